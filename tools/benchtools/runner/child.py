"""The child of ``bench run``: set Airflow up for this project, build the campaign's DAG and run it once with
``dag.test()``, its output into the run's log file; the outcome goes to a small JSON file the parent reads.

    python -m benchtools.runner.child SPEC_PATH WHEN_ISO CONF_JSON RESULT_FILE
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

# What bench run's runs carry so that a running stack's scheduler and triggerer leave them to dag.test: a pool of
# no slots (the scheduler never queues its tasks) and a trigger queue no triggerer of the stack consumes.
BENCH_RUN_POOL = "bench_run"
BENCH_RUN_QUEUE = "bench_run"


def leave_to_dag_test(dag: Any) -> None:
    """The metadata database is the one this checkout's stack (``bench up``) uses, so the run's tasks go to a pool
    of no slots (that stack's scheduler never queues them) and their triggers to a queue no triggerer of the stack
    consumes (it is started without ``--queues``): only ``dag.test()`` runs them."""
    from airflow.models.pool import Pool

    os.environ["AIRFLOW__TRIGGERER__QUEUES_ENABLED"] = "True"
    about = "bench run's runs: dag.test() runs their tasks, never a scheduler (no slots)"
    Pool.create_or_update_pool(BENCH_RUN_POOL, 0, about, include_deferred=False)
    for task in dag.tasks:
        task.pool = BENCH_RUN_POOL
        task.queue = BENCH_RUN_QUEUE


def async_lookups_in_line() -> None:
    """Let a trigger that dag.test() runs in line look connections up the async way, as it does under a triggerer.

    dag.test() gives that trigger the in-process comms of its tasks, which answer ``send`` but have no ``asend``
    (Airflow 3.3): the SSH provider's ``SSHHookAsync`` asks for its connection with ``asend``, the lookup fails
    quietly and falls through to the environment, so a connection stored in the metadata DB (the UI, the REST API,
    ``bench airflow connections add``) read as "isn't defined" in the deferred wait alone. Here ``asend`` is
    ``send``: the same request, answered from the same metadata DB."""
    from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms

    if hasattr(InProcessSupervisorComms, "asend"):
        return

    async def asend(self: Any, msg: Any) -> Any:
        return self.send(msg)

    InProcessSupervisorComms.asend = asend  # type: ignore[attr-defined]


def child_main(argv: list[str]) -> int:
    """Set up, run the DAG once (the arguments: see the module's docstring)."""
    spec_path, when_iso, conf_json, result_file = argv
    from benchflow.paths import PROJECT_ROOT
    from benchflow.spec import load_spec
    from benchtools.airflow_env import configure_airflow, ensure_pools

    spec = load_spec(Path(spec_path))
    configure_airflow()
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.db import upgradedb

    upgradedb()
    ensure_pools()
    bag = DagBag(dag_folder=str(PROJECT_ROOT / "dags" / "campaigns.py"))
    dag = bag.get_dag(spec.dag_id)
    if dag is None:
        Path(result_file).write_text(json.dumps({"error": f"DAG {spec.dag_id} not found: {bag.import_errors}"}))
        return 1
    leave_to_dag_test(dag)
    async_lookups_in_line()
    from benchflow.warehouse import Warehouse

    Warehouse.from_airflow().migrate()
    when = datetime.fromisoformat(when_iso)
    dag_run = dag.test(run_after=when, logical_date=when, run_conf=json.loads(conf_json) if conf_json else None)
    state = str(getattr(dag_run, "state", "unknown")).split(".")[-1].lower()
    Path(result_file).write_text(json.dumps({"run_id": dag_run.run_id, "state": state}))
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
