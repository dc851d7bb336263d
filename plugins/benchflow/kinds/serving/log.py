"""SGLang ``bench_serving`` and vLLM ``bench serve`` / ``benchmark_serving.py`` text output.

``Serving Benchmark Result`` blocks, optionally under sweep phase headers
(``===== PD concurrency=8 (n=24) =====``), with log prefixes, tqdm bars and other lines around them.
Labels differ across releases and tools (``Total throughput`` / ``Total token throughput`` /
``Total Token throughput``, ``Inter-token`` / ``Inter-Token``); values may be ``inf``, ``not set``
or ``-0.00``. A block cut off before its closing rule is dropped and the run marked incomplete.
"""

from __future__ import annotations

import re
from typing import Any

from benchflow.kinds.serving.common import empty_row, finish, number
from benchflow.parsing import Format, ParsedRun, ParseError

# ===== PD concurrency=8 (n=24) =====
PHASE_RE = re.compile(r"={3,}\s*(?P<config>\S.*?)\s+concurrency=(?P<c>\d+)\s+\(n=(?P<n>\d+)\)\s*={3,}\s*$")
# ============ Serving Benchmark Result ============
BLOCK_START_RE = re.compile(r"={3,}\s*Serving Benchmark Result\s*={3,}\s*$")
# ==================================================   (closes a block)
BLOCK_END_RE = re.compile(r"^={10,}\s*$")
# ---------------Time to First Token----------------
SECTION_RE = re.compile(r"^-{3,}.*-{3,}\s*$")
# Mean TTFT (ms):                          153.00
LINE_RE = re.compile(r"^(?P<label>[A-Za-z][^:]*?)\s*:\s+(?P<value>\S.*?)\s*$")
# P99 Inter-token Latency (ms) / Median E2E Latency (ms) / Mean TPOT (ms)
LATENCY_RE = re.compile(r"^(?P<stat>mean|median|std|p90|p95|p99|max)\s+(?P<metric>.+?)\s+\(ms\)$")

_METRIC_NAMES = {
    "ttft": "ttft", "time to first token": "ttft", "tpot": "tpot", "time per output token": "tpot",
    "itl": "itl", "inter-token latency": "itl", "inter token latency": "itl",
    "e2e latency": "e2e", "e2el": "e2e", "end-to-end latency": "e2e",
}  # fmt: skip
_LABELS = {
    "backend": None,
    "traffic request rate": None,
    "max request concurrency": "concurrency",
    "successful requests": "completed",
    "failed requests": "failed",
    "benchmark duration (s)": "duration_s",
    "total input tokens": "total_input_tokens",
    "total input text tokens": None,
    "total input vision tokens": None,
    "total generated tokens": "total_output_tokens",
    "total generated tokens (retokenized)": None,
    "request throughput (req/s)": "request_throughput",
    "input token throughput (tok/s)": "input_throughput",
    "output token throughput (tok/s)": "output_throughput",
    "peak output token throughput (tok/s)": "peak_output_throughput",
    "peak concurrent requests": "peak_concurrent_requests",
    "total token throughput (tok/s)": "total_throughput",
    "total throughput (tok/s)": "total_throughput",
    "concurrency": None,  # achieved mean concurrency, not the configured one
    "accept length": None,
}
def detect(text: str) -> bool:
    return any(BLOCK_START_RE.search(line) for line in text.splitlines())


def parse(text: str, marker: str = "ALL_DONE") -> ParsedRun:
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    phase: tuple[str, int, int] | None = None
    block: dict[str, Any] | None = None
    block_line = prefix_len = 0
    complete = False
    empty_phases: list[str] = []  # phases whose client printed no result block (a failed phase)
    phase_rows = 0
    for number_, line in enumerate(text.splitlines(), start=1):
        if block is None:
            if line.strip() == marker:
                complete = True
                break
            if match := PHASE_RE.search(line):
                if phase is not None and phase_rows == 0:
                    empty_phases.append(f"{phase[0]} concurrency={phase[1]}")
                phase, phase_rows = (match["config"], int(match["c"]), int(match["n"])), 0
            elif match := BLOCK_START_RE.search(line):
                block = empty_row(*(phase or (None, None, None)))
                block_line, prefix_len = number_, match.start()
            continue
        body = line[prefix_len:] if len(line) >= prefix_len else line
        if BLOCK_END_RE.match(body):
            rows.append(finish(block))
            block = None
            phase_rows += 1
            continue
        if SECTION_RE.match(body) or not body.strip():
            continue
        found = LINE_RE.match(body)
        if found is None:
            raise ParseError("not a 'label: value' line inside a result block", number_, line)
        _assign(block, found["label"], found["value"], number_, line, warnings)
    if block is not None:
        warnings.append(f"line {block_line}: result block cut off before its closing rule; dropped")
    if complete and phase is not None and phase_rows == 0:
        empty_phases.append(f"{phase[0]} concurrency={phase[1]}")
    if empty_phases:
        complete = False
        warnings.append(f"phases without a result: {', '.join(empty_phases)}")
    if phase is None and not complete:
        # a client's own output (no sweep driver, so no marker): complete when no block was cut off
        complete = bool(rows) and block is None
    return ParsedRun("log", rows, complete, {}, warnings)


def _assign(row: dict[str, Any], label: str, value: str, line_no: int, line: str, warnings: list[str]) -> None:
    key = re.sub(r"\s+", " ", label.strip().lower())
    try:
        if latency := LATENCY_RE.match(key):
            metric = _METRIC_NAMES.get(latency["metric"])
            if metric is None:
                warnings.append(f"line {line_no}: unknown latency metric {label!r}")
                return
            row[f"{latency['stat']}_{metric}_ms"] = number(value)
            return
        if key not in _LABELS:
            warnings.append(f"line {line_no}: unknown label {label!r}")
            return
        column = _LABELS[key]
        if column is not None and not (column == "concurrency" and row["concurrency"] is not None):
            row[column] = number(value)
    except ValueError:
        raise ParseError(f"value of {label!r} is not a number", line_no, line) from None




FORMAT = Format("log", detect, parse)
