"""The Benchmarks view's charts: Plotly figures, built here as JSON and drawn in the browser by the ``plotly.min.js``
that the ``plotly`` package bundles, which the view serves itself (``static/plotly.min.js``): nothing is fetched
from elsewhere, so the view works on an api-server without internet.

Why Plotly rather than hand-written SVG or another library: one declarative figure JSON gives interactive hover
(run id, value and interval of every point), asymmetric error bars, log and date axes (several runs a day stay
apart), legends that list every series and can hide or isolate any of them, zoom into a crowded range, shaded
regions and reference lines (phases, SLOs), and subplots sharing an axis; the Python package validates the JSON
against the schema of the plotly.js it ships, the two pinned together (``requirements.txt``), and the bundle is one
offline file. Matplotlib (the report's PNGs) draws no hover and no link; Vega-Lite/Altair needs three bundles and
has no error-bar-per-point without a layered spec; Bokeh serves its JS from a CDN by default.

Every builder is a pure function of plain values and returns a ``plotly.graph_objects.Figure`` (tests read its
JSON); :func:`render` turns one into HTML, :func:`loader` is the page's one script. The rules every chart keeps:
axis titles are the columns' headings (label and unit, as the warehouse declares them), a linear value axis
starts at zero, a range wider than :data:`WIDE` is drawn on a log axis (and its title says so), intervals are
error bars wherever a point has repeats, x ticks sit at the levels measured, every series is in the legend.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html import escape
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import plotly.graph_objects as go

WIDE = 20.0  # a value range (max / min) at least this wide is drawn on a log axis
WIDE_X = 16.0  # the same for a load axis (1, 2, 4, … 16: powers of two read better on a log axis)
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#393b79")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "cross", "triangle-down")
MARK = "#d62728"  # regressions, failures, throttling
CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}
AxisType = Literal["linear", "log", "date", "category"]


def plotly_js() -> Path:
    """The plotly.js bundle of the installed ``plotly`` package (the one its figures are validated against)."""
    return Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))


def number(value: float) -> str:
    """A number as people read it: 4 significant digits, no trailing zeros."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 1e12:
        return str(int(value))
    if 1e4 <= abs(value) < 1e12:
        return str(round(value))
    return f"{value:.4g}"


def clock(epoch_s: float) -> str:
    """Epoch seconds as the UTC time a Plotly date axis reads, to the millisecond."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def when(value: Any) -> str:
    """A run's time (a timestamp or its text) as a Plotly date: ``2026-12-01 03:00:00`` (UTC)."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value).replace("T", " ")[:19]


@dataclass
class Point:
    """One drawn value: ``low``/``high`` its 95 % interval (None: one value, no interval), ``n`` the values behind
    it, ``href`` where a click leads (its DAG run), ``marked`` a regression."""

    x: Any
    y: float
    low: float | None = None
    high: float | None = None
    n: int = 1
    run_id: str = ""
    href: str = ""
    marked: bool = False
    note: str = ""


@dataclass
class Series:
    name: str
    points: list[Point] = field(default_factory=list)


@dataclass(frozen=True)
class Axis:
    """An axis: its title (a column's heading), its type, whether a linear one starts at zero, and the tick
    values (the levels measured) with their texts."""

    title: str
    type: AxisType = "linear"
    zero: bool = False
    ticks: tuple[Any, ...] = ()

    def layout(self) -> dict[str, Any]:
        title = self.title + (" — log scale" if self.type == "log" else "")
        out: dict[str, Any] = {"title": {"text": escape(title)}, "type": self.type, "automargin": True}
        if self.type == "linear" and self.zero:
            out["rangemode"] = "tozero"
        if self.ticks:
            out |= {"tickmode": "array", "tickvals": list(self.ticks), "ticktext": [number(t) for t in self.ticks]}
        if self.type == "date":
            out["hoverformat"] = "%Y-%m-%d %H:%M:%S"
        return out


def wide(values: Iterable[float], ratio: float = WIDE) -> bool:
    """Whether positive values span ``ratio`` or more (a log axis then shows every one of them)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) >= ratio


def value_axis(title: str, values: Iterable[float]) -> Axis:
    """A value axis: log when the values are wide apart, else linear from zero (never a range that starts near
    the data, where a 1 % gap looks large)."""
    values = list(values)
    if wide(values):
        return Axis(title, "log", ticks=log_ticks(values))
    return Axis(title, "linear", zero=all(v >= 0 for v in values if v == v))


def log_ticks(values: Iterable[float]) -> tuple[float, ...]:
    """1-2-5 ticks over the values' span, each labelled in full (``2000``): Plotly's own ticks on a log axis of
    about one decade label the minor ones by their first digit only (``2, 3, 4`` for 2000 ms)."""
    finite = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    low, high = min(finite), max(finite)
    ticks = [
        m * 10.0**k for k in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1) for m in (1, 2, 5)
    ]
    inside = [t for t in ticks if low / 1.5 <= t <= high * 1.5]
    return tuple(inside) if len(inside) >= 2 else tuple(ticks)


def level_axis(title: str, levels: Iterable[float]) -> Axis:
    """A load axis (concurrency, M): ticks at the levels measured only, log when they span :data:`WIDE_X`."""
    ticks = tuple(sorted({float(v) for v in levels if v is not None and math.isfinite(v)}))
    return Axis(title, "log" if wide(ticks, WIDE_X) else "linear", zero=False, ticks=ticks)


def style(index: int) -> dict[str, Any]:
    """The colour and marker of the ``index``-th series: after the ten colours the marker changes, so no two of
    the first 80 series look alike."""
    return {"color": COLORS[index % len(COLORS)], "symbol": SYMBOLS[(index // len(COLORS)) % len(SYMBOLS)]}


def hover(series: str, x_text: str, point: Point, unit: str) -> str:
    """A point's hover: its series, where it is, its value with the interval (or why there is none), the run."""
    value = f"{number(point.y)} {unit}".strip()
    if point.low is not None and point.high is not None and point.n > 1:
        spread = f"95 % CI {number(point.low)} – {number(point.high)} (n={point.n})"
    else:
        spread = f"n={point.n}: no interval"
    lines = [f"<b>{escape(series)}</b>", escape(x_text), f"{escape(value)}, {spread}"]
    if point.run_id:
        lines.append(f"run {escape(point.run_id)}")
    if point.marked:
        lines.append("REGRESSION")
    if point.note:
        lines.append(escape(point.note))
    return "<br>".join(lines)


def _x_text(x: Any, x_axis: Axis) -> str:
    name = x_axis.title.split(" (")[0]
    return f"{name} {x}" if x_axis.type == "date" else f"{name} = {number(x) if isinstance(x, float) else x}"


def error_bars(points: Sequence[Point]) -> dict[str, Any] | None:
    """Asymmetric error bars for the points that have an interval (n > 1); None when none has one."""
    if not any(p.n > 1 and p.low is not None and p.high is not None for p in points):
        return None
    plus = [p.high - p.y if p.n > 1 and p.high is not None else None for p in points]
    minus = [p.y - p.low if p.n > 1 and p.low is not None else None for p in points]
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "visible": True, "thickness": 1.2}


def traces(series: Sequence[Series], x_axis: Axis, unit: str, mode: str = "lines+markers") -> list[dict[str, Any]]:
    """One trace per series (every one, each in the legend), points in x order, intervals as error bars, and a
    trace of the marked points (regressions, circled in red) when there are any."""
    out: list[dict[str, Any]] = []
    marked: list[tuple[Point, str]] = []
    for index, s in enumerate(series):
        points = sorted((p for p in s.points if p.y is not None and math.isfinite(p.y)), key=lambda p: p.x)
        look = style(index)
        trace: dict[str, Any] = {
            "type": "scatter",
            "mode": mode,
            "name": escape(s.name),
            "legendgroup": escape(s.name),
            "x": [p.x for p in points],
            "y": [p.y for p in points],
            "customdata": [p.href for p in points],
            "hovertext": [hover(s.name, _x_text(p.x, x_axis), p, unit) for p in points],
            "hoverinfo": "text",
            "line": {"color": look["color"], "width": 1.5},
            "marker": {"color": look["color"], "symbol": look["symbol"], "size": 7},
        }
        if (bars := error_bars(points)) is not None:
            trace["error_y"] = bars | {"color": look["color"]}
        out.append(trace)
        marked += [(p, s.name) for p in points if p.marked]
    if marked:
        out.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "regression",
                "x": [p.x for p, _ in marked],
                "y": [p.y for p, _ in marked],
                "customdata": [p.href for p, _ in marked],
                "hovertext": [hover(name, _x_text(p.x, x_axis), p, unit) for p, name in marked],
                "hoverinfo": "text",
                "marker": {"symbol": "circle-open", "size": 17, "color": MARK, "line": {"width": 2.5, "color": MARK}},
            }
        )
    return out


def _figure(data: list[dict[str, Any]], layout: dict[str, Any]) -> go.Figure:
    import plotly.graph_objects as go

    base = {
        "template": "plotly_white",
        "height": 380,
        "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
        "hovermode": "closest",
        "legend": {"font": {"size": 11}},
        "font": {"family": 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif', "size": 12},
    }
    return go.Figure(data=data, layout=base | layout)


def line_chart(series: Sequence[Series], x: Axis, y: Axis, title: str, unit: str = "", legend: str = "") -> go.Figure:
    """Lines of points (with error bars where repeats exist), every series in the legend (``legend``: its title,
    what the series are)."""
    x_layout = x.layout()
    times = {p.x for s in series for p in s.points}
    if x.type == "date" and len(times) == 1:  # one run: a day around it, not a millisecond
        only = datetime.fromisoformat(str(next(iter(times))))
        x_layout["range"] = [when(only - timedelta(hours=12)), when(only + timedelta(hours=12))]
    return _figure(
        traces(series, x, unit),
        {"title": {"text": escape(title)}, "xaxis": x_layout, "yaxis": y.layout(), "showlegend": True}
        | ({"legend": {"title": {"text": escape(legend)}, "font": {"size": 11}}} if legend else {}),
    )


def flagged(
    points: Sequence[tuple[Any, float, str]], x: Axis, unit: str, series: str, run_id: str, index: int
) -> dict[str, Any]:
    """A series' rows not judged ok (noisy, throttled, contended) as hollow markers in the series' own colour and
    legend group: never merged with another series' rows, each hover naming the series, its run and why."""
    look = style(index)
    return {
        "type": "scatter",
        "mode": "markers",
        "name": f"{escape(series)}: not ok",
        "legendgroup": escape(series),
        "x": [p[0] for p in points],
        "y": [p[1] for p in points],
        "hovertext": [
            f"<b>{escape(series)}</b><br>{escape(_x_text(px, x))}<br>{escape(number(py))} {escape(unit)}<br>"
            f"{escape(why)}: not in the mean<br>run {escape(run_id)}"
            for px, py, why in points
        ],
        "hoverinfo": "text",
        "marker": {
            "symbol": f"{look['symbol']}-open",
            "size": 9,
            "color": look["color"],
            "line": {"width": 1.5, "color": look["color"]},
        },
    }


def render(fig: go.Figure, caption: str = "", wide: bool = False) -> str:
    """A figure as HTML: its JSON in a ``<script type="application/json">`` (``<``, ``>`` and ``&`` written as
    JSON escapes, so no text of it can end the script) beside the element :func:`loader` draws it into."""
    text = fig.to_json().replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    note = f'<p class="muted caption">{escape(caption)}</p>' if caption else ""
    css = "plot wide" if wide else "plot"
    return (
        f'<figure class="{css}"><div class="plot-area"></div><script type="application/json">{text}</script>'
        f"{note}</figure>"
    )


LOADER_JS = """
for (const box of document.querySelectorAll("figure.plot")) {
  const fig = JSON.parse(box.querySelector("script").textContent);
  const area = box.querySelector(".plot-area");
  Plotly.newPlot(area, fig.data, fig.layout, %s).then(() => area.setAttribute("data-drawn", "1"));
  area.on("plotly_click", (event) => {
    const href = event.points.length ? event.points[0].customdata : null;
    if (typeof href !== "string" || !href.startsWith("/")) { return; }
    const link = Object.assign(document.createElement("a"), {href: href, target: "_top"});  // as the page's links
    document.body.appendChild(link);
    link.click();
    link.remove();
  });
}
"""


def loader(static: str) -> str:
    """The page's scripts: the bundled plotly.js from the view itself (``static``: the path to the view's
    ``static/`` from the page), then the drawing of every figure of the page."""
    return (
        f'<script src="{escape(static)}static/plotly.min.js" charset="utf-8"></script>'
        f"<script>{LOADER_JS % json.dumps(CONFIG)}</script>"
    )


STYLE = """
figure.plot{margin:0;background:#fff;border:1px solid #e2e8f0;width:760px;min-height:380px}
figure.plot.wide{width:1100px}.caption{margin:2px 8px 6px}
"""
