"""``sweep.py --search`` with the real SGLang client (``python -m sglang.bench_serving`` from the host
environment) against the tiny server with its capacity knob, on loopback: a request-rate search out of budget
reports the bracket it has, and a probe too small for its percentile is refused before any client runs. (A search
over concurrency converging on the server's capacity, every probe a phase the log parser reads: the campaign's
own run, tests/e2e/test_campaign_search.py.)

The server: ``--max-batch 6 --step-ms 20``, 8 output tokens per request: TPOT is 20 ms up to concurrency 6
and 40 ms from 7 (one round of ceil(C / 6) steps per token), so a P90 TPOT limit of 30 ms holds up to 6
and fails from 7. P90 at 95 % needs 29 requests and a 5 % failed fraction 59: 60 prompts per probe."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchflow.paths import host_python
from tests.conftest import PROJECT_ROOT
from tests.gpu_standin import host_env
from tests.tiny_server import tiny_server

pytestmark = pytest.mark.integration

SERVING = PROJECT_ROOT / "kernels" / "serving"
BATCH, STEP_MS, OUTPUT_LEN = 6, 20, 8
SEARCH = {
    "over": "concurrency",
    "range": [1, 32],
    "slo": {"p90_tpot_ms": 30, "max_failed_fraction": 0.05},
    "precision": 0.1,
    "prompts_per_probe": 60,
    "repeats": 3,
    "budget": {"probes": 20, "seconds": 900},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The tiny server with a capacity of 6 sequences per 20 ms step, on a free loopback port."""
    with tiny_server(tmp_path_factory.mktemp("server"), "--max-batch", str(BATCH), "--step-ms", str(STEP_MS)) as url:
        yield url


def sweep(url: str, out: Path, search: dict, label: str = "tiny") -> subprocess.CompletedProcess[str]:
    command = [host_python(), str(SERVING / "sweep.py"), "--label", label, "--base-url", url, "--client", "sglang"]
    command += ["--input-len", "16", "--output-len", str(OUTPUT_LEN), "--out", str(out / "results.jsonl")]
    return subprocess.run(
        [*command, "--search", json.dumps(search)],
        env=host_env(),
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )


def test_a_request_rate_search_out_of_budget_reports_its_bracket(server, tmp_path):
    search = {
        "over": "request_rate",
        "range": [4, 64],
        "slo": {"p50_e2e_ms": 10_000},
        "prompts_per_probe": 20,
        "repeats": 1,
        "budget": {"probes": 2},
    }
    done = sweep(server, tmp_path, search, label="rate")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (record,) = [json.loads(line) for line in (tmp_path / "search.jsonl").read_text().splitlines()]
    assert (record["reason"], record["pass_load"], record["fail_load"], record["probes"]) == ("budget", 8.0, None, 2)
    assert [s["load"] for s in record["trail"]] == [4.0, 8.0]
    assert "===== rate request_rate=4 (n=20) =====" in done.stdout.splitlines()
    assert "===== rate request_rate=8 (n=20) =====" in done.stdout.splitlines()
    summaries = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [(s["request_rate"], s["max_concurrency"], s["completed"]) for s in summaries] == [
        (4.0, None, 20),
        (8.0, None, 20),
    ]
    requests = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert {(r["request_rate"], r["concurrency"]) for r in requests} == {(4.0, None), (8.0, None)}
    assert "search rate -> over request_rate: budget; highest pass 8, none failed" in done.stdout


def test_a_probe_too_small_for_its_percentile_is_refused_before_any_client_runs(tmp_path):
    search = {**SEARCH, "slo": {"p99_ttft_ms": 2000}, "prompts_per_probe": 100}
    done = sweep("http://127.0.0.1:9", tmp_path, search)
    assert done.returncode == 2
    assert "p99_ttft_ms: a P99 bound at 95 % confidence needs at least 299 requests per probe" in done.stderr
    assert not (tmp_path / "results.jsonl").exists()
