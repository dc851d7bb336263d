"""The bisection as a search strategy: which payload commit made a campaign's case slower.

Triggered with ``{campaign, case, metric, good, bad}``; the campaign must take its payload from git. The algorithm is
:class:`benchflow.searches.bisection.Bisection`; this module is its campaign side, for the search engine
(:mod:`benchflow.searches.engine`):

* :meth:`BisectStrategy.begin` checks the conf field by field (each error names its field), resolves good and bad to
  commits, lists the commits between them, and seeds every commit that earlier valid runs of the campaign measured
  (same payload commit, same GPU model, ``ok`` rows of the case and metric): those count as probes, free.
* a probe of a commit is a run of the campaign's DAG at that commit, only the case (the kind's ``case_conf``,
  ``repeats`` times), on one host of the pool;
* its values are read from the warehouse (a failed or invalid run gives none: the commit is skipped);
* the answer: the first bad commit with its ratio against its parent, the narrowest range the budget allowed, or
  ``not_reproduced`` with the confirm step's evidence.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from typing import TYPE_CHECKING, Any

from benchflow import payloads
from benchflow.params import HOST, PAYLOAD_REF, ConfError, check_conf, check_fields
from benchflow.searches import engine
from benchflow.searches.bisection import Bisection, Budget
from benchflow.searches.engine import MAX_HOURS_PARAM, Declared, Probe, Search, StrategyBase, campaign_param

if TYPE_CHECKING:
    from benchflow.spec import CampaignSpec
    from benchflow.warehouse import Warehouse

DAG_ID = "bench_bisect"
MAX_ROUNDS = 11  # rounds the DAG has, confirm's included; a bisection's own budget may stop it sooner
_CASE_RE = re.compile(r"^[A-Za-z0-9_.,=:/+-]{1,200}$")

PARAMS: dict[str, tuple[Any, dict[str, Any]]] = {
    "campaign": campaign_param("The campaign whose payload regressed (include/campaigns/<name>.yaml)."),
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
    "max_hours": MAX_HOURS_PARAM,
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


def probe_conf(spec: CampaignSpec, conf: dict[str, Any], sha: str, host: str | None) -> dict[str, Any]:
    """The conf of the campaign run that probes ``sha``: only the case, ``repeats`` times, at that commit."""
    kind = spec.result_kind
    out: dict[str, Any] = {}
    if kind.case_args:
        try:
            out.update(kind.case_conf(conf["case"], conf["repeats"]))
        except ValueError as exc:
            raise ConfError("case", str(exc)) from None
    out.update(conf.get("probe_conf") or {})
    out[PAYLOAD_REF] = sha
    if host is not None:
        out[HOST] = host
    return out


def _ends(spec: CampaignSpec, conf: dict[str, Any]) -> tuple[str, str, list[str]]:
    """Good and bad as commits, and the commits after good that change the payload folder (bad last)."""

    git = spec.git_payload
    assert git is not None
    found = {}
    for end in ("good", "bad"):
        try:
            found[end] = payloads.resolve(git.repo, conf[end])
        except payloads.PayloadError as exc:
            raise ConfError(end, str(exc)) from None
    good, bad = found["good"], found["bad"]
    try:
        commits = payloads.commits_between(git.repo, good, bad, git.path)
    except payloads.PayloadError as exc:
        raise ConfError("bad", str(exc)) from None
    if not commits or commits[-1] != bad:
        raise ConfError("bad", f"{bad[:12]} does not change the payload folder {git.path!r} after {good[:12]}")
    return good, bad, commits


def _check_probe_conf(spec: CampaignSpec, conf: dict[str, Any], bad: str) -> None:
    """The probe conf may not set what the bisection sets, and the campaign must accept it."""
    kind = spec.result_kind
    measured = set(measuring(spec, dict.fromkeys(conf["probe_conf"]), conf["case"], conf["repeats"]))
    if fixed := sorted(set(conf["probe_conf"]) - measured):
        why = "the bisection sets them itself: the commit, the host and the case (its own field)"
        raise ConfError("probe_conf", f"may not set {', '.join(fixed)}: {why}")
    sample = probe_conf(spec, conf, bad, spec.host if len(spec.host_ids) > 1 else None)
    try:  # the campaign's own preflight would refuse it: refuse it here, before any probe
        check_conf(dict(spec.benchmark.args), bool(spec.configs), sample, dict(kind.form), ["payload_ref", "host"])
    except ValueError as exc:
        raise ConfError("probe_conf", f"the campaign refuses the probe conf {sample}: {exc}") from None


def reuse(search: Search, bisection: Bisection, spec: CampaignSpec, warehouse: Warehouse) -> list[str]:
    """Seed the inner commits that an earlier valid run measured the same way: the GPU model of the campaign's latest
    valid run, the same spec, the same trigger conf but for what only selects the case (:func:`measuring`), at least
    ``repeats`` values and no more spread among them than the spec's ``validity.repeat_cv_max``. The latest such
    run of a commit is used, alone; every run passed over is named in ``facts["not_reused"]``, with why."""
    from benchflow.warehouse import queries  # the warehouse: a task's, never loaded at DAG parse

    facts = search.facts
    latest = queries.latest_valid_runs(warehouse, search.campaign)
    if not len(latest):
        return []
    gpu_model = str(latest["gpu_model"].iloc[0])
    facts["gpu_model"] = gpu_model
    case, metric = facts["case"], facts["metric"]
    wanted = measuring(spec, probe_conf(spec, search.conf, bisection.bad, None), case, bisection.repeats)
    spec_hash, inner = spec.spec_hash(), bisection.commits[:-1]  # the hash once, not once a run
    found = queries.commit_samples(warehouse, search.campaign, case, metric, gpu_model, inner)
    usable: dict[str, tuple[str, list[float]]] = {}
    skipped = facts.setdefault("not_reused", [])
    for (sha, run_id), rows in found.groupby(["payload_commit", "run_id"], sort=False):
        values = [float(v) for v in rows["value"]]
        why = _unlike(spec, spec_hash, wanted, rows.iloc[0], values, bisection.repeats, case)
        if why:
            skipped.append(f"{run_id} ({str(sha)[:12]}): {why}")
        else:
            usable[str(sha)] = (str(run_id), values)  # oldest first: the latest run of a commit wins
    for sha, (run_id, values) in usable.items():
        bisection.seed(sha, values, run_id)
        search.runs.setdefault(sha, []).append(run_id)
    return list(usable)


def measuring(spec: CampaignSpec, conf: dict[str, Any], case: str, repeats: int) -> dict[str, Any]:
    """What of a run's trigger conf changes what it measures: all of it but the commit, the host and what only
    narrows the run to the case (the kind's ``case_args``: ``m_list`` for a kernel)."""
    kind = spec.result_kind
    selecting = {"payload_ref", "host", "repeats"}
    selecting |= set(kind.case_args.values())
    return {k: v for k, v in conf.items() if k not in selecting}


def _unlike(
    spec: CampaignSpec, spec_hash: str, wanted: dict[str, Any], run: Any, values: list[float], repeats: int, case: str
) -> str:
    """Why an earlier run's values are not what a probe would measure ("" when they are)."""
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


class BisectStrategy(
    StrategyBase,
    declared=Declared("bisect", DAG_ID, "bisect", MAX_ROUNDS, PARAMS, ("bench", "bisect"), Bisection),
):
    """The bisection's campaign side, for :mod:`benchflow.searches.engine`."""

    def check_spec(self, spec: CampaignSpec) -> str:
        if spec.git_payload is None:
            return f"{spec.name!r} ships the folder kernels/{spec.payload}/, not a git payload"
        return ""

    def begin(self, conf: dict[str, Any], spec: CampaignSpec, warehouse: Warehouse | None) -> Search:
        """Check the conf, list the commits, seed what earlier runs measured."""
        conf = checked_conf(conf)
        kind = spec.result_kind
        if conf["metric"] not in kind.trends():
            known = kind.trends()
            raise ConfError("metric", f"{conf['metric']!r} is not a trend metric of {kind.name} (known: {known})")
        good, bad, commits = _ends(spec, conf)
        _check_probe_conf(spec, conf, bad)
        bisection = Bisection(
            good=good,
            commits=commits,
            better=kind.better(conf["metric"]),
            repeats=conf["repeats"],
            max_samples=conf["max_samples"],
            parallel=len(spec.host_ids),
            min_change=conf["min_change"],
            budget=Budget(probes=conf["max_probes"], rounds=MAX_ROUNDS, seconds=conf["max_hours"] * 3600.0),
        )
        facts = {"case": conf["case"], "metric": conf["metric"], "good_sha": good, "bad_sha": bad, "gpu_model": None}
        search = self.new_search(spec, conf, {**facts, "not_reused": []})
        if warehouse is not None and warehouse.schema_version() > 0:
            reuse(search, bisection, spec, warehouse)
        search.state = bisection.to_json()
        return search

    def next_round(self, algo: Bisection, now: float, slots: int) -> list[tuple[str, int]]:
        algo.parallel = max(1, slots)
        return [(sha, 0) for sha in algo.next_round(now)]

    def probe_confs(
        self, search: Search, spec: CampaignSpec, picks: list[tuple[str, int]], hosts: list[str]
    ) -> list[Probe]:
        return [
            Probe(sha[:12], hosts[i % len(hosts)], [sha], probe_conf(spec, search.conf, sha, None))
            for i, (sha, _) in enumerate(picks)
        ]

    def read(
        self,
        search: Search,
        algo: Bisection,
        spec: CampaignSpec,
        probe: Probe,
        warehouse: Warehouse,
    ) -> dict[str, Any]:
        """The probe's values of the case and metric; a run that loaded none gives why."""
        from benchflow.warehouse import queries  # the warehouse: a task's, never loaded at DAG parse

        (sha,) = probe.keys
        if not warehouse.schema_version() > 0:
            return {sha: f"run {probe.run_id} loaded nothing"}
        found = queries.probe_samples(warehouse, search.campaign_dag_id, probe.run_id, search.facts["case"],
                                      search.facts["metric"])  # fmt: skip
        if not len(found):
            return {sha: f"run {probe.run_id} gave no valid values"}
        if set(found["payload_commit"]) != {sha}:
            raise RuntimeError(f"probe run {probe.run_id} shipped {set(found['payload_commit'])}, not {sha}")
        return {sha: [float(v) for v in found["value"]]}

    def take(self, algo: Bisection, key: str, found: Any) -> None:
        algo.record(key, [] if isinstance(found, str) else found)

    def answer(self, search: Search, algo: Bisection) -> dict[str, Any]:
        result = algo.result()
        result["planned"] = [
            {"sha": sha, "run_id": search.runs[sha][-1], "round": len(algo.rounds)}
            for sha in algo.outstanding
            if search.runs.get(sha)
        ]
        return result

    def keys(self, result: dict[str, Any]) -> list[dict[str, Any]]:
        """The probe chain, oldest commit first: each commit's verdict and its ratio to good with the interval."""
        return [
            {"key": link["sha"], "verdict": link["verdict"], "n": link["n"], "detail": link,
             **({"value": link["vs_good"]["ratio"], "low": link["vs_good"]["low"], "high": link["vs_good"]["high"]}
                if link["vs_good"] else {})}
            for link in result["chain"]
        ]  # fmt: skip

    def write(self, warehouse: Warehouse, dag_id: str, run_id: str, search: Search, result: dict[str, Any]) -> None:
        from benchflow.warehouse import search_writes  # the warehouse: a task's, never loaded at DAG parse

        started = engine.started_at(self.load(search))
        search_writes.save_bisection(warehouse, dag_id, run_id, search, result, started)

    def lines(self, result: dict[str, Any]) -> list[str]:
        chain = [f"{c['sha'][:12]} {c['verdict']:<13} n={c['n']} {c['reason']}" for c in result["chain"]]
        return [*chain, f"bisection: {result['summary']}", *(f"note: {n}" for n in result.get("notes", []))]

    def round_line(self, algo: Bisection) -> str:
        return str(algo.result()["summary"])

    def opening(self, search: Search, run_id: str) -> str:
        algo = self.load(search)
        reused = "".join(f"\nreused {sha[:12]}: {source}" for sha, source in algo.reused.items())
        facts = search.facts
        what = f"{search.campaign} {facts['case']} {facts['metric']}"
        return f"{what}: {len(algo.commits)} commits after good; run {run_id}{reused}"

    def answered(self, result: dict[str, Any]) -> bool:
        return result["status"] in ("found", "range", "not_reproduced")


engine.register(BisectStrategy())
