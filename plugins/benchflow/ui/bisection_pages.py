"""A bisection's own section of its search page (:mod:`benchflow.ui.search_pages`): the confirm step's evidence and
the probe chain (commit, verdict, the ratio against good and bad with its 95 % interval, where the values came from,
a link to each probe's DAG run); and the "bisect" link a regression finding offers: the bisect DAG's trigger form,
pre-filled, or the page of the automatic bisection that covers it."""

from __future__ import annotations

import json
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from benchflow.searches import bisect_campaign
from benchflow.ui.markup import dag_id_of, run_href, search_href
from benchflow.warehouse import queries

if TYPE_CHECKING:
    import pandas as pd

    from benchflow.warehouse import Warehouse

BISECT_DAG = bisect_campaign.DAG_ID
VERDICTS = {"same_as_good": "same as good", "same_as_bad": "same as bad", "unknown": "unknown"}


def trigger_href(campaign: str, case: str, metric: str, good: str, bad: str) -> str:
    """The bisect DAG's trigger form with its conf filled in (the UI reads ``conf`` from the query string)."""
    conf = {"campaign": campaign, "case": case, "metric": metric, "good": good, "bad": bad}
    return f"/dags/{BISECT_DAG}/trigger/single?{urlencode({'conf': json.dumps(conf)})}"


def _ratio(value: Any, low: Any, high: Any) -> str:
    if value is None or value != value:  # None or NaN
        return ""
    return f"{value:.3f} ({low:.3f}–{high:.3f})"


def _short(sha: Any) -> str:
    return str(sha)[:12] if sha is not None and sha == sha else ""


def with_bisect(warehouse: Warehouse, campaign: str, findings: pd.DataFrame) -> tuple[pd.DataFrame, Any]:
    """The findings with a ``bisect`` column, and the link each of its cells gets: the bisect DAG's trigger
    form for that case and metric, from the last good run's payload commit to the regressed run's (only where
    both commits are known: a git payload), or the page of the automatic bisection that covers it."""
    commits = (
        queries.finding_commits(warehouse, campaign) if len(findings) and warehouse.has("payload_commit") else None
    )
    known = {} if commits is None else {str(r.run_id): (r.good, r.bad) for r in commits.itertuples(index=False)}
    hrefs: dict[tuple[str, str, str], str] = {}
    for record in findings.itertuples(index=False):
        good, bad = known.get(str(record.run_id), (None, None))
        if isinstance(good, str) and isinstance(bad, str):
            key = (str(record.run_id), str(record.case_key), str(record.metric))
            hrefs[key] = trigger_href(campaign, key[1], key[2], good, bad)
    started = _auto_bisections(warehouse, campaign) if len(findings) else {}
    hrefs |= {key: search_href(BISECT_DAG, run_id, "../") for key, run_id in started.items()}
    out = findings.copy()
    out["bisect"] = [
        ("bisection" if key in started else "bisect" if key in hrefs else "")
        for key in ((str(r.run_id), str(r.case_key), str(r.metric)) for r in findings.itertuples(index=False))
    ]
    return out, lambda r: hrefs[(str(r.run_id), str(r.case_key), str(r.metric))]


def _auto_bisections(warehouse: Warehouse, campaign: str) -> dict[tuple[str, str, str], str]:
    """The findings an automatic bisection covers: its bench_bisect run (the finding's own bisection)."""
    if not warehouse.has("auto_bisections"):
        return {}
    found = queries.auto_bisection_links(warehouse, campaign)
    return {(str(r.run_id), str(r.case_key), str(r.metric)): str(r.bisect_run_id) for r in found.itertuples()}


def section(warehouse: Warehouse, dag_id: str, run_id: str) -> tuple[str, str] | None:
    """A bisection's title and its own section: good and bad, the confirm step's evidence, the probe runs under way
    and the probe chain oldest commit first; None when the warehouse has no such bisection."""
    found = queries.bisection(warehouse, dag_id, run_id) if warehouse.has("bisections") else []
    if not len(found):
        return None
    row = found.iloc[0]  # type: ignore[union-attr]
    result = json.loads(row["result"])
    title = f"Bisection of {row['campaign']}: {row['case_key']} {row['metric']}"
    out = [
        f'<p class="muted">good {escape(_short(row["good"]))} · bad {escape(_short(row["bad"]))} · '
        f"{int(row['reused'])} commits reused from earlier runs</p>"
    ]
    if result.get("confirmation"):
        confirmation = result["confirmation"]
        ratio = confirmation.get("ratio") or {}
        spread = _ratio(ratio.get("ratio"), ratio.get("low"), ratio.get("high"))
        out.append(
            f"<h2>Confirm</h2><p>bad / good = {escape(spread)}: {escape(str(confirmation['reason']))} "
            f'<span class="muted">({escape(str(confirmation["test"]))})</span></p>'
        )
    for note in result.get("notes") or []:
        out.append(f'<p class="muted">note: {escape(str(note))}</p>')
    out.append(_under_way(result.get("planned") or [], str(row["campaign"])))
    out.append("<h2>Probe chain</h2>")
    out.append(chain_table(queries.bisection_probes(warehouse, dag_id, run_id)))
    return title, "".join(out)


def _under_way(planned: list[dict[str, Any]], campaign: str) -> str:
    """The probe runs of the round under way: each commit and its campaign run (its page shows queued or
    running), before any value of theirs is in."""
    if not planned:
        return ""
    dag_id = dag_id_of(campaign)
    rows = "".join(
        f'<tr><td class="text"><code>{escape(_short(p.get("sha")))}</code></td><td>{int(p.get("round") or 0)}</td>'
        f'<td class="text"><a href="{escape(run_href(dag_id, str(p.get("run_id"))))}" target="_top">'
        f"{escape(str(p.get('run_id')))}</a></td></tr>"
        for p in planned
    )
    head = '<tr><th class="text">commit</th><th>round</th><th class="text">probe run (its state in Airflow)</th></tr>'
    return f"<h2>Probe runs under way</h2><table><thead>{head}</thead><tbody>{rows}</tbody></table>"


def chain_table(probes: pd.DataFrame) -> str:
    if not len(probes):
        return '<p class="empty">(nothing measured yet)</p>'
    rows = []
    for p in probes.itertuples(index=False):
        runs = json.loads(p.probe_runs or "[]")
        links = " ".join(f'<a href="{escape(run_href(p.probe_dag_id, r))}" target="_top">{escape(r)}</a>' for r in runs)
        source = f"reused: {escape(str(p.reused_from))}" if isinstance(p.reused_from, str) else "probed"
        cells = [
            f"<td>{int(p.position)}</td>",
            f'<td class="text"><code>{escape(_short(p.sha))}</code></td>',
            f'<td class="text">{escape(VERDICTS.get(str(p.verdict), str(p.verdict)))}</td>',
            f"<td>{int(p.n)}</td>",
            f"<td>{escape(_ratio(p.ratio, p.ratio_low, p.ratio_high))}</td>",
            f"<td>{escape(_ratio(p.ratio_bad, p.ratio_bad_low, p.ratio_bad_high))}</td>",
            f'<td class="text">{escape(str(p.reason or ""))}</td>',
            f'<td class="text">{source}</td>',
            f'<td class="text">{links}</td>',
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(
        f'<th class="text">{h}</th>' if i > 0 else f"<th>{h}</th>"
        for i, h in enumerate(
            ["#", "commit", "verdict", "n", "vs good (95 % CI)", "vs bad (95 % CI)", "why", "values", "DAG runs"]
        )
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
