"""Serving benchmarks: SGLang ``bench_serving`` and vLLM ``bench serve`` / ``benchmark_serving.py``.

Three shapes of the same numbers, one tidy row per run (per phase of a sweep):

* ``serving_log``: text with ``Serving Benchmark Result`` blocks, optionally under sweep phase headers
  (``===== PD concurrency=8 (n=24) =====``), with log prefixes, tqdm bars and other lines around them.
  Labels differ across releases and tools (``Total throughput`` / ``Total token throughput`` /
  ``Total Token throughput``, ``Inter-token`` / ``Inter-Token``); values may be ``inf``, ``not set``
  or ``-0.00``. A block cut off before its closing rule is dropped and the run marked incomplete.
* ``sglang_jsonl``: SGLang's ``--output-file``, one JSON object per run (``Infinity`` allowed).
* ``vllm_json``: vLLM's ``--save-result`` JSON object.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from benchflow.parsers import ParsedRun, ParseError

FORMAT_LOG = "serving_log"
FORMAT_SGLANG_JSONL = "sglang_jsonl"
FORMAT_VLLM_JSON = "vllm_json"

METRICS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "median", "std", "p90", "p95", "p99", "max")
COLUMNS = (
    "config", "concurrency", "num_prompts", "input_len", "output_len", "completed", "failed", "duration_s",
    "total_input_tokens",
    "total_output_tokens", "request_throughput", "input_throughput", "output_throughput", "total_throughput",
    "peak_output_throughput", "peak_concurrent_requests",
    *(f"{stat}_{metric}_ms" for metric in METRICS for stat in STATS),
)  # fmt: skip

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
_JSON_KEYS = {
    "max_concurrency": "concurrency", "completed": "completed", "failed": "failed", "duration": "duration_s",
    "total_input_tokens": "total_input_tokens", "total_input": "total_input_tokens",
    "total_output_tokens": "total_output_tokens", "total_output": "total_output_tokens",
    "request_throughput": "request_throughput", "input_throughput": "input_throughput",
    "output_throughput": "output_throughput", "total_token_throughput": "total_throughput",
    "total_throughput": "total_throughput", "max_output_tokens_per_s": "peak_output_throughput",
    "max_concurrent_requests": "peak_concurrent_requests", "num_prompts": "num_prompts",
    "random_input_len": "input_len", "random_output_len": "output_len", "input_len": "input_len",
    "output_len": "output_len",
}  # fmt: skip
_JSON_LATENCY_RE = re.compile(
    r"^(?P<stat>mean|median|std|p90|p95|p99|max)_(?P<metric>ttft|tpot|itl|e2el|e2e_latency)_ms$"
)


def number(text: str) -> float | None:
    """A block value: ``inf``/``Infinity`` → inf, ``not set``/``N/A`` → None, ``-0.00`` → 0.0."""
    value = text.strip().lower()
    if value in ("not set", "n/a", "none", "null", "-", ""):
        return None
    if value in ("inf", "infinity", "+inf"):
        return math.inf
    result = float(value)
    return 0.0 if result == 0 else result


def _empty_row(config: str | None = None, concurrency: int | None = None, prompts: int | None = None) -> dict:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(config=config or "default", concurrency=concurrency, num_prompts=prompts)
    return row


def _finish(row: dict[str, Any]) -> dict[str, Any]:
    if row["failed"] is None and row["num_prompts"] is not None and row["completed"] is not None:
        row["failed"] = row["num_prompts"] - row["completed"]
    if row["num_prompts"] is None and row["completed"] is not None:
        row["num_prompts"] = int(row["completed"] + (row["failed"] or 0))
    for key in ("concurrency", "num_prompts", "input_len", "output_len", "completed", "failed", "total_input_tokens",
                "total_output_tokens", "peak_concurrent_requests"):  # fmt: skip
        if isinstance(row[key], float) and math.isfinite(row[key]):
            row[key] = int(row[key])
    return row


def detect_log(text: str) -> bool:
    return any(BLOCK_START_RE.search(line) for line in text.splitlines())


def parse_log(text: str, marker: str = "ALL_DONE") -> ParsedRun:
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
                block = _empty_row(*(phase or (None, None, None)))
                block_line, prefix_len = number_, match.start()
            continue
        body = line[prefix_len:] if len(line) >= prefix_len else line
        if BLOCK_END_RE.match(body):
            rows.append(_finish(block))
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
    return ParsedRun(FORMAT_LOG, rows, complete, {}, warnings)


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


def _from_json(obj: dict[str, Any], config: str | None) -> dict[str, Any]:
    row = _empty_row(config)
    for key, value in obj.items():
        if isinstance(value, str):
            try:
                value = number(value)
            except ValueError:
                continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if key in _JSON_KEYS:
            row[_JSON_KEYS[key]] = value
        elif latency := _JSON_LATENCY_RE.match(key):
            metric = "e2e" if latency["metric"] in ("e2el", "e2e_latency") else latency["metric"]
            row[f"{latency['stat']}_{metric}_ms"] = value
    return _finish(row)


def detect_sglang_jsonl(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0]
    return first.startswith("{") and '"output_throughput"' in first and '"total_token_throughput"' not in first


def parse_sglang_jsonl(text: str, marker: str = "ALL_DONE") -> ParsedRun:
    rows, warnings = [], []
    lines = text.splitlines()
    for number_, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if number_ == len(lines) and not text.endswith("\n"):
                warnings.append(f"line {number_}: dropped a record cut off mid-write")
                continue
            raise ParseError(f"not a JSON object ({exc.msg})", number_, line) from None
        if not isinstance(obj, dict):
            raise ParseError("not a JSON object", number_, line)
        rows.append(_from_json(obj, obj.get("tag") or obj.get("config")))
    return ParsedRun(FORMAT_SGLANG_JSONL, rows, True, {}, warnings)


def detect_vllm_json(text: str) -> bool:
    stripped = text.lstrip()
    return stripped.startswith("{") and '"total_token_throughput"' in stripped[:20000]


def parse_vllm_json(text: str, marker: str = "ALL_DONE") -> ParsedRun:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"not a JSON document ({exc.msg})", exc.lineno) from None
    if not isinstance(obj, dict):
        raise ParseError("not a JSON object", 1)
    return ParsedRun(FORMAT_VLLM_JSON, [_from_json(obj, obj.get("label") or obj.get("model_id"))], True, {}, [])
