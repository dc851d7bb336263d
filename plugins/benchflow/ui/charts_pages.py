"""The chart sections of a campaign's page, read from the warehouse through :mod:`benchflow.warehouse.queries` and
drawn by :mod:`benchflow.ui.charts`; kind-generic, from the kinds' declarations:

* the trend of every trend metric (the kind's and its side tables'): one line per case over the runs' times,
  each run's mean with its 95 % interval, regressions circled;
* each trend metric of the latest valid run against the kind's last key (serving: each config at each
  concurrency; kernel: against M), the mean of its ``ok`` repeats with their interval, the rows left out drawn
  apart; the same for energy per unit of work (every column whose unit is ``J/…``: J/token, J/call);
* a kind of one named measurement a row (``measures``: the generic kind): a chart per metric and its trend;
* a load search (a kind's side table of role ``load_search``): each config's latency bounds against load, the
  SLO lines, the answer;
* GPU telemetry: per config, power, utilisation and SM clock of its servers' GPUs over time, phases shaded.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from benchflow import kinds
from benchflow.analysis.stats import summarize, t_quantile
from benchflow.ui import charts, server_pages
from benchflow.ui.charts import Axis, Point, Series, clock, level_axis, number, value_axis, when
from benchflow.ui.markup import table
from benchflow.warehouse import queries

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from benchflow.kinds import Column, ResultKind, SideTable
    from benchflow.warehouse import Warehouse

RUN_TIME = "run time, UTC (its logical date, else its start)"
VERDICT_COLORS = {"pass": "#2ca02c", "fail": charts.MARK, "undecided": "#ff7f0e"}


def natural(text: Any) -> list[Any]:
    """Text with its numbers compared as numbers: ``m=2`` before ``m=16``."""
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", str(text)) if t]


def _f(value: Any) -> float | None:
    try:
        number_ = float(value)
    except (TypeError, ValueError):
        return None
    return number_ if math.isfinite(number_) else None


def _section(title: str, figures: Sequence[str]) -> str:
    figures = [f for f in figures if f]
    return f'<h2>{escape(title)}</h2><div class="charts">{"".join(figures)}</div>' if figures else ""


def sections(
    warehouse: Warehouse, kind: ResultKind, name: str, run: Any, findings: pd.DataFrame, href: Callable[..., str]
) -> str:
    """Every chart section of a campaign's page for its latest valid run ``run``, then the page's scripts;
    ``href(dag_id, run_id)`` is a run's page in Airflow."""

    out = []
    if kind.trends():
        out.append(_section("Trend over runs", trend_figures(warehouse, kind, name, findings, href)))
    for metric in [t.column for t in kind.trend]:
        frame = queries.case_values(warehouse, kind, run["dag_id"], run["run_id"], metric)
        figure = point_figure(warehouse, kind, run, metric, href, frame)
        out.append(_section(comparison_title(kind, metric, frame), [figure]))
    if kind.headline is not None and (pivot := comparison_table(warehouse, kind, run)):
        out.append(pivot)
    joules = kind.energy()
    out.append(_section("Energy per unit of work", [point_figure(warehouse, kind, run, m, href) for m in joules]))
    if kind.measures is not None:
        figures = measure_figures(warehouse, kind, run, href)
        out.append(_section("Each metric of the latest valid run", figures))
        out.append(_section("Trend of each metric over runs", measure_trend_figures(warehouse, kind, name, href)))
    if (searches := kinds.side_table(kind, kinds.LOAD_SEARCH)) is not None:
        out.append(
            _section(
                "Load search: latency against load, the SLO and the answer", search_figures(warehouse, searches, run)
            )
        )
    if any(side.table == "telemetry_samples" for side in kind.side_tables):
        out.append(server_pages.verdict_section(warehouse, run))
        out.append(_section("GPU telemetry of the latest valid run (phases shaded)", telemetry_figures(warehouse, run)))
        title = "Server metrics of the latest valid run: requests running and queued, KV-cache usage per role"
        out.append(_section(title, server_pages.server_figures(warehouse, run)))
    body = "".join(out)
    return body + f"<style>{charts.STYLE}</style>" + charts.loader("../") if "figure class=" in body else body


# -- trends --------------------------------------------------------------------------------------------------


def trend_figures(
    warehouse: Warehouse, kind: ResultKind, name: str, findings: pd.DataFrame, href: Callable[..., str]
) -> list[str]:
    """One chart per trend metric: every case a line over the valid runs' times (several runs a day stay apart),
    each run's mean with its 95 % interval over its ok repeats, regressed points circled."""
    history = queries.trend_intervals(warehouse, name)
    marked = set(zip(findings["run_id"], findings["case_key"], findings["metric"], strict=True))
    out = []
    for metric in kind.trends():
        part = history[history["metric"] == metric]
        if not len(part):
            continue
        column = kind.any_column(metric)
        series = []
        for case, rows in sorted(part.groupby("case_key"), key=lambda item: natural(item[0])):
            points = [
                Point(
                    x=when(r.run_at),
                    y=float(r.value),
                    low=_f(r.ci_low),
                    high=_f(r.ci_high),
                    n=int(r.n),
                    run_id=str(r.run_id),
                    href=href(r.dag_id, r.run_id),
                    marked=(r.run_id, case, metric) in marked,
                    note=f"night {r.night}",
                )
                for r in rows.itertuples()
            ]
            series.append(Series(str(case), points))
        y = value_axis(column.heading, part["value"].astype(float))
        fig = charts.line_chart(series, Axis(RUN_TIME, "date"), y, f"{metric}: trend", column.unit)
        bars = "; bars: 95 % interval of the run's mean" if (part["n"] > 1).any() else "; one value a run: no interval"
        out.append(charts.render(fig, f"{kind.better(metric)} is better; {len(series)} series, each a case{bars}"))
    return out


# -- one run: a metric at each level of the kind's last key ----------------------------------------------------


def comparison_title(kind: ResultKind, metric: str | None = None, frame: pd.DataFrame | None = None) -> str:
    metric = metric or kind.headline or ""
    import pandas as pd

    groups, axis = kind.layout(frame if frame is not None else pd.DataFrame())
    if groups:
        return f"{metric} of each {', '.join(groups)} at each {axis} (latest valid run)"
    return f"{metric} against {axis} (latest valid run)"


def _series_name(groups: list[str], row: Any, metric: str) -> str:
    return ", ".join(str(getattr(row, g)) for g in groups) if groups else metric


def point_series(
    kind: ResultKind, frame: pd.DataFrame, metric: str, run: Any, href: Callable[..., str]
) -> tuple[list[Series], dict[str, list[tuple[Any, float, str]]]]:
    """The mean of each case's ok repeats with its 95 % interval, one series per value of the leading key columns
    (configs), in natural order, every config a series even when none of its rows was ok; and each config's rows
    left out (not ok) with their validity."""
    groups, axis = kind.layout(frame)
    numeric = kind.column(axis).type in ("int", "float")
    link = href(run["dag_id"], run["run_id"])
    grouped: dict[str, list[Point]] = {}
    left: dict[str, list[tuple[Any, float, str]]] = {}
    for _, rows in frame.groupby([*groups, axis], sort=False, dropna=False):
        first = next(rows.itertuples())
        x = float(getattr(first, axis)) if numeric else str(getattr(first, axis))
        name = _series_name(groups, first, metric)
        points = grouped.setdefault(name, [])
        ok = rows[rows["validity"] == "ok"]["value"].astype(float)
        flagged = [(x, float(r.value), str(r.validity)) for r in rows[rows["validity"] != "ok"].itertuples()]
        if flagged:
            left.setdefault(name, []).extend(flagged)
        if not len(ok):
            continue
        s = summarize(list(ok))
        night = f"night {run['night']}"
        points.append(Point(x, s.mean, s.ci_low, s.ci_high, s.n, str(run["run_id"]), link, note=night))
    series = [Series(n, p) for n, p in sorted(grouped.items(), key=lambda item: natural(item[0]))]
    return series, left


def point_figure(
    warehouse: Warehouse,
    kind: ResultKind,
    run: Any,
    metric: str,
    href: Callable[..., str],
    frame: pd.DataFrame | None = None,
) -> str:
    """``metric`` of the latest valid run against its load axis, configs as series (``frame``: its values, when
    the caller read them already)."""
    if frame is None:
        frame = queries.case_values(warehouse, kind, run["dag_id"], run["run_id"], metric)
    if not len(frame):
        return ""
    fig, caption = point_chart(kind, frame, metric, run, href)
    if len(frame.drop_duplicates([c for c in kind.case if c in frame])) >= queries.CASES:  # case_values reads no more
        caption += f"; the first {queries.CASES} cases"
    return charts.render(fig, caption)


def point_chart(
    kind: ResultKind, frame: pd.DataFrame, metric: str, run: Any, href: Callable[..., str]
) -> tuple[go.Figure, str]:
    axis = kind.axis(frame)
    column = kind.column(metric)
    series, left = point_series(kind, frame, metric, run, href)
    numeric = kind.column(axis).type in ("int", "float")
    levels = [float(v) for v in frame[axis]] if numeric else []
    x = level_axis(kind.column(axis).heading, levels) if numeric else Axis(kind.column(axis).heading, "category")
    means = [p.y for s in series for p in s.points]
    better = f"{kind.better(metric)} is better; " if metric in kind.trends() else ""
    title = comparison_title(kind, metric, frame)
    fig = charts.line_chart(series, x, value_axis(column.heading, means), title, column.unit)
    for index, s in enumerate(series):  # each config's rows not judged ok: hollow, in its own colour
        if left.get(s.name):
            fig.add_trace(charts.flagged(left[s.name], x, column.unit, s.name, str(run["run_id"]), index))
    repeats = max((p.n for s in series for p in s.points), default=0)
    count = sum(len(rows) for rows in left.values())
    caption = (
        better
        + ("mean of the ok repeats, bars: 95 % interval" if repeats > 1 else "one value per case: no interval to draw")
        + (f"; {count} row(s) left out of the means (hollow, in their config's colour)" if count else "")
    )
    return fig, caption


def comparison_table(warehouse: Warehouse, kind: ResultKind, run: Any) -> str:
    """The headline's means as a table: configs side by side, one row per level of the last key column."""
    if len(kind.case) < 2:
        return ""
    frame = queries.headline_by_case(warehouse, kind, run["dag_id"], run["run_id"])
    if not len(frame):
        return ""
    groups, axis = kind.layout(frame)
    if not groups:
        return ""
    frame["series"] = frame[groups].astype(str).agg(", ".join, axis=1)
    frame["shown"] = [_mean_cell(r) for r in frame.to_dict("records")]
    pivot = frame.pivot_table(index=axis, columns="series", values="shown", aggfunc="first").reset_index()
    pivot.columns = [str(c) for c in pivot.columns]
    assert kind.headline is not None
    left = int(frame["left_out"].sum())
    note = (
        f'<p class="muted">{left} repeat(s) not judged ok (noisy, throttled or contended) are left out of these means'
        "; a case with none left reads “no ok repeat”.</p>"
        if left
        else ""
    )
    heading = f"<h3>{escape(kind.column(kind.headline).heading)}, mean of the ok repeats per case (95 % interval)</h3>"
    return heading + table(pivot) + note


def _mean_cell(row: dict[str, Any]) -> str:
    """``1234 (1200–1270, n=3)``: a case's mean of its ok repeats with the interval stats.summarize gives; one
    repeat has no interval; none ok says so rather than showing a number."""

    values = [float(v) for v in str(row.get("values") or "").split(",") if v]
    if not values:
        return "no ok repeat"
    found = summarize(values)
    if found.n == 1:
        return f"{number(found.mean)} (n=1)"
    return f"{number(found.mean)} ({number(found.ci_low)}–{number(found.ci_high)}, n={found.n})"


# -- a kind of named measurements (generic) --------------------------------------------------------------------


def _case_axis(title: str, cases: Sequence[str]) -> tuple[Axis, Callable[[str], Any]]:
    """Cases as numbers on a level axis when every one is a number, else as categories in natural order."""
    values = [_f(c) for c in cases]
    if cases and all(v is not None for v in values):
        return level_axis(title, [v for v in values if v is not None]), lambda c: float(c)
    return Axis(title, "category"), category


def category(case: Any) -> str:
    """A case from benchmark output as a category of an axis: Plotly draws tick labels as HTML (``<a href>`` would
    be a link), so angle brackets become look-alikes that are not markup (hover text escapes its own)."""
    return str(case).replace("<", "\u2039").replace(">", "\u203a") or "(no case)"


def _interval(mean: float, std: float | None, n: int) -> tuple[float | None, float | None]:
    if n < 2 or std is None:
        return None, None
    half = t_quantile(n - 1) * std / math.sqrt(n)
    return mean - half, mean + half


def measure_figures(warehouse: Warehouse, kind: ResultKind, run: Any, href: Callable[..., str]) -> list[str]:
    """One chart per metric of the run: the mean of its values at each case (95 % interval where a case matched
    more than once), in the unit its pattern declares."""
    assert kind.measures is not None
    frame = queries.measure_values(warehouse, kind, run["dag_id"], run["run_id"])
    case_title = kind.column(kind.measures.case).heading
    out = []
    for metric, rows in sorted(frame.groupby("metric"), key=lambda item: natural(item[0])):
        unit = next((str(u) for u in rows["unit"] if u), "")
        cases = sorted({str(c) for c in rows["case_key"]}, key=natural)
        x, place = _case_axis(case_title, [c for c in cases if c])
        points = []
        for case in cases:
            s = summarize(list(rows[rows["case_key"] == case]["value"].astype(float)))
            points.append(
                Point(
                    place(case),
                    s.mean,
                    s.ci_low,
                    s.ci_high,
                    s.n,
                    str(run["run_id"]),
                    href(run["dag_id"], run["run_id"]),
                )
            )
        title = f"{metric} ({unit})" if unit else str(metric)
        fig = charts.line_chart(
            [Series(str(metric), points)],
            x,
            value_axis(title, [p.y for p in points]),
            f"{metric} (latest valid run)",
            unit,
        )
        out.append(charts.render(fig, "mean of the matches of each case, bars: 95 % interval"))
    return out


def measure_trend_figures(warehouse: Warehouse, kind: ResultKind, name: str, href: Callable[..., str]) -> list[str]:
    """One chart per metric: each case a line over the valid runs' times, each run's mean with its interval."""
    assert kind.measures is not None
    history = queries.measure_history(warehouse, kind, name)
    out = []
    for metric, part in sorted(history.groupby("metric"), key=lambda item: natural(item[0])):
        unit = next((str(u) for u in part["unit"] if u), "")
        series = []
        for case, rows in sorted(part.groupby("case_key"), key=lambda item: natural(item[0])):
            points = []
            for r in rows.itertuples():
                low, high = _interval(float(r.value), _f(r.std), int(r.n))
                points.append(
                    Point(
                        when(r.run_at),
                        float(r.value),
                        low,
                        high,
                        int(r.n),
                        str(r.run_id),
                        href(r.dag_id, r.run_id),
                        note=f"night {r.night}",
                    )
                )
            series.append(Series(str(case) or str(metric), points))
        title = f"{metric} ({unit})" if unit else str(metric)
        fig = charts.line_chart(
            series,
            Axis(RUN_TIME, "date"),
            value_axis(title, part["value"].astype(float)),
            f"{metric}: trend",
            unit,
            legend=kind.measures.case,
        )
        out.append(charts.render(fig, f"{len(series)} series, each a case"))
    return out


# -- a load search -----------------------------------------------------------------------------------------------


def slo_unit(key: str) -> str:
    """``p99_ttft_ms`` → ms; ``max_failed_fraction`` → fraction."""
    return "ms" if key.endswith("_ms") else "fraction" if key.endswith("fraction") else ""


def _gap(high: Any, low: Any) -> float | None:
    """``high - low`` when both are numbers (an error bar's length), else None (no bar that side)."""
    a, b = _f(high), _f(low)
    return None if a is None or b is None else a - b


def search_figures(warehouse: Warehouse, side: SideTable, run: Any) -> list[str]:
    frame = queries.search_results(warehouse, side, run["dag_id"], run["run_id"])
    out = []
    for r in frame.itertuples(index=False):
        fig, caption = search_chart(r._asdict(), str(run["run_id"]))
        out.append(charts.render(fig, caption, wide=len(json.loads(r.slo or "{}")) > 1))
    return out


def search_chart(result: dict[str, Any], run_id: str = "") -> tuple[go.Figure, str]:
    """A config's load search: one panel per SLO objective, each probe's estimate of it with its confidence
    bounds against the load (coloured by the probe's verdict), the SLO's limit as a line, the answer (the highest
    load that passed) and the lowest that did not as vertical lines, the bracket between them shaded."""
    from plotly.subplots import make_subplots

    trail = json.loads(result.get("trail") or "[]")
    slo = json.loads(result.get("slo") or "{}")
    keys = list(slo) or sorted({c["key"] for step in trail for c in step.get("checks", [])})
    over = str(result.get("over") or "load")
    unit = "requests" if over == "concurrency" else "req/s"
    loads = [float(s["load"]) for s in trail if _f(s.get("load")) is not None]
    pass_load, fail_load = _f(result.get("pass_load")), _f(result.get("fail_load"))
    x = level_axis(f"{over} ({unit})", loads + [v for v in (pass_load, fail_load) if v is not None])
    fig = make_subplots(rows=1, cols=max(len(keys), 1), subplot_titles=[escape(k) for k in keys] or [""])
    for col, key in enumerate(keys, start=1):
        for verdict in ("pass", "undecided", "fail"):
            _add_probes(fig, result, _probe_steps(trail, key, verdict), key, verdict, col, run_id)
        limit = _f(slo.get(key))
        _add_slo_line(fig, key, limit, col)
        _add_bracket(fig, pass_load, fail_load, col)
        _add_answer_line(fig, pass_load, col)
        _add_lowest_line(fig, result, fail_load, col)
        _search_axes(fig, x, trail, key, limit, col)
    _search_layout(fig, result, over, pass_load, fail_load)
    return fig, _search_caption(result)


def _probe_steps(trail: list[dict[str, Any]], key: str, verdict: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each (probe, its check of ``key``) whose check of ``key`` decided ``verdict`` (a probe that failed on another
    objective passed this one: its panel shows it passing)."""
    return [
        (s, c)
        for s in trail
        for c in s.get("checks", [])
        if c.get("key") == key and c.get("verdict", s.get("verdict")) == verdict  # this objective's verdict
    ]


def _add_probes(
    fig: go.Figure,
    result: dict[str, Any],
    steps: list[tuple[dict[str, Any], dict[str, Any]]],
    key: str,
    verdict: str,
    col: int,
    run_id: str,
) -> None:
    """The probes of one verdict in panel ``col``: each one's estimate of ``key`` with its confidence bounds."""
    if not steps:
        return
    ys = [_f(c.get("estimate")) for _, c in steps]
    plus = [_gap(c.get("upper"), y) for (_, c), y in zip(steps, ys, strict=True)]
    minus = [_gap(y, c.get("lower")) for (_, c), y in zip(steps, ys, strict=True)]
    fig.add_scatter(
        x=[float(s["load"]) for s, _ in steps],
        y=ys,
        mode="markers",
        name=verdict,
        legendgroup=verdict,
        showlegend=col == 1,
        marker={"color": VERDICT_COLORS[verdict], "size": 9},
        error_y={"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "visible": True},
        hovertext=[_probe_text(result, s, c, key, y, run_id) for (s, c), y in zip(steps, ys, strict=True)],
        hoverinfo="text",
        row=1,
        col=col,
    )


def _probe_text(
    result: dict[str, Any], step: dict[str, Any], check: dict[str, Any], key: str, y: float | None, run_id: str
) -> str:
    """A probe's hover text: its load and repeat, its estimate of ``key`` with the bounds, its verdict."""
    over = str(result.get("over") or "load")
    return (
        f"<b>{escape(str(result.get('config')))}</b><br>{escape(over)} = {number(float(step['load']))}, "
        f"repeat {step.get('repeat')}<br>{escape(key)}: {number(y) if y is not None else 'none'} "
        f"{slo_unit(key)}, bounds {number(_f(check.get('lower')) or math.nan) or '–'} – "
        f"{number(_f(check.get('upper')) or math.nan) or '–'} (n={check.get('n')})<br>"
        f"verdict {escape(str(step.get('verdict')))} ({step.get('pooled')} requests pooled)"
        + (f"<br>run {escape(run_id)}" if run_id else "")
    )


def _add_slo_line(fig: go.Figure, key: str, limit: float | None, col: int) -> None:
    """The SLO's limit on ``key`` as a dashed horizontal line in panel ``col``."""
    if limit is None:
        return
    fig.add_hline(
        y=limit,
        line={"color": "#555", "dash": "dash"},
        name=f"SLO {escape(key)} ≤ {number(limit)}",  # shapes in the legend: an annotation at x on a
        showlegend=True,  # log axis would be read as 10^x and stretch the axis
        row=1,
        col=col,
    )


def _add_bracket(fig: go.Figure, pass_load: float | None, fail_load: float | None, col: int) -> None:
    """The bracket between the answer and the lowest load that did not pass, shaded in panel ``col``."""
    if pass_load is None or fail_load is None:
        return
    fig.add_vrect(
        x0=pass_load,
        x1=fail_load,
        fillcolor="#fbd38d",
        opacity=0.3,
        line_width=0,
        row=1,
        col=col,
        name=f"bracket {number(pass_load)} – {number(fail_load)}",
        showlegend=col == 1,
    )


def _add_answer_line(fig: go.Figure, pass_load: float | None, col: int) -> None:
    """The answer (the highest load that passed) as a vertical line in panel ``col``."""
    if pass_load is None:
        return
    fig.add_vline(
        x=pass_load,
        line={"color": "#2f855a", "width": 2},
        name=f"answer: {number(pass_load)} (highest load that passed)",
        showlegend=col == 1,
        row=1,
        col=col,
    )


def _add_lowest_line(fig: go.Figure, result: dict[str, Any], fail_load: float | None, col: int) -> None:
    """The lowest load that did not pass (failed or stayed undecided) as a dotted vertical line in panel ``col``."""
    if fail_load is None:
        return
    lowest = f"lowest {result.get('fail_verdict')}: {number(fail_load)}"
    fig.add_vline(
        x=fail_load,
        line={"color": charts.MARK, "width": 1, "dash": "dot"},
        row=1,
        col=col,
        name=lowest,
        showlegend=col == 1,
    )


def _search_axes(fig: go.Figure, x: Axis, trail: list[dict[str, Any]], key: str, limit: float | None, col: int) -> None:
    """Panel ``col``'s axes: the load axis, and a value axis that holds every estimate, upper bound and the limit."""
    fig.update_xaxes(x.layout(), row=1, col=col)
    y_title = f"{key} ({slo_unit(key)})" if slo_unit(key) else key
    values = [
        v
        for s in trail
        for c in s.get("checks", [])
        if c.get("key") == key
        for v in (_f(c.get("estimate")), _f(c.get("upper")))
        if v is not None
    ]
    fig.update_yaxes(value_axis(y_title, values + ([limit] if limit is not None else [])).layout(), row=1, col=col)


def _search_layout(
    fig: go.Figure, result: dict[str, Any], over: str, pass_load: float | None, fail_load: float | None
) -> None:
    """The chart's title (the config, why the search ended, its answer) and frame."""
    config = str(result.get("config"))
    answer = f"answer {number(pass_load)}" if pass_load is not None else "no load passed"
    above = f", lowest {result.get('fail_verdict')} {number(fail_load)}" if fail_load is not None else ""
    fig.update_layout(
        template="plotly_white",
        height=400,
        title={"text": escape(f"{config}: load search over {over} ({result.get('reason')}; {answer}{above})")},
        legend={"title": {"text": "probes (bars: bounds) and lines"}},
        margin={"l": 70, "r": 20, "t": 80, "b": 60},
    )


def _search_caption(result: dict[str, Any]) -> str:
    goodput = _f(result.get("goodput_rps"))
    validity = str(result.get("validity") or "ok")
    caveat = (
        f"NOT OK: a probe of this config was {escape(validity)}, so the answer may rest on a disturbed measurement "
        "and is never a baseline; "
        if validity != "ok"
        else ""
    )
    return (
        f"{caveat}{result.get('probes')} probes at {result.get('loads')} loads in "
        f"{number(_f(result.get('seconds')) or 0)} s; "
        "bars: the percentile's confidence bounds (order statistics); shaded: the bracket"
        + (f"; goodput at the answer {number(goodput)} req/s" if goodput is not None else "")
    )


# -- GPU telemetry ----------------------------------------------------------------------------------------------

TIMELINE = ("power_w", "util_gpu_pct", "sm_mhz")
PHASE_KEYS = ("concurrency", "request_rate", "repeat", "dtype", "m")


def _samples_column(name: str) -> Column:
    return next(c for side in kinds.TELEMETRY_TABLES for c in side.columns if c.name == name)


def phase_label(row: Any) -> str:
    parts = [
        f"{k}={number(v) if isinstance(v, float) else v}"
        for k in PHASE_KEYS
        if (v := getattr(row, k, None)) is not None and v == v
    ]
    return ", ".join(parts) + (" (warm-up)" if _true(getattr(row, "warmup", False)) else "")


def _true(value: Any) -> bool:
    """A warehouse boolean (None, NaN, numpy or Python bool) as a bool: only true is true."""
    return value is not None and value == value and bool(value)


def telemetry_figures(warehouse: Warehouse, run: Any) -> list[str]:
    samples = queries.telemetry_timeline(warehouse, run["dag_id"], run["run_id"])
    if not len(samples):
        return []
    phases = queries.telemetry_phases(warehouse, run["dag_id"], run["run_id"])
    configs = sorted({str(c) for c in phases["config"].dropna()}, key=natural) if len(phases) else []
    if not configs:
        return [charts.render(*telemetry_chart(samples, phases, "the run", str(run["run_id"])), wide=True)]
    return [
        charts.render(
            *telemetry_chart(samples, phases[phases["config"] == c], f"config {c}", str(run["run_id"])), wide=True
        )
        for c in configs
    ]


def telemetry_chart(samples: pd.DataFrame, phases: pd.DataFrame, what: str, run_id: str = "") -> tuple[go.Figure, str]:
    """Power, GPU utilisation and SM clock of each GPU of ``phases`` (those its servers hold, when they say) over
    the phases' span, one row each on a shared time axis, every phase shaded (red when a GPU throttled in it)."""
    from plotly.subplots import make_subplots

    servers = _gpu_servers(phases)
    held = {i for i, s in servers.items() if s}
    gpus = sorted(held or servers or {int(i) for i in samples["gpu_index"].dropna()})
    part = _phases_span(samples[samples["gpu_index"].isin(gpus)], phases)
    columns = [_samples_column(c) for c in TIMELINE]
    fig = make_subplots(rows=len(columns), cols=1, shared_xaxes=True, vertical_spacing=0.06)
    for index, gpu in enumerate(gpus):
        name = f"GPU {gpu}" + (f" ({servers[gpu]})" if servers.get(gpu) else "")
        _add_gpu_lines(fig, part[part["gpu_index"] == gpu], gpu, name, charts.style(index), columns, run_id)
    shaded = phases.drop_duplicates(["phase_start", "phase_end"]) if len(phases) else phases
    throttled = {(r.phase_start, r.phase_end) for r in phases.itertuples() if _true(r.throttled)}
    shapes = [
        _phase_shape(r, number_, (r.phase_start, r.phase_end) in throttled)
        for number_, r in enumerate(shaded.itertuples())
    ]
    notes = (
        [_phase_note(r, phases, (r.phase_start, r.phase_end) in throttled) for r in shaded.itertuples()]
        if len(shaded) <= 40
        else []
    )
    fig.update_layout(shapes=shapes, annotations=notes)  # one validation for all (add_vrect is one per call)
    _telemetry_layout(fig, what, len(columns))
    bucketed = int(part["samples"].max()) if len(part) else 0
    caption = (
        f"{len(gpus)} GPU(s){' of its servers' if held else ''}, {len(shaded)} phase(s) shaded"
        + (f", {len(throttled)} throttled (red)" if throttled else "")
        + (f"; lines are means of up to {bucketed} samples" if bucketed > 1 else "")
    )
    return fig, caption


def _telemetry_layout(fig: go.Figure, what: str, rows: int) -> None:
    """The shared time axis (titled under the last of the ``rows``), the chart's title and frame."""
    fig.update_xaxes(type="date", hoverformat="%H:%M:%S.%L")
    fig.update_xaxes(title={"text": "t (UTC)"}, row=rows, col=1)
    fig.update_layout(
        template="plotly_white",
        height=620,
        title={"text": escape(f"GPU telemetry of {what}")},
        hovermode="closest",
        margin={"l": 80, "r": 20, "t": 90, "b": 50},
    )


def _gpu_servers(phases: pd.DataFrame) -> dict[int, str]:
    """Each GPU the phases name, and the server that holds it (empty when they do not say)."""
    servers: dict[int, str] = {}
    for r in phases.itertuples():
        if r.gpu_index == r.gpu_index and r.gpu_index is not None:
            servers.setdefault(int(r.gpu_index), str(r.server) if isinstance(r.server, str) and r.server else "")
    return servers


def _phases_span(samples: pd.DataFrame, phases: pd.DataFrame) -> pd.DataFrame:
    """The samples within the phases' span (and a margin of 5 %, at least a second, either side)."""
    if not len(phases):
        return samples
    start, end = float(phases["phase_start"].min()), float(phases["phase_end"].max())
    pad = max((end - start) * 0.05, 1.0)
    return samples[(samples["t"] >= start - pad) & (samples["t"] <= end + pad)]


def _add_gpu_lines(
    fig: go.Figure,
    rows: pd.DataFrame,
    gpu: int,
    name: str,
    look: dict[str, Any],
    columns: Sequence[Column],
    run_id: str,
) -> None:
    """One GPU's line in every row of the chart, one row per column of ``columns``."""
    times = [clock(float(t)) for t in rows["t"]]
    for row, column in enumerate(columns, start=1):
        fig.add_scatter(
            x=times,
            y=[_f(v) for v in rows[column.name]],
            mode="lines",
            name=escape(name),
            legendgroup=f"gpu{gpu}",
            showlegend=row == 1,
            line={"color": look["color"], "width": 1.4},
            customdata=[int(n) for n in rows["samples"]],  # a template, not a text a point: 800 points a GPU
            hovertemplate=f"<b>{escape(name)}</b><br>%{{x}}<br>{column.name} %{{y:.4g}} {column.unit} "
            f"(mean of %{{customdata}} samples)" + (f"<br>run {escape(run_id)}" if run_id else "") + "<extra></extra>",
            row=row,
            col=1,
        )
        fig.update_yaxes(title={"text": escape(column.heading)}, rangemode="tozero", row=row, col=1)


def _phase_shape(r: Any, number_: int, hot: bool) -> dict[str, Any]:
    """A phase's shading over every row: red when a GPU throttled in it, else blue and violet in turn."""
    return {
        "type": "rect",
        "xref": "x",
        "yref": "paper",
        "x0": clock(float(r.phase_start)),
        "y0": 0,
        "x1": clock(float(r.phase_end)),
        "y1": 1,
        "line": {"width": 0},
        "layer": "below",
        "opacity": 0.45,
        "fillcolor": "#feb2b2" if hot else ("#bee3f8" if number_ % 2 == 0 else "#e9d8fd"),
    }


def _phase_note(r: Any, phases: pd.DataFrame, hot: bool) -> dict[str, Any]:
    """A phase's label above the chart, its span and throttle reasons on hover."""
    same = phases[(phases["phase_start"] == r.phase_start) & (phases["phase_end"] == r.phase_end)]
    reasons = sorted({str(v) for v in same["throttle_reasons"] if isinstance(v, str) and v})
    return {
        "x": clock((float(r.phase_start) + float(r.phase_end)) / 2),
        "y": 1.0,
        "xref": "x",
        "yref": "paper",
        "yanchor": "bottom",
        "showarrow": False,
        "font": {"size": 9, "color": charts.MARK if hot else "#444"},
        "text": escape(
            phase_label(r).replace("concurrency=", "c=").replace("request_rate=", "q=").replace("repeat=", "r")
        ),
        "hovertext": escape(
            f"{phase_label(r)}: {clock(float(r.phase_start))} – {clock(float(r.phase_end))}"
            + (f"; throttled: {', '.join(reasons)}" if hot else "")
        ),
    }
