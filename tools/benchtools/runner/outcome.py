"""The end of ``bench run``: the run's state and time, the failed tasks with their errors, the run's status and
rows in the warehouse, and where its results, artifacts and logs are."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    from benchflow import artifacts, kinds
    from benchflow.analysis.bottleneck import headlines
    from benchflow.records import verdict_text
    from benchflow.warehouse import Warehouse, queries

    # read what readers read (DuckDB: the published snapshot), never holding the file the loads write
    warehouse = Warehouse.from_airflow(read_only=True)
    kind = spec.result_kind
    if getattr(warehouse.hook, "snapshot_stale", lambda: False)():
        watch.say(
            "the published snapshot is older than the warehouse (its last publish failed): the rows below may "
            "be missing although they are committed; `bench migrate` publishes it again"
        )
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
    if (searches := kinds.side_table(kind, kinds.LOAD_SEARCH)) is not None:
        for answer in queries.search_results(warehouse, searches, spec.dag_id, run_id).to_dict("records"):
            watch.say(search_answer(answer))
    for line in headlines(queries.bottlenecks(warehouse, spec.dag_id, run_id).to_dict("records")):
        watch.say(line)
    watch.say(f"results: {warehouse.location} (read it with bench sql, or the Benchmarks view of `make up`)")
    if (folder := artifacts.local_folder(spec.dag_id, run_id)) is not None:
        watch.say(f"artifacts: {folder}")


def search_answer(found: dict[str, Any]) -> str:
    """A load search's answer as one line: the highest load that passed, the lowest that failed (or none up to the
    range's top), why the search stopped, what it cost, and whether every probe was measured ok."""
    over = found.get("over") or "load"

    def load(value: Any) -> str:
        return "none" if value is None or value != value else f"{float(value):g}"

    fail = found.get("fail_load")
    lowest = load(fail) if fail is not None and fail == fail else f"none up to {load(found.get('range_high'))}"
    slo = ", ".join(f"{k} {v:g}" for k, v in json.loads(found.get("slo") or "{}").items())
    validity = found.get("validity") or "ok"
    judged = "ok" if validity == "ok" else f"NOT OK: a probe was {validity}, so the answer is not a valid figure"
    goodput = found.get("goodput_rps")
    at = f"; goodput {goodput:.3g} req/s at it" if isinstance(goodput, int | float) and goodput == goodput else ""
    return (
        f"load search {found.get('config')}: highest {over} within the SLO ({slo}) {load(found.get('pass_load'))}, "
        f"lowest failing {lowest}{at}; stopped: {found.get('reason')} after {found.get('probes')} probes in "
        f"{float(found.get('seconds') or 0):.0f} s; validity {judged}"
    )
