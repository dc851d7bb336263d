"""The Benchmarks view's pages, rendered from the warehouse (read-only) for every result kind."""

from __future__ import annotations

import math
import re
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from benchflow.ui.charts import Point, Series, line_chart, number
from benchflow.warehouse import queries

if TYPE_CHECKING:
    import pandas as pd

    from benchflow.kinds import ResultKind
    from benchflow.warehouse import Warehouse

MAX_SERIES = 10
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px 24px;color:#1a202c;background:#fafafa}
h1{font-size:22px;margin:4px 0 12px}h2{font-size:18px;margin:22px 0 8px}h3{font-size:15px;margin:14px 0 6px}
table{border-collapse:collapse;background:#fff;font-size:13px;margin:6px 0 12px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f0f2f5}td.text,th.text{text-align:left}
.muted{color:#666;font-size:13px}.bad{color:#c53030;font-weight:600}.ok{color:#2f855a;font-weight:600}
.tick{font-size:11px;fill:#555}.axis{font-size:12px;fill:#333}.legend{font-size:11px;fill:#333}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{background:#fff;border:1px solid #e2e8f0}
a{color:#2b6cb0}.empty{color:#888}
"""


def document(title: str, body: str) -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )


def problem(exc: BaseException) -> str:
    return (
        f'<h1>Benchmarks</h1><p class="bad">The warehouse cannot be read: {escape(str(exc))}</p>'
        '<p class="muted">Run a campaign (or <code>bench migrate</code>) to create it.</p>'
    )


def open_warehouse() -> Warehouse:
    from benchflow.warehouse import Warehouse

    return Warehouse.from_airflow(read_only=True)


def run_href(dag_id: str, run_id: str) -> str:
    """The DAG run's page in the Airflow UI (the view is an iframe: links open in the top window)."""
    return f"/dags/{quote(str(dag_id), safe='')}/runs/{quote(str(run_id), safe='')}"


def _cell(value: Any) -> tuple[str, str]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "", ""
    if isinstance(value, bool):
        return str(value).lower(), "text"
    if isinstance(value, int | float):
        return number(float(value)), ""
    try:
        import numpy as np

        if isinstance(value, np.integer | np.floating):
            return number(float(value)), ""
    except ImportError:  # pragma: no cover
        pass
    return escape(str(value)), "text"


def table(frame: pd.DataFrame, links: dict[str, Any] | None = None) -> str:
    if not len(frame):
        return '<p class="empty">(no rows)</p>'
    head = "".join(f"<th>{escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for record in frame.itertuples(index=False):
        cells = []
        for column, value in zip(frame.columns, record, strict=True):
            text, css = _cell(value)
            if links and column in links and text:
                text = f'<a href="{escape(links[column](record))}" target="_top">{text}</a>'
            cells.append(f'<td class="{css}">{text}</td>' if css else f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def campaigns(warehouse: Warehouse) -> dict[str, ResultKind]:
    """Every campaign with a valid run, and its kind (the wide view it appears in)."""
    from benchflow import kinds

    found: dict[str, ResultKind] = {}
    for kind in kinds.all_kinds():
        for name in queries.campaigns_with_valid_runs(warehouse, kind):
            found.setdefault(name, kind)
    return dict(sorted(found.items()))


def index(warehouse: Warehouse) -> str:
    found = campaigns(warehouse)
    latest = queries.latest_valid_runs(warehouse).set_index("campaign")
    runs = queries.run_counts(warehouse).set_index("campaign")
    rows = []
    for name, kind in found.items():
        last = latest.loc[name] if name in latest.index else None
        count = runs.loc[name] if name in runs.index else None
        regressed = int(last["regressions"] or 0) if last is not None else 0
        flag = f'<span class="bad">{regressed} regression(s)</span>' if regressed else '<span class="ok">none</span>'
        link = (
            f'<a href="{escape(run_href(last["dag_id"], last["run_id"]))}" target="_top">'
            f"{escape(str(last['run_id']))}</a>"
            if last is not None
            else ""
        )
        rows.append(
            f'<tr><td class="text"><a href="campaign/{quote(name, safe="")}">{escape(name)}</a></td>'
            f'<td class="text">{escape(kind.name)}</td><td class="text">{link}</td>'
            f'<td class="text">{escape(str(last["night"]) if last is not None else "")}</td>'
            f'<td class="text">{escape(str(last["gpu_model"]) if last is not None else "")}</td>'
            f"<td>{int(count['valid']) if count is not None else 0} / {int(count['runs']) if count is not None else 0}"
            f'</td><td class="text">{flag}</td></tr>'
        )
    if not rows:
        return '<h1>Benchmarks</h1><p class="empty">No valid run in the warehouse yet.</p>'
    head = (
        "<tr><th class='text'>campaign</th><th class='text'>kind</th><th class='text'>latest valid run</th>"
        "<th class='text'>night</th><th class='text'>GPU</th><th>valid / all runs</th>"
        "<th class='text'>regressions in the latest run</th></tr>"
    )
    return (
        f"<h1>Benchmarks</h1><p class='muted'>warehouse: {escape(warehouse.location)}</p>"
        f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"
        '<p><a href="bisections">Bisections</a>: which payload commit made a case slower</p>'
    )


def campaign(warehouse: Warehouse, name: str) -> str:
    found = campaigns(warehouse)
    if name not in found:
        raise KeyError(name)
    kind = found[name]
    run = queries.latest_valid_runs(warehouse, name).iloc[0]
    rows = kind.present(queries.shown_rows(warehouse, kind, run["dag_id"], run["run_id"]))
    findings = queries.findings(warehouse, name)
    out = [
        f'<p class="muted"><a href="../">All campaigns</a></p><h1>{escape(name)}</h1>',
        f'<p class="muted">kind {escape(kind.name)}; warehouse {escape(warehouse.location)}</p>',
        f'<h2>Latest valid run</h2><p><a href="{escape(run_href(run["dag_id"], run["run_id"]))}" target="_top">'
        f"{escape(str(run['run_id']))}</a> · night {escape(str(run['night']))} · host {escape(str(run['host']))}"
        f" · GPU {escape(str(run['gpu_model']))} · {int(run['rows_loaded'] or 0)} rows · ",
        (
            f'<span class="bad">{int(run["regressions"])} regression(s)</span>'
            if run["regressions"]
            else '<span class="ok">no regression</span>'
        )
        + "</p>",
        table(rows),
    ]
    if kind.trend:
        out.append(f"<h2>Trend over nights</h2>{trend_charts(warehouse, kind, name, findings)}")
        out.append(f"<h2>{escape(comparison_title(kind))}</h2>{comparison(warehouse, kind, name, run)}")
    out.append("<h2>Regressions</h2>")
    if len(findings):
        rank = sorted(
            range(len(findings)),
            key=lambda i: (_natural((findings["case_key"].iloc[i], None)), str(findings["metric"].iloc[i])),
        )
        rank.sort(key=lambda i: str(findings["night"].iloc[i]), reverse=True)  # newest night first, stable
        findings = findings.iloc[rank].reset_index(drop=True)
        findings["relative_change"] = findings["relative_change"].map(lambda v: f"{100 * v:+.1f}%")
        from benchflow.ui import bisections

        findings, bisect_href = bisections.with_bisect(warehouse, name, findings)
        out.append(table(findings, links={"run_id": lambda r: run_href(r.dag_id, r.run_id), "bisect": bisect_href}))
    else:
        out.append('<p class="ok">none found</p>')
    from benchflow.ui.bisections import listing

    out.append(f"<h2>Bisections</h2>{listing(warehouse, name, prefix='../')}")
    return "".join(out)


def trend_charts(warehouse: Warehouse, kind: ResultKind, name: str, findings: pd.DataFrame) -> str:
    """One chart per trend metric: every case a line over the valid runs, regressed points circled."""
    history = queries.trend_history(warehouse, name)
    if not len(history):
        return '<p class="empty">no history</p>'
    order = {run: i for i, run in enumerate(dict.fromkeys(zip(history["dag_id"], history["run_id"], strict=True)))}
    nights = {
        float(i): str(night)[5:10]
        for (run, i), night in zip(order.items(), history.drop_duplicates(["dag_id", "run_id"])["night"], strict=True)
    }
    marked = set(zip(findings["run_id"], findings["case_key"], findings["metric"], strict=True))
    charts = []
    for trend in kind.trend:
        metric, better = trend.column, trend.better
        part = history[history["metric"] == metric]
        if not len(part):
            continue
        series = []
        for case, rows in sorted(part.groupby("case_key"), key=_natural)[:MAX_SERIES]:
            points = [
                Point(
                    x=float(order[(r.dag_id, r.run_id)]),
                    y=float(r.value),
                    tip=f"{case} · {metric} {number(float(r.value))} · night {r.night} · {r.run_id}"
                    + (" · REGRESSION" if (r.run_id, case, metric) in marked else ""),
                    href=run_href(r.dag_id, r.run_id),
                    marked=(r.run_id, case, metric) in marked,
                )
                for r in rows.itertuples()
            ]
            label = str(case) if str(case).count("=") < 2 else re.sub(r"[A-Za-z_]+=", "", str(case))
            series.append(Series(label, points))
        charts.append(
            line_chart(
                series,
                "night, MM-DD (one point per valid run)",
                f"{kind.column(metric).heading}, {better} is better",
                x_names=nights,
                title=f"{metric} trend",
            )
        )
    return f'<div class="charts">{"".join(charts)}</div>'


def _natural(item: tuple[Any, Any]) -> list[Any]:
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", str(item[0])) if t]


def comparison_title(kind: ResultKind) -> str:
    key = kind.case
    if len(key) > 1:
        return f"{kind.headline} of each {', '.join(key[:-1])} at each {key[-1]} (latest valid run)"
    return f"{kind.headline} against {key[-1]} (latest valid run)"


def comparison(warehouse: Warehouse, kind: ResultKind, name: str, run: Any) -> str:
    """The headline metric of the latest valid run (the mean over repeats, warm-ups left out, where the kind has
    them): one line per value of the leading key columns, against the last key column, and the same as a table
    (configs side by side at each concurrency)."""
    key = kind.case
    axis, groups = key[-1], list(key[:-1])
    frame = queries.headline_by_case(warehouse, kind, run["dag_id"], run["run_id"])
    if not len(frame):
        return '<p class="empty">no rows</p>'
    label = frame[groups].astype(str).agg(", ".join, axis=1) if groups else None
    frame["series"] = label if label is not None else kind.headline
    numeric = kind.column(axis).type in ("int", "float")
    series = []
    for group, rows in list(frame.groupby("series", sort=False))[:MAX_SERIES]:
        series.append(
            Series(
                str(group),
                [
                    Point(
                        x=float(r[axis]) if numeric else float(i),
                        y=float(r["value"]),
                        tip=f"{group} · {axis}={r[axis]} · {kind.headline} {number(float(r['value']))}",
                        href=run_href(run["dag_id"], run["run_id"]),
                    )
                    for i, (_, r) in enumerate(rows.iterrows())
                ],
            )
        )
    positive = numeric and bool((frame[axis] > 0).all())
    spread = positive and frame[axis].max() / max(frame[axis].min(), 1e-9) >= 16
    assert kind.headline is not None
    headline = kind.column(kind.headline).heading
    chart = line_chart(series, kind.column(axis).heading, headline, x_log=spread, title=comparison_title(kind))
    if groups:
        pivot = frame.pivot_table(index=axis, columns="series", values="value", aggfunc="first").reset_index()
        pivot.columns = [str(c) for c in pivot.columns]
        return chart + table(pivot)
    return chart
