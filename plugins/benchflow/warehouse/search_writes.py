"""The searches' writes, one pattern for every strategy: a search run's row and its per-key rows (a bisection's probe
chain, a config search's ranking) replaced together in one transaction each time the search learns something, so
the Benchmarks view shows a running search as it goes. Reads are in :mod:`benchflow.warehouse.queries`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from benchflow.warehouse import Warehouse


class Search(Protocol):
    """What these writes read of a search (:class:`benchflow.searches.engine.Search`): the warehouse sits below the
    engine, so it names the fields, not the class."""

    strategy: str
    campaign: str
    campaign_dag_id: str
    facts: dict[str, Any]
    runs: dict[str, list[str]]
    down: dict[str, str]


BISECTION_COLUMNS = (
    "dag_id, run_id, campaign, case_key, metric, good, bad, status, first_bad, parent, ratio, ratio_low, "
    "ratio_high, range_good, range_bad, suspects, probes, reused, rounds, summary, result, started_at, updated_at"
)
PROBE_COLUMNS = (
    "dag_id, run_id, sha, position, verdict, n, ratio, ratio_low, ratio_high, ratio_bad, ratio_bad_low, "
    "ratio_bad_high, test, reason, rounds, probe_dag_id, probe_runs, reused_from"
)


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


def replace(
    warehouse: Warehouse,
    dag_id: str,
    run_id: str,
    tables: tuple[str, str],
    columns: tuple[str, str],
    row: list[Any],
    rows: list[list[Any]],
) -> None:
    """Write (replace) one search run: its row in ``tables[0]`` and its per-key rows in ``tables[1]``."""
    warehouse.migrate()
    with warehouse.transaction() as tx:
        for table in tables:
            tx.delete_run(table, dag_id, run_id)
        tx.execute(f"INSERT INTO {tables[0]} ({columns[0]}) VALUES ({', '.join([tx.p] * len(row))})", row)
        if rows:
            tx.executemany(f"INSERT INTO {tables[1]} ({columns[1]}) VALUES ({', '.join([tx.p] * len(rows[0]))})", rows)


SEARCH_COLUMNS_ALL = (
    "dag_id, run_id, strategy, campaign, campaign_dag_id, status, best, summary, rounds, probes, hosts_down, result, "
    "started_at, updated_at"
)
KEY_COLUMNS = "dag_id, run_id, key, rank, verdict, n, value, low, high, probe_dag_id, probe_runs, detail"


def save_search(
    warehouse: Warehouse,
    dag_id: str,
    run_id: str,
    search: Search,
    result: dict[str, Any],
    started_at: datetime | None,
    keys: list[dict[str, Any]],
) -> None:
    """Any search, whatever its strategy: its row in ``searches``, its keys in ``search_keys`` (``keys``: each a
    ``key``, ``verdict`` and, where it has them, ``n``, ``value``, ``low``, ``high`` and the rest as its detail)."""
    now = datetime.now(UTC)
    best = result.get("best") or result.get("first_bad")
    row = [
        dag_id,
        run_id,
        search.strategy,
        search.campaign,
        search.campaign_dag_id,
        result["status"],
        best,
        result["summary"],
        result["rounds"],
        result["probes"],
        json.dumps(search.down, sort_keys=True) if search.down else None,
        json.dumps(result, sort_keys=True, default=str),
        started_at or now,
        now,
    ]
    rows = [
        [
            dag_id,
            run_id,
            k["key"],
            rank,
            k["verdict"],
            k.get("n"),
            _finite(k.get("value")),
            _finite(k.get("low")),
            _finite(k.get("high")),
            search.campaign_dag_id,
            json.dumps(search.runs.get(k["key"], [])),
            json.dumps(k.get("detail"), sort_keys=True, default=str) if k.get("detail") is not None else None,
        ]
        for rank, k in enumerate(keys, start=1)
    ]
    columns = (SEARCH_COLUMNS_ALL, KEY_COLUMNS)
    replace(warehouse, dag_id, run_id, ("searches", "search_keys"), columns, row, rows)


def _finite(value: Any) -> float | None:
    """A figure as stored: an open end (infinite) or a missing one is NULL."""
    if value is None or not isinstance(value, int | float) or value != value or value in (float("inf"), float("-inf")):
        return None
    return float(value)


def save_bisection(
    warehouse: Warehouse, dag_id: str, run_id: str, search: Search, result: dict[str, Any], started_at: datetime | None
) -> None:
    """A bisection: its row in ``bisections``, its probe chain in ``bisection_probes``."""
    meta = {**search.facts, "campaign": search.campaign, "campaign_dag_id": search.campaign_dag_id, "runs": search.runs}
    row = _bisection_row(dag_id, run_id, meta, result, started_at)
    tables, columns = ("bisections", "bisection_probes"), (BISECTION_COLUMNS, PROBE_COLUMNS)
    replace(warehouse, dag_id, run_id, tables, columns, row, _probe_rows(dag_id, run_id, meta, result))


def save_config_search(
    warehouse: Warehouse, dag_id: str, run_id: str, search: Search, result: dict[str, Any], started_at: datetime | None
) -> None:
    """A config search: its row in ``config_searches``, its ranking in ``config_search_configs``."""
    now = datetime.now(UTC)
    grid = result.get("grid") or {}
    row = [
        dag_id,
        run_id,
        search.campaign,
        search.campaign_dag_id,
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
    meta = {**search.facts, "campaign_dag_id": search.campaign_dag_id, "runs": search.runs}
    tables, columns = ("config_searches", "config_search_configs"), (SEARCH_COLUMNS, CONFIG_COLUMNS)
    replace(warehouse, dag_id, run_id, tables, columns, row, _config_rows(dag_id, run_id, meta, result))


def _ratio(value: dict[str, Any] | None) -> list[Any]:
    return [value["ratio"], value["low"], value["high"]] if value else [None, None, None]


def _bisection_row(
    dag_id: str, run_id: str, meta: dict[str, Any], result: dict[str, Any], started_at: datetime | None
) -> list[Any]:
    """The bisection's row in ``bisections`` (:data:`BISECTION_COLUMNS`), updated now."""
    found = result.get("vs_parent") or (result.get("confirmation") or {}).get("ratio")
    span = result.get("range") or {}
    now = datetime.now(UTC)
    return [
        dag_id,
        run_id,
        meta["campaign"],
        meta["case"],
        meta["metric"],
        meta["good_sha"],
        meta["bad_sha"],
        result["status"],
        result.get("first_bad"),
        result.get("parent"),
        *_ratio(found),
        span.get("good"),
        span.get("bad"),
        len(span["suspects"]) if span else None,
        result["probes"],
        result["reused"],
        result["rounds"],
        result["summary"],
        json.dumps(result, sort_keys=True),
        started_at or now,
        now,
    ]


def _probe_rows(dag_id: str, run_id: str, meta: dict[str, Any], result: dict[str, Any]) -> list[list[Any]]:
    """The probe chain's rows in ``bisection_probes`` (:data:`PROBE_COLUMNS`), one per commit of the chain."""
    runs: dict[str, list[str]] = meta.get("runs", {})
    return [
        [
            dag_id,
            run_id,
            link["sha"],
            link["position"],
            link["verdict"],
            link["n"],
            *_ratio(link["vs_good"]),
            *_ratio(link["vs_bad"]),
            "Welch t on log values, 95 % interval" if link["vs_good"] else None,
            link["reason"],
            json.dumps(link["rounds"]),
            meta["campaign_dag_id"],
            json.dumps(runs.get(link["sha"], [])),
            link["reused_from"],
        ]
        for link in result["chain"]
    ]


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
