"""Result kinds: everything the project knows about one kind of result, in one package each.

A kind (``kernel``, ``serving``, ``generic``, …) is a sub-package of this one that defines ``KIND``, a
:class:`ResultKind`: the output formats that produce its rows (one pure module per format), its warehouse
table and columns, its Great Expectations suite and the suite's parameters from the spec, the query that
shows a run's rows, its trend metrics and which way each is better, and its plots. Spec, CLI, pipeline,
warehouse, views, regressions and the report look kinds up here; nothing outside this package names one.

Adding a kind: one folder here plus the migration that creates its table (``include/sql/``).
Adding a format to a kind: one module in the kind's folder, listed in its ``KIND.formats``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from benchflow.parsing import Format, ParsedRun, ParseError

if TYPE_CHECKING:
    import pandas as pd

ColumnType = Literal["int", "float", "text", "bool"]
Better = Literal["higher", "lower"]


def _no_options(benchmark: Any) -> dict[str, Any]:
    return {}


def _no_params(benchmark: Any, args: Mapping[str, Any]) -> dict[str, Any]:
    return {}


def _no_derived(frame: pd.DataFrame) -> pd.DataFrame:
    return frame


@dataclass(frozen=True)
class SideTable:
    """Rows a kind loads beside its results from a file the benchmark saved (serving: per-request data)."""

    table: str
    columns: Mapping[str, ColumnType]
    file: str  # in the run's artifacts, JSON lines
    defaults: Mapping[str, Any] = field(default_factory=dict)  # for rows that do not say


@dataclass(frozen=True)
class ResultKind:
    """One kind of result. ``formats[0]`` is the default format of a spec of this kind."""

    name: str
    description: str
    formats: tuple[Format, ...]
    table: str
    columns: Mapping[str, ColumnType]  # load order, after (dag_id, run_id)
    key: tuple[str, ...]  # what identifies a case within a run
    expectations: Callable[..., list[Any]]  # GX expectations, given the suite's parameters
    servers: Literal["required", "forbidden", "optional"]
    display: str  # SELECT list that shows a run's rows (bench run, the results view)
    trend: Mapping[str, Better]  # metrics judged night over night, and which way is better
    headline: str  # the metric a trend plot shows
    case_sql: str  # SQL over the kind's wide view giving a case's key text, e.g. 'm=' || m
    point_sql: str  # the same without the config, so that configs can be compared point by point
    group_sql: str  # the config a row belongs to ('NULL' when the kind has none)
    wide_view: str  # analyst view: the kind's rows of valid runs, with the run's provenance
    wide_sql: str  # its SELECT (over the table aliased ``t`` joined to ``valid_runs v``)
    derive: Callable[[pd.DataFrame], pd.DataFrame] = _no_derived  # columns only the suite checks
    suite_params: Callable[[Any, Mapping[str, Any]], dict[str, Any]] = _no_params  # (benchmark, run args)
    parser_options: Callable[[Any], dict[str, Any]] = _no_options  # (benchmark) → options for parse
    takes_patterns: bool = False  # the spec's benchmark.patterns configure its format
    default_repeats: int = 1  # runs of each phase when the spec does not say (benchmark.repeats)
    repeat_sql: str = "1"  # which repeat of its case a row is
    warmup_sql: str = "FALSE"  # rows kept but left out of every statistic
    defaults: Mapping[str, Any] = field(default_factory=dict)  # a column's value when a row leaves it empty
    row_defaults: tuple[str, ...] = ()  # run arguments that fill columns a format leaves empty
    side_tables: tuple[SideTable, ...] = ()
    plots: Callable[[pd.DataFrame, str], list[tuple[str, Any]]] | None = None  # (run rows, title) → figures
    order_by: str = field(default="")

    def format(self, name: str | None) -> Format:
        if name is None:
            return self.formats[0]
        for candidate in self.formats:
            if candidate.name == name:
                return candidate
        raise ParseError(f"kind {self.name!r} has no format {name!r} (known: {', '.join(self.format_names)})")

    @property
    def format_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.formats)

    def frame(self, rows: list[dict[str, Any]]) -> pd.DataFrame:
        """Rows as a DataFrame with this kind's columns in load order, numbers typed as numbers."""
        import pandas as pd

        filled = [
            {**self.defaults, **{k: v for k, v in r.items() if v is not None or k not in self.defaults}} for r in rows
        ]
        frame = pd.DataFrame.from_records(filled, columns=list(self.columns))
        for column, kind in self.columns.items():
            if kind in ("int", "float"):
                frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
            elif kind == "text":
                frame[column] = frame[column].astype("object")
        return frame


@cache
def _registry() -> dict[str, ResultKind]:
    found: dict[str, ResultKind] = {}
    for module in pkgutil.iter_modules(__path__):
        if module.ispkg:
            kind = importlib.import_module(f"{__name__}.{module.name}").KIND
            found[kind.name] = kind
    return found


def names() -> list[str]:
    return sorted(_registry())


def get(name: str) -> ResultKind:
    try:
        return _registry()[name]
    except KeyError:
        raise KeyError(f"no result kind {name!r} (known: {', '.join(names())})") from None


def all_kinds() -> list[ResultKind]:
    return [_registry()[name] for name in names()]


def format_names() -> list[str]:
    """Every format as ``kind/format``, for help texts and errors."""
    return [f"{k.name}/{f.name}" for k in all_kinds() for f in k.formats]


def detect(text: str) -> tuple[ResultKind, Format]:
    """The kind and format of an output, by each format's ``detect``."""
    for kind in all_kinds():
        for fmt in kind.formats:
            if fmt.detect(text):
                return kind, fmt
    raise ParseError(f"unknown format (known: {', '.join(format_names())})")


def resolve(text: str, kind: str | None = None, fmt: str | None = None) -> tuple[ResultKind, Format]:
    """The kind and format to read ``text`` with: as named, else the kind that has the named format, else
    detected (among the named kind's formats, or among all)."""
    if kind is None and fmt is not None:
        owners = [k for k in all_kinds() if fmt in k.format_names]
        if not owners:
            raise ParseError(f"unknown format {fmt!r} (known: {', '.join(format_names())})")
        return owners[0], owners[0].format(fmt)
    if kind is None:
        return detect(text)
    found = get(kind)
    if fmt is not None or len(found.formats) == 1:
        return found, found.format(fmt)
    return found, next((f for f in found.formats if f.detect(text)), found.formats[0])


def parse_text(
    text: str, kind: str | None = None, fmt: str | None = None, marker: str = "ALL_DONE", **options: Any
) -> ParsedRun:
    """Parse ``text`` as ``kind``/``fmt``; what is not named is found by :func:`resolve`. ``options`` go to the
    format."""
    return resolve(text, kind, fmt)[1].parse(text, marker=marker, **options)


__all__ = [
    "Format",
    "ParseError",
    "ParsedRun",
    "ResultKind",
    "SideTable",
    "all_kinds",
    "detect",
    "get",
    "names",
    "parse_text",
    "resolve",
]
