"""Plots of one campaign run, drawn from the warehouse (matplotlib, PNG files in the artifact store).

Each result kind draws its own plots of the run's rows (serving: throughput and TTFT against concurrency
per config; kernel: us/token against M); every kind gets the nightly trend of its headline metric with
the nights that regressed circled.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from benchflow import kinds

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from benchflow.warehouse import Warehouse


def render(warehouse: Warehouse, dag_id: str, run_id: str, out: ObjectStoragePath) -> list[ObjectStoragePath]:
    """Draw every plot that the run's data allows into ``out``; return the files written."""
    import matplotlib

    matplotlib.use("Agg")

    p = warehouse.p
    run = warehouse.query(f"SELECT campaign FROM runs WHERE dag_id = {p} AND run_id = {p}", [dag_id, run_id])
    if not len(run):
        return []
    campaign = str(run["campaign"][0])
    out.mkdir(parents=True, exist_ok=True)
    written: list[ObjectStoragePath] = []
    for kind in kinds.all_kinds():
        rows = warehouse.query(f"SELECT * FROM {kind.table} WHERE dag_id = {p} AND run_id = {p}", [dag_id, run_id])
        if not len(rows):
            continue
        for name, fig in kind.plots(rows, campaign) if kind.plots else []:
            written.append(_save(fig, out / name))
        if kind.headline in kind.trend:
            trend = _trend(warehouse, kind, campaign, dag_id, run_id)
            if trend is not None:
                written.append(_save(trend, out / "nightly_trend.png"))
    return written


def _trend(warehouse: Warehouse, kind: Any, campaign: str, dag_id: str, run_id: str) -> Any:
    """The headline metric night by night for the run's best-covered case; regressed nights circled."""
    import matplotlib.pyplot as plt

    p = warehouse.p
    history = warehouse.query(
        f"SELECT case_key, run_id, night, value FROM metric_history WHERE campaign = {p} AND metric = {p} "
        "ORDER BY night",
        [campaign, kind.headline],
    )
    if not len(history):
        return None
    case = history.groupby("case_key")["run_id"].count().idxmax()
    series = history[history["case_key"] == case]
    regressed = warehouse.query(
        "SELECT DISTINCT g.run_id FROM regressions g JOIN runs r ON r.dag_id = g.dag_id AND r.run_id = g.run_id "
        f"WHERE r.campaign = {p} AND g.metric = {p}",
        [campaign, kind.headline],
    )
    fig, axis = plt.subplots(figsize=(9, 4))
    label = f"{kind.headline} at {case}"
    axis.plot(series["night"], series["value"], marker="o", label=label)
    bad = series[series["run_id"].isin(set(regressed["run_id"]))]
    axis.scatter(
        bad["night"],
        bad["value"],
        s=160,
        facecolors="none",
        edgecolors="red",
        linewidths=2,
        label="regression",
        zorder=3,
    )
    axis.set(xlabel="night", ylabel=label, title=f"{campaign}: nightly trend")
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
