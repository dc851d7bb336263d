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
        ("PD", 1, 6),
        ("PD", 8, 24),
        ("PD", 16, 32),
    ]
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
    for label, new in [("Max request concurrency", "not set"), ("P99 TTFT (ms)", "inf"), ("Median TPOT (ms)", "-0.00")]:
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
    result = {
        "date": "20250101",
        "backend": "vllm",
        "request_rate": "inf",
        "max_concurrency": 8,
        "completed": 23,
        "failed": 1,
        "num_prompts": 24,
        "duration": 10.0,
        "total_input_tokens": 6144,
        "total_output_tokens": 5888,
        "request_throughput": 2.3,
        "output_throughput": 588.8,
        "total_token_throughput": 1203.2,
        "mean_ttft_ms": 50.0,
        "median_ttft_ms": 45.0,
        "std_ttft_ms": 5.0,
        "p99_ttft_ms": 90.0,
        "mean_e2el_ms": 2500.0,
        "p99_e2el_ms": 2900.0,
    }
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


# Shapes real tools and people print, built from the vLLM sample (a block closed by its rule).
def rows_of(text: str) -> list[dict]:
    parsed = parse_text(text)
    assert parsed.format == "log" and not parsed.dropped, parsed.problem_lines()
    return parsed.rows


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "# ",
        "service-1  | ",
        "[rank0]: ",
        "2026-11-29 02:00:01 INFO ",
        "(APIServer pid=4711) ",
        "2025-01-01 10:00:00,123 - INFO - ",
    ],
)
def test_a_prefix_on_every_line_of_a_block(prefix: str):
    text = "".join(prefix + line + "\n" for line in VLLM.splitlines())
    row = rows_of(text)[0]
    assert row["completed"] == 10 and row["mean_itl_ms"] == 7.74 and row["p99_itl_ms"] == 8.39


def test_timestamps_that_change_from_line_to_line_and_crlf():
    text = "".join(f"2026-11-29 02:00:{i % 60:02d} INFO {line}\r\n" for i, line in enumerate(VLLM.splitlines()))
    assert rows_of(text)[0]["p99_itl_ms"] == 8.39


HEADER = "============ Serving Benchmark Result ============"


@pytest.mark.parametrize(
    "header",
    [
        "=== Serving Benchmark Result ===",
        "--- Serving Benchmark Result ---",
        "==========\nServing Benchmark Result\n==========",
        "============ Serving Benchmark\nResult ============",
        "100%|██████████| 10/10 [00:05<00:00,  1.73it/s]" + HEADER,
        "\r  0%|          | 0/10\r100%|██████████| 10/10 [00:05<00:00]\r" + HEADER,
    ],
)
def test_every_header_layout(header: str):
    row = rows_of(VLLM.replace(HEADER, header))[0]
    assert row["completed"] == 10 and row["p99_itl_ms"] == 8.39


@pytest.mark.parametrize("closing", ["", "```", "\n"])
def test_a_block_closed_by_a_blank_line_a_fence_or_the_end(closing: str):
    rule = "=" * 50
    text = VLLM.replace(rule, closing) + "\nAvg latency: 4.9 seconds\nMean TTFT (ms): 1.0\n"
    parsed = parse_text(text)
    assert len(parsed.rows) == 1 and parsed.rows[0]["mean_ttft_ms"] == 71.54 and parsed.rows[0]["p99_itl_ms"] == 8.39


def test_concurrency_and_rate_above_the_block_and_every_label_generation():
    above = (
        "Traffic request rate: 15.0 RPS.\nBurstiness factor: 1.0 (Poisson process)\nMaximum request concurrency: 30\n"
    )
    row = rows_of(above + VLLM)[0]
    assert (row["concurrency"], row["request_rate"]) == (30, 15.0)
    for label in ("Max request concurrency", "Maximum request concurrency", "Max reqeuest concurrency", "Concurrency"):
        block = VLLM.replace("Successful requests:", f"{label + ':':<41}8\nSuccessful requests:")
        assert rows_of(block)[0]["concurrency"] == 8, label
    achieved = VLLM.replace("Successful requests:", f"{'Concurrency:':<41}7.93\nSuccessful requests:")
    assert rows_of(achieved)[0]["concurrency"] is None  # SGLang's achieved mean, not the configured level
    extra = VLLM.replace(
        "Successful requests:",
        "Request rate configured (RPS):           4.00\nRequest goodput (req/s):                 3.75\n"
        "Accept length:                           2.61\nSuccessful requests:",
    )
    row = rows_of(extra)[0]
    assert (row["request_rate"], row["goodput"], row["accept_length"]) == (4.0, 3.75, 2.61)
    sweep = "qps 4:\n" + VLLM + "\nqps inf:\n" + VLLM
    assert [r["request_rate"] for r in rows_of(sweep)] == [4.0, math.inf]


def test_a_forks_extra_section_inside_a_block_loses_nothing():
    fork = VLLM.replace(
        "Total input tokens:",
        "\n----------- Instance Load Distribution -----------\n"
        "instance_0           http://127.0.0.1:30001         Requests:  500 ( 50.0%)\n"
        "               Load Balance Metrics               \nStd dev:                            0.0\n\n"
        "-------------- Performance Metrics ---------------\nTotal input tokens:",
    )
    parsed = parse_text(fork)
    assert len(parsed.rows) == 1 and not parsed.dropped and parsed.complete
    assert parsed.rows[0]["total_input_tokens"] == 1369 and parsed.rows[0]["p99_itl_ms"] == 8.39
    assert any("instance_0" in w for w in parsed.warnings)


def test_a_value_followed_by_text_and_a_label_without_a_value():
    text = VLLM.replace("Successful requests:                     10", "Successful requests: 10   <<<<<<< New line")
    text = text.replace("Mean TPOT (ms):                          7.91", "Mean TPOT (ms):")
    parsed = parse_text(text)
    row = parsed.rows[0]
    assert row["completed"] == 10 and row["mean_tpot_ms"] is None and row["p99_itl_ms"] == 8.39
    assert not parsed.dropped and any("has no value" in p.message for p in parsed.problems)


def test_num_prompts_from_the_runs_arguments_never_from_completed():
    command = "python3 -m sglang.bench_serving --backend sglang --num-prompts 3000 --max-concurrency 64\n"
    row = rows_of(command + VLLM)[0]
    assert (row["num_prompts"], row["concurrency"], row["failed"]) == (3000, 64, None)
    assert rows_of(VLLM)[0]["num_prompts"] is None


def test_warnings_are_capped_with_a_summary():
    noisy = VLLM.replace(
        "Successful requests:", "".join(f"Odd label {i}: {i}\n" for i in range(100)) + "Successful requests:"
    )
    parsed = parse_text(noisy)
    assert len(parsed.warnings) == 21 and parsed.warnings[-1] == "… and 80 more warnings"
    assert parsed.warnings[0].startswith("line 2: unknown label")


def test_json_records_pasted_under_text_or_wrapped():
    record = {
        "backend": "vllm",
        "max_concurrency": 8,
        "completed": 23,
        "failed": 1,
        "num_prompts": 24,
        "request_rate": "inf",
        "duration": 10.0,
        "total_token_throughput": 1203.2,
        "output_throughput": 588.8,
        "mean_ttft_ms": 50.0,
    }
    pasted = "Result saved with --save-result:\n" + json.dumps(record, indent=2) + "\nthat is all\n"
    row = parse_text(pasted).rows[0]
    assert row["completed"] == 23 and row["request_rate"] == math.inf and row["total_throughput"] == 1203.2
    line = json.dumps({k: v for k, v in record.items() if k != "total_token_throughput"})
    wrapped = "$ cat out.jsonl\n" + line[:60] + "\n" + line[60:] + "\n" + line.replace("23", "24") + "\n"
    parsed = parse_text(wrapped)
    assert parsed.format == "sglang_jsonl" and [r["completed"] for r in parsed.rows] == [23, 24]
    assert parsed.rows[0]["mean_ttft_ms"] == 50.0 and not parsed.dropped


def test_sglang_offline_throughput_block_reads_like_a_serving_block():
    block = (
        "====== Offline Throughput Benchmark Result =======\n"
        "Backend:                                 engine\nSuccessful requests:                     10\n"
        "Last generation throughput (tok/s):      900.00\nTotal token throughput (tok/s):          1200.00\n"
        "==================================================\n"
    )
    parsed = parse_text("$ python3 -m sglang.bench_offline_throughput --num-prompts 10\n" + block)
    assert parsed.complete and parsed.warnings == []
    assert (parsed.rows[0]["completed"], parsed.rows[0]["num_prompts"], parsed.rows[0]["total_throughput"]) == (
        10,
        10,
        1200.0,
    )


def test_non_finite_values_read_alike_and_write_as_strict_json():
    from benchflow.parsing import strict_row

    for text in ("inf", "Infinity", "+inf", "INF"):
        assert parse_text(VLLM.replace("7.74", text)).rows[0]["mean_itl_ms"] == math.inf
    for text in ("NaN", "nan"):
        assert math.isnan(parse_text(VLLM.replace("7.74", text)).rows[0]["mean_itl_ms"])
    assert parse_text(VLLM.replace("7.74", "-inf")).rows[0]["mean_itl_ms"] == -math.inf
    row, flagged = strict_row(parse_text(VLLM.replace("7.74", "NaN")).rows[0])
    assert flagged == ["mean_itl_ms"] and row["mean_itl_ms"] is None
    json.dumps(row, allow_nan=False)


# Issue #21: the classes a new user's real outputs found, each as its smallest case.
V2023 = (
    "Total time: 166.88 s\nThroughput: 5.99 requests/s\nAverage latency: 67.59 s\nAverage latency per token: 0.21 s\n"
)
EARLY_2024 = (
    "Traffic request rate: inf\nSuccessful requests: 1780\nBenchmark duration: 294.101467 s\n"
    "Request throughput: 6.05 requests/s\nOutput token throughput: 1412.49 tokens/s\nMean TTFT: 114960.78 ms\n"
)


def test_blocks_without_a_header_are_detected_and_read_in_the_columns_units():
    row = rows_of("Namespace(num_prompts=1000, request_rate=200.0)\n" + V2023)[0]
    assert (row["duration_s"], row["request_throughput"], row["mean_e2e_ms"]) == (166.88, 5.99, 67590.0)
    assert (row["num_prompts"], row["request_rate"]) == (1000, 200.0)  # the run's arguments, printed above
    row = rows_of(EARLY_2024)[0]
    assert (row["completed"], row["duration_s"], row["output_throughput"]) == (1780, 294.101467, 1412.49)
    assert (row["mean_ttft_ms"], row["request_rate"]) == (114960.78, math.inf)
    forced = parse_text(V2023, "serving")
    assert forced.format == "log" and forced.complete and forced.warnings == []


def test_a_label_read_again_starts_the_next_row():
    runs = "1 L4 GPU\n" + V2023 + "\n2 L4 GPU\n" + V2023.replace("166.88", "148.03") + "LLAMA 2:\n" + EARLY_2024
    assert [r["duration_s"] for r in rows_of(runs)] == [166.88, 148.03, 294.101467]


def test_a_dashed_line_after_a_preamble_inside_a_block_ends_nothing():
    text = VLLM.replace(
        "Successful requests:", "Hardware: 8x H200\nConcurrency: 4\n" + "-" * 50 + "\nSuccessful requests:"
    )
    parsed = parse_text(text)
    row = parsed.rows[0]
    assert (row["concurrency"], row["completed"], row["p99_itl_ms"]) == (4, 10, 8.39) and parsed.complete
    assert parsed.warnings == ["line 2: unknown label 'Hardware'"]


def test_latencies_in_seconds_and_units_after_the_value_are_converted():
    e2el = "----------------End-to-end Latency----------------\nMean E2EL (s):                           1.25\n"
    row = rows_of(VLLM.replace("=" * 50 + "\n", e2el + "P99 E2EL (s):   2.5\n" + "=" * 50 + "\n"))[0]
    assert (row["mean_e2e_ms"], row["p99_e2e_ms"], row["mean_itl_ms"]) == (1250.0, 2500.0, 7.74)
    parsed = parse_text(
        VLLM.replace("Benchmark duration (s):                  5.78", "Benchmark duration (s): 5780 ms")
    )
    assert parsed.rows[0]["duration_s"] == 5.78 and parsed.warnings == []
    parsed = parse_text(VLLM.replace("Mean TTFT (ms):                          71.54", "Mean TTFT (ms): 71.54 tok/s"))
    assert parsed.rows[0]["mean_ttft_ms"] is None  # a unit that does not fit the column is reported, not stored
    assert "line 10: 'Mean TTFT (ms)': unit 'tok/s' does not fit mean_ttft_ms; not read" in parsed.warnings


def test_a_block_flattened_onto_one_line_reads_the_same():
    above = "Traffic request rate: 4.0\nMaximum request concurrency: 8\n"
    flat = " ".join(" ".join(line.split()) for line in (above + VLLM).splitlines())
    assert flat.startswith("Traffic request rate: 4.0 Maximum request concurrency: 8 ===")
    parsed = parse_text("Copied from the page:\n" + flat + "\n")
    assert len(parsed.rows) == 1 and parsed.rows[0] == rows_of(above + VLLM)[0] and parsed.complete
    two = " ".join(" ".join(line.split()) for line in (V2023 + V2023.replace("5.99", "6.76")).splitlines())
    assert [r["request_throughput"] for r in rows_of("Results: " + two)] == [5.99, 6.76]


def test_a_block_quoted_as_json_strings_reads_the_same():
    block = SGLANG.replace(*value("Max request concurrency", "not set"))
    parsed = parse_text(json.dumps({"output": block.splitlines()}, indent=2))
    assert not parsed.dropped and parsed.complete and parsed.warnings == []
    assert parsed.rows[0]["concurrency"] is None and parsed.rows[0] == parse_text(block).rows[0]
    notebook = json.dumps({"outputs": [{"text": [line + "\n" for line in block.splitlines()]}]}, indent=1)
    assert parse_text(notebook).rows[0] == parse_text(block).rows[0]
    assert parse_text(json.dumps({"stdout": block})).rows[0] == parse_text(block).rows[0]  # one string, \n escapes


def test_a_save_result_json_with_latency_statistics_only_gives_its_row():
    stats = {"date": "20250301-101500", "backend": "vllm", "model_id": "m", "mean_ttft_ms": 12.5, "p99_itl_ms": 9.0}
    parsed = parse_text(json.dumps(stats, indent=4))
    assert parsed.format == "vllm_json" and parsed.complete and parsed.warnings == []
    assert (parsed.rows[0]["mean_ttft_ms"], parsed.rows[0]["p99_itl_ms"], parsed.rows[0]["config"]) == (12.5, 9.0, "m")


def test_vllms_pytorch_benchmark_format_gives_one_row_per_run():
    def record(name: str, value: float, concurrency: int) -> dict:
        args = {"max_concurrency": concurrency, "num_prompts": 80, "request_rate": "inf"}
        extra = {"completed": 80, "duration": 10.0, "total_token_throughput": 5000.0}
        return {
            "benchmark": {"name": "vLLM benchmark", "extra_info": {"args": args}},
            "model": {"name": "m"},
            "metric": {"name": name, "benchmark_values": [value], "extra_info": extra},
        }

    runs = [record(n, v, c) for c in (1, 8) for n, v in (("median_ttft_ms", 10.0 * c), ("p99_itl_ms", 9.0))]
    parsed = parse_text(json.dumps(runs))  # one line, as the client writes it
    assert parsed.format == "vllm_json" and [r["concurrency"] for r in parsed.rows] == [1, 8]
    assert [r["median_ttft_ms"] for r in parsed.rows] == [10.0, 80.0] and parsed.rows[1]["completed"] == 80


def test_every_unread_label_number_line_near_a_block_is_reported_with_its_line():
    text = "GPU util: 97\n" + VLLM.replace("Total input tokens:", "Cache hit rate (%): 41.5\nTotal input tokens:")
    text += "KV cache usage: 0.4\n\n" + "\n" * 20 + "Unrelated counter: 12\n"
    parsed = parse_text(text)
    assert parsed.rows[0]["total_input_tokens"] == 1369
    assert "line 1: unknown label 'GPU util' above a result block; not read" in parsed.warnings
    assert "line 5: unknown label 'Cache hit rate (%)'" in parsed.warnings
    assert "line 24: unknown label 'KV cache usage' near a result block; not read" in parsed.warnings
    assert not any("Unrelated counter" in w for w in parsed.warnings)  # far from any block: not about one


def test_figures_lost_past_an_unexpected_line_are_a_problem_that_drops_them():
    odd = VLLM.replace("=" * 50, "scheduler crashed, see above\nMean TTFT (ms): 1.0\nMedian TTFT (ms): 2.0")
    parsed = parse_text(odd)
    assert parsed.rows[0]["mean_ttft_ms"] == 71.54 and parsed.dropped
    assert [p.line for p in parsed.problems if p.dropped] == [22, 23]


def test_bench_parse_with_a_forced_kind_on_text_without_results_exits_nonzero_saying_why(tmp_path, capsys):
    from benchtools import cli

    path = tmp_path / "notes.txt"
    path.write_text("We ran the benchmark twice.\nGPU util: 97\n")
    assert cli.main(["parse", str(path), "--kind", "serving"]) == 1
    err = capsys.readouterr().err
    assert "no rows as serving/log: no result block: no 'Serving Benchmark Result' header" in err
    path.write_text(V2023)
    assert cli.main(["parse", str(path), "--kind", "serving"]) == 0
    assert json.loads(capsys.readouterr().out)["mean_e2e_ms"] == 67590.0


def test_terminal_colours_logger_names_and_a_dict_of_the_labels_read_the_same():
    plain = rows_of(VLLM)[0]
    assert rows_of("".join(f"\x1b[1;32m{line}\x1b[0m\n" for line in VLLM.splitlines()))[0] == plain
    assert rows_of("".join(f"INFO:__main__:{line}\n" for line in VLLM.splitlines()))[0] == plain
    labels = dict(line.split(":", 1) for line in VLLM.splitlines() if ":" in line)
    parsed = parse_text(json.dumps({label: float(value) for label, value in labels.items()}, indent=2))
    assert parsed.rows[0] == plain and parsed.warnings == []


def test_a_result_dict_as_python_prints_it_gives_its_row():
    result = {"backend": "vllm", "request_rate": math.inf, "max_concurrency": None, "completed": 100}
    result |= {"duration": 12.5, "mean_ttft_ms": 12.5, "p99_itl_ms": math.nan, "itls": [[0.01, 0.02]]}
    parsed = parse_text(f"print(result) gave:\n{result!r}\n")
    row = parsed.rows[0]
    assert (row["completed"], row["duration_s"], row["request_rate"], row["concurrency"]) == (100, 12.5, math.inf, None)
    assert math.isnan(row["p99_itl_ms"]) and parsed.complete and parsed.warnings == []


def test_a_block_turned_into_a_two_column_table_reads_the_same():
    rows = [line.split(":", 1) for line in VLLM.splitlines() if ":" in line]
    table = "| Metric | Value |\n|---|---|\n" + "".join(f"| {k} | {v.strip()} |\n" for k, v in rows)
    parsed = parse_text(table, "serving")
    assert parsed.rows[0] == rows_of(VLLM)[0] and parsed.warnings == []
    bold = table.replace("| Mean TTFT (ms) |", "| **Mean TTFT (ms)** |")
    assert parse_text(bold).rows[0]["mean_ttft_ms"] == 71.54


def test_a_setting_the_block_contradicts_is_kept_from_the_phase_and_reported():
    parsed = parse_text(PHASES[1] + "\n" + SGLANG.replace(*value("Max request concurrency", "16")) + "ALL_DONE\n")
    assert parsed.rows[0]["concurrency"] == 8
    assert "line 5: 'Max request concurrency': '16' differs from the concurrency of the phase (8), kept" in (
        parsed.warnings
    )


# A client's saved result echoed into the log above the next block (its keys are identifiers, not labels).
SAVED = json.dumps({"backend": "sglang", "request_rate": 10.0, "max_concurrency": 8, "completed": 100, "duration": 9.5})


def test_a_value_comes_only_from_its_own_block_never_from_a_json_record_or_text_above():
    """The rule: a JSON record is a record, never a source of labels; a setting printed above a block (an
    argument line, a sweep label) yields to the block's own line for it."""
    text = SAVED + "\n" + SGLANG.replace(*value("Max request concurrency", "16"))
    parsed = parse_text("--max-concurrency 4 --request-rate 2\n" + text)
    (row,) = parsed.rows
    assert row["concurrency"] == 16 and row["request_rate"] == rows_of(SGLANG)[0]["request_rate"]
    assert row["completed"] == rows_of(SGLANG)[0]["completed"]
    assert "line 2: a JSON record (a client's saved result) in the log: not read as labels" in parsed.warnings


def test_a_digest_line_that_repeats_the_block_is_not_a_row_of_its_own():
    r = rows_of(SGLANG)[0]
    digest = (
        f"PERF_LINES: Request throughput (req/s): {r['request_throughput']:.2f} | "
        f"Output token throughput (tok/s): {r['output_throughput']:.2f} | Mean TTFT (ms): {r['mean_ttft_ms']:.2f}"
    )
    parsed = parse_text(SGLANG + digest + "\n" + SGLANG)
    assert len(parsed.rows) == 2 and parsed.rows[0] == parsed.rows[1] == r
    assert any("repeats the values of the result block at line 1: not a new row" in w for w in parsed.warnings)


@pytest.mark.parametrize("code", ["`{}`", "`{}", "{}`"])
def test_a_label_in_inline_code_or_behind_a_stray_backtick_is_read(code: str):
    lines = SGLANG.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Mean TTFT"))
    label, number = lines[at].split(":", 1)
    lines[at] = code.format(label + ":") + number
    parsed = parse_text("\n".join(lines) + "\n")
    assert parsed.rows[0] == rows_of(SGLANG)[0] and not any("skipped a line" in w for w in parsed.warnings)


@pytest.mark.parametrize("style", ["* {}", "• {}", "- {}", "**{}**"])
def test_a_block_written_as_a_markdown_list_or_in_bold_reads_the_same(style: str):
    text = "".join(style.format(line) + "\n" for line in VLLM.splitlines() if line.strip())
    parsed = parse_text(text)
    assert parsed.rows[0] == rows_of(VLLM)[0] and parsed.warnings == []


@pytest.mark.parametrize(
    "paste",
    [
        json.dumps(VLLM.splitlines()),  # a list of the lines, on one line
        repr(VLLM.splitlines()),  # the same as Python prints it
        "<p>" + "<br>".join(VLLM.splitlines()) + "</p>",  # an HTML page's lines
    ],
    ids=["json-list", "python-list", "html-br"],
)
def test_a_block_as_a_list_on_one_line_or_html_lines_reads_the_same(paste: str):
    parsed = parse_text(paste + "\n")
    assert parsed.rows[0] == rows_of(VLLM)[0] and parsed.complete and parsed.warnings == []


BLOCK = """============ Serving Benchmark Result ============
Successful requests:                     10
Benchmark duration (s):                  5.00
Request throughput (req/s):              2.00
{lines}
==================================================
"""


def test_a_statistic_of_a_metric_the_table_does_not_know_is_warned_about_never_dropped_silently():
    """A newer client's ``Mean Client Queue Time (ms)`` reads like a fork's raw metric key the table ignores by
    pattern; only a label holding a raw key (``prefill_cost_time``) is that fork's. Every other is warned about."""
    lines = "Mean Client Queue Time (ms):             1.00\nP99 Client Queue Time (ms):              2.00"
    parsed = parse_text(BLOCK.format(lines=lines), "serving")
    assert parsed.rows and any("unknown label 'Mean Client Queue Time (ms)'" in w for w in parsed.warnings)
    assert any("unknown label 'P99 Client Queue Time (ms)'" in w for w in parsed.warnings), parsed.warnings
    fork = parse_text(BLOCK.format(lines="Mean prefill_cost_time (ms):             1.00"), "serving")
    assert not any("prefill_cost_time" in w for w in fork.warnings), fork.warnings  # the fork's, declared ignored


def test_a_unit_its_tools_print_after_the_value_is_never_assumed_when_missing():
    """``Median TTFT: 1.58`` (a multi-turn tool's seconds, no unit) is not stored as 1.58 ms beside a mean read
    with its unit; the line is named. With the unit after the value, both read."""
    parsed = parse_text(BLOCK.format(lines="Mean TTFT: 1440.00 ms\nMedian TTFT: 1.58"), "serving")
    (row,) = parsed.rows
    assert row["mean_ttft_ms"] == 1440.0 and row["median_ttft_ms"] is None, row
    assert any("'Median TTFT' without the unit its tools print after the value (ms)" in w for w in parsed.warnings)
    seconds = parse_text(BLOCK.format(lines="Mean TTFT: 1.44 s\nMedian TTFT: 1.58 s"), "serving").rows[0]
    assert (seconds["mean_ttft_ms"], seconds["median_ttft_ms"]) == (1440.0, 1580.0)
