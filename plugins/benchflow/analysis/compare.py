"""Two sides, point by point: configs, runs or nights, with a ratio, its interval and a verdict.

A side is ``CAMPAIGN[:CONFIG][@WHEN]``: ``serving_pd``, ``serving_local:single``, ``serving_tp4@2026-11-28``
(the one valid run of that night), ``moe_kernel_nightly@scheduled__2026-11-29T02:00:00+00:00`` (one run).
Without ``@`` it is the campaign's latest valid run. Each point (a concurrency level, a token count M) and
trend metric of the two sides is compared with :func:`benchflow.analysis.stats.compare`.

A side stands for exactly one run and one config, or it is refused, saying what to write:

* a side without ``:CONFIG`` whose run has several configs (pooling them would compare a mix);
* ``@YYYY-MM-DD`` of a night with several valid runs (each is listed: name one by its run id);
* ``@WHEN`` that is neither a night nor a valid run id of the campaign (``@yesterday``), or a date that is none.

What is compared is said: the run each side stands for, and a warning for every point whose settings (the
kind's run arguments: a serving phase's prompt count, input and output lengths) differ between the sides.

Only rows measured ``ok`` are compared (noisy, throttled or contended ones are counted and named on their point's
line) unless ``include_noisy``. A metric known only within a bracket (a load search's answer: the highest load
that passed, below the lowest that did not) is compared by its brackets: B/A lies between B's lower bound over
A's upper one and B's upper bound over A's lower one, and B is better only when it passed a load A did not.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING

from benchflow import kinds
from benchflow.analysis.stats import Comparison, Summary, compare, summarize
from benchflow.warehouse import queries

if TYPE_CHECKING:
    import pandas as pd

    from benchflow.kinds import ResultKind
    from benchflow.warehouse import Warehouse

_SIDE = re.compile(r"^(?P<campaign>[a-z][a-z0-9_]*)(?::(?P<config>[a-z][a-z0-9_]*))?(?:@(?P<when>\S+))?$")
_NIGHT = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATE_LIKE = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}$")
RATIO = (
    "B/A is the ratio of the geometric means (exp of the mean of log B minus the mean of log A), its 95 % "
    "interval from Welch's t on the logs; A and B are each side's arithmetic mean ± half its 95 % interval"
)


@dataclass(frozen=True)
class Side:
    campaign: str
    config: str | None = None
    when: str | None = None  # a run id, a night (YYYY-MM-DD), or None: the latest valid run

    @classmethod
    def parse(cls, text: str) -> Side:
        match = _SIDE.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not CAMPAIGN[:CONFIG][@RUN_ID or @YYYY-MM-DD]")
        when = match["when"]
        if when is not None and _DATE_LIKE.match(when):
            try:
                if not _NIGHT.match(when):
                    raise ValueError(when)
                date.fromisoformat(when)
            except ValueError:
                raise ValueError(f"{text!r}: @{when} is not a date (YYYY-MM-DD)") from None
        return cls(match["campaign"], match["config"], when)

    def __str__(self) -> str:
        return self.campaign + (f":{self.config}" if self.config else "") + (f"@{self.when}" if self.when else "")


@dataclass(frozen=True)
class Resolved:
    """The run (and config) a side stands for."""

    side: Side
    run_id: str
    night: str
    run_type: str
    samples: pd.DataFrame = field(repr=False, compare=False)
    left_out: pd.DataFrame | None = field(default=None, repr=False, compare=False)  # rows not ok, not compared

    def describe(self) -> str:
        config = f", config {self.side.config}" if self.side.config else ""
        return f"{self.side} = run {self.run_id} (night {self.night}, {self.run_type}{config})"

    def not_ok(self) -> str:
        """``9 contended, 1 noisy``: this side's rows that were not judged ok, left out or (``--include-noisy``)
        compared anyway; empty when every row was ok."""
        frame = self.left_out if self.left_out is not None and len(self.left_out) else self.samples
        counts = frame[frame["validity"] != "ok"]["validity"].value_counts()
        return ", ".join(f"{int(n)} {validity}" for validity, n in sorted(counts.items()))


@dataclass(frozen=True)
class Bracket:
    """A bracketed metric on both sides (``Trend.bracket``): each side's value and its other bound (None: open)."""

    a: tuple[float, float | None]
    b: tuple[float, float | None]
    better: str  # higher | lower

    @property
    def ratio(self) -> tuple[float, float]:
        """The bounds of B/A: B's value over A's bound, B's bound over A's value (inf where a bound is open)."""
        (a, a_bound), (b, b_bound) = self.a, self.b
        low = b / a_bound if a_bound else 0.0
        high = b_bound / a if b_bound is not None and a else math.inf
        return (min(low, high), max(low, high))

    def verdict(self, what: str) -> str:
        (a, a_bound), (b, b_bound) = self.a, self.b
        low, high = self.ratio
        span = f"B/A between {low:.3g} and {high:.3g}" if math.isfinite(high) else f"B/A at least {low:.3g}"
        b_ahead = a_bound is not None and b >= a_bound  # B passed a load A did not
        a_ahead = b_bound is not None and a >= b_bound
        higher = self.better == "higher"
        if b_ahead or a_ahead:
            word = "better" if b_ahead == higher else "worse"
            return f"{what} is {word}: its bracket lies wholly {'above' if b_ahead else 'below'} A's ({span})"
        return f"no difference shown: the brackets overlap ({span})"


@dataclass(frozen=True)
class Row:
    point: str
    metric: str
    result: Comparison | None  # None: too few repeats on a side for an interval
    a_values: int
    b_values: int
    a: Summary | None = None  # each side's figures, also when they cannot be compared
    b: Summary | None = None
    bracket: Bracket | None = None  # a bracketed metric: compared by its brackets instead
    a_left_out: str = ""  # "2 noisy": rows of this point and metric not compared
    b_left_out: str = ""

    def verdict(self, b: Side) -> str:
        left = [f"{side} left out {text}" for side, text in (("A", self.a_left_out), ("B", self.b_left_out)) if text]
        note = f" [{'; '.join(left)}: not ok, see --include-noisy]" if left else ""
        if self.bracket is not None:
            return self.bracket.verdict(str(b)) + note
        if self.result is None:
            return (
                f"not comparable: {self.a_values} and {self.b_values} values (2 a side needed for an interval)" + note
            )
        return self.result.verdict(str(b)) + note


@dataclass(frozen=True)
class Outcome:
    a: Resolved
    b: Resolved
    rows: list[Row]
    warnings: list[str]


def point_order(point: str) -> tuple[tuple[str, float, str], ...]:
    """``concurrency=8`` before ``concurrency=16``: each ``name=value`` part by name, then by number."""
    key = []
    for part in point.split(","):
        name, _, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.inf
        key.append((name, number if math.isfinite(number) else math.inf, value))
    return tuple(key)


def _run(warehouse: Warehouse, side: Side) -> tuple[str, str, str]:
    """(run id, night, run type) of the one valid run a side stands for; LookupError saying why not one."""
    if side.when and _NIGHT.match(side.when):
        runs = queries.valid_runs_of(warehouse, side.campaign, side.when)
        if not len(runs):
            raise LookupError(f"{side}: no valid run of {side.campaign} on the night {side.when}")
        if len(runs) > 1:
            listed = ", ".join(f"{r.run_id} ({r.run_type})" for r in runs.itertuples())
            raise LookupError(
                f"{side}: {len(runs)} valid runs that night ({listed}); name one: {side.campaign}"
                f"{':' + side.config if side.config else ''}@RUN_ID"
            )
        found = runs.iloc[0]
    else:
        runs = queries.valid_runs_of(warehouse, side.campaign)
        if not len(runs):
            raise LookupError(f"{side}: {side.campaign} has no valid run")
        if side.when is None:
            found = runs.iloc[0]
        else:
            chosen = runs[runs["run_id"] == side.when]
            if not len(chosen):
                newest = ", ".join(str(r) for r in runs["run_id"].head(3))
                raise LookupError(
                    f"{side}: @{side.when} is neither a night (YYYY-MM-DD) nor a valid run of {side.campaign} "
                    f"(its newest: {newest})"
                )
            found = chosen.iloc[0]
    return str(found["run_id"]), str(found["night"])[:10], str(found["run_type"])


def resolve(warehouse: Warehouse, side: Side, include_noisy: bool = False) -> Resolved:
    """The run and config ``side`` stands for, with its samples (its ``ok`` ones, or all when
    ``include_noisy``) and those left out; LookupError when it is ambiguous or absent."""
    run_id, night, run_type = _run(warehouse, side)
    samples = queries.run_samples(warehouse, side.campaign, run_id, include_noisy=True)
    configs = sorted({str(c) for c in samples["config"].dropna()})
    if side.config is None and len(configs) > 1:
        options = ", ".join(f"{side.campaign}:{c}" for c in configs)
        raise LookupError(
            f"{side}: run {run_id} has {len(configs)} configs ({', '.join(configs)}); a side is one of them: {options}"
        )
    if side.config is not None:
        if side.config not in configs:
            raise LookupError(f"{side}: run {run_id} has no config {side.config!r} (it has: {', '.join(configs)})")
        samples = samples[samples["config"] == side.config]
    if include_noisy:
        return Resolved(side, run_id, night, run_type, samples, samples.iloc[0:0])
    ok = samples["validity"] == "ok"
    return Resolved(side, run_id, night, run_type, samples[ok], samples[~ok])


def _kinds_of(metrics: set[str]) -> list[ResultKind]:
    return [kind for kind in kinds.all_kinds() if metrics & {t.column for t in kind.trend} and kind.row_defaults]


def _settings(warehouse: Warehouse, kind: ResultKind, side: Resolved) -> dict[str, set[tuple[str, ...]]]:
    frame = queries.point_settings(
        warehouse, kind, side.side.campaign, side.run_id, kind.row_defaults, side.side.config
    )
    found: dict[str, set[tuple[str, ...]]] = {}
    for record in frame.to_dict("records"):
        found.setdefault(str(record["point"]), set()).add(tuple(f"{c}={_text(record[c])}" for c in kind.row_defaults))
    return found


def _text(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "?"
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def setting_warnings(warehouse: Warehouse, a: Resolved, b: Resolved, points: list[str]) -> list[str]:
    """A line for every compared point whose run settings differ between the sides."""
    metrics = {str(m) for m in a.samples["metric"]} | {str(m) for m in b.samples["metric"]}
    lines = []
    for kind in _kinds_of(metrics):
        left, right = _settings(warehouse, kind, a), _settings(warehouse, kind, b)
        for at in points:
            mine, theirs = left.get(at, set()), right.get(at, set())
            if mine and theirs and mine != theirs:
                lines.append(
                    f"{at}: the sides ran different settings: A {_joined(mine)}; B {_joined(theirs)}; their "
                    "figures measure different work"
                )
    return lines


def _joined(settings: set[tuple[str, ...]]) -> str:
    return " or ".join(" ".join(s) for s in sorted(settings))


def _summary(values: list[float]) -> Summary | None:
    try:
        return summarize(values)
    except ValueError:
        return None


def _left_out(side: Resolved, at: str, name: str) -> str:
    """``2 noisy, 1 throttled``: the rows of a point and metric not compared, by validity."""
    frame = side.left_out
    if frame is None or not len(frame):
        return ""
    counts = frame[(frame["point"] == at) & (frame["metric"] == name)]["validity"].value_counts()
    return ", ".join(f"{int(n)} {validity}" for validity, n in sorted(counts.items()))


def _bracket(warehouse: Warehouse, a: Resolved, b: Resolved, name: str) -> Bracket | None:
    found = kinds.bracketed(name)
    if found is None:
        return None
    table, trend = found
    left = queries.brackets(warehouse, table, trend, a.side.campaign, a.run_id, a.side.config)
    right = queries.brackets(warehouse, table, trend, b.side.campaign, b.run_id, b.side.config)
    if len(left) != 1 or len(right) != 1:
        return None
    return Bracket(left[0], right[0], trend.better)


def _rows(warehouse: Warehouse, a: Resolved, b: Resolved, point: str | None, metric: str | None) -> list[Row]:
    rows: list[Row] = []
    left, right = a.samples, b.samples
    for (at, name), mine in left.groupby(["point", "metric"], sort=False):
        if (point and at != point) or (metric and name != metric):
            continue
        theirs = right[(right["point"] == at) & (right["metric"] == name)]
        if not len(theirs):
            continue
        values_a, values_b = [float(v) for v in mine["value"]], [float(v) for v in theirs["value"]]
        try:
            result = compare(values_a, values_b, kinds.trend_direction(str(name)))
        except ValueError:
            result = None
        at, name = str(at), str(name)
        figures = (len(values_a), len(values_b), _summary(values_a), _summary(values_b))
        bracket = _bracket(warehouse, a, b, name)
        rows.append(Row(at, name, result, *figures, bracket, _left_out(a, at, name), _left_out(b, at, name)))
    return sorted(rows, key=lambda r: (point_order(r.point), r.metric))


def compare_runs(
    warehouse: Warehouse,
    a: Side,
    b: Side,
    point: str | None = None,
    metric: str | None = None,
    include_noisy: bool = False,
    across_workloads: bool = False,
) -> Outcome:
    """Every point and metric both sides have (or the one asked for), ``b`` against ``a``, points in numeric
    order, with the runs compared and the points whose settings differ; rows that are not ``ok`` only when
    ``include_noisy``. Sides measured on different workloads (datasets) are refused (ValueError) unless
    ``across_workloads``, which compares them with a warning."""
    left, right = resolve(warehouse, a, include_noisy), resolve(warehouse, b, include_noisy)
    differ = workload_differences(warehouse, left, right)
    if differ and not across_workloads:
        raise ValueError(
            f"{a} and {b} measured different workloads ({'; '.join(differ)}): their figures are not comparable "
            "(--across-datasets compares them anyway, with a warning)"
        )
    rows = _rows(warehouse, left, right, point, metric)
    points = sorted({r.point for r in rows}, key=point_order)
    warnings = [f"the sides measured different workloads: {line}" for line in differ]
    return Outcome(left, right, rows, warnings + setting_warnings(warehouse, left, right, points))


def workload_differences(warehouse: Warehouse, a: Resolved, b: Resolved) -> list[str]:
    """A line per column that must match for rows to be compared (a kind's ``comparable_by``: the dataset and its
    sha256) and does not: ``dataset: A sharegpt:chat.json, B random``. A side that does not say (rows stored
    before the column existed) is not held against the other."""
    metrics = {str(m) for m in a.samples["metric"]} | {str(m) for m in b.samples["metric"]}
    lines = []
    for kind in [k for k in kinds.all_kinds() if k.comparable_by and metrics & {t.column for t in k.trend}]:
        found = [_values(warehouse, kind, side) for side in (a, b)]
        for column in kind.comparable_by:
            mine, theirs = (f.get(column, set()) for f in found)
            if mine and theirs and mine != theirs:
                lines.append(f"{column}: A {' or '.join(sorted(mine))}, B {' or '.join(sorted(theirs))}")
    return lines


def _values(warehouse: Warehouse, kind: ResultKind, side: Resolved) -> dict[str, set[str]]:
    frame = queries.point_settings(
        warehouse, kind, side.side.campaign, side.run_id, kind.comparable_by, side.side.config
    )
    return {c: {str(v) for v in frame[c].dropna()} for c in kind.comparable_by if c in frame}


def compare_sides(
    warehouse: Warehouse, a: Side, b: Side, point: str | None = None, metric: str | None = None
) -> list[Row]:
    """The rows of :func:`compare_runs`."""
    return compare_runs(warehouse, a, b, point, metric).rows
