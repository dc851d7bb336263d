"""How a serving run's status follows from what its parse lost (issue #21): a row that lost values makes the
run incomplete, and the parse's problems lead runs.detail whatever else the log warns about."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchflow import artifacts, kinds, pipeline
from tests.conftest import FIXTURES

pytestmark = pytest.mark.unit

VLLM = (FIXTURES / "vllm_benchmark_serving_vllm-benchmarks-README.txt").read_text()
NOISE = "".join(f"Odd counter {i}: {i}\n" for i in range(30))  # 30 warnings above the block: past the notes' cap


def parse_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> pipeline.Parsed:
    monkeypatch.setenv("BENCH_ARTIFACTS_URL", f"file://{tmp_path / 'store'}")
    store = artifacts.store("bench_serving_t", "run1")
    (store / "bench.log").write_text(text)
    fetched = pipeline.Fetched(str(store), ["bench.log"], [], ["bench.log"])
    return pipeline.parse(fetched, kinds.get("serving"), None, "ALL_DONE", {}, {})


def test_a_row_that_lost_values_makes_the_run_incomplete_and_says_where(tmp_path, monkeypatch):
    lost = VLLM.replace("=" * 50, "scheduler crashed, see above\nMean TTFT (ms): 1.0\nMedian TTFT (ms): 2.0")
    phase = "===== pd concurrency=1 (n=10) =====\n"
    parsed = parse_log(tmp_path, monkeypatch, phase + "\n".join(NOISE.splitlines()[:25]) + "\n" + lost + "ALL_DONE\n")
    assert (parsed.status, parsed.rows) == ("incomplete", 1)
    lost = [
        f"line {n}: '{stat} TTFT (ms)' after the result block that ended at line 47: not read (dropped)"
        for n, stat in ((48, "Mean"), (49, "Median"))
    ]
    assert parsed.detail.startswith("bench.log: line 47: result block (line 27) ended by a line that is not")
    assert all(0 < parsed.detail.index(text) < parsed.detail.index("Odd counter") for text in lost)


def test_a_block_cut_short_by_the_next_phase_keeps_the_run_ok_with_the_problem_first(tmp_path, monkeypatch):
    phases = "===== pd concurrency=1 (n=10) =====\n" + NOISE + VLLM.split("Mean TTFT")[0]
    phases += "===== pd concurrency=8 (n=24) =====\n" + VLLM + "ALL_DONE\n"
    parsed = parse_log(tmp_path, monkeypatch, phases)
    assert (parsed.status, parsed.rows) == ("ok", 2)
    assert parsed.detail.startswith("bench.log: line 41: result block (line 32) cut short by a sweep phase header")
