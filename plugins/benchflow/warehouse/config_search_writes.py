"""The config searches' writes: one search run's row in ``config_searches`` and its ranking in
``config_search_configs``, replaced together in one transaction each time the search learns something (the
Benchmarks view shows a running one as it goes). Reads are in :mod:`benchflow.warehouse.queries`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchflow.warehouse import Warehouse

SEARCH_COLUMNS = (
    "dag_id, run_id, campaign, campaign_dag_id, status, best, configs, excluded, rounds, probes, search_probes, "
    "prompts, grid_probes, grid_prompts, reused, summary, winner_yaml, result, started_at, updated_at"
)
CONFIG_COLUMNS = (
    "dag_id, run_id, config, rank, verdict, config_hash, dimensions, gpus, load_per_gpu_low, load_per_gpu_high, "
    "pass_load, fail_load, level, settings, probes, prompts, tokens_per_s_per_gpu, tokens_per_s_per_user, "
    "j_per_token, cost_per_mtok, pareto, bottleneck, validity, error, probe_dag_id, probe_runs, payload, gpu_model, "
    "reused_from"
)


def save(
    warehouse: Warehouse,
    dag_id: str,
    run_id: str,
    meta: dict[str, Any],
    result: dict[str, Any],
    started_at: datetime | None,
) -> None:
    """Write (replace) the config search ``dag_id``/``run_id``: ``meta`` says what is searched (campaign, config
    hashes and dimensions, probe runs), ``result`` is :meth:`ConfigSearch.result` with the levels and the winner."""
    warehouse.migrate()
    now = datetime.now(UTC)
    grid = result.get("grid") or {}
    row = [
        dag_id,
        run_id,
        meta["campaign"],
        meta["campaign_dag_id"],
        result["status"],
        result["best"],
        len(result["ranking"]),
        len(result.get("excluded") or []),
        result["rounds"],
        result["probes"],
        result["search_probes"],
        result["prompts"],
        grid.get("probes"),
        grid.get("prompts"),
        result["reused"],
        result["summary"],
        result.get("winner_yaml"),
        json.dumps(result, sort_keys=True, default=str),
        started_at or now,
        now,
    ]
    configs = _config_rows(dag_id, run_id, meta, result)
    with warehouse.transaction() as tx:
        tx.delete_run("config_searches", dag_id, run_id)
        tx.delete_run("config_search_configs", dag_id, run_id)
        tx.execute(f"INSERT INTO config_searches ({SEARCH_COLUMNS}) VALUES ({', '.join([tx.p] * len(row))})", row)
        if configs:
            marks = ", ".join([tx.p] * len(configs[0]))
            tx.executemany(f"INSERT INTO config_search_configs ({CONFIG_COLUMNS}) VALUES ({marks})", configs)


def _config_rows(dag_id: str, run_id: str, meta: dict[str, Any], result: dict[str, Any]) -> list[list[Any]]:
    """The ranking's rows (:data:`CONFIG_COLUMNS`), best first."""
    levels = result.get("levels") or []
    front = set(result.get("pareto") or [])
    rows = []
    for rank, r in enumerate(result["ranking"], start=1):
        level = r["level"]
        rows.append(
            [
                dag_id,
                run_id,
                r["config"],
                rank,
                r["verdict"],
                meta["hashes"][r["config"]],
                json.dumps(meta["dimensions"].get(r["config"], {}), sort_keys=True),
                r["gpus"],
                r["low"],
                r["high"],
                r["pass_load"],
                r["fail_load"],
                level,
                json.dumps(levels[level], sort_keys=True) if level is not None and level < len(levels) else None,
                r["probes"],
                r["prompts"],
                r.get("tokens_per_s_per_gpu"),
                r.get("tokens_per_s_per_user"),
                r.get("j_per_token"),
                r.get("cost_per_mtok"),
                r["config"] in front,
                r.get("bottleneck"),
                r.get("validity"),
                r["error"] or None,
                meta["campaign_dag_id"],
                json.dumps(r["runs"] or meta.get("runs", {}).get(r["config"], [])),
                r.get("payload"),
                r.get("gpu_model"),
                r["reused_from"],
            ]
        )
    return rows
