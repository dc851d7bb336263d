"""The steps of a config search (the DAG ``bench_config_search``, ``dags/config_search.py``, and ``bench search``):
which config of a campaign's config space (``space:`` in its spec) holds the most load per GPU within its SLO.

The search's state is :class:`benchflow.analysis.config_search.ConfigSearch` as JSON, handed from step to step:

* :func:`start` checks the conf field by field (each error names its field), expands the space, derives the probe
  levels from the spec's load search (the last level is the spec's own settings) and seeds every config an earlier
  search measured the same way (same config hash, payload, GPU model and settings, valid rows): those are free.
* :func:`plan` groups the round's configs by level and hands them out to the campaign's hosts: one probe run per
  host and level, a run of the campaign's own DAG whose conf names its configs and the level's settings (so it
  leases its host, keeps the campaign's timeouts and runs its teardowns like any campaign run).
* :func:`record` reads each probe run's load-search answers (a config without one failed: the run's detail says
  why, a server that never came up included) and writes the search's rows.
* :func:`finish` writes the answer once no round is left to run.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import yaml

from benchflow.analysis.config_search import ConfigSearch, Measure, levels
from benchflow.params import ConfError, check_fields

if TYPE_CHECKING:
    from benchflow.spec import CampaignSpec
    from benchflow.warehouse import Warehouse

DAG_ID = "bench_config_search"
MAX_ROUNDS = 4  # rounds the DAG has: round 1 measures every config, each later one a level finer (levels <= 4)
POKE_S = 5.0

PARAMS: dict[str, tuple[Any, dict[str, Any]]] = {
    "campaign": (
        "",
        {
            "type": "string",
            "pattern": r"^[a-z][a-z0-9_]{0,62}$",
            "title": "Campaign",
            "description": "A campaign whose spec has a config space (space:) and a load search.",
        },
    ),
    "levels": (
        3,
        {
            "type": "integer",
            "minimum": 1,
            "maximum": 4,
            "title": "Probe levels",
            "description": "From cheap probes of every config to the spec's own settings for the contenders. Unit: "
            "levels.",
        },
    ),
    "max_probes": (
        60,
        {
            "type": "integer",
            "minimum": 1,
            "maximum": 1000,
            "title": "Probe budget",
            "description": "Config measurements at most (one load search of one config each). Unit: probes.",
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
    "reuse": (
        True,
        {
            "type": "boolean",
            "title": "Reuse earlier measures",
            "description": "Use what earlier searches measured of the same config, payload and GPU model.",
        },
    ),
}


# -- the conf and the campaign -------------------------------------------------------------------------


def campaign_spec(name: str) -> CampaignSpec:
    from benchflow.spec import SpecError, load_all

    specs, errors = load_all()
    for spec in specs:
        if spec.name == name:
            if spec.space is None or getattr(spec.benchmark, "search", None) is None:
                raise ConfError("campaign", f"{name!r} has no config space (space:) with a load search to rank by")
            return spec
    for error in errors:
        if isinstance(error, SpecError) and error.path.stem == name:
            raise ConfError("campaign", f"the spec of {name!r} is invalid: {error}")
    raise ConfError("campaign", f"no campaign {name!r} (known: {', '.join(sorted(s.name for s in specs))})")


def config_hash(spec: CampaignSpec, name: str) -> str:
    """What makes two measures of a config the same measure: the config and the benchmark section, as JSON."""
    config = next(c for c in spec.configs if c.name == name)
    canonical = {"config": config.model_dump(mode="json"), "benchmark": spec.benchmark.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def fewest_prompts(search: Any) -> int:
    """The fewest prompts a probe needs to decide the SLO's percentiles at the search's confidence, and to put the
    range's top load on the server (a probe of P requests never has more than P in flight)."""
    from benchhost import loadsearch

    def enough(n: int) -> bool:
        return not loadsearch.undersized(search.slo, n, search.confidence)

    n = 1
    while not enough(n) and n < 1 << 20:
        n *= 2
    low, high = n // 2, n
    while low + 1 < high:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    top = math.ceil(search.range[1]) if search.over == "concurrency" else 1
    return max(high, top)


def start(conf: dict[str, Any], warehouse: Warehouse | None = None, now: float | None = None) -> dict[str, Any]:
    """Check the conf, expand the space, seed what earlier searches measured; the state as JSON."""
    from benchflow.space import gpu_count

    conf = check_fields(dict(conf), PARAMS, "a config search")
    spec = campaign_spec(conf["campaign"])
    assert spec.space is not None
    expansion = spec.space.expand()
    search = spec.benchmark.search  # type: ignore[attr-defined]
    state = ConfigSearch(
        gpus={c.name: gpu_count(c) for c in spec.configs},
        levels=levels(
            search.prompts_per_probe, search.precision, search.repeats, fewest_prompts(search), conf["levels"]
        ),
        low=float(search.range[0]),
        high=float(search.range[1]),
        integer=search.over == "concurrency",
        max_probes=conf["max_probes"],
        max_seconds=conf["max_hours"] * 3600.0,
        started_at=time.time() if now is None else now,
        meta={
            "campaign": spec.name,
            "campaign_dag_id": spec.dag_id,
            "conf": conf,
            "hosts": spec.host_ids,
            "hashes": {c.name: config_hash(spec, c.name) for c in spec.configs},
            "dimensions": expansion.values,
            "excluded": [{"values": e.values, "reason": e.reason} for e in expansion.excluded],
            "price": dict(spec.space.price),
            "grid": _grid(search, len(spec.configs)),
            "runs": {},
            "not_reused": [],
        },
    )
    if warehouse is not None and conf["reuse"]:
        reuse(state, warehouse)
    return state.to_json()


def _grid(search: Any, configs: int) -> dict[str, int]:
    """The most a grid of every config at the spec's own settings would spend: probes and prompts."""
    probes = configs * search.most_probes()
    return {"probes": probes, "prompts": probes * search.prompts_per_probe}


def reuse(state: ConfigSearch, warehouse: Warehouse) -> list[str]:
    """Seed each config whose latest valid measure by an earlier search has the same config hash and settings,
    on the payload and GPU model of the campaign's latest valid run."""
    from benchflow.warehouse import queries

    meta = state.meta
    try:
        latest = queries.latest_valid_runs(warehouse, meta["campaign"])
        found = queries.reusable_config_measures(warehouse, list(meta["hashes"].values()))
    except Exception:  # a warehouse never loaded has no tables yet: nothing to reuse
        return []
    if not len(latest) or not len(found):
        return []
    payload = payload_of(queries.run_record(warehouse, str(latest["dag_id"].iloc[0]), str(latest["run_id"].iloc[0])))
    gpu_model = str(latest["gpu_model"].iloc[0])
    by_hash = {h: n for n, h in meta["hashes"].items()}
    settings = [json.dumps(level.settings(), sort_keys=True) for level in state.levels]
    seeded = []
    for row in found.to_dict("records"):  # newest first
        name = by_hash.get(row["config_hash"])
        if name is None or name in state.reused:
            continue
        if (row["payload"], row["gpu_model"]) != (payload, gpu_model) or row["settings"] not in settings:
            meta["not_reused"].append(f"{name}: {row['run_id']} measured another payload, GPU model or settings")
            continue
        measure = Measure(
            level=settings.index(row["settings"]),
            pass_load=row["pass_load"],
            fail_load=row["fail_load"],
            probes=0,
            prompts=0,
            run_id=json.loads(row["probe_runs"])[-1],
            figures=_stored_figures(row),
        )
        state.seed(name, measure, f"{row['dag_id']}/{row['run_id']}")
        seeded.append(name)
    return seeded


def payload_of(record: Any) -> str | None:
    """A run's payload as a reuse compares it: the git commit it shipped, else the folder's hash."""
    if not len(record):
        return None
    first = record.iloc[0]
    return str(first.get("payload_commit") or first.get("payload_sha256") or "") or None


def _stored_figures(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "j_per_token", "cost_per_mtok", "bottleneck", "validity")
    return {k: row.get(k) for k in keys} | {"payload": row["payload"], "gpu_model": row["gpu_model"]}


# -- the rounds ----------------------------------------------------------------------------------------


def run_id_for(search_run_id: str, round_number: int, host: str, level: int) -> str:
    """A probe's campaign run id: readable, and the same on a retry of the same round."""
    tag = hashlib.sha256(search_run_id.encode()).hexdigest()[:8]
    return f"cfgsearch_{tag}_r{round_number}_l{level}_{re.sub(r'[^A-Za-z0-9_]', '_', host)}"


def plan(state: dict[str, Any], search_run_id: str, now: float | None = None) -> dict[str, Any]:
    """The next round: ``{"state": …, "probes": [TriggerDagRunOperator kwargs, …]}`` (no probes: over). One probe
    run per host and level: its configs in the spec's order, handed out across the hosts in turn."""
    from benchflow.params import CONFIGS, HOST, SEARCH

    search = ConfigSearch.from_json(state)
    meta = search.meta
    picks = search.next_round(time.time() if now is None else now)
    hosts = meta["hosts"]
    batches: dict[tuple[str, int], list[str]] = {}
    for i, (name, level) in enumerate(sorted(picks, key=lambda p: (p[1], list(search.gpus).index(p[0])))):
        batches.setdefault((hosts[i % len(hosts)], level), []).append(name)
    probes = []
    for (host, level), names in batches.items():
        run_id = run_id_for(search_run_id, len(search.rounds), host, level)
        conf: dict[str, Any] = {CONFIGS: names, SEARCH: search.levels[level].settings()}
        if len(hosts) > 1:
            conf[HOST] = host
        for name in names:
            meta["runs"].setdefault(name, []).append(run_id)
        meta.setdefault("levels_asked", {}).update(dict.fromkeys(names, level))
        probes.append({"trigger_dag_id": meta["campaign_dag_id"], "trigger_run_id": run_id, "conf": conf})
    return {"state": search.to_json(), "probes": probes}


def record(planned: dict[str, Any] | None, warehouse: Warehouse, dag_id: str, run_id: str) -> dict[str, Any]:
    """Each probe run's answers (a config without one failed, with why), then the search's rows; the new state."""
    assert planned is not None
    search = ConfigSearch.from_json(planned["state"])
    spec = campaign_spec(search.meta["campaign"])
    for probe in planned["probes"]:
        measured = probe_measures(spec, warehouse, probe["trigger_run_id"], probe["conf"]["configs"], search)
        for name in probe["conf"]["configs"]:
            measure, error = measured[name]
            search.record(name, measure, error)
    save(search, warehouse, dag_id, run_id)
    return search.to_json()


def probe_measures(
    spec: CampaignSpec, warehouse: Warehouse, run_id: str, names: list[str], search: ConfigSearch
) -> dict[str, tuple[Measure | None, str]]:
    """Per config of one probe run: its measure, or None with why there is none."""
    from benchflow import kinds
    from benchflow.warehouse import queries

    side = kinds.side_table(spec.result_kind, kinds.LOAD_SEARCH)
    assert side is not None
    try:
        answers = queries.search_results(warehouse, side, spec.dag_id, run_id)
        run = queries.run_record(warehouse, spec.dag_id, run_id)
    except Exception as exc:  # the warehouse has no tables yet: the probe loaded nothing
        return {n: (None, f"run {run_id} loaded nothing ({type(exc).__name__})") for n in names}
    detail = str(run["detail"].iloc[0] or "") if len(run) else ""
    rows = {str(r["config"]): r for r in answers.to_dict("records")}
    figures = pass_load_figures(spec, warehouse, run_id, rows, search)
    where = {"payload": payload_of(run), "gpu_model": str(run["gpu_model"].iloc[0]) if len(run) else None}
    level = search.meta.get("levels_asked", {})
    out: dict[str, tuple[Measure | None, str]] = {}
    for name in names:
        row = rows.get(name)
        if row is None or (row["pass_load"] is None and row["fail_load"] is None):
            out[name] = (None, _why_none(name, run_id, detail, row))
            continue
        out[name] = (
            Measure(
                level=int(level.get(name, 0)),
                pass_load=_number(row["pass_load"]),
                fail_load=_number(row["fail_load"]),
                probes=int(row["probes"] or 0),
                prompts=int(row["probes"] or 0) * search.levels[int(level.get(name, 0))].prompts_per_probe,
                run_id=run_id,
                reason=str(row["reason"] or ""),
                figures={**figures.get(name, {}), **where},
            ),
            "",
        )
    return out


def _number(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _why_none(name: str, run_id: str, detail: str, row: dict[str, Any] | None) -> str:
    """Why a config of a probe run has no answer: what the run's detail says of it, else its search's reason."""
    said = [part.strip() for part in detail.split(";") if name in part]
    if said:
        return f"run {run_id}: " + "; ".join(said)[:600]
    if row is not None:
        return f"run {run_id}: the search stopped {row['reason']} without an answer"
    return f"run {run_id}: no load-search answer for {name} (the run's detail: {detail[:300] or 'none'})"


def pass_load_figures(
    spec: CampaignSpec, warehouse: Warehouse, run_id: str, answers: dict[str, dict[str, Any]], search: ConfigSearch
) -> dict[str, dict[str, Any]]:
    """Per config, at its pass load: output tokens/s per GPU, tokens/s per user, J/token, cost per million tokens
    at the spec's prices, the bottleneck verdict there, and whether its rows were valid."""
    from benchflow.warehouse import queries

    rows = queries.pass_load_rows(warehouse, spec.result_kind.table, spec.dag_id, run_id)
    verdicts = queries.bottlenecks(warehouse, spec.dag_id, run_id)
    price, out = search.meta.get("price", {}), {}
    axis = spec.benchmark.search.over  # type: ignore[attr-defined]
    for name, answer in answers.items():
        load = answer["pass_load"]
        mine = rows[(rows["config"] == name) & (rows[axis] == load)] if load is not None else rows.iloc[0:0]
        if not len(mine) or name not in search.gpus:
            continue
        gpus, tokens = search.gpus[name], float(mine["output_throughput"].mean())
        tpot = float(mine["mean_tpot_ms"].mean())
        joules = mine["j_per_token"].dropna()
        j_per_token = float(joules.mean()) if len(joules) else None
        figures: dict[str, Any] = {
            "tokens_per_s_per_gpu": tokens / gpus,
            "tokens_per_s_per_user": 1000.0 / tpot if tpot > 0 else None,
            "j_per_token": j_per_token,
            "cost_per_mtok": _cost(price, gpus, tokens, j_per_token),
            "validity": "ok" if set(mine["validity"].fillna("ok")) == {"ok"} else "not ok",
        }
        said = verdicts[(verdicts["config"] == name) & (verdicts[axis] == load)]
        figures["bottleneck"] = str(said["says"].iloc[-1]) if len(said) else None
        out[name] = figures
    return out


def _cost(price: dict[str, float], gpus: int, tokens_per_s: float, j_per_token: float | None) -> float | None:
    """Currency per million output tokens: the GPUs' hours at ``gpu_hour`` and the energy at ``kwh``."""
    if not price or tokens_per_s <= 0:
        return None
    cost = price.get("gpu_hour", 0.0) * gpus / 3600.0 / tokens_per_s * 1e6
    if "kwh" in price and j_per_token is not None:
        cost += j_per_token * 1e6 / 3.6e6 * price["kwh"]
    return cost


def finish(state: dict[str, Any], warehouse: Warehouse, dag_id: str, run_id: str, now: float | None = None) -> dict:
    """The answer from the last state (no round left: the search is over, or its budget is spent)."""
    search = ConfigSearch.from_json(state)
    if search.status() == "running" and not search.outstanding:
        if picks := search.next_round(time.time() if now is None else now):
            raise RuntimeError(f"a round was left to run after the last round of the DAG: {picks}")
    return save(search, warehouse, dag_id, run_id)


def winner_yaml(spec: CampaignSpec, name: str | None) -> str | None:
    """The best config as a ``configs:`` entry a nightly spec can take as it is."""
    if name is None:
        return None
    config = next(c for c in spec.configs if c.name == name)
    block = config.model_dump(mode="json", exclude_defaults=True)
    return yaml.safe_dump({"configs": [block]}, sort_keys=False, width=200)


def save(search: ConfigSearch, warehouse: Warehouse, dag_id: str, run_id: str) -> dict[str, Any]:
    """The search's rows as it stands (the Benchmarks view shows it from its first round, probes under way)."""
    from benchflow.warehouse import config_search_writes

    result = search.result()
    done = result["status"] == "done"  # the spec is read for the winner's block only, once the answer is in
    result["winner_yaml"] = winner_yaml(campaign_spec(search.meta["campaign"]), result["best"]) if done else None
    result["levels"] = [level.settings() for level in search.levels]
    result["excluded"] = search.meta.get("excluded", [])
    result["grid"] = search.meta.get("grid", {})
    result["not_reused"] = search.meta.get("not_reused", [])
    started = datetime.fromtimestamp(search.started_at, UTC) if search.started_at else None
    config_search_writes.save(warehouse, dag_id, run_id, search.meta, result, started)
    return result


def rename_probe(planned: dict[str, Any], old: str, new: str) -> None:
    """A probe run's id as it was made (``bench search`` runs each through ``bench run``, which names its run)."""
    for probe in planned["probes"]:
        if probe["trigger_run_id"] == old:
            probe["trigger_run_id"] = new
    for runs in planned["state"]["meta"]["runs"].values():
        runs[:] = [new if r == old else r for r in runs]
