"""Result kinds: everything the project knows about one kind of result, in one package each, declared as data.

A kind (``kernel``, ``serving``, ``generic``, …) is a sub-package of this one that defines ``KIND``, a
:class:`ResultKind`: the output formats that produce its rows (one pure module per format), its warehouse table
and its columns (each with its type, unit and display label), its key, its trend metrics (with the direction that
is better), its Great Expectations suite, its own fields of a spec's ``benchmark`` section (a pydantic model that
also says what they mean to the parser, the suite, a config's job and the rows: :class:`BenchmarkOptions`) and of
the trigger form, its bottleneck rules (a YAML file, :mod:`benchflow.kinds.rules`), its plots, and (``measures``)
whether its rows are one named measurement each. What is not data is a function of the rows (its derived columns,
telemetry, signals, notes, plots). The SQL over a kind (its wide view, case and point keys, the query that shows a
run's rows) is derived from these declarations by
:mod:`benchflow.warehouse`; spec, CLI, pipeline, views, regressions and the report look kinds up here, and
nothing outside this package names one.

Adding a kind: one folder here plus the migration that creates its table (``include/sql/``).
Adding a format to a kind: one module in the kind's folder, listed in its ``KIND.formats``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from benchflow.kinds.options import BenchmarkOptions
from benchflow.kinds.rules import Rules, read_rules
from benchflow.parsing import Format, ParsedRun, ParseError
from benchflow.telemetry import columns
from benchflow.telemetry.columns import UNITS

if TYPE_CHECKING:
    import pandas as pd

ColumnType = Literal["int", "float", "text", "bool"]
Better = Literal["higher", "lower"]


@dataclass(frozen=True)
class Column:
    """One column of a kind's table: its type, the unit of the stored value and the label people read.

    ``digits``: decimals when the column is shown in a run's table (None: as stored)."""

    name: str
    type: ColumnType
    unit: str = ""
    label: str = ""
    digits: int | None = None

    @property
    def heading(self) -> str:
        """The label with its unit, as tables and chart axes show it: ``output_throughput (tok/s)``."""
        label = self.label or self.name
        return f"{label} ({self.unit})" if self.unit else label


@dataclass(frozen=True)
class Trend:
    """A metric judged night over night, and which way is better. ``bracket``: the column of the same row that
    bounds the value from the other side (a load search: the highest load that passed is ``column``, the lowest
    that did not is ``bracket``; the answer lies between them), so comparisons use the bracket as its interval."""

    column: str
    better: Better
    bracket: str | None = None


LOAD_SEARCH = "load_search"  # a side table's role: a load search's answers, one row per config


@dataclass(frozen=True)
class SideTable:
    """Rows a kind loads beside its results from a file the benchmark saved (serving: per-request data)."""

    table: str
    columns: tuple[Column, ...]
    file: str  # in the run's artifacts, JSON lines
    defaults: Mapping[str, Any] = field(default_factory=dict)  # for rows that do not say
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None  # a record as the table's row (flatten it)
    # Metrics of this table judged night over night like the kind's own (a load search's answer): their case is
    # ``case`` (columns of this table), their point is ``point`` (a fixed text: what configs are compared at).
    trend: tuple[Trend, ...] = ()
    case: tuple[str, ...] = ()
    point: str = ""
    # What the table is to the rest of the library, where it has a page or a query of its own: "load_search" (a
    # load search's answers, one row per config), "" for none. The view and the warehouse find tables by role.
    role: str = ""
    # The kind's own rows a row of this table was measured by (a search's answer: every probe of its config): those
    # of the same run with the same values of these columns. The row is ok only when they all are; its validity in
    # metric_samples is the first other one of theirs (none: every row counts as ok).
    judged_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class Measures:
    """A kind whose rows are one measurement each (the generic kind): the columns holding the metric's name, its
    value, its unit and its case. The Benchmarks view charts each metric of such a kind, and its trend."""

    name: str
    value: str
    unit: str
    case: str


def _no_derived(frame: pd.DataFrame) -> pd.DataFrame:
    return frame


def _no_notes(rows: list[dict[str, Any]]) -> list[str]:
    return []


@dataclass(frozen=True)
class ResultKind:
    """One kind of result. ``formats[0]`` is the default format of a spec of this kind.

    ``key`` identifies a row within a run; ``repeat`` (a key column) numbers the repeats of a case, ``group`` (a
    key column) is the configuration a row belongs to, ``warmup`` marks rows kept but left out of every statistic.
    A case is the key without ``repeat``; a point is a case without ``group`` (what configs are compared at).
    """

    name: str
    description: str
    formats: tuple[Format, ...]
    table: str
    columns: tuple[Column, ...]  # load order, after (dag_id, run_id)
    key: tuple[str, ...]
    shown: tuple[str, ...]  # the columns of a run's table (bench run, the Benchmarks view), in order
    expectations: Callable[..., list[Any]]  # GX expectations, given the suite's parameters
    servers: Literal["required", "forbidden", "optional"]
    wide_view: str  # analyst view: the kind's rows of valid runs, with the run's provenance
    trend: tuple[Trend, ...] = ()
    headline: str | None = None  # the metric that charts and reports lead with (one of the trend metrics)
    repeat: str | None = None
    group: str | None = None
    warmup: str | None = None
    options: type[BenchmarkOptions] = BenchmarkOptions  # the kind's own fields of a spec's benchmark section
    default: bool = False  # the kind of a spec that names none
    former_names: tuple[str, ...] = ()  # what specs wrote before kinds (benchmark.parser), for a helpful error
    form: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # trigger-form fields of its payloads' args
    # argument lists that go together by position, the leading one first (serving: a prompts count per
    # concurrency level): a run must keep them of one length and may not change the leading one alone
    paired: tuple[tuple[str, ...], ...] = ()
    derive: Callable[[pd.DataFrame], pd.DataFrame] = _no_derived  # columns only the suite checks
    defaults: Mapping[str, Any] = field(default_factory=dict)  # a column's value when a row leaves it empty
    row_defaults: tuple[str, ...] = ()  # run arguments that fill columns a format leaves empty
    side_tables: tuple[SideTable, ...] = ()
    plots: Callable[[pd.DataFrame, str], list[tuple[str, Any]]] | None = None  # (run rows, title) → figures
    # (rows, benchflow.telemetry.run.RunTelemetry) → the columns each row gains: energy, host load, validity
    telemetry: Callable[[list[dict[str, Any]], Any], list[dict[str, Any]]] | None = None
    # its bottleneck rules (data: benchflow.kinds.rules reads them) and, given them, (rows, RunTelemetry, phase GPU
    # rows, phase server rows, rules) → one verdict row per phase over the kind's signals; None: no verdict
    rules: Path | None = None
    bottlenecks: Callable[..., list[dict[str, Any]]] | None = None
    validity: str | None = None  # the column that says whether a row is ok (others never reach a baseline)
    measures: Measures | None = None  # rows that are one named measurement each (their own metrics and units)
    # a case column → the run argument (a list) that runs only that case: a bisection's probe runs its case
    # ``repeats`` times as that list in one run (kernel: ``m`` → ``m_list``); none: the kind cannot narrow a run to
    # one case, and a bisection passes its own probe conf. See :meth:`case_conf`.
    case_args: Mapping[str, str] = field(default_factory=dict)
    # (rows, side table → its rows as fetched) → the rows with what a format leaves empty and the benchmark's side
    # files give (serving: ``failed`` of a phase from its requests in requests.jsonl)
    from_side_files: (
        Callable[[list[dict[str, Any]], Mapping[str, list[dict[str, Any]]]], list[dict[str, Any]]] | None
    ) = None
    # key columns a row may leave empty (serving: no concurrency cap, no request-rate limit): a case key leaves an
    # empty one out (``config=pd,concurrency=8`` stays what it was before the kind had ``request_rate``)
    sparse: tuple[str, ...] = ()
    # columns whose values must match for two runs' rows to be compared (serving: the dataset and its sha256)
    comparable_by: tuple[str, ...] = ()
    # (rows, after from_side_files) → what the run's detail says of them (serving: a phase that did not reach the
    # request rate it asked for); none by default
    row_notes: Callable[[list[dict[str, Any]]], list[str]] = _no_notes

    def __post_init__(self) -> None:
        names = self.column_names
        for what, used in (
            ("key", self.key),
            ("shown", self.shown),
            ("trend", [t.column for t in self.trend]),
        ):
            if unknown := [c for c in used if c not in names]:
                raise ValueError(f"kind {self.name!r}: {what} names unknown columns {unknown}")
        if unknown := [c for c in (*self.sparse, *self.comparable_by) if c not in names]:
            raise ValueError(f"kind {self.name!r}: sparse or comparable_by names unknown columns {unknown}")
        for what, column in (("repeat", self.repeat), ("group", self.group)):
            if column is not None and column not in self.key:
                raise ValueError(f"kind {self.name!r}: {what} column {column!r} is not in its key")
        if self.measures is not None and (unknown := [c for c in vars(self.measures).values() if c not in names]):
            raise ValueError(f"kind {self.name!r}: measures names unknown columns {unknown}")
        if self.headline is not None and self.headline not in {t.column for t in self.trend}:
            raise ValueError(f"kind {self.name!r}: headline {self.headline!r} is not a trend metric")
        if unknown := [c for c in self.case_args if c not in self.case]:
            raise ValueError(f"kind {self.name!r}: case_args names columns {unknown} that are not its case")
        if unknown := [a for a in self.case_args.values() if a not in self.form]:
            raise ValueError(f"kind {self.name!r}: case_args names run arguments {unknown} it has no form field for")
        if (self.rules is None) != (self.bottlenecks is None):
            raise ValueError(f"kind {self.name!r}: bottleneck rules and the signals for them go together")

    def bottleneck_rules(self, overrides: Mapping[str, float] | None = None) -> Rules:
        """The kind's bottleneck rules with a spec's thresholds (``bottleneck:``); a name they lack is refused."""
        if self.rules is None:
            if overrides:
                raise ValueError(f"kind {self.name!r} draws no bottleneck verdicts: it has no thresholds to change")
            return Rules({}, ())
        return read_rules(self.rules).with_thresholds(overrides)

    def case_conf(self, case_key: str, repeats: int) -> dict[str, Any]:
        """The trigger conf that runs only the case ``case_key`` (``m=64``), ``repeats`` times in one run, each
        value checked against its run argument's form field; a ValueError says what a case of this kind is."""
        values = dict(part.partition("=")[::2] for part in case_key.split(","))
        wanted = ", ".join(f"{c}=<{self.column(c).unit or self.column(c).type}>" for c in self.case_args)
        if not self.case_args or set(values) != set(self.case_args):
            raise ValueError(f"case {case_key!r}: a {self.name} case is {wanted or 'not one a run can narrow to'}")
        conf: dict[str, Any] = {}
        for column, argument in self.case_args.items():
            item = self.form[argument].get("items", {})
            value = _case_value(values[column], self.column(column).type)
            low, high = item.get("minimum", float("-inf")), item.get("maximum", float("inf"))
            if value is None or not low <= value <= high:
                raise ValueError(f"case {case_key!r}: a {self.name} case is {wanted}, {column} within {low}..{high}")
            conf[argument] = [value] * repeats
        return conf

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for candidate in self.columns:
            if candidate.name == name:
                return candidate
        raise KeyError(f"kind {self.name!r} has no column {name!r}")

    def any_column(self, name: str) -> Column:
        """A column of the kind's table, else of one of its side tables (a load search's answer)."""
        for candidate in (*self.columns, *(c for side in self.side_tables for c in side.columns)):
            if candidate.name == name:
                return candidate
        raise KeyError(f"kind {self.name!r} has no column {name!r}, nor do its side tables")

    @property
    def case(self) -> tuple[str, ...]:
        """The key columns that tell cases apart: the key without its repeat column."""
        return tuple(c for c in self.key if c != self.repeat)

    def axis(self, frame: pd.DataFrame) -> str:
        """The load axis of these rows: the last point column whose value varies among them, else the last that has
        a value (serving: request_rate for a rate sweep, concurrency otherwise; kernel: m)."""
        levels = {c: _levels(frame[c]) for c in reversed(self.point or self.case) if c in frame}  # inf: no limit
        columns = [c for c, values in levels.items() if values.notna().any()]
        varying = [c for c in columns if levels[c].nunique() > 1]
        return (varying or columns or [(self.point or self.case)[0]])[0]

    def layout(self, frame: pd.DataFrame) -> tuple[list[str], str]:
        """How rows are drawn and tabled: the case columns that tell series apart (those with a value in the rows,
        the axis left out) and the axis (:meth:`axis`)."""
        axis = self.axis(frame)
        if not len(frame.columns):  # no rows to say: the group column(s)
            return [c for c in self.case if c not in self.point], axis
        return [c for c in self.case if c != axis and c in frame and _levels(frame[c]).notna().any()], axis

    @property
    def point(self) -> tuple[str, ...]:
        """A case without its configuration: where configs are compared (a concurrency, an M)."""
        return tuple(c for c in self.case if c != self.group)

    def better(self, metric: str) -> Better:
        for trend in (*self.trend, *(t for side in self.side_tables for t in side.trend)):
            if trend.column == metric:
                return trend.better
        raise KeyError(f"kind {self.name!r} does not trend {metric!r}")

    def energy(self) -> list[str]:
        """The columns of joules per unit of work (unit ``J/…``): lower is better."""
        return [c.name for c in self.columns if c.unit.startswith("J/")]

    def trends(self) -> list[str]:
        """Every metric judged night over night: the kind's own and its side tables'."""
        return [t.column for t in self.trend] + [t.column for side in self.side_tables for t in side.trend]

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

    def present(self, frame: pd.DataFrame) -> pd.DataFrame:
        """A frame of this kind's columns as people read it: each column headed by its label and unit, numbers
        rounded to the column's digits (one name per concept: the heading is the warehouse column's)."""
        shown = frame.copy()
        for name in shown.columns:
            if name in self.column_names and (digits := self.column(name).digits) is not None:
                shown[name] = shown[name].astype("float64").round(digits)
        return shown.rename(columns={c.name: c.heading for c in self.columns})

    def frame(self, rows: list[dict[str, Any]]) -> pd.DataFrame:
        """Rows as a DataFrame with this kind's columns in load order, numbers typed as numbers."""
        filled = [
            {**self.defaults, **{k: v for k, v in r.items() if v is not None or k not in self.defaults}} for r in rows
        ]
        return typed_frame(filled, self.columns)


def _case_value(text: str, type_: str) -> int | float | None:
    """A case key's value as its column's number (``64`` of ``m=64``), None when it is not one."""
    try:
        return int(text) if type_ == "int" else float(text)
    except ValueError:
        return None


def _levels(values: pd.Series) -> pd.Series:
    """A key column's levels: an infinite value (a client's request rate ``inf``: no limit) is none."""
    import numpy as np

    return values.replace([np.inf, -np.inf], np.nan) if values.dtype.kind == "f" else values


def telemetry_columns(types: Mapping[str, ColumnType]) -> tuple[Column, ...]:
    """Columns the telemetry adds to a kind (:mod:`benchflow.telemetry.columns`), with their units."""

    return tuple(
        Column(name, kind, UNITS.get(name, ""), digits=3 if kind == "float" else None) for name, kind in types.items()
    )


def _telemetry_tables() -> tuple[SideTable, ...]:
    """The raw samples and the per-phase, per-GPU figures of a run, whatever its kind (from files the pipeline's
    parse step writes into the run's store)."""

    return (
        SideTable("telemetry_samples", telemetry_columns(columns.SAMPLES), "telemetry_samples.jsonl"),
        SideTable("telemetry_phase_gpus", telemetry_columns(columns.PHASE_GPUS), "telemetry_phase_gpus.jsonl"),
        SideTable("server_samples", telemetry_columns(columns.SERVER_SAMPLES), "server_samples.jsonl"),
        SideTable("phase_servers", telemetry_columns(columns.PHASE_SERVERS), "phase_servers.jsonl"),
        SideTable("phase_bottlenecks", telemetry_columns(columns.PHASE_BOTTLENECKS), "phase_bottlenecks.jsonl"),
    )


TELEMETRY_TABLES = _telemetry_tables()


def typed_frame(rows: list[dict[str, Any]], columns: tuple[Column, ...]) -> pd.DataFrame:
    """``rows`` as a DataFrame of exactly ``columns``: numbers as float64 (NaN for missing), text as objects."""
    import pandas as pd

    frame = pd.DataFrame.from_records(rows, columns=[c.name for c in columns])
    for column in columns:
        if column.type in ("int", "float"):
            frame[column.name] = pd.to_numeric(frame[column.name], errors="coerce").astype("float64")
        elif column.type == "text":
            frame[column.name] = frame[column.name].astype("object")
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


def default() -> ResultKind:
    """The kind of a spec that names none (the one that declares itself the default)."""
    return next(k for k in all_kinds() if k.default)


def side_table(kind: ResultKind, role: str) -> SideTable | None:
    """The kind's side table of ``role`` (see :class:`SideTable`), or None when it has none."""
    return next((side for side in kind.side_tables if side.role == role), None)


def owner(side: SideTable) -> ResultKind:
    """The kind a side table belongs to."""
    return next(kind for kind in all_kinds() if side in kind.side_tables)


def bracketed(metric: str) -> tuple[SideTable, Trend] | None:
    """The side table and trend of a metric known only within a bracket (``Trend.bracket``), else None."""
    for kind in all_kinds():
        for side in kind.side_tables:
            for trend in side.trend:
                if trend.column == metric and trend.bracket:
                    return side, trend
    return None


def trend_direction(metric: str) -> Better:
    """Which way is better for a trend metric, as the kind that trends it declares."""
    for kind in all_kinds():
        if metric in kind.trends():
            return kind.better(metric)
    raise KeyError(f"no result kind trends the metric {metric!r}")


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
    "LOAD_SEARCH",
    "BenchmarkOptions",
    "Column",
    "Format",
    "Measures",
    "ParseError",
    "ParsedRun",
    "ResultKind",
    "SideTable",
    "Trend",
    "all_kinds",
    "detect",
    "get",
    "names",
    "parse_text",
    "resolve",
    "side_table",
    "trend_direction",
    "typed_frame",
]
