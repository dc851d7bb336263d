"""The bisections' writes: one bisect DAG run's row in ``bisections`` and its probe chain in
``bisection_probes``, replaced together in one transaction each time the bisection learns something (the
Benchmarks view shows a running one as it goes). Reads are in :mod:`benchflow.warehouse.queries`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchflow.warehouse import Warehouse

BISECTION_COLUMNS = (
    "dag_id, run_id, campaign, case_key, metric, good, bad, status, first_bad, parent, ratio, ratio_low, "
    "ratio_high, range_good, range_bad, suspects, probes, reused, rounds, summary, result, started_at, updated_at"
)
PROBE_COLUMNS = (
    "dag_id, run_id, sha, position, verdict, n, ratio, ratio_low, ratio_high, ratio_bad, ratio_bad_low, "
    "ratio_bad_high, test, reason, rounds, probe_dag_id, probe_runs, reused_from"
)


def _ratio(value: dict[str, Any] | None) -> list[Any]:
    return [value["ratio"], value["low"], value["high"]] if value else [None, None, None]


def save(
    warehouse: Warehouse,
    dag_id: str,
    run_id: str,
    meta: dict[str, Any],
    result: dict[str, Any],
    started_at: datetime | None,
) -> None:
    """Write (replace) the bisection ``dag_id``/``run_id``: ``meta`` says what is bisected (campaign, case,
    metric, good, bad, the probe runs of each commit), ``result`` is :meth:`Bisection.result`."""
    warehouse.migrate()
    row = _bisection_row(dag_id, run_id, meta, result, started_at)
    probes = _probe_rows(dag_id, run_id, meta, result)
    with warehouse.transaction() as tx:
        tx.delete_run("bisections", dag_id, run_id)
        tx.delete_run("bisection_probes", dag_id, run_id)
        tx.execute(f"INSERT INTO bisections ({BISECTION_COLUMNS}) VALUES ({', '.join([tx.p] * len(row))})", row)
        if probes:
            marks = ", ".join([tx.p] * len(probes[0]))
            tx.executemany(f"INSERT INTO bisection_probes ({PROBE_COLUMNS}) VALUES ({marks})", probes)


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
