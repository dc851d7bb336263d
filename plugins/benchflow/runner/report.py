"""The end of ``bench run``: the run's state and time, the failed tasks with their errors, the run's status and
rows in the warehouse, and where its results, artifacts and logs are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from benchflow.runner.watch import Watch, failure_of, last_error

if TYPE_CHECKING:
    from benchflow.spec import CampaignSpec

SHOWN_ROWS = 100  # rows of the run's table printed (a million-row run prints its first 100)


def report(spec: CampaignSpec, run_id: str, result_file: Path, logs: Path, watch: Watch, took: float) -> int:
    """Print the outcome; the exit code of ``bench run`` (0 only for a successful run)."""
    try:
        result = json.loads(result_file.read_text())
    except (OSError, ValueError):
        result = {}
    finally:
        result_file.unlink(missing_ok=True)
    if "error" in result or not result:
        reason = result.get("error") or last_error(logs) or "the run ended before it started"
        watch.say(f"\n{spec.dag_id}: could not run: {reason}\nAirflow logs: {logs}")
        return 1
    state = result.get("state", "unknown")
    watch.say(f"\n{spec.dag_id} run {run_id}: {state} in {took:.1f} s")
    failed = sorted((v.start is None, str(v.start or ""), t) for t, v in watch.tasks.items() if v.state == "failed")
    for _, _, task_id in failed:  # in the order they ran: the cause first, the verdict last
        error = failure_of(logs, task_id) or "(no error line found; see the log)"
        watch.say(f"failed task: {task_id}: {error}")
    _results(spec, run_id, watch)
    watch.say(f"Airflow logs: {logs}")
    return 0 if state == "success" else 1


def _results(spec: CampaignSpec, run_id: str, watch: Watch) -> None:
    from benchflow import artifacts
    from benchflow.records import verdict_text
    from benchflow.warehouse import Warehouse, queries

    # read what readers read (DuckDB: the published snapshot), never holding the file the loads write
    warehouse = Warehouse.from_airflow(read_only=True)
    kind = spec.result_kind
    loaded = queries.run_record(warehouse, spec.dag_id, run_id)
    if len(loaded):
        first = loaded.iloc[0]
        detail = f": {first['detail']}" if first["detail"] else ""
        watch.say(f"warehouse status: {first['status']} ({first['rows_loaded']} rows){detail}")
        judged = verdict_text(
            first.get("verdict"), first.get("verdict_detail"), first.get("baseline_runs"), first["regressions"]
        )
        watch.say(f"verdict: {judged}")
    rows = kind.present(queries.shown_rows(warehouse, kind, spec.dag_id, run_id, limit=SHOWN_ROWS))
    watch.say(rows.to_string(index=False) if len(rows) else "(no rows loaded)")
    if len(rows) == SHOWN_ROWS and (total := queries.run_row_count(warehouse, kind, spec.dag_id, run_id)) > len(rows):
        watch.say(f"showing {len(rows)} of {total} rows (bench sql for all of them)")
    for found in queries.validity_counts(warehouse, kind, spec.dag_id, run_id).itertuples():
        # stored, but never summarised, a baseline or compared (bench compare --include-noisy)
        watch.say(f"not ok: {found.n} row(s) {found.validity}: {found.reason or 'no reason recorded'}")
    watch.say(f"results: {warehouse.location} (read it with bench sql, or the Benchmarks view of `make up`)")
    if (folder := artifacts.local_folder(spec.dag_id, run_id)) is not None:
        watch.say(f"artifacts: {folder}")
