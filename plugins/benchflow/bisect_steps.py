"""The steps of the bisect DAG (``dags/bisect.py``): behaviour only, the wiring is there.

A bisection is triggered with ``{campaign, case, metric, good, bad}``; the campaign must take its payload from
git. Its state is :class:`benchflow.analysis.bisect_search.Bisection` as JSON in XCom, handed from step to step:

* :func:`start` checks the conf field by field (each error names its field), resolves good and bad to commits,
  lists the commits between them, and seeds every commit that earlier valid runs of the campaign measured
  (same payload commit, same GPU model, ``ok`` rows of the case and metric): those count as probes, free.
* :func:`plan` says which commits the next round probes, each as the kwargs of one mapped
  ``TriggerDagRunOperator``: the campaign's own DAG, its conf the payload ref (the commit), only the case (the
  kind's ``case_conf``, ``repeats`` times) and, for a campaign with several hosts, the host of that probe. So a
  probe leases its host, keeps the campaign's timeouts and runs its teardowns like any campaign run.
* :func:`record` reads each probe run's values from the warehouse (a failed or invalid run gives none: the
  commit is skipped) and writes the bisection's rows.
* :func:`decide` writes the answer: the first bad commit with its ratio against its parent, the narrowest range
  the budget allowed, or ``not_reproduced`` with the confirm step's evidence.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from benchflow.analysis.bisect_search import Bisection, Budget
from benchflow.params import ConfError, check_fields

if TYPE_CHECKING:
    from benchflow.spec import CampaignSpec
    from benchflow.warehouse import Warehouse

MAX_ROUNDS = 10  # narrow rounds the DAG has (confirm is one more); a bisection's own budget may stop it sooner
POKE_S = 5.0  # how often a probe's wait looks at the campaign run
STATE_KEY = "state"
_CASE_RE = re.compile(r"^[A-Za-z0-9_.,=:/+-]{1,200}$")


# -- the conf ------------------------------------------------------------------------------------------


PARAMS: dict[str, tuple[Any, dict[str, Any]]] = {
    "campaign": (
        "",
        {
            "type": "string",
            "pattern": r"^[a-z][a-z0-9_]{0,62}$",
            "title": "Campaign",
            "description": "The campaign whose payload regressed (include/campaigns/<name>.yaml).",
        },
    ),
    "case": (
        "",
        {
            "type": "string",
            "pattern": _CASE_RE.pattern,
            "title": "Case",
            "description": "The regressed case as the warehouse names it, e.g. m=64.",
        },
    ),
    "metric": (
        "",
        {
            "type": "string",
            "pattern": r"^[a-z][a-z0-9_]{0,62}$",
            "title": "Metric",
            "description": "The trend metric that regressed, e.g. us_per_token.",
        },
    ),
    "good": (
        "",
        {
            "type": "string",
            "pattern": r"^[A-Za-z0-9_][A-Za-z0-9._/@^~{}+-]{0,255}$",
            "title": "Good ref",
            "description": "A commit (or ref) of the payload that measured well.",
        },
    ),
    "bad": (
        "",
        {
            "type": "string",
            "pattern": r"^[A-Za-z0-9_][A-Za-z0-9._/@^~{}+-]{0,255}$",
            "title": "Bad ref",
            "description": "A later commit (or ref) that measured worse.",
        },
    ),
    "repeats": (
        5,
        {
            "type": "integer",
            "minimum": 2,
            "maximum": 20,
            "title": "Repeats per probe",
            "description": "Values of the case each probe run measures. Unit: repeats.",
        },
    ),
    "max_samples": (
        15,
        {
            "type": "integer",
            "minimum": 2,
            "maximum": 60,
            "title": "Values per commit at most",
            "description": "An unknown commit is probed again until it has this many. Unit: values.",
        },
    ),
    "min_change": (
        0.05,
        {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "title": "Smallest change",
            "description": "Bad must be worse than good by at least this. Unit: a fraction.",
        },
    ),
    "max_probes": (
        40,
        {
            "type": "integer",
            "minimum": 2,
            "maximum": 500,
            "title": "Probe budget",
            "description": "Probe runs at most, the confirm step's two included. Unit: runs.",
        },
    ),
    "max_hours": (
        6.0,
        {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 168,
            "title": "Time budget",
            "description": "No new round starts after this. Unit: hours.",
        },
    ),
    "probe_conf": (
        {},
        {
            "type": "object",
            "title": "Extra probe conf",
            "description": "Added to every probe run's conf (for a kind that cannot narrow a run "
            "to one case by itself).",
        },
    ),
}


def checked_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """The conf with its defaults, each field against its schema; :class:`ConfError` names the first bad one."""
    out = check_fields(conf, PARAMS, "a bisection")
    if out["max_samples"] < out["repeats"]:
        raise ConfError("max_samples", f"{out['max_samples']} is fewer than repeats ({out['repeats']})")
    return out


def campaign_spec(name: str) -> CampaignSpec:
    from benchflow.spec import SpecError, load_all

    specs, errors = load_all()
    for spec in specs:
        if spec.name == name:
            if spec.git_payload is None:
                raise ConfError("campaign", f"{name!r} ships the folder kernels/{spec.payload}/, not a git payload")
            return spec
    for error in errors:
        if isinstance(error, SpecError) and error.path.stem == name:
            raise ConfError("campaign", f"the spec of {name!r} is invalid: {error}")
    raise ConfError("campaign", f"no campaign {name!r} (known: {', '.join(sorted(s.name for s in specs))})")


def probe_conf(spec: CampaignSpec, conf: dict[str, Any], sha: str, host: str | None) -> dict[str, Any]:
    """The conf of the campaign run that probes ``sha``: only the case, ``repeats`` times, at that commit."""
    from benchflow.params import HOST, PAYLOAD_REF

    kind = spec.result_kind
    out: dict[str, Any] = {}
    if kind.case_conf is not None:
        try:
            out.update(kind.case_conf(conf["case"], conf["repeats"]))
        except ValueError as exc:
            raise ConfError("case", str(exc)) from None
    out.update(conf.get("probe_conf") or {})
    out[PAYLOAD_REF] = sha
    if host is not None:
        out[HOST] = host
    return out


# -- the steps -----------------------------------------------------------------------------------------


def start(conf: dict[str, Any], warehouse: Warehouse | None = None) -> dict[str, Any]:
    """Check the conf, list the commits, seed what earlier runs measured; the state as JSON."""
    from benchflow import payloads
    from benchflow.params import check_conf

    conf = checked_conf(dict(conf))
    spec = campaign_spec(conf["campaign"])
    kind = spec.result_kind
    if conf["metric"] not in kind.trends():
        raise ConfError("metric", f"{conf['metric']!r} is not a trend metric of {kind.name} (known: {kind.trends()})")
    git = spec.git_payload
    assert git is not None
    try:
        good = payloads.resolve(git.repo, conf["good"])
    except payloads.PayloadError as exc:
        raise ConfError("good", str(exc)) from None
    try:
        bad = payloads.resolve(git.repo, conf["bad"])
    except payloads.PayloadError as exc:
        raise ConfError("bad", str(exc)) from None
    try:
        commits = payloads.commits_between(git.repo, good, bad, git.path)
    except payloads.PayloadError as exc:
        raise ConfError("bad", str(exc)) from None
    if not commits or commits[-1] != bad:
        raise ConfError("bad", f"{bad[:12]} does not change the payload folder {git.path!r} after {good[:12]}")
    measured = set(measuring(spec, dict.fromkeys(conf["probe_conf"]), conf["case"], conf["repeats"]))
    if fixed := sorted(set(conf["probe_conf"]) - measured):
        why = "the bisection sets them itself: the commit, the host and the case (its own field)"
        raise ConfError("probe_conf", f"may not set {', '.join(fixed)}: {why}")
    sample = probe_conf(spec, conf, bad, spec.host if len(spec.host_ids) > 1 else None)
    try:  # the campaign's own preflight would refuse it: refuse it here, before any probe
        check_conf(dict(spec.benchmark.args), bool(spec.configs), sample, dict(kind.form), ["payload_ref", "host"])
    except ValueError as exc:
        raise ConfError("probe_conf", f"the campaign refuses the probe conf {sample}: {exc}") from None
    bisection = Bisection(
        good=good,
        commits=commits,
        better=kind.better(conf["metric"]),
        repeats=conf["repeats"],
        max_samples=conf["max_samples"],
        parallel=len(spec.host_ids),
        min_change=conf["min_change"],
        budget=Budget(probes=conf["max_probes"], rounds=1 + MAX_ROUNDS, seconds=conf["max_hours"] * 3600.0),
        meta={
            "campaign": spec.name,
            "campaign_dag_id": spec.dag_id,
            "case": conf["case"],
            "metric": conf["metric"],
            "good_sha": good,
            "bad_sha": bad,
            "conf": conf,
            "hosts": spec.host_ids,
            "runs": {},
            "gpu_model": None,
        },
    )
    if warehouse is not None:
        reuse(bisection, warehouse)
    return bisection.to_json()


def reuse(bisection: Bisection, warehouse: Warehouse) -> list[str]:
    """Seed the inner commits that an earlier valid run measured the same way: the GPU model of the campaign's latest
    valid run, the same spec, the same trigger conf but for what only selects the case (:func:`measuring`), at least
    ``repeats`` values and no more spread among them than the spec's ``validity.repeat_cv_max``. The latest such
    run of a commit is used, alone; every run passed over is named in ``meta["not_reused"]``, with why."""
    from benchflow.warehouse import queries

    meta = bisection.meta
    try:
        latest = queries.latest_valid_runs(warehouse, meta["campaign"])
    except Exception:  # a warehouse never loaded has no tables yet: nothing to reuse
        return []
    if not len(latest):
        return []
    gpu_model = str(latest["gpu_model"].iloc[0])
    meta["gpu_model"] = gpu_model
    spec = campaign_spec(meta["campaign"])
    wanted = measuring(spec, probe_conf(spec, meta["conf"], bisection.bad, None), meta["case"], bisection.repeats)
    spec_hash, inner = spec.spec_hash(), bisection.commits[:-1]  # the hash once, not once a run
    found = queries.commit_samples(warehouse, meta["campaign"], meta["case"], meta["metric"], gpu_model, inner)
    usable: dict[str, tuple[str, list[float]]] = {}
    skipped = meta.setdefault("not_reused", [])
    for (sha, run_id), rows in found.groupby(["payload_commit", "run_id"], sort=False):
        values = [float(v) for v in rows["value"]]
        why = _unlike(spec, spec_hash, wanted, rows.iloc[0], values, bisection.repeats, meta["case"])
        if why:
            skipped.append(f"{run_id} ({str(sha)[:12]}): {why}")
        else:
            usable[str(sha)] = (str(run_id), values)  # oldest first: the latest run of a commit wins
    for sha, (run_id, values) in usable.items():
        bisection.seed(sha, values, run_id)
        meta["runs"].setdefault(sha, []).append(run_id)
    return list(usable)


def measuring(spec: CampaignSpec, conf: dict[str, Any], case: str, repeats: int) -> dict[str, Any]:
    """What of a run's trigger conf changes what it measures: all of it but the commit, the host and what only
    narrows the run to the case (the kind's ``case_conf``: ``m_list`` for a kernel)."""
    kind = spec.result_kind
    selecting = {"payload_ref", "host", "repeats"}
    if kind.case_conf is not None:
        selecting |= set(kind.case_conf(case, repeats))
    return {k: v for k, v in conf.items() if k not in selecting}


def _unlike(
    spec: CampaignSpec, spec_hash: str, wanted: dict[str, Any], run: Any, values: list[float], repeats: int, case: str
) -> str:
    """Why an earlier run's values are not what a probe would measure ("" when they are)."""
    import json
    import statistics

    if run["spec_hash"] != spec_hash:
        return "the campaign's spec has changed since"
    conf = measuring(spec, json.loads(run["conf"] or "{}"), case, repeats)
    if conf != wanted:
        differ = sorted(k for k in set(conf) | set(wanted) if conf.get(k) != wanted.get(k))
        return f"its conf measured something else ({', '.join(differ)})"
    if len(values) < repeats:
        return f"{len(values)} values, fewer than the {repeats} repeats asked for"
    mean = statistics.fmean(values)
    spread = statistics.stdev(values) / mean if mean > 0 else math.inf  # len(values) >= repeats >= 2
    limit = spec.validity.repeat_cv_max
    if spread > limit:
        return f"its values vary {spread:.0%} (coefficient of variation; limit {limit:.0%}, validity.repeat_cv_max)"
    return ""


def run_id_for(bisect_run_id: str, round_number: int, sha: str) -> str:
    """The probe's campaign run id: readable, and the same on a retry of the same round."""
    tag = hashlib.sha256(bisect_run_id.encode()).hexdigest()[:8]
    return f"bisect_{tag}_r{round_number}_{sha[:12]}"


def plan(state: dict[str, Any], bisect_run_id: str, now: float | None = None) -> dict[str, Any]:
    """The next round: ``{"state": …, "probes": [TriggerDagRunOperator kwargs, …]}`` (no probes: over)."""
    bisection = Bisection.from_json(state)
    meta = bisection.meta
    spec = campaign_spec(meta["campaign"])
    picks = bisection.next_round(time.time() if now is None else now)
    hosts = meta["hosts"]
    probes = []
    for i, sha in enumerate(picks):
        host = hosts[i % len(hosts)] if len(hosts) > 1 else None
        run_id = run_id_for(bisect_run_id, len(bisection.rounds), sha)  # confirm is round 1, as in the chain
        meta["runs"].setdefault(sha, []).append(run_id)
        probes.append(
            {
                "trigger_dag_id": meta["campaign_dag_id"],
                "trigger_run_id": run_id,
                "conf": probe_conf(spec, meta["conf"], sha, host),
            }
        )
    return {"state": bisection.to_json(), "probes": probes}


def record(planned: dict[str, Any] | None, warehouse: Warehouse, bisect_dag_id: str, bisect_run_id: str) -> dict:
    """Each probe's values (none for a failed or invalid run), then the bisection's rows; the new state."""
    from benchflow.warehouse import queries

    assert planned is not None
    bisection = Bisection.from_json(planned["state"])
    meta = bisection.meta
    for probe in planned["probes"]:
        run_id, sha = probe["trigger_run_id"], probe["conf"]["payload_ref"]
        try:
            found = queries.probe_samples(warehouse, meta["campaign_dag_id"], run_id, meta["case"], meta["metric"])
        except Exception:  # the warehouse has no tables yet: the probe loaded nothing
            found = None
        values: list[float] = []
        if found is not None and len(found):
            if set(found["payload_commit"]) != {sha}:
                raise RuntimeError(f"probe run {run_id} shipped {set(found['payload_commit'])}, not {sha}")
            values = [float(v) for v in found["value"]]
        bisection.record(sha, values)
    save(bisection, warehouse, bisect_dag_id, bisect_run_id)
    return bisection.to_json()


def save(bisection: Bisection, warehouse: Warehouse, dag_id: str, run_id: str) -> dict[str, Any]:
    """The bisection's rows as it stands: at its start, when a round is planned and when one is recorded, so the
    Benchmarks view shows it from its first second, with the probe runs under way."""
    from benchflow.warehouse import bisection_writes

    result = bisection.result()
    runs = bisection.meta.get("runs", {})
    result["planned"] = [
        {"sha": sha, "run_id": runs[sha][-1], "round": len(bisection.rounds)}
        for sha in bisection.outstanding
        if runs.get(sha)
    ]
    started = datetime.fromtimestamp(bisection.started_at, UTC) if bisection.started_at else None
    bisection_writes.save(warehouse, dag_id, run_id, bisection.meta, result, started)
    return result


def decide(state: dict[str, Any], warehouse: Warehouse, dag_id: str, run_id: str, now: float | None = None) -> dict:
    """The answer from the last state: no round left to run (the budget, or the search is over)."""
    bisection = Bisection.from_json(state)
    if bisection.status() == "running" and not bisection.outstanding:
        # the last plan found nothing to probe: this records why (a budget spent; the DAG's rounds are the
        # rounds budget, so no round is ever planned here)
        picks = bisection.next_round(time.time() if now is None else now)
        if picks:
            raise RuntimeError(f"a round was left to run after the last round of the DAG: {picks}")
    return save(bisection, warehouse, dag_id, run_id)
