"""The sweep driver's phases (kernels/serving/sweep.py): the client command and header of a fixed phase, of
a concurrency probe and of a request-rate probe, and the ``--search`` arguments it refuses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "kernels" / "serving"))  # the payload, imported as it runs on a host
import sweep

pytestmark = pytest.mark.unit

SEARCH = {"over": "concurrency", "range": [1, 16], "slo": {"p50_e2e_ms": 500}, "prompts_per_probe": 20}


def args(*extra: str):
    return sweep.parse_args(["--label", "pd", "--base-url", "http://127.0.0.1:1", "--input-len", "8", *extra])


def test_a_fixed_phase_runs_the_client_as_before():
    command = sweep.client_command(args(), sweep.Phase(8, 24, 2), Path("/r/phase_c8_r2.json"))
    assert command[1:] == [
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--base-url",
        "http://127.0.0.1:1",
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        "8",
        "--random-output-len",
        "256",
        "--random-range-ratio",
        "1",
        "--num-prompts",
        "24",
        "--max-concurrency",
        "8",
        "--output-file",
        "/r/phase_c8_r2.json",
        "--output-details",
    ]
    phase = sweep.Phase(8, 24, 2)
    assert (phase.load(), phase.tag(), phase.stem()) == ("concurrency=8", " repeat=2", "phase_c8_r2")
    assert sweep.Phase(1, 6, 0).tag() == " warmup" and sweep.Phase(1, 6, 1).tag() == ""


def test_a_request_rate_probe_has_a_rate_and_no_concurrency_limit():
    phase = sweep.Phase(None, 400, 1, rate=2.5)
    sglang = sweep.client_command(args(), phase, Path("/r/phase_q2.5_r1.json"))
    assert "--max-concurrency" not in sglang
    assert sglang[sglang.index("--request-rate") + 1] == "2.5"
    vllm = sweep.client_command(args("--client", "vllm", "--model", "m"), phase, Path("/r/phase_q2.5_r1.json"))
    assert "--max-concurrency" not in vllm and vllm[vllm.index("--request-rate") + 1] == "2.5"
    assert (phase.load(), phase.stem()) == ("request_rate=2.5", "phase_q2.5_r1")


def test_search_arguments_are_checked_before_any_client_runs(capsys):
    parsed = args("--search", json.dumps(SEARCH))
    assert parsed.search.over == "concurrency" and parsed.search.prompts_per_probe == 20
    assert sweep.probe_phase(parsed.search, 4, 2) == sweep.Phase(4, 20, 2)
    rate = {**SEARCH, "over": "request_rate", "range": [0.5, 8]}
    rate_plan = args("--search", json.dumps(rate)).search
    assert sweep.probe_phase(rate_plan, 1.5, 1) == sweep.Phase(None, 20, 1, rate=1.5)
    for bad, says in (
        ({**SEARCH, "prompts_per_probe": 4}, "needs at least 5 requests"),
        ({**SEARCH, "range": [32, 1]}, "0 < low < high"),
        ({**SEARCH, "range": [1, 32]}, "never has more than 20 in flight"),
        ({**SEARCH, "over": "tokens"}, "over must be one of"),
        ({k: v for k, v in SEARCH.items() if k != "slo"}, "slo"),
    ):
        with pytest.raises(SystemExit):
            args("--search", json.dumps(bad))
        assert says in capsys.readouterr().err
    assert args("--client", "local", "--search", json.dumps(rate)).search.over == "request_rate"  # loadgen has rates
    with pytest.raises(SystemExit):
        args("--client", "sglang", "--request-rate", "2,4", "--prompts", "8,8", "--burstiness", "0.5")
    assert "SGLang's bench_serving sends Poisson" in capsys.readouterr().err


def test_an_sglang_result_without_a_failed_count_gets_one_from_its_errors(tmp_path):
    """SGLang saves ``completed`` and, with --output-details, one ``errors`` entry per request, but no failed count:
    the --out record gets ``failed`` = requests - completed (vLLM's own count is kept as it is)."""
    result = tmp_path / "phase_c8_r1.json"
    result.write_text(
        json.dumps(
            {
                "completed": 2,
                "duration": 1.0,
                "errors": ["", "HTTP 503", ""],
                "ttfts": [0.01, 0.0, 0.02],
                "itls": [[0.001], [], [0.001]],
            }
        )
        + "\n"
    )
    out = tmp_path / "results.jsonl"
    sweep.keep_results(args("--out", str(out)), sweep.Phase(8, 3, 1), result, {"exited": 0.0})
    saved = json.loads(out.read_text())
    assert (saved["completed"], saved["failed"], "errors" in saved) == (2, 1, False)
    requests = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [r["ok"] for r in requests] == [True, False, True]
    vllm = tmp_path / "phase_c8_r2.json"
    vllm.write_text(json.dumps({"completed": 2, "failed": 0, "duration": 1.0, "errors": ["", "x", ""]}))
    sweep.keep_results(args("--out", str(out)), sweep.Phase(8, 3, 2), vllm, {"exited": 0.0})
    assert json.loads(out.read_text().splitlines()[1])["failed"] == 0
