"""Plots of one campaign run, drawn from the warehouse (matplotlib, PNG files in the artifact store).

Each result kind draws its own plots of the run's rows (serving: throughput and TTFT against concurrency
per config; kernel: us/token against M); every kind gets the nightly trend of its headline metric with
the nights that regressed circled.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from benchflow import kinds
from benchflow.records import verdict_text
from benchflow.spec import DAG_PREFIX, RESERVED_NAMES
from benchflow.warehouse import queries

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from benchflow.kinds import ResultKind
    from benchflow.warehouse import Warehouse


def report_targets(events: Any) -> tuple[list[tuple[str, str]], list[str]]:
    """The (dag_id, run_id) of each ``bench_results`` event that a campaign run's load emitted, and why each
    other one is ignored: an event posted through the REST API, or by another DAG, may name any run, so its
    ``extra`` must name the run that emitted it (``source_dag_id``/``source_run_id``) and a campaign DAG."""

    found: list[tuple[str, str]] = []
    ignored: list[str] = []
    for asset_events in events.values():
        for event in asset_events:
            extra = event.extra or {}
            dag_id, run_id = extra.get("dag_id"), extra.get("run_id")
            source = (getattr(event, "source_dag_id", None), getattr(event, "source_run_id", None))
            if not isinstance(dag_id, str) or not isinstance(run_id, str):
                ignored.append(f"an event without a run ({str(extra)[:200]})")
            elif (
                source != (dag_id, run_id)
                or not dag_id.startswith(DAG_PREFIX)
                or dag_id.removeprefix(DAG_PREFIX) in RESERVED_NAMES
            ):
                ignored.append(f"an event naming {dag_id[:100]} {run_id[:100]} that its run did not emit")
            elif (dag_id, run_id) not in found:
                found.append((dag_id, run_id))
    return found, ignored


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
