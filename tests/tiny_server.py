"""The tiny serving target (kernels/serving/server.py) on a free loopback port, for tests that drive it with the
real clients directly (no campaign)."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchflow.hosts.local import signal_group
from benchflow.paths import host_python
from benchtools.net import free_port
from tests.conftest import PROJECT_ROOT

SERVING = PROJECT_ROOT / "kernels" / "serving"


@contextmanager
def tiny_server(log_dir: Path, *args: str) -> Iterator[str]:
    """The server with ``args`` (its knobs), its output in ``log_dir/server.log``; yields its URL once healthy."""
    port = free_port()
    log = (log_dir / "server.log").open("w")
    command = [host_python(), "server.py", "--port", str(port), *args]
    proc = subprocess.Popen(command, cwd=SERVING, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5):
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the tiny server did not come up"
                time.sleep(0.5)
        yield url
    finally:
        signal_group(proc, signal.SIGTERM)  # not once reaped (the poll above may have)
        proc.wait(timeout=30)
        log.close()
