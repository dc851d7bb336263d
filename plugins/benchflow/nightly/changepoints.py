"""Change points in a case's nightly series: where its level moved, found over the whole history rather than
tonight against the nights before it.

The per-night check (:mod:`benchflow.nightly.regressions`) sees a step the size of the noise; it misses a drift
of 2 % a week, whose every night looks like the nights just before it. E-divisive means (Matteson and James; the
windowed form of Hunter, Fleming et al. 2023) finds the points that split a series into segments of different
means, each with a significance; this module uses Apache Otava's implementation (``otava.analysis``, Hunter's
successor) and says, for each point, the night and run it starts at, the commits around it (the last run before
and the first at the new level: a bisection's good and bad), and its size as the ratio of the segments' means with a
95 % interval (Welch's t on the logs of the nights of the two segments, as every comparison of this project).

A change point in the worse direction within the last ``lookback`` nights, when tonight's own check found nothing,
is a fourth verdict: "suspected drift since <night>".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from benchflow.analysis.stats import compare

MAX_PVALUE = 0.001  # of each change point (Otava's t-test between the segments around it)
MIN_MAGNITUDE = 0.01  # a relative change smaller than 1 % is not reported (noise of the order of the repeats)
WINDOW = 30  # nights Otava's split step looks at together
MIN_NIGHTS = 8  # no change point is looked for in a shorter history


@dataclass(frozen=True)
class Night:
    """One night of a case's series: its date, run, value (the run's mean) and the commit it measured."""

    night: str
    run_id: str
    value: float
    commit: str | None = None


@dataclass(frozen=True)
class ChangePoint:
    """The series' level moved at ``index`` (the first night of the new level)."""

    index: int
    night: str
    run_id: str
    good_commit: str | None  # the last night before the change measured this commit
    bad_commit: str | None  # the first night at the new level
    before: float  # mean of the segment before
    after: float  # mean of the segment from the change on
    ratio: float  # after / before (geometric means), with its 95 % interval
    ratio_low: float
    ratio_high: float
    p_value: float  # Otava's, of the split
    worse: bool  # in the metric's worse direction

    @property
    def change(self) -> float:
        return self.ratio - 1

    def text(self) -> str:
        span = f"{self.good_commit[:12]}..{self.bad_commit[:12]}" if self.good_commit and self.bad_commit else ""
        return (
            f"{self.change:+.1%} from night {self.night} (95 % CI {self.ratio_low - 1:+.1%} to "
            f"{self.ratio_high - 1:+.1%}, p={self.p_value:.2g}){f', commits {span}' if span else ''}"
        )


def split_points(
    values: Sequence[float], max_pvalue: float = MAX_PVALUE, min_magnitude: float = MIN_MAGNITUDE
) -> list[tuple[int, float]]:
    """(index, p-value) of each change point Otava's E-divisive means finds in ``values``, in order."""
    if len(values) < MIN_NIGHTS:
        return []
    from otava.analysis import compute_change_points

    found, _ = compute_change_points(
        [float(v) for v in values], window_len=WINDOW, max_pvalue=max_pvalue, min_magnitude=min_magnitude
    )
    return [(int(cp.index), float(cp.stats.pvalue)) for cp in found]


def change_points(
    nights: Sequence[Night],
    better: Literal["higher", "lower"],
    max_pvalue: float = MAX_PVALUE,
    min_magnitude: float = MIN_MAGNITUDE,
) -> list[ChangePoint]:
    """Every change point of a case's series (nights in time order), with its size between the segments on either
    side of it (up to the neighbouring change points) and the commits around it. Nights whose value cannot be a
    measurement (:func:`left_out`) are not part of the series; each point's index is in ``nights`` as given."""

    kept = [i for i, n in enumerate(nights) if measured(n.value)]  # a NaN, an infinity or a 0: left out
    values = [nights[i].value for i in kept]
    points = split_points(values, max_pvalue, min_magnitude)
    bounds = [0, *(i for i, _ in points), len(values)]
    out = []
    for k, (at, p_value) in enumerate(points):
        left, right = values[bounds[k] : at], values[at : bounds[k + 2]]
        if len(left) < 2 or len(right) < 2:
            continue
        result = compare(left, right, better)
        ratio = result.ratio
        worse = ratio < 1 if better == "higher" else ratio > 1
        index = kept[at]  # in the series as given
        out.append(
            ChangePoint(
                index,
                nights[index].night,
                nights[index].run_id,
                nights[kept[at - 1]].commit,
                nights[index].commit,
                _mean(left),
                _mean(right),
                ratio,
                result.ratio_low,
                result.ratio_high,
                p_value,
                worse,
            )
        )
    return out


def measured(value: float) -> bool:
    """Whether a night's value can be a measurement (a time, a rate: finite and above 0). One that cannot (a NaN, an
    infinity, a 0 from a run that measured nothing) is left out of the series, so that it never hides a step."""
    return math.isfinite(value) and value > 0


def left_out(nights: Sequence[Night]) -> list[Night]:
    """The nights :func:`change_points` leaves out of the series: their value cannot be a measurement."""
    return [n for n in nights if not measured(n.value)]


def suspected_drift(points: Sequence[ChangePoint], nights: int, lookback: int) -> ChangePoint | None:
    """The earliest change point in the worse direction among the last ``lookback`` of ``nights`` nights."""
    recent = [p for p in points if p.worse and p.index >= nights - lookback]
    return recent[0] if recent else None


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)
