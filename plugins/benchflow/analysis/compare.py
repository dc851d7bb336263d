"""Two sides, point by point: configs, runs or nights, with a ratio, its interval and a verdict.

A side is ``CAMPAIGN[:CONFIG][@WHEN]``: ``serving_pd``, ``serving_local:single``, ``serving_tp4@2026-11-28``
(the last valid run of that night), ``moe_kernel_nightly@scheduled__2026-11-29T02:00:00+00:00`` (one run).
Without ``@`` it is the campaign's latest valid run. Each point (a concurrency level, a token count M) and
trend metric of the two sides is compared with :func:`benchflow.stats.compare`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from benchflow import kinds
from benchflow.stats import Comparison, compare
from benchflow.warehouse import queries

if TYPE_CHECKING:
    import pandas as pd

    from benchflow.warehouse import Warehouse

_SIDE = re.compile(r"^(?P<campaign>[a-z][a-z0-9_]*)(?::(?P<config>[a-z][a-z0-9_]*))?(?:@(?P<when>\S+))?$")
_NIGHT = re.compile(r"^\d{4}-\d{2}-\d{2}$")


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
        return cls(match["campaign"], match["config"], match["when"])

    def __str__(self) -> str:
        return self.campaign + (f":{self.config}" if self.config else "") + (f"@{self.when}" if self.when else "")


@dataclass(frozen=True)
class Row:
    point: str
    metric: str
    result: Comparison | None  # None: too few repeats on a side for an interval
    a_values: int
    b_values: int

    def verdict(self, b: Side) -> str:
        if self.result is None:
            return f"not comparable: {self.a_values} and {self.b_values} values (2 a side needed)"
        return self.result.verdict(str(b))


def run_of(warehouse: Warehouse, side: Side) -> str:
    """The run a side stands for."""
    if side.when and not _NIGHT.match(side.when):
        return side.when
    runs = queries.valid_runs_of(warehouse, side.campaign, side.when)
    if not len(runs):
        raise LookupError(f"no valid run of {side}")
    return str(runs["run_id"].iloc[0])


def samples(warehouse: Warehouse, side: Side) -> pd.DataFrame:
    return queries.run_samples(warehouse, side.campaign, run_of(warehouse, side), side.config)


def compare_sides(
    warehouse: Warehouse, a: Side, b: Side, point: str | None = None, metric: str | None = None
) -> list[Row]:
    """Every point and metric both sides have (or the one asked for), ``b`` against ``a``."""
    left, right = samples(warehouse, a), samples(warehouse, b)
    rows: list[Row] = []
    for (at, name), mine in left.groupby(["point", "metric"], sort=True):
        if (point and at != point) or (metric and name != metric):
            continue
        theirs = right[(right["point"] == at) & (right["metric"] == name)]
        if not len(theirs):
            continue
        values_a, values_b = list(mine["value"]), list(theirs["value"])
        try:
            result = compare(values_a, values_b, kinds.trend_direction(str(name)))
        except ValueError:
            result = None
        rows.append(Row(str(at), str(name), result, len(values_a), len(values_b)))
    return rows
