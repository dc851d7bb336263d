"""What the serving formats share: the row's columns, value reading, and the JSON record mapping."""

from __future__ import annotations

import math
import re
from typing import Any

METRICS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "median", "std", "p90", "p95", "p99", "max")
COLUMNS = (
    "config", "concurrency", "num_prompts", "input_len", "output_len", "completed", "failed", "duration_s",
    "total_input_tokens",
    "total_output_tokens", "request_throughput", "input_throughput", "output_throughput", "total_throughput",
    "peak_output_throughput", "peak_concurrent_requests",
    *(f"{stat}_{metric}_ms" for metric in METRICS for stat in STATS),
)  # fmt: skip

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


def empty_row(config: str | None = None, concurrency: int | None = None, prompts: int | None = None) -> dict:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(config=config or "default", concurrency=concurrency, num_prompts=prompts)
    return row


def finish(row: dict[str, Any]) -> dict[str, Any]:
    if row["failed"] is None and row["num_prompts"] is not None and row["completed"] is not None:
        row["failed"] = row["num_prompts"] - row["completed"]
    if row["num_prompts"] is None and row["completed"] is not None:
        row["num_prompts"] = int(row["completed"] + (row["failed"] or 0))
    for key in ("concurrency", "num_prompts", "input_len", "output_len", "completed", "failed", "total_input_tokens",
                "total_output_tokens", "peak_concurrent_requests"):  # fmt: skip
        if isinstance(row[key], float) and math.isfinite(row[key]):
            row[key] = int(row[key])
    return row


def from_json(obj: dict[str, Any], config: str | None) -> dict[str, Any]:
    row = empty_row(config)
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
    return finish(row)
