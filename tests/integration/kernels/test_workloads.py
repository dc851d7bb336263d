"""Production-like workloads with the real clients (``python -m sglang.bench_serving`` and the project's load
generator from the host environment) against the tiny server, on loopback: a sweep over request rates with Poisson
arrivals gives rows keyed by rate with the rate each phase achieved; conversations that share system prompts
(SGLang's generated shared-prefix workload, two turns each, on the chat endpoint) are served from the server's prefix
cache and random prompts are not; a load search
over request rate converges, is stored and compared; a dataset file whose sha256 is not the spec's stops the sweep
before any client runs. (vLLM's client at three rates, on a ShareGPT file the test makes, through a whole campaign:
tests/e2e/test_campaign_serving.py.)"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchflow import kinds
from benchflow.analysis.compare import Side, compare_runs
from benchflow.kinds.serving import search_row
from benchflow.paths import host_python
from benchflow.warehouse import RunRecord
from tests.conftest import PROJECT_ROOT
from tests.gpu_standin import host_env
from tests.tiny_server import tiny_server

pytestmark = pytest.mark.integration

SERVING = PROJECT_ROOT / "kernels" / "serving"
KIND = kinds.get("serving")
RATES = [2.0, 4.0, 8.0]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The tiny server (prefix cache on, as SGLang's) with a capacity of 4 sequences per 20 ms step."""
    with tiny_server(tmp_path_factory.mktemp("server"), "--layers", "1", "--hidden", "32", "--max-batch", "4") as url:
        yield url


def sweep(url: str, out: Path, *extra: str, client: str = "sglang") -> subprocess.CompletedProcess[str]:
    command = [host_python(), str(SERVING / "sweep.py"), "--label", "tiny", "--base-url", url, "--client", client]
    command += ["--input-len", "48", "--output-len", "4", "--out", str(out / "results.jsonl"), *extra]
    done = subprocess.run(command, env=host_env(), capture_output=True, text=True, timeout=540, check=False)
    (out / "sweep.log").write_text(done.stdout + done.stderr)
    return done


def rows_of(out: Path) -> list[dict]:
    """The sweep's log as the campaign parses it, with what its requests.jsonl tells (failed, achieved rate,
    lengths, cached tokens)."""
    parsed = kinds.parse_text((out / "sweep.log").read_text(), "serving", None)
    requests = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines() if line.strip()]
    assert KIND.from_side_files is not None
    return KIND.from_side_files(parsed.rows, {"serving_requests": requests})


def test_a_rate_sweep_keys_rows_by_rate_with_the_rate_achieved(server, tmp_path):
    done = sweep(server, tmp_path, "--request-rate", "2,4,8", "--prompts", "8,8,8")
    assert done.returncode == 0, done.stdout[-3000:]
    rows = rows_of(tmp_path)
    assert [(r["request_rate"], r["concurrency"], r["completed"]) for r in rows] == [(q, None, 8) for q in RATES]
    for row in rows:
        # Poisson gaps: 8 requests sent at about the rate asked for (within sampling error), never all at once
        assert 0.3 * row["request_rate"] < row["achieved_rate"] < 3 * row["request_rate"], row
        assert row["rate_reached"] is True and row["burstiness"] == 1.0
        assert row["achieved_input_len"] == 48 and row["achieved_output_len"] == 4
    assert KIND.row_notes(rows) == []
    late = {**rows[0], "request_rate": 50.0, "rate_reached": None}
    (noted,) = KIND.row_notes(KIND.from_side_files([late], {}))  # asked 50/s, sent at the duration's rate
    assert "request_rate 50 repeat 1: sent" in noted and "did not keep up" in noted


def test_shared_prefixes_are_served_from_the_prefix_cache_and_random_prompts_are_not(server, tmp_path):
    shared, random = tmp_path / "shared", tmp_path / "random"
    conversations = {"name": "shared-prefix", "groups": 2, "system_prompt_len": 40, "turns": 2}  # SGLang's chat form
    for out, dataset in ((shared, conversations), (random, {})):
        out.mkdir()
        spec = json.dumps({"name": "random", **dataset})
        done = sweep(server, out, "--request-rate", "8", "--prompts", "8", "--dataset", spec)
        assert done.returncode == 0, done.stdout[-3000:]
    (with_prefix,) = rows_of(shared)
    (without,) = rows_of(random)
    # 2 groups of 2 conversations of 2 turns (8 requests): a group's later requests find its 40-token system prompt
    # cached, a second turn its whole first turn too
    assert with_prefix["num_prompts"] == with_prefix["completed"] == 8, with_prefix
    assert with_prefix["prefix_cache_hit_rate"] > 0.4, with_prefix
    assert with_prefix["cached_tokens"] >= 6 * 40
    assert (
        without["prefix_cache_hit_rate"] < 0.1
        and with_prefix["prefix_cache_hit_rate"] > 4 * without["prefix_cache_hit_rate"]
    )


SEARCH = {  # short probes (20 requests from 4/s up): the search's time is its low rates' seconds
    "over": "request_rate",
    "range": [4, 256],
    "slo": {"p50_ttft_ms": 100, "max_failed_fraction": 0.5},
    "precision": 0.5,
    "prompts_per_probe": 20,
    "repeats": 1,
    "budget": {"probes": 12, "seconds": 300},
}


def record(run_id: str) -> RunRecord:
    return RunRecord(
        dag_id="bench_rates",
        run_id=run_id,
        campaign="rates",
        host="local",
        spec_hash="h" * 64,
        status="ok",
        payload_sha256="p" * 64,
        started_at=datetime.now(UTC),
        host_facts={"gpu": "none"},
    )


@pytest.fixture(scope="module")
def searched(server, tmp_path_factory):
    """Two runs of the same search with the local load generator (Poisson arrivals): their rows and side rows."""
    runs = {}
    for run_id in ("r1", "r2"):
        out = tmp_path_factory.mktemp(run_id)
        done = sweep(server, out, "--search", json.dumps(SEARCH), client="local")
        assert done.returncode == 0, done.stdout[-3000:]
        (answer,) = [json.loads(line) for line in (out / "search.jsonl").read_text().splitlines()]
        requests = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines() if line.strip()]
        runs[run_id] = (answer, rows_of(out), {"serving_requests": requests, "serving_search": [search_row(answer)]})
    return runs


def test_a_load_search_over_request_rate_converges_is_stored_and_compared(searched, warehouse_backend):
    """Each search stops converged with a bracket, its probes keyed by rate; both runs load into the
    warehouse (both backends) and bench compare pairs their answers by their brackets."""
    warehouse_backend.migrate()
    for run_id, (answer, rows, sides) in searched.items():
        assert answer["over"] == "request_rate" and answer["reason"] == "converged", answer
        assert 4 <= answer["pass_load"] < answer["fail_load"] <= 256, answer  # a bracket, within its precision
        assert rows and all(r["concurrency"] is None and r["request_rate"] for r in rows)
        warehouse_backend.load(record(run_id), KIND, rows, side_rows=sides)
    keys = warehouse_backend.query(
        "SELECT DISTINCT case_key FROM metric_samples WHERE run_id = 'r1' AND metric = 'output_throughput'"
    )["case_key"]
    assert keys.tolist() and all(k.startswith("config=tiny,request_rate=") for k in keys)
    outcome = compare_runs(warehouse_backend, Side.parse("rates@r1"), Side.parse("rates@r2"), include_noisy=True)
    (answer,) = [r for r in outcome.rows if r.metric == "pass_load"]
    assert answer.bracket is not None and answer.point == "search", outcome.rows


def test_a_dataset_file_that_is_not_the_one_the_spec_names_stops_the_sweep_first(tmp_path):
    data = tmp_path / "chat.json"
    data.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]))
    spec = json.dumps({"name": "sharegpt", "path": str(data), "sha256": "0" * 64})
    done = sweep("http://127.0.0.1:9", tmp_path, "--concurrency", "1", "--prompts", "1", "--dataset", spec)
    assert done.returncode == 2
    assert f"dataset file {data} has sha256" in done.stdout and "not " + "0" * 64 in done.stdout
    assert "=====" not in done.stdout  # no phase ran
