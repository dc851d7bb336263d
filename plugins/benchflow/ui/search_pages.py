"""The Benchmarks view's search pages, one kit and one route for every strategy: every search (a bisection, a config
search, a tile search) in one list (all, or one campaign's), and one search's page: its status and answer, what it
spent, the hosts found down, then the strategy's own section where it has one (a bisection's confirm step and probe
chain: :mod:`~benchflow.ui.bisection_pages`; a config search's ranking, Pareto chart and winner's block:
:mod:`~benchflow.ui.config_search_pages`), else its keys in the order of its answer (each key's verdict, its figure
with the interval, open where censored, and a link to each probe run)."""

from __future__ import annotations

import json
import math
from html import escape
from typing import TYPE_CHECKING, Any

from benchflow.ui import bisection_pages, config_search_pages
from benchflow.ui.markup import run_href, search_href, table
from benchflow.warehouse import queries

if TYPE_CHECKING:
    from benchflow.warehouse import Warehouse

EMPTY = '<p class="empty">(no search yet)</p>'
SECTIONS = {"bisect": bisection_pages.section, "config": config_search_pages.section}  # a strategy's own section


def listing(warehouse: Warehouse, readable: Any, campaign: str | None = None, prefix: str = "") -> str:
    """Every search (of one campaign) the viewer may read the runs of (``readable(dag_id)``), newest first."""
    found = queries.searches(warehouse, campaign) if warehouse.has("searches") else None
    if found is None or not len(found):
        return EMPTY
    found = found[[bool(readable(d)) for d in found["dag_id"]]]
    if not len(found):
        return EMPTY
    shown = found[["run_id", "strategy", "campaign", "status", "best", "summary", "rounds", "probes"]].copy()
    runs = dict(zip(found["run_id"], found["dag_id"], strict=False))
    links = {"run_id": lambda r: search_href(runs[r.run_id], r.run_id, prefix)}
    return table(shown, links=links).replace(' target="_top"', "")


def _figure(value: Any, low: Any, high: Any) -> str:
    def known(v: Any) -> bool:
        return v is not None and not (isinstance(v, float) and math.isnan(v))

    if not known(value):
        return ""
    if not known(high):
        return f"{value:.4g} (≥ {low:.4g})" if known(low) else f"{value:.4g}"
    return f"{value:.4g} ({low:.4g}–{high:.4g})"


def detail(warehouse: Warehouse, dag_id: str, run_id: str) -> str:
    """One search of any strategy: what every search says, then its strategy's own section or its keys."""
    found = queries.search(warehouse, dag_id, run_id) if warehouse.has("searches") else []
    if not len(found):
        raise KeyError(run_id)
    row = found.iloc[0]  # type: ignore[union-attr]
    status, strategy = str(row["status"]), str(row["strategy"])
    css = "muted" if status == "running" else "bad" if status.startswith(("failed", "cancelled")) else "ok"
    own = SECTIONS[strategy](warehouse, dag_id, run_id) if strategy in SECTIONS else None
    title, section = own or (f"{strategy} search of {row['campaign']}", "")
    out = [
        '<p class="muted"><a href="../../">All campaigns</a> · <a href="../../searches">All searches</a></p>',
        f"<h1>{escape(title)}</h1>",
        f'<p><span class="{css}">{escape(status.replace("_", " "))}</span>: {escape(str(row["summary"]))}</p>',
        f'<p class="muted">{escape(strategy)} search · {int(row["probes"])} probe runs · {int(row["rounds"])} rounds · '
        f'<a href="{escape(run_href(dag_id, run_id))}" target="_top">the search\'s DAG run</a></p>',
    ]
    for host, why in (json.loads(row["hosts_down"]) if isinstance(row["hosts_down"], str) else {}).items():
        out.append(f'<p class="bad">host {escape(host)} was down: {escape(str(why))}</p>')
    out.append(section or "<h2>Keys</h2>" + _keys(queries.search_keys(warehouse, dag_id, run_id)))
    return "".join(out)


def _keys(keys: Any) -> str:
    if not len(keys):
        return '<p class="empty">(nothing measured yet)</p>'
    rows = []
    for k in keys.itertuples(index=False):
        runs = json.loads(k.probe_runs or "[]")
        links = " ".join(f'<a href="{escape(run_href(k.probe_dag_id, r))}" target="_top">{escape(r)}</a>' for r in runs)
        n = "" if k.n is None or (isinstance(k.n, float) and math.isnan(k.n)) else str(int(k.n))
        cells = [
            f"<td>{int(k.rank)}</td>",
            f'<td class="text"><code>{escape(str(k.key))}</code></td>',
            f'<td class="text">{escape(str(k.verdict))}</td>',
            f"<td>{escape(n)}</td>",
            f"<td>{escape(_figure(k.value, k.low, k.high))}</td>",
            f'<td class="text">{links}</td>',
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = '<th>#</th><th class="text">key</th><th class="text">verdict</th><th>n</th><th>figure (95 % CI)</th>'
    head += '<th class="text">probe runs</th>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
