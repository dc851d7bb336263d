"""Plots of one campaign run, drawn from the warehouse (matplotlib, PNG files in the artifact store).

Each result kind draws its own plots of the run's rows (serving: throughput and TTFT against concurrency
per config; kernel: us/token against M); every kind gets the nightly trend of its headline metric with
the nights that regressed circled.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from benchflow import kinds
from benchflow.warehouse import queries

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from benchflow.kinds import ResultKind
    from benchflow.warehouse import Warehouse


def render(warehouse: Warehouse, dag_id: str, run_id: str, out: ObjectStoragePath) -> list[ObjectStoragePath]:
    """Draw every plot that the run's data allows into ``out``; return the files written."""
    import matplotlib

    matplotlib.use("Agg")

    run = queries.run_record(warehouse, dag_id, run_id)
    if not len(run):
        return []
    campaign = str(run["campaign"].iloc[0])
    out.mkdir(parents=True, exist_ok=True)
    written: list[ObjectStoragePath] = []
    for kind in kinds.all_kinds():
        rows = queries.run_rows(warehouse, kind, dag_id, run_id)
        if not len(rows):
            continue
        for name, fig in kind.plots(rows, campaign) if kind.plots else []:
            written.append(_save(fig, out / name))
        if kind.headline is not None:
            trend = _trend(warehouse, kind, campaign)
            if trend is not None:
                written.append(_save(trend, out / "nightly_trend.png"))
    return written


def verdict_line(warehouse: Warehouse, dag_id: str, run_id: str) -> str:
    """The run's verdict as ``runs`` stores it: regressed, fine against N baseline nights, or not judged and why."""
    from benchflow.records import verdict_text

    run = queries.run_record(warehouse, dag_id, run_id)
    if not len(run):
        return "not judged (run not loaded)"
    first = run.iloc[0]
    return verdict_text(
        first.get("verdict"), first.get("verdict_detail"), first.get("baseline_runs"), first["regressions"]
    )


def _trend(warehouse: Warehouse, kind: ResultKind, campaign: str) -> Any:
    """The headline metric night by night for the run's best-covered case; regressed nights circled."""
    import matplotlib.pyplot as plt

    assert kind.headline is not None
    history = queries.trend_history(warehouse, campaign, kind.headline)
    if not len(history):
        return None
    case = history.groupby("case_key")["run_id"].count().idxmax()
    series = history[history["case_key"] == case]
    regressed = queries.regressed_runs(warehouse, campaign, kind.headline)
    fig, axis = plt.subplots(figsize=(9, 4))
    unit = kind.column(kind.headline).unit
    label = f"{kind.headline} ({unit}) at {case}" if unit else f"{kind.headline} at {case}"
    axis.plot(series["run_at"], series["value"], marker="o", label=label)
    bad = series[series["run_id"].isin(regressed)]
    axis.scatter(
        bad["run_at"],
        bad["value"],
        s=160,
        facecolors="none",
        edgecolors="red",
        linewidths=2,
        label="regression",
        zorder=3,
    )
    axis.set(xlabel="run time (UTC)", ylabel=label, title=f"{campaign}: nightly trend")
    axis.grid(alpha=0.3)
    axis.legend()
    fig.autofmt_xdate()
    return fig


def _save(fig: Any, path: ObjectStoragePath) -> ObjectStoragePath:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    path.write_bytes(buffer.getvalue())
    return path
