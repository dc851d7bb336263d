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
from datetime import UTC, datetime
from typing import Any

HIGHER_IS_BETTER = {"tok_per_s", "output_throughput", "total_throughput", "request_throughput", "input_throughput"}


def direction(metric: str) -> str:
    return "higher_is_better" if metric in HIGHER_IS_BETTER else "lower_is_better"


@dataclass(frozen=True)
class Thresholds:
    lookback: int = 14
    min_runs: int = 5
    z_threshold: float = 2.5
    min_change: float = 0.05


@dataclass
class Finding:
    case_key: str
    metric: str
    value: float
    baseline_mean: float
    baseline_std: float
    baseline_runs: int
    relative_change: float
    z_score: float
    direction: str


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


def detect(warehouse: Any, dag_id: str, run_id: str, limits: Thresholds) -> list[Finding]:
    """Judge every case and metric of one loaded run against its baseline; store and return the findings."""
    current = warehouse.query(
        "SELECT h.case_key, h.metric, h.value, r.gpu_model, r.campaign, COALESCE(r.logical_date, r.started_at) AS t "
        "FROM metric_history h JOIN runs r ON r.dag_id = h.dag_id AND r.run_id = h.run_id "
        "WHERE h.dag_id = ? AND h.run_id = ?",
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
            "  WHERE h.campaign = ? AND h.run_type = 'scheduled' AND h.gpu_model = ? AND h.run_id <> ?"
            "    AND COALESCE(r.logical_date, r.started_at) < ?"
            ") recent WHERE back <= ?",
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
    now = datetime.now(UTC)
    with warehouse.transaction() as tx:
        tx.execute("DELETE FROM regressions WHERE dag_id = ? AND run_id = ?", [dag_id, run_id])
        if findings:
            tx.executemany(
                "INSERT INTO regressions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [[dag_id, run_id, f.case_key, f.metric, f.value, f.baseline_mean, f.baseline_std, f.baseline_runs,
                  f.relative_change, f.z_score, f.direction, now] for f in findings],
            )  # fmt: skip
        tx.execute("UPDATE runs SET regressions = ? WHERE dag_id = ? AND run_id = ?", [len(findings), dag_id, run_id])
    return findings


def notify(callback: str | None, dag_id: str, run_id: str, findings: list[Finding]) -> None:
    """Call ``module:function(dag_id, run_id, findings)`` named in the spec (a chat or paging hook)."""
    if not callback or not findings:
        return
    module, _, name = callback.partition(":")
    getattr(importlib.import_module(module), name)(dag_id, run_id, [asdict(f) for f in findings])
