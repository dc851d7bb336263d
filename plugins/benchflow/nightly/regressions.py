"""Did tonight's run regress, beyond noise?

For every case and metric of a run, the baseline is the same metric of the same case in the previous
``lookback`` valid scheduled runs of the same campaign on the same GPU model. A regression always needs a
relative change of at least ``min_change`` in the worse direction, and a history of ``min_runs`` nights;
then the spread decides:

* when tonight repeated the case (serving phases repeat 3 times by default), tonight's repeats are compared
  with every repeat of the baseline nights (:func:`benchflow.analysis.stats.compare`: Welch's t on the logs):
  the 95 % interval of the ratio must lie wholly on the worse side of 1;
* with one value a night (a kernel sweep), the lookback z-score of tonight's value must pass ``z_threshold``
  (as conbench judges a result against its history's distribution).

Which way is worse is known per metric (each kind declares it). Thresholds are data in the spec,
overridable per GPU model (ReFrame-style). A finding records its interval and which test made it.

Beyond tonight, every case's nightly series (the last 60 valid scheduled nights) is searched for change points
(:mod:`benchflow.nightly.changepoints`, E-divisive means): each is stored with its night, commits and size, and a
recent one in the worse direction makes a run whose own check found nothing "suspected drift since <night>".

A run's :class:`~benchflow.records.Verdict` has four states: regressed, fine against N baseline nights, suspected
drift, or not judged and why: a manual run (its conf may override what the scheduled nights ran, so it has no
baseline of its own kind), a history shorter than ``min_runs`` ("2 of 5 nights"), a run that is not ``ok``, or no
valid rows.
"""

from __future__ import annotations

import importlib
import logging
import math
import statistics
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Literal

from benchflow import kinds
from benchflow.analysis.stats import compare
from benchflow.nightly.changepoints import Night, left_out
from benchflow.nightly.changepoints import change_points as find_points
from benchflow.records import Finding, Verdict
from benchflow.warehouse import queries

SERIES_NIGHTS = 60  # the nights each case's series is searched for change points over

if TYPE_CHECKING:
    from benchflow.spec import RegressionLimits
    from benchflow.warehouse import Warehouse

log = logging.getLogger(__name__)


def direction(metric: str) -> str:
    """Which way is better for a trend metric, as its kind declares it (the words ``regressions`` stores)."""
    return "higher_is_better" if kinds.trend_direction(metric) == "higher" else "lower_is_better"


def judge_repeats(
    tonight: list[float], baseline: list[float], history: list[float], metric: str, limits: RegressionLimits
) -> Finding | None:
    """A finding when tonight's repeats are worse than the baseline nights' repeats: the ratio's 95 % interval
    lies on the worse side of 1 and its point estimate changes by at least ``min_change``."""

    if len(history) < limits.min_runs or len(tonight) < 2 or len(baseline) < 2:
        return None
    worse = direction(metric)
    better: Literal["higher", "lower"] = "higher" if worse == "higher_is_better" else "lower"
    result = compare(baseline, tonight, better)
    change = result.ratio - 1
    if better == "higher":
        regressed = result.ratio_high < 1 and change <= -limits.min_change
    else:
        regressed = result.ratio_low > 1 and change >= limits.min_change
    if not regressed:
        return None
    mean, std = result.a.mean, result.a.std
    z = (result.b.mean - mean) / max(std, abs(mean) * 1e-6)
    return Finding(
        "",
        metric,
        result.b.mean,
        mean,
        std,
        len(history),
        change,
        z,
        worse,
        result.ratio_low,
        result.ratio_high,
        result.p_value,
        "welch-log",
    )


def judge(value: float, history: list[float], metric: str, limits: RegressionLimits) -> Finding | None:
    """A finding when ``value`` is worse than ``history`` beyond noise and beyond the minimum change."""
    if len(history) < limits.min_runs:
        return None
    mean = statistics.fmean(history)
    std = statistics.stdev(history) if len(history) > 1 else 0.0
    if mean == 0:
        return None
    std = max(std, abs(mean) * 1e-6)  # a perfectly flat history still gives a finite z
    z = (value - mean) / std
    change = (value - mean) / abs(mean)
    worse = direction(metric)
    if worse == "higher_is_better":
        regressed = z <= -limits.z_threshold and change <= -limits.min_change
    else:
        regressed = z >= limits.z_threshold and change >= limits.min_change
    if not regressed:
        return None
    return Finding("", metric, value, mean, std, len(history), change, z, worse, test="z")


def find(warehouse: Warehouse, dag_id: str, run_id: str, limits: RegressionLimits) -> list[Finding]:
    """Judge every case and metric of one loaded run against its baseline; returns the findings."""
    return assess(warehouse, dag_id, run_id, limits).findings


def assess(warehouse: Warehouse, dag_id: str, run_id: str, limits: RegressionLimits) -> Verdict:
    """The run's verdict: its findings against the baseline nights, or why it could not be judged."""
    record = queries.run_record(warehouse, dag_id, run_id)
    if not len(record):
        return Verdict.not_judged("run not loaded")
    run = record.iloc[0]
    if run["status"] != "ok":
        return Verdict.not_judged(f"run {run['status']}")
    run_type = run["run_type"] if isinstance(run["run_type"], str) and run["run_type"] else "manual"
    if run_type != "scheduled":
        return Verdict.not_judged(f"{run_type} run")
    current = queries.run_means(warehouse, dag_id, run_id)
    if not len(current):
        counts = queries.run_validity(warehouse, dag_id, run_id)
        if not len(counts):
            return Verdict.not_judged("no trend metric in its rows")
        bad = ", ".join(f"{int(r.n)} {r.validity}" for r in counts.itertuples(index=False) if r.validity != "ok")
        return Verdict.not_judged(f"invalid rows: {bad}" if bad else "no valid rows")
    first = current.iloc[0]
    campaign, gpu_model = str(first["campaign"]), str(first["gpu_model"])
    since = queries.accepted_since(warehouse, campaign, gpu_model, first["t"])
    history = queries.baseline_means(warehouse, campaign, gpu_model, run_id, first["t"], limits.lookback, since)
    nights: dict[tuple[str, str], list[float]] = {}
    runs: dict[tuple[str, str], set[str]] = {}
    for row in history.itertuples(index=False):
        nights.setdefault((row.case_key, row.metric), []).append(float(row.value))
        runs.setdefault((row.case_key, row.metric), set()).add(str(row.run_id))
    cases = {(row.case_key, row.metric) for row in current.itertuples(index=False)}
    deepest = max((len(nights.get(case, [])) for case in cases), default=0)
    if deepest < limits.min_runs:
        return Verdict.not_judged(f"{deepest} of {limits.min_runs} nights")
    samples = _samples(warehouse, str(first["campaign"]), str(first["gpu_model"])) if (current["n"] > 1).any() else {}
    findings: list[Finding] = []
    unjudged: set[tuple[str, str]] = set()
    for row in current.itertuples(index=False):
        case = (row.case_key, row.metric)
        if len(nights.get(case, [])) < limits.min_runs:
            unjudged.add(case)
            continue
        if row.n > 1:
            tonight = samples.get((*case, run_id), [])
            baseline = [v for other in runs.get(case, ()) for v in samples.get((*case, other), [])]
            if len(tonight) < 2 or len(baseline) < 2:
                unjudged.add(case)
                continue
            found = judge_repeats(tonight, baseline, nights.get(case, []), row.metric, limits)
        else:
            found = judge(float(row.value), nights.get(case, []), row.metric, limits)
        if found is not None:
            found.case_key = row.case_key
            findings.append(found)
    if len(unjudged) == len(cases):
        return Verdict.not_judged(f"no case with {limits.min_runs} nights of its own")
    points = change_points(warehouse, campaign, gpu_model, first["t"], limits, since)
    drift = None if findings else _drift(points, limits)
    state = "regressed" if findings else "suspected drift" if drift else "fine"
    return Verdict(state, deepest, drift or "", findings, len(unjudged), points)


def change_points(
    warehouse: Warehouse, campaign: str, gpu_model: str, until: object, limits: RegressionLimits, since: object = None
) -> list:
    """(case_key, metric, ChangePoint, nights) for every change point of every case's nightly series up to
    ``until`` (the last :data:`SERIES_NIGHTS` valid scheduled nights on this GPU model, from an accepted
    baseline's first night on)."""

    series = queries.nightly_series(warehouse, campaign, gpu_model, until, SERIES_NIGHTS, since)
    out = []
    for (case_key, metric), rows in series.groupby(["case_key", "metric"], sort=True):
        nights = [Night(str(r.night), str(r.run_id), _float(r.value), _text(r.commit)) for r in rows.itertuples()]
        for night in left_out(nights):
            log.warning(
                "%s at %s: night %s (run %s) left out of the series: %r is no measurement",
                metric,
                case_key,
                night.night,
                night.run_id,
                night.value,
            )
        better: Literal["higher", "lower"] = "higher" if direction(str(metric)) == "higher_is_better" else "lower"
        out += [(str(case_key), str(metric), point, len(nights)) for point in find_points(nights, better)]
    return out


def _float(value: object) -> float:
    """A series value as a float; a NULL (no value) as NaN, which the series leaves out."""
    return float(value) if isinstance(value, int | float) else math.nan


def _drift(points: list, limits: RegressionLimits) -> str | None:
    """ "suspected drift since <night>: …" for the earliest recent change point in the worse direction."""
    recent = [(c, m, p) for c, m, p, n in points if p.worse and p.index >= n - limits.lookback]
    if not recent:
        return None
    case_key, metric, point = min(recent, key=lambda found: found[2].night)
    return f"suspected drift since {point.night}: {metric} at {case_key} {point.text()}"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _samples(warehouse: Warehouse, campaign: str, gpu_model: str) -> dict[tuple[str, str, str], list[float]]:
    """Every repeat of the campaign's valid runs on this GPU model, by (case, metric, run)."""
    found: dict[tuple[str, str, str], list[float]] = {}
    for row in queries.campaign_samples(warehouse, campaign, gpu_model).itertuples(index=False):
        found.setdefault((row.case_key, row.metric, str(row.run_id)), []).append(float(row.value))
    return found


def notify(callback: str | None, dag_id: str, run_id: str, findings: list[Finding]) -> None:
    """Call ``module:function(dag_id, run_id, findings)`` named in the spec (a chat or paging hook)."""
    if not callback or not findings:
        return
    hook(callback)(dag_id, run_id, [asdict(f) for f in findings])


def hook(callback: str) -> Any:
    """The spec's ``module:function`` notifier (``regressions.notify``), imported."""
    module, _, name = callback.partition(":")
    return getattr(importlib.import_module(module), name)
