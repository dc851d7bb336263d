"""The comparison page: configs of any campaigns side by side (``/compare?side=A&side=B&baseline=A``).

Each side is what ``bench compare`` takes, ``CAMPAIGN[:CONFIG][@RUN_ID or @YYYY-MM-DD]`` (without ``@``: the
campaign's latest valid run), resolved by :func:`benchflow.analysis.compare.resolve`, so the page and the command
stand for the same runs and refuse the same ambiguities. Per load point (the kind's last case column) and metric
(the kind's trend metrics, then its energy per unit of work where measured), every side shows the mean of its
``ok`` repeats with the 95 % interval, the rows not judged ok (counted, never averaged in), the value per GPU for
a rate when the side's spec declares its GPUs, and the ratio to the baseline side with its interval and verdict
(:func:`benchflow.analysis.stats.compare`: Welch's t on the logs). The charts draw each side in its own colour, its
means
with their intervals as filled markers and every row not judged ok as a hollow marker of the same colour; a
hover names the side, its run and the row's validity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from benchflow.analysis.compare import Side, resolve
from benchflow.analysis.stats import Comparison, Summary, compare, summarize
from benchflow.ui import charts
from benchflow.ui.charts import Axis, Point, Series, number
from benchflow.ui.markup import dag_id_of, run_href, table
from benchflow.ui.server_pages import side_verdict
from benchflow.warehouse import queries

if TYPE_CHECKING:
    import pandas as pd

    from benchflow.kinds import ResultKind
    from benchflow.spec import CampaignSpec
    from benchflow.warehouse import Warehouse

MAX_SIDES = 8  # sides on one page (each is a run's rows read once)


class Refused(ValueError):
    """A request the page cannot answer, with what to write instead (shown as a 400 or 404 page)."""


@dataclass(frozen=True)
class Column:
    """One side on the page: the side, the run it stands for, its kind, and the GPUs its spec declares."""

    side: Side
    run_id: str
    night: str
    run_type: str
    dag_id: str
    kind: ResultKind
    gpus: int | None

    @property
    def name(self) -> str:
        return str(Side(self.side.campaign, self.side.config))


def href(sides: list[str], baseline: str | None = None, prefix: str = "") -> str:
    """The page's URL for these sides (relative to the view's root, ``prefix`` the way there)."""
    query = [("side", s) for s in sides] + ([("baseline", baseline)] if baseline else [])
    return f"{prefix}compare?{urlencode(query)}"


def groups(
    warehouse: Warehouse,
    kinds_of: dict[str, ResultKind],
    specs: dict[str, CampaignSpec],
    readable: set[str],
    only: str | None = None,
) -> list[list[str]]:
    """The sides worth comparing, as the index and campaign pages link them: every config of the latest valid run
    of the campaigns of one kind whose specs name one host (TP4, PD and EP4 on one 8-GPU host), where there are two
    or more; a campaign without a spec on its own. ``readable``: the campaigns the user may read; ``only``: just
    the group of that campaign (a campaign page's link)."""
    together: dict[tuple[str, str], list[str]] = {}
    for name, kind in sorted(kinds_of.items()):
        if name in readable:
            spec = specs.get(name)
            together.setdefault((kind.name, spec.host if spec is not None else f"(runs of {name})"), []).append(name)
    found = []
    for names in together.values():
        if only is None or only in names:
            sides = [side for name in names for side in _sides_of(warehouse, name)]
            if len(sides) > 1:
                found.append(sides[:MAX_SIDES])
    return found


def _sides_of(warehouse: Warehouse, name: str) -> list[str]:
    """``campaign:config`` for each config of the campaign's latest valid run (the campaign alone without one)."""
    run = queries.latest_valid_runs(warehouse, name)
    if not len(run):
        return []
    samples = queries.run_samples(warehouse, name, str(run.iloc[0]["run_id"]), include_noisy=True)
    return [f"{name}:{c}" for c in sorted({str(c) for c in samples["config"].dropna()})] or [name]


def declared_gpus(spec: CampaignSpec | None, config: str | None) -> int | None:
    """The GPUs a config's servers declare (distinct ids over its servers), None when any server declares none."""
    if spec is None or not spec.configs:
        return None
    chosen = [c for c in spec.configs if c.name == config] if config else spec.configs[:1]
    if len(chosen) != 1:
        return None
    ids: set[str] = set()
    for server in chosen[0].servers:
        devices = server.visible_devices()
        if devices is None:
            return None
        ids |= set(devices.split(","))
    return len(ids)


def columns(
    warehouse: Warehouse, texts: list[str], kinds_of: dict[str, ResultKind], specs: dict[str, CampaignSpec]
) -> list[Column]:
    """The sides asked for, each resolved to one run (and config); Refused saying why one cannot be."""
    if not texts:
        raise Refused("name the configs to compare: ?side=CAMPAIGN:CONFIG&side=… (at least two)")
    if len(texts) > MAX_SIDES:
        raise Refused(f"at most {MAX_SIDES} sides on one page; this asks for {len(texts)}")
    found: list[Column] = []
    for text in texts:
        try:
            side = Side.parse(text)
        except ValueError as exc:
            raise Refused(str(exc)) from None
        if side.campaign not in kinds_of:
            raise Refused(f"{side}: no valid run of a campaign {side.campaign!r} in the warehouse")
        try:
            resolved = resolve(warehouse, side, include_noisy=True)
        except LookupError as exc:
            raise Refused(str(exc)) from None
        config = side.config or _only_config(resolved.samples)
        side = Side(side.campaign, config, side.when)
        gpus = declared_gpus(specs.get(side.campaign), config)
        kind = kinds_of[side.campaign]
        found.append(
            Column(side, resolved.run_id, resolved.night, resolved.run_type, dag_id_of(side.campaign), kind, gpus)
        )
    if len({c.kind.name for c in found}) > 1:
        names = ", ".join(f"{c.side} ({c.kind.name})" for c in found)
        raise Refused(f"the sides are of different kinds and measure different things: {names}")
    if len({(c.name, c.run_id) for c in found}) < len(found):
        raise Refused("a side is named twice")
    return found


def _only_config(samples: pd.DataFrame) -> str | None:
    configs = {str(c) for c in samples["config"].dropna()}
    return next(iter(configs)) if len(configs) == 1 else None


def metrics(kind: ResultKind) -> list[str]:
    """What the page compares: the kind's trend metrics of its rows, then its energy per unit of work."""
    names = [t.column for t in kind.trend if t.column in kind.column_names]
    return names + [e for e in kind.energy() if e not in names]


def direction(kind: ResultKind, metric: str) -> str:
    """``higher`` or ``lower``: a trend metric's own; energy per unit of work is better lower."""
    return "lower" if metric in kind.energy() else kind.better(metric)


def values(warehouse: Warehouse, column: Column, metric: str) -> pd.DataFrame:
    """The side's measured repeats of ``metric`` (warm-ups left out): ``level``, ``value``, ``validity``."""
    kind = column.kind
    frame = queries.case_values(warehouse, kind, column.dag_id, column.run_id, metric)
    if kind.group and column.side.config is not None:
        frame = frame[frame[kind.group].astype(str) == column.side.config]
    axis = kind.axis(frame)
    shown = frame.rename(columns={axis: "level"})[["level", "value", "validity"]]
    shown.attrs["axis"] = axis  # the heading of the level column (concurrency, request_rate, m)
    return shown


def axis_of(cols: list[Column], frames: list[pd.DataFrame]) -> str:
    """The load axis the sides were measured on (the first side that has rows says)."""
    kind = cols[0].kind
    return next((str(f.attrs["axis"]) for f in frames if len(f) and "axis" in f.attrs), kind.case[-1])


def _ok(frame: pd.DataFrame) -> list[float]:
    return [float(v) for v in frame[frame["validity"] == "ok"]["value"]]


def _summary(frame: pd.DataFrame) -> Summary | None:
    ok = _ok(frame)
    return summarize(ok) if ok else None


def _versus(base: pd.DataFrame, mine: pd.DataFrame, better: str) -> Comparison | None:
    try:
        return compare(_ok(base), _ok(mine), "lower" if better == "lower" else "higher")
    except ValueError:  # fewer than two ok values a side: no interval, no verdict
        return None


def _ratio_text(result: Comparison | None, is_base: bool) -> tuple[str, str]:
    if is_base:
        return "baseline", ""
    if result is None:
        return "", "not comparable: fewer than 2 ok repeats on a side"
    ratio = f"{result.ratio:.3f} ({result.ratio_low:.3f}–{result.ratio_high:.3f})"
    if not result.significant:
        return ratio, f"no detectable difference (p={result.p_value:.2g})"
    improved = (result.ratio > 1) == (result.better == "higher")
    change = abs(result.ratio - 1) * 100
    return ratio, f"{'better' if improved else 'worse'} by {change:.1f} % (p={result.p_value:.2g})"


def _mean_text(found: Summary | None) -> str:
    if found is None:
        return "no ok repeat"
    if found.n == 1:
        return f"{number(found.mean)} (n=1: no interval)"
    return f"{number(found.mean)} ({number(found.ci_low)}–{number(found.ci_high)}, n={found.n})"


def _not_ok(frame: pd.DataFrame) -> str:
    counts = frame[frame["validity"] != "ok"]["validity"].value_counts()
    return ", ".join(f"{int(n)} {v}" for v, n in sorted(counts.items()))


def metric_table(cols: list[Column], frames: list[pd.DataFrame], base: int, metric: str) -> pd.DataFrame:
    """One row per level and side: the mean of its ok repeats with the interval, the rows left out, the value per
    GPU for a rate, and the ratio to the baseline with its interval and verdict."""
    import pandas as pd

    kind = cols[0].kind
    column = kind.column(metric)
    better = direction(kind, metric)
    rate = column.unit.endswith("/s")
    levels = sorted({v for f in frames for v in f["level"].dropna()}, key=_level_order)
    rows = []
    for level in levels:
        at = [f[f["level"] == level] for f in frames]
        for index, (col, mine) in enumerate(zip(cols, at, strict=True)):
            if not len(mine):
                continue
            found = _summary(mine)
            ratio, verdict = _ratio_text(_versus(at[base], mine, better), index == base)
            per_gpu = found.mean / col.gpus if rate and found is not None and col.gpus else None
            rows.append(
                {
                    kind.column(axis_of(cols, frames)).heading: level,
                    "config": col.name,
                    f"mean ({column.unit}, 95 % CI)": _mean_text(found),
                    "per GPU": number(per_gpu) if per_gpu is not None else "",
                    "not ok (left out)": _not_ok(mine),
                    f"ratio to {cols[base].name} (95 % CI)": ratio,
                    "verdict": verdict,
                }
            )
    frame = pd.DataFrame(rows)
    if not rate or not any(c.gpus for c in cols):
        frame = frame.drop(columns=["per GPU"], errors="ignore")
    return frame


def _level_order(value: Any) -> tuple[float, str]:
    try:
        return (float(value), "")
    except (TypeError, ValueError):
        return (math.inf, str(value))


def metric_chart(cols: list[Column], frames: list[pd.DataFrame], metric: str) -> str:
    """Each side a line of its ok means with their intervals; its rows not judged ok hollow, in its colour."""
    kind = cols[0].kind
    column = kind.column(metric)
    axis = kind.column(axis_of(cols, frames))
    numeric = axis.type in ("int", "float")
    levels = [float(v) for f in frames for v in f["level"].dropna()] if numeric else []
    x = charts.level_axis(axis.heading, levels) if numeric else Axis(axis.heading, "category")
    series, flagged = [], []
    for col, frame in zip(cols, frames, strict=True):
        points = []
        for level, rows in frame.groupby("level", sort=False):
            found = _summary(rows)
            if found is not None:
                at = float(level) if numeric else str(level)
                points.append(Point(at, found.mean, found.ci_low, found.ci_high, found.n, col.run_id, _run(col)))
        series.append(Series(col.name, points))
        bad = frame[frame["validity"] != "ok"]
        flagged.append(
            [(float(r.level) if numeric else str(r.level), float(r.value), str(r.validity)) for r in bad.itertuples()]
        )
    means = [p.y for s in series for p in s.points] + [v for f in flagged for _, v, _ in f]
    title = f"{column.heading}: {', '.join(c.name for c in cols)}"
    fig = charts.line_chart(series, x, charts.value_axis(column.heading, means), title, column.unit, legend="config")
    for index, (col, rows) in enumerate(zip(cols, flagged, strict=True)):
        if rows:
            fig.add_trace(charts.flagged(rows, x, column.unit, col.name, col.run_id, index))
    caption = f"{direction(kind, metric)} is better; filled: mean of the ok repeats, bars: 95 % interval"
    if any(flagged):
        caption += "; hollow: a repeat not judged ok, in its config's colour, left out of the means"
    return charts.render(fig, caption, wide=True)


def _run(col: Column) -> str:
    return run_href(col.dag_id, col.run_id)


def page(
    warehouse: Warehouse,
    texts: list[str],
    baseline: str | None,
    kinds_of: dict[str, Any],
    specs: dict[str, Any],
    across_datasets: bool = False,
) -> str:
    """The whole page: what each side stands for, then per metric a chart and a table. Sides measured on different
    workloads (the kind's ``comparable_by``: dataset and its sha256) are refused unless ``across_datasets``, which
    shows them under a warning."""
    cols = columns(warehouse, texts, kinds_of, specs)
    names = [c.name for c in cols]
    differ = workloads(warehouse, cols)
    if differ and not across_datasets:
        raise Refused(
            f"the sides measured different workloads ({differ}): their figures are not comparable; add "
            "&across_datasets=1 to the address to show them side by side anyway"
        )
    base = 0
    if baseline:
        chosen = [i for i, c in enumerate(cols) if baseline in (c.name, str(c.side))]
        if not chosen:
            raise Refused(f"baseline {baseline!r} is none of the sides ({', '.join(names)})")
        base = chosen[0]
    out = [
        '<p class="muted"><a href="./">All campaigns</a></p>',
        f"<h1>Comparison: {escape(' vs '.join(names))}</h1>",
        _sides_table(cols, base, [side_verdict(warehouse, c.dag_id, c.run_id, c.side.config) for c in cols]),
        '<p class="muted">Ratios are each side over the baseline, of the geometric means of the ok repeats, with '
        "the 95 % interval of Welch's t on the logs; a difference is named only when that interval excludes 1. "
        "Rows not judged ok (noisy, throttled, contended) are counted and drawn hollow, never averaged in. "
        "Baseline: " + " · ".join(_baseline_link(texts, c, i == base) for i, c in enumerate(cols)) + "</p>",
    ]
    if differ:
        out.append(
            f'<p class="bad">The sides measured different workloads ({escape(differ)}): their figures '
            "measure different work.</p>"
        )
    kind = cols[0].kind
    for metric in metrics(kind):
        frames = [values(warehouse, c, metric) for c in cols]
        if not any(len(f) for f in frames):
            continue
        out.append(f"<h2>{escape(kind.column(metric).heading)}</h2>")
        out.append(metric_chart(cols, frames, metric))
        out.append(table(metric_table(cols, frames, base, metric)))
    body = "".join(out)
    return body + f"<style>{charts.STYLE}</style>" + charts.loader("") if "figure class=" in body else body


def workloads(warehouse: Warehouse, cols: list[Column]) -> str:
    """``dataset: pd sharegpt:chat.json, single random`` when the sides' workloads differ, else ""; a side that
    does not say (rows from before the columns existed) is not held against the others."""
    kind = cols[0].kind
    said: list[str] = []
    for column in kind.comparable_by:
        found = {}
        for col in cols:
            frame = queries.point_settings(warehouse, kind, col.side.campaign, col.run_id, (column,), col.side.config)
            if values_ := sorted({str(v) for v in frame[column].dropna()}):
                found[col.name] = " or ".join(values_)
        if len(set(found.values())) > 1:
            said.append(f"{column}: " + ", ".join(f"{name} {value}" for name, value in found.items()))
    return "; ".join(said)


def _baseline_link(texts: list[str], col: Column, chosen: bool) -> str:
    if chosen:
        return f"<b>{escape(col.name)}</b>"
    return f'<a href="{escape(href(texts, col.name))}">{escape(col.name)}</a>'


def _sides_table(cols: list[Column], base: int, verdicts: list[str]) -> str:
    import pandas as pd

    frame = pd.DataFrame(
        [
            {
                "config": c.name + (" (baseline)" if i == base else ""),
                "campaign": c.side.campaign,
                "run_id": c.run_id,
                "night": c.night,
                "run type": c.run_type,
                "GPUs (spec)": c.gpus if c.gpus else "not declared",
                "bottleneck": verdicts[i] or "no verdict recorded",
            }
            for i, c in enumerate(cols)
        ]
    )
    return table(frame, links={"run_id": lambda r: run_href(dag_id_of(r.campaign), r.run_id)})
