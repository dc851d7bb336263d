"""The project's load generator (``kernels/serving/loadgen.py``, as a process) against servers that end a stream
early: one that closes the connection after 2 of 8 tokens, one that ends with ``finish_reason: "abort"`` after one
token, one that says ``length`` after 3 of 8, and the tiny server that finishes every answer. A request counts as
completed only when its stream ended as the protocol ends a finished answer, with the tokens the workload fixed; the
load search's judge (``benchhost.loadsearch.completed``) holds the same rule for any client's row."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from benchflow.paths import host_python
from benchhost import loadsearch
from tests.conftest import PROJECT_ROOT
from tests.gpu_standin import host_env
from tests.tiny_server import tiny_server

pytestmark = pytest.mark.integration
LOADGEN = PROJECT_ROOT / "kernels" / "serving" / "loadgen.py"
OUTPUT_LEN = 8


def chunk(text: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "text": text, "finish_reason": finish}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


BEHAVIOURS = {  # what each hostile server writes of a stream, then it closes the connection
    "cut": [chunk("a"), chunk("b")],
    "abort": [chunk("a", "abort"), b"data: [DONE]\n\n"],
    "short": [chunk("a"), chunk("b"), chunk("c", "length"), b"data: [DONE]\n\n"],
}


@contextmanager
def hostile(behaviour: str) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the body ends when the connection closes: a cut is a clean EOF

        def log_message(self, *args: object) -> None:
            return

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for part in BEHAVIOURS[behaviour]:
                self.wfile.write(part)
                self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def loadgen(url: str, tmp_path) -> tuple[dict, list[dict]]:
    summary, requests = tmp_path / "summary.jsonl", tmp_path / "requests.jsonl"
    command = [host_python(), str(LOADGEN), "--base-url", url, "--num-prompts", "4", "--max-concurrency", "2"]
    command += ["--input-len", "4", "--output-len", str(OUTPUT_LEN), "--output-file", str(summary)]
    subprocess.run([*command, "--requests-file", str(requests)], env=host_env(), timeout=120, capture_output=True)
    rows = [json.loads(line) for line in requests.read_text().splitlines()]
    return json.loads(summary.read_text().splitlines()[-1]), rows


@pytest.mark.parametrize("behaviour", sorted(BEHAVIOURS))
def test_a_stream_that_ends_before_a_finished_answer_is_a_failed_request(behaviour, tmp_path):
    with hostile(behaviour) as url:
        summary, rows = loadgen(url, tmp_path)
    assert summary["completed"] == 0 and summary["total_output_tokens"] == 0, summary
    assert len(rows) == 4 and not any(r["ok"] for r in rows), rows
    assert all(f"of {OUTPUT_LEN} tokens" in r["error"] for r in rows), rows  # how far it got, said
    assert not any(loadsearch.completed(r) for r in rows)


def test_every_finished_answer_of_the_tiny_server_is_completed(tmp_path):
    (tmp_path / "server").mkdir()
    with tiny_server(tmp_path / "server") as url:
        summary, rows = loadgen(url, tmp_path)
    assert summary["completed"] == 4 and all(r["ok"] and loadsearch.completed(r) for r in rows), rows
    assert {r["output_tokens"] for r in rows} == {OUTPUT_LEN} == {r["expected_tokens"] for r in rows}


def test_the_load_searchs_judge_fails_a_row_any_client_called_ok_with_fewer_tokens_than_fixed():
    row = {"ok": True, "ttft_ms": 5.0, "e2e_ms": 9.0, "output_tokens": 2, "expected_tokens": OUTPUT_LEN}
    assert not loadsearch.completed(row) and loadsearch.request_value(row, "ttft") is None
    assert loadsearch.completed({**row, "output_tokens": OUTPUT_LEN})
    assert loadsearch.completed({k: v for k, v in row.items() if k != "expected_tokens"})  # a workload that varies
    slo = {"p90_ttft_ms": 1000}
    assert loadsearch.good_requests([row, {**row, "output_tokens": OUTPUT_LEN}], slo) == 1
