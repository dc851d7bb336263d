"""Did tonight's run regress, beyond noise?

For every case and metric of a run, the baseline is the same metric of the same case in the previous
``lookback`` valid scheduled runs of the same campaign on the same GPU model (``metric_history``).
A regression needs both a lookback z-score past ``z_threshold`` in the worse direction (as conbench
judges a result against its history's distribution) and a relative change of at least
``min_change``, so neither a tiny-but-quiet shift nor one noisy night raises it. Which way is worse
is known per metric. Thresholds are data in the spec, overridable per GPU model (ReFrame-style).
"""

from __future__ import annotations

import importlib
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from benchflow import kinds
from benchflow.warehouse import Finding

if TYPE_CHECKING:
    from benchflow.warehouse import Warehouse


def direction(metric: str) -> str:
    """Which way is better for a trend metric, as its kind declares it."""
    for kind in kinds.all_kinds():
        if metric in kind.trend:
            return "higher_is_better" if kind.trend[metric] == "higher" else "lower_is_better"
    raise KeyError(f"no result kind trends the metric {metric!r}")


@dataclass(frozen=True)
class Thresholds:
    lookback: int = 14
    min_runs: int = 5
    z_threshold: float = 2.5
    min_change: float = 0.05


def judge(value: float, history: list[float], metric: str, limits: Thresholds) -> Finding | None:
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
    return Finding("", metric, value, mean, std, len(history), change, z, worse)


def find(warehouse: Warehouse, dag_id: str, run_id: str, limits: Thresholds) -> list[Finding]:
    """Judge every case and metric of one loaded run against its baseline; returns the findings."""
    p = warehouse.p
    current = warehouse.query(
        "SELECT h.case_key, h.metric, h.value, r.gpu_model, r.campaign, COALESCE(r.logical_date, r.started_at) AS t "
        "FROM metric_history h JOIN runs r ON r.dag_id = h.dag_id AND r.run_id = h.run_id "
        f"WHERE h.dag_id = {p} AND h.run_id = {p}",
        [dag_id, run_id],
    )
    findings: list[Finding] = []
    if len(current):
        first = current.iloc[0]
        history = warehouse.query(
            "SELECT case_key, metric, value, run_id FROM ("
            "  SELECT h.case_key, h.metric, h.value, h.run_id, ROW_NUMBER() OVER ("
            "    PARTITION BY h.case_key, h.metric ORDER BY COALESCE(r.logical_date, r.started_at) DESC) AS back"
            "  FROM metric_history h JOIN runs r ON r.dag_id = h.dag_id AND r.run_id = h.run_id"
            f"  WHERE h.campaign = {p} AND h.run_type = 'scheduled' AND h.gpu_model = {p} AND h.run_id <> {p}"
            f"    AND COALESCE(r.logical_date, r.started_at) < {p}"
            f") recent WHERE back <= {p}",
            [first["campaign"], first["gpu_model"], run_id, first["t"], limits.lookback],
        )
        baseline: dict[tuple[str, str], list[float]] = {}
        for row in history.itertuples(index=False):
            baseline.setdefault((row.case_key, row.metric), []).append(float(row.value))
        for row in current.itertuples(index=False):
            found = judge(float(row.value), baseline.get((row.case_key, row.metric), []), row.metric, limits)
            if found is not None:
                found.case_key = row.case_key
                findings.append(found)
    return findings


def notify(callback: str | None, dag_id: str, run_id: str, findings: list[Finding]) -> None:
    """Call ``module:function(dag_id, run_id, findings)`` named in the spec (a chat or paging hook)."""
    if not callback or not findings:
        return
    module, _, name = callback.partition(":")
    getattr(importlib.import_module(module), name)(dag_id, run_id, [asdict(f) for f in findings])
