"""A config search's own section of its search page (:mod:`benchflow.ui.search_pages`): the ranking (each config's
load per GPU as an interval with its verdict, the figures at its pass load, its bottleneck), the Pareto chart of
throughput per GPU against per-user speed, each config's probe runs (linked to their DAG runs), what the search
spent against the full grid, and the winner as a config block for a nightly spec."""

from __future__ import annotations

import json
import math
from html import escape
from typing import TYPE_CHECKING, Any

from benchflow.ui import charts
from benchflow.ui.markup import run_href
from benchflow.warehouse import queries

if TYPE_CHECKING:
    import pandas as pd

    from benchflow.warehouse import Warehouse


def _interval(low: Any, high: Any, verdict: Any = "") -> str:
    """A config's load per GPU as the search knows it: open where the range censored it (``≥ 8`` held the top,
    ``< 2`` failed the bottom)."""
    if low is None or (isinstance(low, float) and math.isnan(low)):
        return ""
    if high is None or (isinstance(high, float) and math.isnan(high)):
        return f"≥ {low:g}"
    if verdict == "held none of the range" or (low == 0 and high > 0):
        return f"< {high:g}"
    return f"{low:g}" if low == high else f"{low:g}–{high:g}"


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return escape(charts.number(value))


def section(warehouse: Warehouse, dag_id: str, run_id: str) -> tuple[str, str] | None:
    """A config search's title and its own section: the spend, the ranking, the Pareto chart and the winner's block;
    None when the warehouse has no such config search."""
    found = queries.config_search(warehouse, dag_id, run_id) if warehouse.has("config_searches") else []
    if not len(found):
        return None
    row = found.iloc[0]  # type: ignore[union-attr]
    result = json.loads(row["result"])
    ranking = queries.config_search_configs(warehouse, dag_id, run_id)
    grid = result.get("grid") or {}
    out = [
        f'<p class="muted">{int(row["configs"])} configs ({int(row["excluded"])} excluded by the space\'s '
        f"constraints) · {int(row['search_probes'])} load-search probes, {int(row['prompts'])} prompts; the full "
        f"grid at the spec's settings: up to {grid.get('probes', '?')} probes, {grid.get('prompts', '?')} prompts</p>",
        "<h2>Ranking</h2>",
        ranking_table(ranking),
    ]
    if figure := pareto_chart(ranking):
        out.append("<h2>Throughput per GPU against per-user speed</h2>" + figure)
    if row["winner_yaml"]:
        out.append(f"<h2>The winner, as a config block</h2><pre>{escape(str(row['winner_yaml']))}</pre>")
    for line in result.get("excluded") or []:
        out.append(f'<p class="muted">excluded: {escape(str(line["reason"]))}</p>')
    body = "".join(out)
    charted = body + f"<style>{charts.STYLE}</style>" + charts.loader("../../") if "figure class=" in body else body
    return f"Config search of {row['campaign']}", charted


def ranking_table(ranking: pd.DataFrame) -> str:
    if not len(ranking):
        return '<p class="empty">(nothing measured yet)</p>'
    rows = []
    for r in ranking.itertuples(index=False):
        runs = json.loads(r.probe_runs or "[]")
        links = " ".join(f'<a href="{escape(run_href(r.probe_dag_id, x))}" target="_top">{escape(x)}</a>' for x in runs)
        said = r.error if isinstance(r.error, str) else (r.bottleneck if isinstance(r.bottleneck, str) else "")
        source = f"reused: {escape(str(r.reused_from))}" if isinstance(r.reused_from, str) else links
        cells = [
            f"<td>{int(r.rank)}</td>",
            f'<td class="text">{escape(str(r.config))}</td>',
            f'<td class="text">{escape(str(r.verdict))}</td>',
            f"<td>{int(r.gpus)}</td>",
            f"<td>{escape(_interval(r.load_per_gpu_low, r.load_per_gpu_high, r.verdict))}</td>",
            f"<td>{_num(r.tokens_per_s_per_gpu)}</td>",
            f"<td>{_num(r.tokens_per_s_per_user)}</td>",
            f"<td>{_num(r.cost_per_mtok)}</td>",
            f'<td class="text">{escape(str(said))}</td>',
            f'<td class="text">{source}</td>',
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    heads = ["rank", "config", "verdict", "GPUs", "load per GPU", "tok/s per GPU", "tok/s per user", "cost / Mtok"]
    heads += ["bottleneck or error", "probe runs"]
    head = "".join(f'<th class="text">{h}</th>' if h in ("config", "verdict") else f"<th>{h}</th>" for h in heads)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def pareto_chart(ranking: pd.DataFrame) -> str:
    """Each measured config at its pass load: tokens/s per GPU (x) against tokens/s per user (y), the Pareto front
    as a line; empty when fewer than two configs have both figures."""
    import plotly.graph_objects as go

    points = ranking.dropna(subset=["tokens_per_s_per_gpu", "tokens_per_s_per_user"])
    if len(points) < 2:
        return ""
    front = points[points["pareto"].astype(bool)].sort_values("tokens_per_s_per_gpu")
    data = [
        go.Scatter(
            x=list(points["tokens_per_s_per_gpu"]),
            y=list(points["tokens_per_s_per_user"]),
            mode="markers+text",
            text=[escape(str(c)) for c in points["config"]],
            textposition="top center",
            name="configs",
        ),
        go.Scatter(
            x=list(front["tokens_per_s_per_gpu"]),
            y=list(front["tokens_per_s_per_user"]),
            mode="lines",
            name="Pareto front",
        ),
    ]
    fig = go.Figure(data=data)
    fig.update_layout(
        template="plotly_white",
        height=420,
        xaxis_title="output tokens/s per GPU (at the config's pass load)",
        yaxis_title="tokens/s per user (1000 / mean TPOT)",
    )
    return charts.render(fig, "each config at the most load it held within the SLO; up and right is better")
