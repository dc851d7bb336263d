"""Serving parsers over the real samples (tests/fixtures/README.md names their sources), and sweeps built
from them the way the sweep driver and log collectors wrap them."""

from __future__ import annotations

import json
import math

import pytest

from benchflow.kinds import parse_text
from tests.conftest import FIXTURES

pytestmark = pytest.mark.unit

SGLANG = (FIXTURES / "sglang_bench_serving_sgl-cookbook_DeepSeek-R1.txt").read_text()
VLLM = (FIXTURES / "vllm_benchmark_serving_vllm-benchmarks-README.txt").read_text()
PHASES = (FIXTURES / "serving_sweep_progress_pd.txt").read_text().splitlines()


def test_sglang_block_late_2025_labels():
    parsed = parse_text(SGLANG)
    assert parsed.format == "log" and parsed.complete and parsed.warnings == [] and not parsed.dropped
    row = parsed.rows[0]
    assert row["concurrency"] == 1 and row["completed"] == 10
    assert row["num_prompts"] is None and row["failed"] is None  # not printed: unknown, never inferred
    assert row["request_rate"] == math.inf
    assert row["duration_s"] == 40.0 and row["total_input_tokens"] == 6101 and row["total_output_tokens"] == 4210
    assert row["request_throughput"] == 0.25 and row["output_throughput"] == 105.24
    assert row["total_throughput"] == 257.76 and row["peak_output_throughput"] == 110.0
    assert row["peak_concurrent_requests"] == 2
    assert row["mean_e2e_ms"] == 3998.40 and row["median_e2e_ms"] == 3207.53
    assert (row["mean_ttft_ms"], row["median_ttft_ms"], row["p99_ttft_ms"]) == (153.0, 140.76, 214.66)
    assert (row["mean_tpot_ms"], row["p99_tpot_ms"]) == (9.16, 9.21)
    assert (row["p95_itl_ms"], row["p99_itl_ms"], row["max_itl_ms"]) == (9.47, 9.63, 15.45)


def test_vllm_block_older_labels_with_trailing_spaces():
    parsed = parse_text(VLLM)
    row = parsed.rows[0]
    assert parsed.complete and parsed.warnings == []
    assert row["completed"] == 10 and row["concurrency"] is None
    assert row["total_throughput"] == 619.85  # "Total Token throughput"
    assert row["mean_itl_ms"] == 7.74 and row["p99_itl_ms"] == 8.39  # "Inter-token Latency"
    assert row["mean_tpot_ms"] == 7.91


def sweep(*blocks: str, prefix: str = "", done: bool = True) -> str:
    out = []
    for header, block in zip(PHASES, blocks, strict=False):
        out.append(header)
        out.append("100%|██████████| 24/24 [00:40<00:00,  1.67s/it]")
        out += [prefix + line for line in block.splitlines()]
    if done:
        out.append("ALL_DONE")
    return "\n".join(out) + "\n"


def test_sweep_with_phase_headers_prefixes_and_tqdm_bars():
    parsed = parse_text(sweep(SGLANG, SGLANG, VLLM, prefix="[bench] 2026-11-29 02:00:01 INFO "))
    assert parsed.complete
    assert [(r["config"], r["concurrency"], r["num_prompts"]) for r in parsed.rows] == [
        ("PD", 1, 6), ("PD", 8, 24), ("PD", 16, 32)
    ]  # fmt: skip
    assert parsed.rows[1]["completed"] == 10 and parsed.rows[1]["failed"] is None  # SGLang prints no failed line


def test_truncated_sweep_keeps_completed_phases():
    text = sweep(SGLANG, SGLANG, done=False)
    text += PHASES[2] + "\n" + "\n".join(VLLM.splitlines()[:6]) + "\n"  # third phase cut mid-block
    parsed = parse_text(text)
    assert not parsed.complete and len(parsed.rows) == 3 and not parsed.dropped
    cut = parsed.rows[2]  # the block cut short keeps what it has; the rest is unknown
    assert cut["concurrency"] == 16 and cut["completed"] == 10 and cut["mean_ttft_ms"] is None
    assert "cut off at the end of the output" in parsed.problems[-1].message


def value(label: str, new: str) -> tuple[str, str]:
    """The sample's line for ``label`` and the same line with another value (40-wide label column)."""
    old = next(line for line in SGLANG.splitlines() if line.startswith(label + ":"))
    return old, f"{label + ':':<40} {new}"


def test_special_values():
    block = SGLANG
    for label, new in [("Max request concurrency", "not set"), ("P99 TTFT (ms)", "inf"),
                       ("Median TPOT (ms)", "-0.00")]:  # fmt: skip
        block = block.replace(*value(label, new))
    assert "inf" in SGLANG.splitlines()[2]  # the sample's own "Traffic request rate: inf"
    row = parse_text(block).rows[0]
    assert row["concurrency"] is None and math.isinf(row["p99_ttft_ms"])
    assert row["median_tpot_ms"] == 0.0 and math.copysign(1, row["median_tpot_ms"]) == 1


def test_garbage_inside_a_block_is_a_problem_that_names_the_line():
    parsed = parse_text(SGLANG.replace(*value("Mean TTFT (ms)", "fast")))
    assert len(parsed.rows) == 1 and parsed.rows[0]["mean_ttft_ms"] is None and parsed.rows[0]["p99_itl_ms"] == 9.63
    assert parsed.dropped and str(parsed.problems[0]).startswith("line 23: value of 'Mean TTFT (ms)' is not a number")
    parsed = parse_text(SGLANG.replace("Benchmark duration (s):                  40.00", "garbage"))
    assert len(parsed.rows) == 1 and not parsed.dropped  # an odd line suspends the block; what follows is kept
    assert parsed.rows[0]["total_input_tokens"] == 6101 and parsed.rows[0]["duration_s"] is None


def test_sglang_jsonl_with_infinity_and_old_key_names():
    records = [
        '{"backend": "sglang", "request_rate": Infinity, "max_concurrency": 8, "completed": 24, "duration": 12.5,'
        ' "total_input": 6144, "total_output": 6144, "request_throughput": 1.92, "input_throughput": 491.5,'
        ' "output_throughput": 491.5, "mean_ttft_ms": 80.1, "p99_itl_ms": 12.0, "mean_e2e_latency_ms": 3000.0}',
        '{"backend": "sglang", "request_rate": Infinity, "max_concurrency": 16, "completed": 32, "duration": 14.0,'
        ' "total_input_tokens": 8192, "total_output_tokens": 8192, "output_throughput": 585.1}',
    ]
    parsed = parse_text("\n".join(records) + "\n")
    assert parsed.format == "sglang_jsonl" and len(parsed.rows) == 2
    first, second = parsed.rows
    assert first["concurrency"] == 8 and first["total_input_tokens"] == 6144 and first["mean_e2e_ms"] == 3000.0
    assert second["total_output_tokens"] == 8192 and second["num_prompts"] is None  # not in the record


def test_vllm_save_result_json():
    result = {"date": "20250101", "backend": "vllm", "request_rate": "inf", "max_concurrency": 8, "completed": 23,
              "failed": 1, "num_prompts": 24, "duration": 10.0, "total_input_tokens": 6144, "total_output_tokens": 5888,
              "request_throughput": 2.3, "output_throughput": 588.8, "total_token_throughput": 1203.2,
              "mean_ttft_ms": 50.0, "median_ttft_ms": 45.0, "std_ttft_ms": 5.0, "p99_ttft_ms": 90.0,
              "mean_e2el_ms": 2500.0, "p99_e2el_ms": 2900.0}  # fmt: skip
    parsed = parse_text(json.dumps(result, indent=2))
    assert parsed.format == "vllm_json"
    row = parsed.rows[0]
    assert (row["completed"], row["failed"], row["num_prompts"], row["concurrency"]) == (23, 1, 24, 8)
    assert row["total_throughput"] == 1203.2 and row["mean_e2e_ms"] == 2500.0 and row["std_ttft_ms"] == 5.0


def test_truncated_jsonl_drops_the_cut_record_only():
    text = '{"output_throughput": 1.0, "completed": 1}\n{"output_throughput": 2'
    parsed = parse_text(text)
    assert len(parsed.rows) == 1 and "cut off" in parsed.warnings[0] and parsed.dropped


def test_failed_phase_is_reported_and_the_sweep_is_incomplete():
    failed = "phase concurrency=8 failed (client exit 1); going on"
    parsed = parse_text("\n".join([PHASES[0], SGLANG, PHASES[1], failed, PHASES[2], VLLM, "ALL_DONE"]) + "\n")
    assert not parsed.complete
    assert "phases without a result: PD concurrency=8" in parsed.warnings[-1]
    assert [r["concurrency"] for r in parsed.rows] == [1, 16]
