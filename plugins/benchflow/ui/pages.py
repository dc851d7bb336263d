"""The Benchmarks view's pages, rendered from the warehouse (read-only) for every result kind."""

from __future__ import annotations

import re
from collections.abc import Callable
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from benchflow import kinds
from benchflow.records import verdict_text
from benchflow.spec import load_all
from benchflow.ui import bisection_pages, charts_pages, compare_pages, search_pages
from benchflow.ui.markup import dag_id_of, run_href, table
from benchflow.warehouse import Warehouse, queries

if TYPE_CHECKING:
    import pandas as pd

    from benchflow.kinds import ResultKind
    from benchflow.spec import CampaignSpec
    from benchflow.warehouse import Warehouse

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px 24px;color:#1a202c;background:#fafafa}
h1{font-size:22px;margin:4px 0 12px}h2{font-size:18px;margin:22px 0 8px}h3{font-size:15px;margin:14px 0 6px}
table{border-collapse:collapse;background:#fff;font-size:13px;margin:6px 0 12px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f0f2f5}td.text,th.text{text-align:left}
.muted{color:#666;font-size:13px}.bad{color:#c53030;font-weight:600}.ok{color:#2f855a;font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:12px}
a{color:#2b6cb0}.empty{color:#888}.unjudged{color:#5a5a5a;font-weight:600}
"""


MAX_ROWS = 500  # rows of a table on one page (the page says "showing N of M")
MAX_FINDINGS = 200  # regressions listed on a campaign's page
_PATH = re.compile(r"(?<![\w.])(?:/[^\s/'\"():,;]+){2,}/?")


def document(title: str, body: str) -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(clip(title))}</title>'
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )


def clip(text: str, limit: int = 300) -> str:
    """At most ``limit`` characters of ``text`` (what an error page echoes of a value)."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def scrub(text: str) -> str:
    """``text`` without absolute server paths: each becomes its last part (a file's name)."""
    return _PATH.sub(lambda m: m.group().rstrip("/").rsplit("/", 1)[-1], str(text))


def problem(exc: BaseException) -> str:
    return (
        f'<h1>Benchmarks</h1><p class="bad">The warehouse cannot be read: {escape(clip(scrub(str(exc))))}</p>'
        '<p class="muted">Run a campaign (or <code>bench migrate</code>) to create it.</p>'
    )


def too_slow(limit: float) -> str:
    return (
        f'<h1>Benchmarks</h1><p class="bad">The warehouse did not answer within {limit:g} s.</p>'
        '<p class="muted">It may be busy or locked; try again later (<code>BENCH_VIEW_TIMEOUT_S</code> sets the '
        "limit).</p>"
    )


def busy() -> str:
    return (
        '<h1>Benchmarks</h1><p class="bad">The Benchmarks view is still waiting for the warehouse on earlier '
        'requests.</p><p class="muted">Try again in a moment.</p>'
    )


def forbidden(what: str) -> str:
    return f'<h1>Benchmarks</h1><p class="bad">Your Airflow role may not {escape(clip(what))}.</p>'


def open_warehouse(statement_timeout_s: float | None = None) -> Warehouse:
    return Warehouse.from_airflow(read_only=True, statement_timeout_s=statement_timeout_s)


def where(warehouse: Warehouse) -> str:
    """The warehouse as a page names it: a DuckDB file by its name, never its absolute path."""
    return scrub(warehouse.location)


def verdict(run: Any) -> str:
    """A run's verdict as a page shows it: red when regressed, green only when judged fine against its baseline
    nights, grey with the reason when it was not judged."""

    state = run.get("verdict")
    text = verdict_text(state, run.get("verdict_detail"), run.get("baseline_runs"), run.get("regressions"))
    css = {"regressed": "bad", "suspected drift": "bad", "fine": "ok"}.get(
        state if isinstance(state, str) else "", "unjudged"
    )
    return f'<span class="{css}">{escape(text)}</span>'


def campaigns(warehouse: Warehouse) -> dict[str, ResultKind]:
    """Every campaign with a valid run, and its kind (the wide view it appears in)."""

    found: dict[str, ResultKind] = {}
    for kind in kinds.all_kinds():
        for name in queries.campaigns_with_valid_runs(warehouse, kind):
            found.setdefault(name, kind)
    return dict(sorted(found.items()))


def specs() -> tuple[dict[str, CampaignSpec], list[str]]:
    """Every campaign spec that builds a DAG, by name, and the file names of the rejected ones."""

    found, errors = load_all()
    return {s.name: s for s in found}, sorted({e.path.name for e in errors if getattr(e, "path", None)})


OTHER_PAGES = (
    '<p><a href="searches">Searches</a>: every bisection (which payload commit made a case slower), config search '
    "(which config of a space holds the most load per GPU) and tile search, and how each ended</p>"
)


def index(warehouse: Warehouse, may_read: Callable[[str], bool] = lambda dag_id: True) -> str:
    """Every campaign spec (with runs or not) and every campaign with runs in the warehouse; only those whose DAG
    the user may read."""
    defined, rejected = specs()
    with_runs = campaigns(warehouse)
    latest = queries.latest_valid_runs(warehouse).set_index("campaign")
    runs = queries.run_counts(warehouse).set_index("campaign")
    names = sorted(set(defined) | set(with_runs) | {str(c) for c in runs.index})
    rows = []
    hidden = 0
    for name in names:
        spec = defined.get(name)
        dag_id = spec.dag_id if spec is not None else dag_id_of(name)
        if not may_read(dag_id):
            hidden += 1
            continue
        kind = with_runs.get(name) or (spec.result_kind if spec is not None else None)
        last = latest.loc[name] if name in latest.index else None
        count = runs.loc[name] if name in runs.index else None
        if last is not None:
            link = (
                f'<a href="{escape(run_href(last["dag_id"], last["run_id"]))}" target="_top">'
                f"{escape(str(last['run_id']))}</a>"
            )
            flag = verdict(last)
        else:
            link = '<span class="empty">no valid run yet</span>'
            flag = '<span class="unjudged">not judged (no valid run)</span>'
        if spec is None:
            where_from = '<span class="muted">no spec (runs only)</span>'
        else:
            where_from = escape(spec.schedule or "manual only")
        rows.append(
            f'<tr><td class="text"><a href="campaign/{quote(name, safe="")}">{escape(name)}</a></td>'
            f'<td class="text">{escape(kind.name if kind is not None else "")}</td>'
            f'<td class="text">{where_from}</td><td class="text">{link}</td>'
            f'<td class="text">{escape(str(last["night"]) if last is not None else "")}</td>'
            f'<td class="text">{escape(str(last["gpu_model"]) if last is not None else "")}</td>'
            f"<td>{int(count['valid']) if count is not None else 0} / {int(count['runs']) if count is not None else 0}"
            f'</td><td class="text">{flag}</td></tr>'
        )
    notes = []
    if hidden:
        notes.append(f"{hidden} campaign(s) whose DAG your role may not read are left out.")
    if rejected:
        notes.append(f"Rejected specs (no DAG; <code>bench validate</code> says why): {escape(', '.join(rejected))}.")
    foot = "".join(f'<p class="muted">{n}</p>' for n in notes)
    if not rows:
        return f'<h1>Benchmarks</h1><p class="empty">No campaign yet.</p>{foot}'
    head = (
        "<tr><th class='text'>campaign</th><th class='text'>kind</th><th class='text'>schedule</th>"
        "<th class='text'>latest valid run</th><th class='text'>night</th><th class='text'>GPU</th>"
        "<th>valid / all runs</th><th class='text'>verdict of the latest valid run</th></tr>"
    )
    return (
        f"<h1>Benchmarks</h1><p class='muted'>warehouse: {escape(where(warehouse))}</p>"
        f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>{foot}"
        + _compare_list(warehouse, with_runs, defined, may_read)
        + OTHER_PAGES
    )


def _compare_list(
    warehouse: Warehouse, with_runs: dict[str, ResultKind], defined: dict[str, CampaignSpec], may_read: Callable
) -> str:
    """Links to the comparison page: the configs of each host's campaigns of one kind, side by side."""
    readable = {n for n in with_runs if may_read(defined[n].dag_id if n in defined else dag_id_of(n))}
    items = "".join(
        f'<li><a href="{escape(compare_pages.href(sides))}">{escape(" vs ".join(sides))}</a></li>'
        for sides in compare_pages.groups(warehouse, with_runs, defined, readable)
    )
    if not items:
        return ""
    note = "<p class='muted'>the campaigns of one kind on one host, side by side</p>"
    return f"<h2>Compare configs</h2>{note}<ul>{items}</ul>"


def campaign(warehouse: Warehouse, name: str) -> str:
    found = campaigns(warehouse)
    if name not in found:
        return campaign_without_valid_runs(warehouse, name)
    kind = found[name]
    run = queries.latest_valid_runs(warehouse, name).iloc[0]
    total = queries.run_row_count(warehouse, kind, run["dag_id"], run["run_id"])
    rows = kind.present(queries.shown_rows(warehouse, kind, run["dag_id"], run["run_id"], limit=MAX_ROWS))
    findings = queries.findings(warehouse, name, limit=MAX_FINDINGS)
    out = [
        f'<p class="muted"><a href="../">All campaigns</a></p><h1>{escape(name)}</h1>',
        f'<p class="muted">kind {escape(kind.name)}; warehouse {escape(where(warehouse))}</p>',
        f'<h2>Latest valid run</h2><p><a href="{escape(run_href(run["dag_id"], run["run_id"]))}" target="_top">'
        f"{escape(str(run['run_id']))}</a> · night {escape(str(run['night']))} · host {escape(str(run['host']))}"
        f" · GPU {escape(str(run['gpu_model']))} · {int(run['rows_loaded'] or 0)} rows · ",
        f"verdict: {verdict(run)}</p>",
        _compare_link(warehouse, name, found),
        _latest_judged(warehouse, name, run),
        table(rows, total=total),
    ]
    out.append(charts_pages.sections(warehouse, kind, name, run, findings, run_href))
    if kind.trends() or kind.measures is not None:  # the trend charts: bounded in runs (and cases)
        valid = queries.run_counts(warehouse).set_index("campaign")
        count = int(valid.loc[name]["valid"]) if name in valid.index else 0
        if count > queries.TREND_RUNS:
            out.append(f'<p class="muted showing">trends show the newest {queries.TREND_RUNS} of {count} runs</p>')
        if (cases := queries.trend_case_count(warehouse, name)) > queries.TREND_CASES:
            out.append(f'<p class="muted showing">trends show the first {queries.TREND_CASES} of {cases} cases</p>')
    out.append("<h2>Regressions</h2>")
    if len(findings):
        rank = sorted(
            range(len(findings)),
            key=lambda i: (_natural((findings["case_key"].iloc[i], None)), str(findings["metric"].iloc[i])),
        )
        rank.sort(key=lambda i: str(findings["night"].iloc[i]), reverse=True)  # newest night first, stable
        findings = findings.iloc[rank].reset_index(drop=True)
        listed, bisect_href = bisection_pages.with_bisect(warehouse, name, _with_interval(findings))
        links = {"run_id": lambda r: run_href(r.dag_id, r.run_id), "bisect": bisect_href}
        total = queries.finding_count(warehouse, name)
        out.append(table(_per_case(listed), links=links, total=total if total > len(findings) else None))
    elif run.get("verdict") in ("fine", "regressed", "suspected drift"):
        out.append(f'<p class="ok">none found in any run (the latest: {verdict(run)})</p>')
    else:
        out.append(f'<p class="unjudged">none recorded; the latest valid run was {verdict(run)}</p>')
    out.append(_decisions(warehouse, name))
    out.append(f"<h2>Searches</h2>{search_pages.listing(warehouse, lambda dag_id: True, name, prefix='../')}")
    return "".join(out)


def _compare_link(warehouse: Warehouse, name: str, found: dict[str, ResultKind]) -> str:
    """A link to the comparison of this campaign's configs beside those of its kind on its host."""
    for sides in compare_pages.groups(warehouse, found, specs()[0], set(found), only=name):
        link = escape(compare_pages.href(sides, prefix="../"))
        return f'<p>Compare configs side by side: <a href="{link}">{escape(" vs ".join(sides))}</a></p>'
    return ""


def _latest_judged(warehouse: Warehouse, name: str, run: Any) -> str:
    """When the latest valid run was not judged (a manual run), the verdict of the newest run that was: a regression
    found last night stays on the page's first lines."""
    if run.get("verdict") in ("fine", "regressed", "suspected drift"):
        return ""
    judged = queries.latest_judged_run(warehouse, name)
    if not len(judged):
        return ""
    last = judged.iloc[0]
    return (
        f'<p>The newest judged run, <a href="{escape(run_href(last["dag_id"], last["run_id"]))}" target="_top">'
        f"{escape(str(last['run_id']))}</a> (night {escape(str(last['night']))}): {verdict(last)}</p>"
    )


def _with_interval(findings: pd.DataFrame) -> pd.DataFrame:
    """The findings as the table shows them: the change with its 95 % interval (the ratio tonight / baseline, from
    the repeats) where the run had repeats, else the change alone with the z-score it was judged by."""
    out = findings.drop(columns=["ci_low", "ci_high", "z_score"])

    def change(r: Any) -> str:
        text = f"{100 * r.relative_change:+.1f}%"
        if _known(r.ci_low) and _known(r.ci_high):
            return f"{text} (95 % CI {100 * (r.ci_low - 1):+.1f}% to {100 * (r.ci_high - 1):+.1f}%)"
        return f"{text} (z {r.z_score:.1f}; one value: no interval)" if _known(r.z_score) else text

    out["relative_change"] = [change(r) for r in findings.itertuples(index=False)]
    return out.rename(columns={"relative_change": "change"})


def _decisions(warehouse: Warehouse, name: str) -> str:
    """Who decided what after the campaign's regressed or drifting nights (regressions.decide), newest first."""
    if not warehouse.has("decisions"):
        return ""
    found = queries.decisions(warehouse, name)
    if not len(found):
        return ""
    found["decided_by"] = [by if isinstance(by, str) and by else "(nobody: the default)" for by in found["decided_by"]]
    shown = found[["night_at", "verdict", "decision", "reason", "decided_by", "decided_at", "run_id"]]
    return f"<h2>Decisions</h2>{table(shown.copy())}"


def _per_case(findings: pd.DataFrame) -> pd.DataFrame:
    """One row per run and case: the metrics of one case move together (a kernel's us_per_token and tok_per_s are
    one change seen twice), so each case is listed once with every metric's change; its first metric's bisect."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in findings.to_dict("records"):
        said = f"{r['metric']} {r['value']:.4g} vs {r['baseline_mean']:.4g}: {r['change']}"
        key = (str(r["run_id"]), str(r["case_key"]))
        if key in rows:
            rows[key]["changes"] += f"; {said}"
            if r["bisect"] and not rows[key]["bisect"]:  # the link goes with the metric it was made for
                rows[key].update(bisect=r["bisect"], metric=r["metric"])
        else:
            keep = ("dag_id", "run_id", "night", "case_key", "metric", "bisect")
            rows[key] = {**{k: r[k] for k in keep}, "changes": said}
    import pandas as pd

    frame = pd.DataFrame(
        list(rows.values()), columns=["dag_id", "run_id", "night", "case_key", "metric", "changes", "bisect"]
    )
    return frame


def _known(value: Any) -> bool:
    return value is not None and value == value  # NULL comes back as None or NaN


def campaign_without_valid_runs(warehouse: Warehouse, name: str) -> str:
    """A campaign that has a spec, or runs that are not valid, but no valid run: what there is to say."""
    defined, _ = specs()
    spec = defined.get(name)
    newest = queries.campaign_runs(warehouse, name)
    if spec is None and not len(newest):
        raise KeyError(name)
    out = [f'<p class="muted"><a href="../">All campaigns</a></p><h1>{escape(name)}</h1>']
    if spec is not None:
        out.append(
            f'<p class="muted">kind {escape(spec.kind)}; schedule {escape(spec.schedule or "manual only")}; '
            f"host {escape(spec.host)}; DAG {escape(spec.dag_id)}</p>"
        )
        if spec.description:
            out.append(f"<p>{escape(spec.description)}</p>")
    if len(newest):
        last = newest.iloc[0]
        status = escape(str(last["status"]))
        if last["status"] == "ok" and last["rows_ok"] == 0:  # finished, but every row noisy, throttled or contended
            status = f"finished, but none of its {int(last['rows_loaded'])} rows was judged ok (see their validity)"
        out.append(
            f'<p>No valid run yet. The newest run, <a href="{escape(run_href(last["dag_id"], last["run_id"]))}" '
            f'target="_top">{escape(str(last["run_id"]))}</a>, is {status}'
            f"{': ' + escape(clip(str(last['detail']))) if last['detail'] else ''}; {verdict(last)}.</p>"
        )
    else:
        out.append(
            f'<p class="empty">No run in the warehouse yet: trigger <code>{escape(dag_id_of(name))}</code> in '
            "Airflow, or <code>bench run</code> it.</p>"
        )
    out.append('<p class="unjudged">not judged (no valid run)</p>')
    return "".join(out)


def _natural(item: tuple[Any, Any]) -> list[Any]:
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", str(item[0])) if t]
