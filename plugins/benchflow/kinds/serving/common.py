"""What the serving formats share: the row's columns, value reading, and the JSON record mapping."""

from __future__ import annotations

import math
import re
from typing import Any

from benchflow.parsing import to_float

METRICS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "median", "std", "p90", "p95", "p99", "max")
COLUMNS = (
    "config",
    "concurrency",
    "repeat",
    "warmup",
    "num_prompts",
    "input_len",
    "output_len",
    "completed",
    "failed",
    "duration_s",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "peak_output_throughput",
    "peak_concurrent_requests",
    *(f"{stat}_{metric}_ms" for metric in METRICS for stat in STATS),
    "request_rate",
    "goodput",
    "accept_length",  # v6 (include/sql/0006_serving_columns.sql)
)
INTS = (
    "concurrency",
    "repeat",
    "num_prompts",
    "input_len",
    "output_len",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "peak_concurrent_requests",
)

_JSON_KEYS = {
    "max_concurrency": "concurrency",
    "completed": "completed",
    "failed": "failed",
    "duration": "duration_s",
    "total_input_tokens": "total_input_tokens",
    "total_input": "total_input_tokens",
    "total_output_tokens": "total_output_tokens",
    "total_output": "total_output_tokens",
    "request_throughput": "request_throughput",
    "input_throughput": "input_throughput",
    "output_throughput": "output_throughput",
    "total_token_throughput": "total_throughput",
    "total_throughput": "total_throughput",
    "max_output_tokens_per_s": "peak_output_throughput",
    "max_concurrent_requests": "peak_concurrent_requests",
    "num_prompts": "num_prompts",
    "random_input_len": "input_len",
    "random_output_len": "output_len",
    "input_len": "input_len",
    "output_len": "output_len",
    "request_rate": "request_rate",
    "request_goodput": "goodput",
    "goodput": "goodput",
    "accept_length": "accept_length",
    "acceptance_length": "accept_length",
    "spec_decode_acceptance_length": "accept_length",
    "repeat": "repeat",
}
_JSON_LATENCY_RE = re.compile(
    r"^(?P<stat>mean|median|std|p90|p95|p99|max)_(?P<metric>ttft|tpot|itl|e2el|e2e_latency)_ms$"
)
NOT_SET = frozenset({"not set", "n/a", "na", "none", "null", "-", "", "unknown"})
# 15.0 RPS.  /  0          <<<<<<< New line  /  1.0 (Poisson process)  /  -0.00  /  inf  /  1.2e+03
LEADING_NUMBER_RE = re.compile(
    r"^(?P<number>[-+]?(?:(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|inf(?:inity)?|nan))(?![\w.])(?P<rest>.*)$",
    re.IGNORECASE,
)


def number(text: str) -> float | None:
    """A block value: ``inf``/``Infinity`` → inf, ``NaN`` → nan, ``not set``/``N/A`` → None, ``-0.00`` → 0.0.
    ValueError when it is not a number (text after a number: see :func:`leading_number`)."""
    value = text.strip()
    if value.lower() in NOT_SET:
        return None
    result = to_float(value)
    return 0.0 if result == 0 else result


def leading_number(text: str) -> tuple[float | None, str]:
    """The number a value starts with and the text after it (``15.0 RPS.`` → ``(15.0, 'RPS.')``);
    ``not set`` → ``(None, '')``. ValueError when the value does not start with a number."""
    value = text.strip()
    if value.lower() in NOT_SET:
        return None, ""
    found = LEADING_NUMBER_RE.match(value)
    if found is None:
        raise ValueError(value)
    result = to_float(found["number"].replace(",", ""))
    return (0.0 if result == 0 else result), found["rest"].strip()


def empty_row(
    config: str | None = None,
    concurrency: int | None = None,
    prompts: int | None = None,
    repeat: int = 1,
    warmup: bool = False,
) -> dict:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(config=config or "default", concurrency=concurrency, num_prompts=prompts, repeat=repeat, warmup=warmup)
    return row


def finish(row: dict[str, Any]) -> dict[str, Any]:
    """Integer columns as ints. Nothing is inferred: ``num_prompts`` comes from the record, the sweep's
    phase header or the run's arguments, never from ``completed``, and ``failed`` only from its own line."""
    for key in INTS:
        if isinstance(row[key], float) and math.isfinite(row[key]):
            row[key] = int(row[key])
    return row


def from_json(obj: dict[str, Any], config: str | None) -> dict[str, Any]:
    row = empty_row(config, warmup=obj.get("warmup") is True)  # the sweep driver marks warm-up phases
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
