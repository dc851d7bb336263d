"""The end of ``bench run``: the run's state and time, the failed tasks with their errors, the run's status and
rows in the warehouse, and where its results, artifacts and logs are."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from benchtools.runner.watch import TaskView, Watch, _as_dt, failure_of, last_error

if TYPE_CHECKING:
    from benchflow.spec import CampaignSpec


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
    failed = [t for t, v in watch.tasks.items() if v.state == "failed"]
    for task_id in sorted(failed, key=lambda t: _order(t, watch.tasks[t])):  # the cause first, the verdict last
        error = failure_of(logs, task_id) or "(no error line found; see the log)"
        watch.say(f"failed task: {task_id}: {error}")
    _results(spec, run_id, watch)
    watch.say(f"Airflow logs: {logs}")
    return 0 if state == "success" else 1


SHOWN_ROWS = 50  # rows of the run printed; past them a line says how many more there are
VERDICT = "verdict"  # fails when an earlier task did: a consequence, listed after every cause


def _order(task_id: str, view: TaskView) -> tuple[bool, bool, datetime, str]:
    """The order failed tasks are listed in: as they started (as times, not text), the verdict last."""
    try:
        began = _as_dt(view.start)
    except (TypeError, ValueError):
        began = datetime.max.replace(tzinfo=UTC)
    return task_id == VERDICT, view.start is None, began, task_id


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
    rows = kind.present(queries.shown_rows(warehouse, kind, spec.dag_id, run_id, limit=SHOWN_ROWS + 1))
    if len(rows) > SHOWN_ROWS:
        total = queries.run_row_count(warehouse, kind, spec.dag_id, run_id)
        watch.say(rows.head(SHOWN_ROWS).to_string(index=False))
        watch.say(
            f"... {total - SHOWN_ROWS} more rows ({total} in all; the first {SHOWN_ROWS} shown): bench sql has them"
        )
    else:
        watch.say(rows.to_string(index=False) if len(rows) else "(no rows loaded)")
    for found in queries.validity_counts(warehouse, kind, spec.dag_id, run_id).itertuples():
        # stored, but never summarised, a baseline or compared (bench compare --include-noisy)
        watch.say(f"not ok: {found.n} row(s) {found.validity}: {found.reason or 'no reason recorded'}")
    watch.say(f"results: {warehouse.location} (read it with bench sql, or the Benchmarks view of `make up`)")
    if (folder := artifacts.local_folder(spec.dag_id, run_id)) is not None:
        watch.say(f"artifacts: {folder}")
