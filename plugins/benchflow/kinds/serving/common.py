"""What the serving formats share: the row's columns, value reading, and the JSON record mapping."""

from __future__ import annotations

import math
import re
from typing import Any

from benchflow.kinds.serving.columns import COLUMNS
from benchflow.kinds.serving.labels import PREAMBLE, json_keys
from benchflow.parsing import to_float

_SETTINGS = ("config", "repeat", "warmup", "input_len", "output_len")
FIGURES = tuple(c for c in COLUMNS if c not in PREAMBLE and c not in _SETTINGS)  # what a run measured
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

# {stat}_{metric}_ms keys no version in json_keys.tsv saves (a fork's p90_e2e_latency_ms, min_ttft_ms)
_JSON_LATENCY_RE = re.compile(
    r"^(?P<stat>mean|median|std|p90|p95|p99|max)_(?P<metric>ttft|tpot|itl|e2el|e2e_latency)_ms$"
)
NOT_SET = frozenset({"not set", "n/a", "na", "none", "null", "-", "", "unknown"})
# 15.0 RPS.  /  0          <<<<<<< New line  /  1.0 (Poisson process)  /  -0.00  /  inf  /  1.2e+03  /  1.5s
LEADING_NUMBER_RE = re.compile(
    r"^(?P<number>[-+]?(?:(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|inf(?:inity)?|nan))"
    r"(?P<glued>ms|s|us)?(?![\w.])(?P<rest>.*)$",
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
    rest = found["rest"].strip()
    return (0.0 if result == 0 else result), f"{found['glued']} {rest}".strip() if found["glued"] else rest


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


def json_column(key: str) -> str | None:
    """The column a saved record's key fills (json_keys.tsv, then the ``{stat}_{metric}_ms`` shape), or None."""
    exact, templates = json_keys()
    if key in exact:
        return exact[key]
    for pattern, column in templates:
        if found := pattern.match(key):
            named = column.replace("{p}", found["p"][:-2] if found["p"].endswith(".0") else found["p"])
            return named if named in COLUMNS else None
    if latency := _JSON_LATENCY_RE.match(key):
        metric = "e2e" if latency["metric"] in ("e2el", "e2e_latency") else latency["metric"]
        return f"{latency['stat']}_{metric}_ms"
    return None


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
        if (column := json_column(key)) is not None:
            row[column] = value
    return finish(row)


def has_figures(row: dict[str, Any]) -> bool:
    """Whether a row holds any figure of a run (a count, a duration, a throughput, a latency), not only its
    settings: a record of latency statistics alone is a result, a config dump is not."""
    return any(row[column] is not None for column in FIGURES)
