"""The server-metrics sampler (``benchhost.metrics_sampler``, as a process) against hostile endpoints beside a good
one, each on its own raw socket server: an endless chunked answer, a chunk declared as 1 GiB, and a Content-Length
over the cap on a kept-alive connection whose rest plants a value. The good endpoint keeps being sampled, nothing
of an answer's rest is ever read as the next answer, memory stays bounded, and SIGTERM stops it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from benchflow.paths import host_python
from benchhost.metrics_sampler import MAX_BODY
from benchhost.telemetry.servers import read_samples
from tests.conftest import PROJECT_ROOT, wait_for

pytestmark = pytest.mark.integration
GOOD = b"sglang:num_running_reqs 3\n"
PLANTED = b"sglang:num_running_reqs 999\n"


def answer(kind: str, conn: socket.socket) -> None:
    """What each endpoint writes for each request on its connection."""
    conn.settimeout(30)
    try:
        while conn.recv(65536):
            if kind == "good":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(GOOD) + GOOD)
            elif kind == "endless":
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                while True:
                    conn.sendall(b"1\r\n#\r\n")
                    time.sleep(0.01)
            elif kind == "huge_chunk":
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40000000\r\n")
                while True:
                    conn.sendall(b"#" * 65536)
            elif kind == "over_cap":  # declares more than the cap; what follows the cap is a planted answer
                body = b"# " + b"x" * (MAX_BODY - 3) + b"\n"
                planted = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(PLANTED) + PLANTED
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1) + body + planted)
    except OSError:
        pass
    finally:
        conn.close()


def serve(kind: str) -> tuple[str, socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))

    def loop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(kind, conn), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/metrics", listener


@pytest.fixture
def endpoints() -> Iterator[list[str]]:
    served = [serve(kind) for kind in ("endless", "huge_chunk", "over_cap", "good")]
    yield [url for url, _ in served]
    for _, listener in served:
        listener.close()


def test_hostile_endpoints_cost_the_good_one_nothing_and_sigterm_stops_the_sampler(endpoints, tmp_path):
    command = [host_python(), "-m", "benchhost.metrics_sampler", "--out", str(tmp_path), "--period-ms", "100"]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "host")}
    sampler = subprocess.Popen([*command, *(w for u in endpoints for w in ("--endpoint", u))], env=env)
    rows = tmp_path / "samples.csv"

    def good_reads() -> int:
        text = rows.read_text() if rows.exists() else ""
        return sum(1 for s in read_samples(text) if s.endpoint == 3 and s.column == "running")

    try:
        wait_for(lambda: good_reads() >= 20, 120, "twenty reads of the good endpoint beside the hostile ones")
    finally:
        sampler.send_signal(signal.SIGTERM)
        code = sampler.wait(60)  # within one read's time, never blocked by an endless answer
    assert code == 0
    samples = read_samples(rows.read_text())
    running = {s.value for s in samples if s.column == "running"}
    assert running == {3.0}, running  # the planted 999 was never read as an answer
    assert {s.endpoint for s in samples} == {3}  # the hostile ones gave nothing
