"""Which bisections a night's check starts by itself (a campaign with ``regressions.bisect`` and a payload from git).

A regression finding names its range as the commit of the first night that found it regressed (bad) and the commit
of the night before (good); a change point in the worse direction, the commits around it (the last night before the
new level, the first at it).
Suspects are grouped by commit range, largest change first; a night starts at most ``per_night`` ranges, and a
range gets one bisection whichever night saw it first: its ``bench_bisect`` run id is derived from the campaign
and the two commits, so a second detection finds it recorded (and Airflow, asked to trigger it again, skips it).
Every suspect is recorded in ``auto_bisections`` with the run it links to, started or not.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benchflow.searches.bisect_campaign import DAG_ID as BISECT_DAG_ID
from benchflow.spec import AutoBisect
from benchflow.warehouse import queries

if TYPE_CHECKING:
    from benchflow.records import Verdict
    from benchflow.spec import CampaignSpec
    from benchflow.warehouse import Warehouse

_SHA = re.compile(r"^[0-9a-f]{7,64}$")


@dataclass(frozen=True)
class Suspect:
    """A commit range that a finding or a change point of one case and metric points at."""

    case_key: str
    metric: str
    reason: str  # "regression" or "change point at <night>"
    change: float  # relative, in the worse direction: 0.2 = 20 % worse
    good: str
    bad: str

    @property
    def range(self) -> tuple[str, str]:
        return self.good, self.bad


def bisect_run_id(campaign: str, good: str, bad: str) -> str:
    """The one ``bench_bisect`` run of a campaign's commit range (Airflow's run id characters only)."""
    digest = hashlib.sha256(f"{campaign}\0{good}\0{bad}".encode()).hexdigest()[:8]
    return f"auto__{campaign}__{good[:12]}_{bad[:12]}_{digest}"


def suspects(verdict: Verdict, commits: dict[tuple[str, str], tuple[str | None, str | None]]) -> list[Suspect]:
    """The night's findings and worse change points with both commits known and different. ``commits`` maps a
    case and metric to a finding's range (:func:`finding_ranges`)."""
    found = []
    for f in verdict.findings:
        good, bad = commits.get((f.case_key, f.metric), (None, None))
        change = f.relative_change if f.direction == "lower_is_better" else -f.relative_change
        found.append(Suspect(f.case_key, f.metric, "regression", float(change), str(good), str(bad)))
    for case_key, metric, point, _ in verdict.change_points:
        if point.worse:
            change = abs(point.ratio - 1)
            reason = f"change point at {point.night}"
            found.append(Suspect(case_key, metric, reason, change, str(point.good_commit), str(point.bad_commit)))
    return [s for s in found if _SHA.match(s.good) and _SHA.match(s.bad) and s.good != s.bad]


def finding_ranges(
    warehouse: Warehouse, dag_id: str, run_id: str, nights: int
) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    """Each case and metric of a scheduled night: the range a regression of it names. Walking back from tonight
    over the nights that found it regressed too, bad is the commit of the first of them and good the commit of
    the night before: a regression that lasts several nights names the same range every night."""

    tonight = queries.run_means(warehouse, dag_id, run_id)
    if not len(tonight):
        return {}
    first = tonight.iloc[0]
    series = queries.nightly_series(warehouse, str(first["campaign"]), str(first["gpu_model"]), first["t"], nights)
    flagged = {
        (str(r.run_id), str(r.case_key), str(r.metric)) for r in queries.finding_keys(warehouse, dag_id).itertuples()
    }
    out: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for (case_key, metric), rows in series.groupby(["case_key", "metric"], sort=False):
        runs = list(rows["run_id"].astype(str))
        commits = [c if isinstance(c, str) and c else None for c in rows["commit"]]
        if not runs or runs[-1] != run_id:
            continue
        start = len(runs) - 1
        while start > 0 and (runs[start - 1], str(case_key), str(metric)) in flagged:
            start -= 1
        if start > 0:
            out[(str(case_key), str(metric))] = (commits[start - 1], commits[start])
    return out


def choose(runs: dict[tuple[str, str], str], known: set[str], per_night: int) -> dict[tuple[str, str], str]:
    """The ranges a night links its suspects to (``runs``: each range's bisection run, largest change first): every
    range bisected on an earlier night (``known``), and at most ``per_night`` new ones, the largest not bisected yet.
    A range already bisected never takes a slot, so a newer, smaller regression is bisected the night it appears."""
    fresh = [r for r in runs if runs[r] not in known][:per_night]
    return {r: run for r, run in runs.items() if run in known or r in fresh}


def plan(
    spec: CampaignSpec, warehouse: Warehouse, dag_id: str, run_id: str, verdict: Verdict, asked: bool = False
) -> list[dict[str, Any]]:
    """Record the night's suspects and return the bisections to trigger now (``trigger_run_id`` and ``conf``
    each, for a mapped ``TriggerDagRunOperator``): none for a campaign without ``regressions.bisect``, unless a
    person ``asked`` for one (then within the default budget)."""

    budget = spec.regressions.bisect or (AutoBisect() if asked else None)
    if budget is None or not (verdict.findings or verdict.change_points):
        return []
    # a regression's first night is looked for as far back as the baseline's nights
    found = suspects(verdict, finding_ranges(warehouse, dag_id, run_id, spec.regressions.lookback + 1))
    ranges: dict[tuple[str, str], Suspect] = {}
    for suspect in sorted(found, key=lambda s: -s.change):
        ranges.setdefault(suspect.range, suspect)
    runs = {r: bisect_run_id(spec.name, *r) for r in ranges}
    known = queries.recorded_bisections(warehouse, list(runs.values()))
    chosen = choose(runs, known, budget.per_night)
    limits = spec.regressions.for_gpu(queries.run_gpu_model(warehouse, dag_id, run_id))
    triggers = []
    for bisect_range, bisect_run in chosen.items():
        if bisect_run in known:
            continue
        top = ranges[bisect_range]
        conf = {
            "campaign": spec.name,
            "case": top.case_key,
            "metric": top.metric,
            "good": top.good,
            "bad": top.bad,
            "max_probes": budget.max_probes,
            "max_hours": budget.max_hours,
            "min_change": round(min(limits.min_change, top.change / 2), 4),
        }
        triggers.append({"trigger_run_id": bisect_run, "conf": conf})
    started = {t["trigger_run_id"] for t in triggers}
    rows = [(s, chosen.get(s.range, ""), chosen.get(s.range, "") in started) for s in found]
    warehouse.record_auto_bisections(dag_id, run_id, BISECT_DAG_ID, rows)
    return triggers
