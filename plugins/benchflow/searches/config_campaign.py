"""The config search as a search strategy: which config of a campaign's config space (``space:`` in its spec) holds
the most load per GPU within its SLO.

The algorithm is :class:`benchflow.searches.configs.ConfigSearch`; this module is its campaign side, for the search
engine (:mod:`benchflow.searches.engine`):

* :meth:`ConfigStrategy.begin` checks the conf field by field, expands the space, derives the probe levels from the
  spec's load search (the last level is the spec's own settings) and seeds every config an earlier search measured
  the same way (same config hash, payload, GPU model and settings, valid rows): those are free.
* a probe is one run of the campaign's DAG per host and level, whose conf names its configs and the level's settings;
* its load-search answers are read from the warehouse (a config without one failed: the run's detail says why, a
  server that never came up included);
* the answer: the ranking by load per GPU (an interval, open where the range's end censored it), the Pareto front,
  and the winner as a ``configs:`` block, or, when no config held the SLO within the range, no best and no block.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING, Any

import yaml

from benchflow import kinds
from benchflow.params import CONFIGS, SEARCH
from benchflow.searches.configs import ConfigSearch, Measure, levels
from benchflow.searches.engine import (
    MAX_HOURS_PARAM,
    Declared,
    Probe,
    Search,
    StrategyBase,
    campaign_param,
    campaign_spec,
    register,
    started_at,
)
from benchflow.space import gpu_count
from benchhost import loadsearch

if TYPE_CHECKING:
    from benchflow.spec import CampaignSpec
    from benchflow.warehouse import Warehouse

DAG_ID = "bench_config_search"
MAX_ROUNDS = 4  # rounds the DAG has: round 1 measures every config, each later one a level finer (levels <= 4)

PARAMS: dict[str, tuple[Any, dict[str, Any]]] = {
    "campaign": campaign_param("A campaign whose spec has a config space (space:) and a load search."),
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
    "max_hours": MAX_HOURS_PARAM,
    "reuse": (
        True,
        {
            "type": "boolean",
            "title": "Reuse earlier measures",
            "description": "Use what earlier searches measured of the same config, payload and GPU model.",
        },
    ),
}


def config_hash(spec: CampaignSpec, name: str) -> str:
    """What makes two measures of a config the same measure: the config and the benchmark section, as JSON."""
    config = next(c for c in spec.configs if c.name == name)
    canonical = {"config": config.model_dump(mode="json"), "benchmark": spec.benchmark.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def fewest_prompts(search: Any) -> int:
    """The fewest prompts a probe needs to decide the SLO's percentiles at the search's confidence, and to put the
    range's top load on the server (a probe of P requests never has more than P in flight)."""

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


def _grid(search: Any, configs: int) -> dict[str, int]:
    """The most a grid of every config at the spec's own settings would spend: probes and prompts."""
    probes = configs * search.most_probes()
    return {"probes": probes, "prompts": probes * search.prompts_per_probe}


def reuse(search: Search, state: ConfigSearch, warehouse: Warehouse) -> list[str]:
    """Seed each config whose latest valid measure by an earlier search has the same config hash and settings,
    on the payload and GPU model of the campaign's latest valid run."""
    from benchflow.warehouse import queries  # the warehouse: a task's, never loaded at DAG parse

    facts = search.facts
    latest = queries.latest_valid_runs(warehouse, search.campaign)
    found = queries.reusable_config_measures(warehouse, list(facts["hashes"].values()))
    if not len(latest) or not len(found):
        return []
    payload = payload_of(queries.run_record(warehouse, str(latest["dag_id"].iloc[0]), str(latest["run_id"].iloc[0])))
    gpu_model = str(latest["gpu_model"].iloc[0])
    by_hash = {h: n for n, h in facts["hashes"].items()}
    settings = [json.dumps(level.settings(), sort_keys=True) for level in state.levels]
    seeded = []
    for row in found.to_dict("records"):  # newest first
        name = by_hash.get(row["config_hash"])
        if name is None or name in state.reused:
            continue
        if (row["payload"], row["gpu_model"]) != (payload, gpu_model) or row["settings"] not in settings:
            facts["not_reused"].append(f"{name}: {row['run_id']} measured another payload, GPU model or settings")
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


def probe_measures(
    spec: CampaignSpec, warehouse: Warehouse, probe: Probe, search: ConfigSearch, price: dict[str, float]
) -> dict[str, Any]:
    """Per config of one probe run: its measure, or why there is none (text)."""
    from benchflow.warehouse import queries  # the warehouse: a task's, never loaded at DAG parse

    run_id, names = probe.run_id, probe.keys
    if warehouse.schema_version() == 0:
        return {n: f"run {run_id} loaded nothing" for n in names}
    side = kinds.side_table(spec.result_kind, kinds.LOAD_SEARCH)
    assert side is not None
    answers = queries.search_results(warehouse, side, spec.dag_id, run_id)
    run = queries.run_record(warehouse, spec.dag_id, run_id)
    detail = str(run["detail"].iloc[0] or "") if len(run) else ""
    rows = {str(r["config"]): r for r in answers.to_dict("records")}
    figures = pass_load_figures(spec, warehouse, run_id, rows, search, price)
    where = {"payload": payload_of(run), "gpu_model": str(run["gpu_model"].iloc[0]) if len(run) else None}
    out: dict[str, Any] = {}
    for name in names:
        row = rows.get(name)
        if row is None or (row["pass_load"] is None and row["fail_load"] is None):
            out[name] = _why_none(name, run_id, detail, row)
            continue
        out[name] = Measure(
            level=probe.level,
            pass_load=_number(row["pass_load"]),
            fail_load=_number(row["fail_load"]),
            probes=int(row["probes"] or 0),
            prompts=int(row["probes"] or 0) * search.levels[probe.level].prompts_per_probe,
            run_id=run_id,
            reason=str(row["reason"] or ""),
            figures={**figures.get(name, {}), **where},
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
    spec: CampaignSpec,
    warehouse: Warehouse,
    run_id: str,
    answers: dict[str, dict[str, Any]],
    search: ConfigSearch,
    price: dict[str, float],
) -> dict[str, dict[str, Any]]:
    """Per config, at its pass load: output tokens/s per GPU, tokens/s per user, J/token, cost per million tokens
    at the spec's prices, the bottleneck verdict there, and whether its rows were valid."""
    from benchflow.warehouse import queries  # the warehouse: a task's, never loaded at DAG parse

    rows = queries.pass_load_rows(warehouse, spec.result_kind.table, spec.dag_id, run_id)
    verdicts = queries.bottlenecks(warehouse, spec.dag_id, run_id)
    out = {}
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


def winner_yaml(spec: CampaignSpec, name: str | None) -> str | None:
    """The best config as a ``configs:`` entry a nightly spec can take as it is."""
    if name is None:
        return None
    config = next(c for c in spec.configs if c.name == name)
    block = config.model_dump(mode="json", exclude_defaults=True)
    return yaml.safe_dump({"configs": [block]}, sort_keys=False, width=200)


def _shown(value: Any, digits: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, digits)


def answer_lines(result: dict[str, Any]) -> list[str]:
    """The ranking, the Pareto front, the spend against the grid and the winner's config block, as printed."""
    lines = [f"config search: {result['summary']}", ""]
    header = ("rank", "config", "verdict", "GPUs", "load/GPU", "tok/s/GPU", "tok/s/user", "J/tok", "cost/Mtok")
    lines.append("  ".join(f"{h:<{w}}" for h, w in zip(header, WIDTHS, strict=True)))
    for rank, r in enumerate(result["ranking"], start=1):
        load = r.get("load") or "-"
        cells = (
            str(rank),
            r["config"],
            r["verdict"],
            str(r["gpus"]),
            load,
            _shown(r.get("tokens_per_s_per_gpu")),
            _shown(r.get("tokens_per_s_per_user")),
            _shown(r.get("j_per_token")),
            _shown(r.get("cost_per_mtok")),
        )
        lines.append("  ".join(f"{c:<{w}}" for c, w in zip(cells, WIDTHS, strict=True)))
        if r["error"]:
            lines.append(f"      failed: {r['error']}")
        elif r.get("bottleneck"):
            lines.append(f"      {r['bottleneck']}")
    grid = result.get("grid") or {}
    lines += [
        "",
        f"Pareto front (tokens/s per GPU against per user): {', '.join(result['pareto']) or 'none measured'}",
        f"spent: {result['probes']} probe runs, {result['search_probes']} load-search probes, {result['prompts']} "
        f"prompts; the full grid at the spec's settings: up to {grid.get('probes', '?')} probes, "
        f"{grid.get('prompts', '?')} prompts",
    ]
    if result.get("winner_yaml"):
        lines += ["", "the winner, as a config block for a nightly spec:", result["winner_yaml"].rstrip()]
    return lines


WIDTHS = (4, 22, 30, 4, 10, 10, 10, 8, 9)


class ConfigStrategy(
    StrategyBase,
    declared=Declared("config", DAG_ID, "cfgsearch", MAX_ROUNDS, PARAMS, ("bench", "config-search"), ConfigSearch),
):
    """The config search's campaign side, for :mod:`benchflow.searches.engine`."""

    ranked_by = ("config", "probes", "low")  # load per GPU, its lower bound: open above where censored

    def check_spec(self, spec: CampaignSpec) -> str:
        if spec.space is None or getattr(spec.benchmark, "search", None) is None:
            return f"{spec.name!r} has no config space (space:) with a load search to rank by"
        return ""

    def begin(
        self, conf: dict[str, Any], spec: CampaignSpec, warehouse: Warehouse | None, now: float | None = None
    ) -> Search:
        """Expand the space, derive the levels, seed what earlier searches measured."""
        import time

        assert spec.space is not None
        expansion = spec.space.expand()
        load = spec.benchmark.search  # type: ignore[attr-defined]
        state = ConfigSearch(
            gpus={c.name: gpu_count(c) for c in spec.configs},
            levels=levels(load.prompts_per_probe, load.precision, load.repeats, fewest_prompts(load), conf["levels"]),
            low=float(load.range[0]),
            high=float(load.range[1]),
            integer=load.over == "concurrency",
            max_probes=conf["max_probes"],
            max_seconds=conf["max_hours"] * 3600.0,
            started_at=time.time() if now is None else now,
        )
        facts = {
            "hashes": {c.name: config_hash(spec, c.name) for c in spec.configs},
            "dimensions": expansion.values,
            "excluded": [{"values": e.values, "reason": e.reason} for e in expansion.excluded],
            "price": dict(spec.space.price),
            "grid": _grid(load, len(spec.configs)),
        }
        search = self.new_search(spec, conf, {**facts, "not_reused": []})
        if warehouse is not None and conf["reuse"] and warehouse.schema_version() > 0:
            reuse(search, state, warehouse)
        search.state = state.to_json()
        return search

    def next_round(self, algo: ConfigSearch, now: float, slots: int) -> list[tuple[str, int]]:
        return algo.next_round(now)

    def probe_confs(
        self, search: Search, spec: CampaignSpec, picks: list[tuple[str, int]], hosts: list[str]
    ) -> list[Probe]:
        """One probe run per host and level: its configs in the spec's order, handed out across the hosts in turn."""
        order = list(search.facts["hashes"])
        batches: dict[tuple[str, int], list[str]] = {}
        for i, (name, level) in enumerate(sorted(picks, key=lambda p: (p[1], order.index(p[0])))):
            batches.setdefault((hosts[i % len(hosts)], level), []).append(name)
        algo = self.load(search)
        return [
            Probe(run_id=f"l{level}", host=host, keys=names, level=level,
                  conf={CONFIGS: names, SEARCH: algo.levels[level].settings()})
            for (host, level), names in batches.items()
        ]  # fmt: skip

    def read(
        self,
        search: Search,
        algo: ConfigSearch,
        spec: CampaignSpec,
        probe: Probe,
        warehouse: Warehouse,
    ) -> dict[str, Any]:
        return probe_measures(spec, warehouse, probe, algo, search.facts.get("price", {}))

    def take(self, algo: ConfigSearch, key: str, found: Any) -> None:
        if isinstance(found, str):
            algo.record(key, None, found)
        else:
            algo.record(key, found)

    def answer(self, search: Search, algo: ConfigSearch) -> dict[str, Any]:
        result = algo.result()
        done = result["status"] == "done" and result["best"] and not search.ended  # the winner's block, once in
        result["winner_yaml"] = winner_yaml(campaign_spec(search.campaign), result["best"]) if done else None
        result["levels"] = [level.settings() for level in algo.levels]
        for key in ("excluded", "grid", "not_reused"):
            result[key] = search.facts.get(key, [] if key != "grid" else {})
        return result

    def write(self, warehouse: Warehouse, dag_id: str, run_id: str, search: Search, result: dict[str, Any]) -> None:
        from benchflow.warehouse import search_writes  # the warehouse: a task's, never loaded at DAG parse

        search_writes.save_config_search(warehouse, dag_id, run_id, search, result, started_at(self.load(search)))

    def lines(self, result: dict[str, Any]) -> list[str]:
        return answer_lines(result)

    def round_line(self, algo: ConfigSearch) -> str:
        return algo.summary(algo.leader())

    def opening(self, search: Search, run_id: str) -> str:
        algo = self.load(search)
        steps = ", ".join(f"{v.prompts_per_probe} prompts/probe at precision {v.precision:g}" for v in algo.levels)
        return (
            f"bench search {search.campaign}: {len(algo.gpus)} configs ({len(search.facts['excluded'])} excluded by "
            f"the space's constraints), {len(algo.reused)} reused; levels: {steps}; run {run_id}"
        )

    def answered(self, result: dict[str, Any]) -> bool:
        return bool(result.get("best"))


register(ConfigStrategy())
