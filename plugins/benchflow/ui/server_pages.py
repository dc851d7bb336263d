"""What the servers said and what limits each phase, on a campaign's page and the comparison page: the bottleneck
verdict of each phase with its figures (``phase_bottlenecks``), and per config a timeline of the requests running
and queued and the KV-cache usage of each server role (``server_samples``), beside the GPU timeline."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from benchflow.analysis.bottleneck import headlines
from benchflow.ui import charts
from benchflow.ui.charts import clock
from benchflow.ui.markup import table
from benchflow.warehouse import queries

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from benchflow.warehouse import Warehouse

ROWS = (("running", "requests running"), ("queued", "requests queued"), ("kv_usage", "KV-cache usage"))


def side_verdict(warehouse: Warehouse, dag_id: str, run_id: str, config: str | None) -> str:
    """A side's verdict at its highest load (one line per config it holds), or "" without verdicts."""
    rows = queries.bottlenecks(warehouse, dag_id, run_id).to_dict("records")
    return " · ".join(headlines([r for r in rows if config in (None, r.get("config"))]))


def verdict_section(warehouse: Warehouse, run: Any) -> str:
    """Each phase's verdict of the run, as a table under its heading; "" when the run has none."""
    import pandas as pd

    rows = queries.bottlenecks(warehouse, run["dag_id"], run["run_id"])
    if not len(rows):
        return ""
    lines = "".join(f"<li>{escape(line)}</li>" for line in headlines(rows.to_dict("records")))
    keys = [c for c in ("config", "concurrency", "request_rate", "repeat", "m") if rows[c].notna().any()]
    shown = pd.DataFrame({**{k: rows[k] for k in keys}, "verdict": rows["verdict"], "evidence": rows["says"]})
    return (
        "<h2>What limits each phase (latest valid run)</h2>"
        f'<ul class="verdicts">{lines}</ul>'
        '<p class="muted">By the rules of its kind (benchflow/kinds/&lt;kind&gt;/bottleneck.yaml) over the '
        "servers' own metrics, the GPUs' telemetry and the load generator's CPU; each verdict lists its evidence.</p>"
        + table(shown)
    )


def server_figures(warehouse: Warehouse, run: Any) -> list[str]:
    """One chart per config of the run: each server's requests running and queued and its KV-cache usage."""
    samples = queries.server_timeline(warehouse, run["dag_id"], run["run_id"])
    if not len(samples):
        return []
    out = []
    for config in sorted({str(c) for c in samples["config"].dropna()}):
        fig, caption = server_chart(samples[samples["config"] == config], f"config {config}")
        out.append(charts.render(fig, caption, wide=True))
    return out


def server_chart(samples: pd.DataFrame, what: str) -> tuple[go.Figure, str]:
    """Requests running, requests queued and KV-cache usage of each server of ``samples``, a row each on one time
    axis, one line per server (named with its role)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=len(ROWS), cols=1, shared_xaxes=True, vertical_spacing=0.06)
    servers = list(dict.fromkeys(zip(samples["role"], samples["server"], strict=True)))
    for index, (role, server) in enumerate(servers):
        part = samples[(samples["role"] == role) & (samples["server"] == server)]
        name = f"{server} ({role})" if server != role else str(role)
        look = charts.style(index)
        for row, (column, label) in enumerate(ROWS, start=1):
            fig.add_scatter(
                x=[clock(float(t)) for t in part["t"]],
                y=[None if v != v else float(v) for v in part[column]],
                mode="lines",
                name=escape(name),
                legendgroup=escape(name),
                showlegend=row == 1,
                line={"color": look["color"], "width": 1.4},
                hovertemplate=f"<b>{escape(name)}</b><br>%{{x}}<br>{label} %{{y:.3g}}<extra></extra>",
                row=row,
                col=1,
            )
            fig.update_yaxes(title={"text": label}, row=row, col=1)
    fig.update_xaxes(type="date", hoverformat="%H:%M:%S.%L")
    fig.update_layout(
        template="plotly_white",
        height=520,
        title={"text": escape(f"Server metrics of {what}")},
        margin={"l": 80, "r": 20, "t": 90, "b": 50},
    )
    return fig, f"{len(servers)} server(s): their own Prometheus figures, read at the telemetry period"
