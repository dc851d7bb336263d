"""Small server-side SVG charts (no JavaScript, nothing fetched): lines of points on linear or log axes,
every point a link (to its DAG run) with a tooltip, marked points circled in red."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#d62728")
WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 20, 50


@dataclass
class Point:
    x: float
    y: float
    tip: str = ""
    href: str | None = None
    marked: bool = False  # a regression: circled in red


@dataclass
class Series:
    name: str
    points: list[Point] = field(default_factory=list)


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * step:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def number(value: float) -> str:
    """A number as people read it: 4 significant digits, no trailing zeros."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if value == int(value) and abs(value) < 1e12:
        return str(int(value))
    if 1e4 <= abs(value) < 1e12:
        return str(round(value))
    return f"{value:.4g}"


@dataclass
class _Frame:
    """A chart's plot area and the scales that map values to it."""

    x0: float
    x1: float
    y0: float
    y1: float
    x_log: bool
    width: float = WIDTH - LEFT - RIGHT
    height: float = HEIGHT - TOP - BOTTOM

    def fx(self, v: float) -> float:
        return math.log2(v) if self.x_log else v

    def sx(self, v: float) -> float:
        return LEFT + (self.fx(v) - self.x0) / (self.x1 - self.x0) * self.width

    def sy(self, v: float) -> float:
        return TOP + self.height - (v - self.y0) / (self.y1 - self.y0) * self.height


def line_chart(
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    x_log: bool = False,
    x_names: dict[float, str] | None = None,
    title: str = "",
) -> str:
    """An inline ``<svg>``; ``x_names`` labels x positions with text (nights) instead of numbers."""
    points = [p for s in series for p in s.points if p.y is not None and not math.isnan(p.y)]
    if not points:
        return '<p class="empty">no data</p>'
    frame = _frame(points, x_log)
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title or y_label)}">',
        f'<rect x="{LEFT}" y="{TOP}" width="{frame.width}" height="{frame.height}" fill="#fff" stroke="#ccc"/>',
        *_axes(frame, x_label, y_label, x_names),
    ]
    for index, s in enumerate(series):
        out += _series(frame, s, index)
    if any(p.marked for p in points):
        ly = TOP + 14 + len(series) * 16
        out.append(
            f'<circle cx="{WIDTH - RIGHT + 17}" cy="{ly - 4}" r="5" fill="none" stroke="#d62728" '
            f'stroke-width="2"/><text x="{WIDTH - RIGHT + 26}" y="{ly}" class="legend">regression</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _frame(points: list[Point], x_log: bool) -> _Frame:
    xs = [math.log2(p.x) if x_log else p.x for p in points]
    ys = [p.y for p in points]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    y0, y1 = min(ys), max(ys)
    pad = (y1 - y0) * 0.1 or abs(y1) * 0.1 or 1.0
    return _Frame(x0, x1, 0.0 if y0 >= 0 and y0 - pad < 0 else y0 - pad, y1 + pad, x_log)


def _axes(frame: _Frame, x_label: str, y_label: str, x_names: dict[float, str] | None) -> list[str]:
    out = []
    for tick in _ticks(frame.y0, frame.y1):
        y = frame.sy(tick)
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + frame.width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{number(tick)}</text>'
        )
    if x_names:
        x_ticks = sorted(x_names)
        step = max(1, math.ceil(len(x_ticks) / 6))
        labels = [(v, x_names[v]) for v in x_ticks[::step]]
    elif frame.x_log:
        labels = [(2.0**e, number(2.0**e)) for e in range(math.floor(frame.x0), math.ceil(frame.x1) + 1)]
    else:
        labels = [(v, number(v)) for v in _ticks(frame.x0, frame.x1)]
    bottom = TOP + frame.height
    for value, text in labels:
        out.append(
            f'<text x="{frame.sx(value):.1f}" y="{bottom + 16}" text-anchor="middle" class="tick">{escape(text)}</text>'
        )
    out.append(
        f'<text x="{LEFT + frame.width / 2}" y="{HEIGHT - 8}" text-anchor="middle" class="axis">'
        f"{escape(x_label)}</text>"
        f'<text x="14" y="{TOP + frame.height / 2}" text-anchor="middle" class="axis" '
        f'transform="rotate(-90 14 {TOP + frame.height / 2})">{escape(y_label)}</text>'
    )
    return out


def _series(frame: _Frame, s: Series, index: int) -> list[str]:
    """One series: its line, its points (links, tooltips, regressions circled) and its legend entry."""
    color = PALETTE[index % len(PALETTE)]
    drawn = sorted((p for p in s.points if p.y is not None and not math.isnan(p.y)), key=lambda p: p.x)
    out = []
    if len(drawn) > 1:
        path = " ".join(f"{frame.sx(p.x):.1f},{frame.sy(p.y):.1f}" for p in drawn)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
    for p in drawn:
        x, y = frame.sx(p.x), frame.sy(p.y)
        tip = f"<title>{escape(p.tip)}</title>" if p.tip else ""
        mark = (
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="8" fill="none" stroke="#d62728" stroke-width="2.5" '
            f'class="regression"/>'
            if p.marked
            else ""
        )
        dot = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"/>{mark}{tip}'
        if p.href:
            dot = f'<a href="{escape(p.href)}" target="_top">{dot}</a>'
        out.append(dot)
    ly = TOP + 14 + index * 16
    out.append(
        f'<rect x="{WIDTH - RIGHT + 12}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
        f'<text x="{WIDTH - RIGHT + 26}" y="{ly}" class="legend">{escape(s.name[:22])}</text>'
    )
    return out
