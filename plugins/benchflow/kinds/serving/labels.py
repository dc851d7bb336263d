"""The serving clients' labels as data: ``labels.tsv`` (text blocks) and ``json_keys.tsv`` (saved records).

Each row of ``labels.tsv`` is a label a tool's print statements printed (SGLang ``bench_serving``, vLLM
``benchmark_serving.py`` / ``vllm bench serve``, their forks, 2023 to now): the unit printed in the label or
after the value, the column it fills (or ``ignored``: known, deliberately not stored), the scale from the printed
unit to the column's, when it was first and last seen and in how many versions, and one source. Labels are
compared after :func:`normalise`; ``{p}`` in a label stands for a percentile (``P99.9``), ``{i}`` for an index,
``{key}`` for a raw metric name (lowest priority). A label no row names but shaped ``<stat> <metric> (<unit>)``
(``Std TTFT (ms)``, ``Mean E2EL (s)``) is read by its parts (:data:`METRIC_NAMES`, :data:`STAT_NAMES`).

Both tables are read once per process; :func:`lookup` is memoised on the label as printed.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from benchflow.kinds.serving.columns import COLUMNS

HERE = Path(__file__).resolve().parent
LABELS_FILE = HERE / "labels.tsv"
JSON_KEYS_FILE = HERE / "json_keys.tsv"
PREAMBLE = frozenset({"request_rate", "concurrency", "num_prompts"})  # the run's settings, not its figures
WHOLE_ONLY = frozenset({"concurrency"})  # labels read only when the value is a whole number (see labels.tsv)

Role = Literal["preamble", "body", "ignored"]

# Units as printed (lower case), in seconds for times; rates and counts have no scale.
TIME_UNITS = {
    "ms": 1e-3,
    "msec": 1e-3,
    "milliseconds": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "秒": 1.0,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "min": 60.0,
    "minutes": 60.0,
}
RATE_UNITS = frozenset(
    {"tok/s", "tokens/s", "token/s", "tokens/sec", "tok/sec", "req/s", "requests/s", "request/s", "reqs/s", "rps"}
    | {"qps", "requests/sec", "it/s"}
)
OTHER_UNITS = frozenset({"tokens", "token", "requests", "reqs", "%"})

STAT_NAMES = {
    "mean": "mean",
    "avg": "mean",
    "average": "mean",
    "median": "median",
    "std": "std",
    "std dev": "std",
    "stdev": "std",
    "max": "max",
    "min": "min",
}
METRIC_NAMES = {
    "ttft": "ttft",
    "time to first token": "ttft",
    "tpot": "tpot",
    "time per output token": "tpot",
    "itl": "itl",
    "inter token latency": "itl",
    "e2el": "e2e",
    "e2e": "e2e",
    "e2e latency": "e2e",
    "end to end latency": "e2e",
    "e2e request latency": "e2e",
    "request latency": "e2e",
    "latency": "e2e",
}
# mean ttft (ms)  /  p99.9 e2el (s)  /  std dev itl (ms)      (after normalise)
_PARTS_RE = re.compile(
    r"^(?P<stat>mean|median|std(?: dev)?|stdev|max|min|avg|average|p(?P<p>\d+(?:\.\d+)?)) (?P<metric>.+?) "
    r"\((?P<unit>ms|s|us|sec|seconds)\)$"
)
_SPACE_RE = re.compile(r"[\s\-_]+")
_PAREN_RE = re.compile(r"\s*\(")


@dataclass(frozen=True)
class Label:
    """What a label means: the column it fills (None: known, not stored), the unit it is printed in."""

    key: str
    column: str | None
    unit: str
    role: Role
    suffix: bool = False  # the tool prints the unit after the value (``Median TTFT: 12.3 ms``): never assumed


def normalise(label: str) -> str:
    """``Mean  TTFT(ms)`` → ``mean ttft (ms)``; ``Inter-Token`` → ``inter token``; ``#Input tokens`` → ``input
    tokens`` (a leading ``#`` is a log's comment prefix as often as the tool's own)."""
    text = _PAREN_RE.sub(" (", label.strip().lower().lstrip("#"))
    return _SPACE_RE.sub(" ", text).strip()


def columns() -> tuple[str, ...]:
    return COLUMNS


def role_of(column: str | None) -> Role:
    return "ignored" if column is None else "preamble" if column in PREAMBLE else "body"


def read_table(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def _template(key: str) -> re.Pattern[str]:
    pattern = re.escape(key)
    for name, part in (("p", r"(?P<p>\d+(?:\.\d+)?)"), ("i", r"\d+"), ("key", r"[a-z][a-z0-9]*(?: [a-z0-9]+)*")):
        pattern = pattern.replace(re.escape("{" + name + "}"), part)
    return re.compile(f"^{pattern}$")


@cache
def table() -> tuple[dict[str, Label], list[tuple[re.Pattern[str], str, str]], list[tuple[re.Pattern[str], str]]]:
    """(exact labels, percentile/index templates, raw-name templates) from ``labels.tsv``. Where tools print the
    same label with different meanings, a column wins over ``ignored`` (``Concurrency``: see its note)."""
    exact: dict[str, Label] = {}
    templates: list[tuple[re.Pattern[str], str, str]] = []
    loose: list[tuple[re.Pattern[str], str]] = []
    for row in read_table(LABELS_FILE):
        key = normalise(row["label"])
        column = None if row["column"] == "ignored" else row["column"]
        unit = row["unit"] if row["unit_place"] != "none" else ""
        if "{key}" in key:
            loose.append((_template(key), unit))
        elif "{" in key:
            templates.append((_template(key), row["column"], unit))
        elif key not in exact or exact[key].column is None:
            exact[key] = Label(key, column, unit, role_of(column), row["unit_place"] == "suffix")
    return exact, templates, loose


_MEMO: dict[str, Label | None] = {}


def lookup(label: str) -> Label | None:
    """What a printed label means, or None for a label no tool prints (nor one with a wide gap inside it, a
    table row such as a fork's ``Total          Requests: 1000``). Memoised (a log repeats its labels)."""
    try:
        return _MEMO[label]
    except KeyError:
        pass
    # wide gaps: a table's columns; a raw metric key (FastDeploy's ``Mean prefill_cost_time (ms)``) has underscores
    found = None if "   " in label.strip() else resolve(normalise(label), raw_key="_" in label)
    if len(_MEMO) > 50_000:
        _MEMO.clear()
    _MEMO[label] = found
    return found


def resolve(key: str, raw_key: bool = True) -> Label | None:
    """A normalised label: the table, its templates, the ``<stat> <metric> (<unit>)`` grammar, raw names (only
    where the printed label holds a raw metric key, ``raw_key``: any other statistic of an unknown metric, such as
    a newer client's ``Mean Client Queue Time (ms)``, is unknown, and warned about, never taken as ignored)."""
    exact, templates, loose = table()
    if key in exact:
        return exact[key]
    for pattern, column, unit in templates:
        if found := pattern.match(key):
            return _known(key, _percentile_column(column, found.groupdict().get("p")), unit)
    if parts := _PARTS_RE.match(key):
        metric = METRIC_NAMES.get(parts["metric"])
        if metric is not None:
            stat = f"p{_p_word(parts['p'])}" if parts["p"] else STAT_NAMES[parts["stat"]]
            return _known(key, f"{stat}_{metric}_ms", parts["unit"])
    for pattern, unit in loose if raw_key else ():
        if pattern.match(key):
            return Label(key, None, unit, "ignored")
    return None


def _p_word(p: str) -> str:
    return p[:-2] if p.endswith(".0") else p


def _percentile_column(column: str, p: str | None) -> str:
    return column.replace("{p}", _p_word(p)) if p is not None else column


def _known(key: str, column: str, unit: str) -> Label:
    """A column the grammar or a template names; a statistic the table has no column for (P50, min) is known
    and not stored."""
    stored = column if column in columns() else None
    return Label(key, stored, unit, role_of(stored))


def unit_of(text: str) -> str | None:
    """``s``, ``requests/s``, ``RPS.``, ``秒`` as a unit (lower case), or None when the text is no unit."""
    unit = text.strip().rstrip(".,;").strip().lower()
    if unit in TIME_UNITS or unit in RATE_UNITS or unit in OTHER_UNITS:
        return unit
    return None


def scale(unit: str, column: str) -> float | None:
    """The factor from ``unit`` to ``column``'s unit (s → ms: 1000), or None when they do not match."""
    unit = unit.lower()
    if column.endswith("_ms") or column == "duration_s":
        target = 1e-3 if column.endswith("_ms") else 1.0
        if not unit:
            return 1.0
        return TIME_UNITS[unit] / target if unit in TIME_UNITS else None
    return None if unit in TIME_UNITS else 1.0


@cache
def json_keys() -> tuple[dict[str, str | None], list[tuple[re.Pattern[str], str]]]:
    """(key → column or None for ignored, templated keys) from ``json_keys.tsv``."""
    exact: dict[str, str | None] = {}
    templates: list[tuple[re.Pattern[str], str]] = []
    for row in read_table(JSON_KEYS_FILE):
        column = None if row["column"] == "ignored" else row["column"]
        if "{p}" in row["key"]:
            pattern = re.escape(row["key"]).replace(re.escape("{p}"), r"(?P<p>\d+(?:\.\d+)?)")
            templates.append((re.compile(f"^{pattern}$"), row["column"]))
        elif row["key"] not in exact or exact[row["key"]] is None:
            exact[row["key"]] = column
    return exact, templates
