"""This project's Airflow cluster policy, named by ``plugins/airflow_local_settings.py`` (Airflow imports it in
the api-server and the scheduler, where task instances are made).

A campaign whose hosts are Edge hosts (``hosts: [edge:a, edge:b]``) lets each run pick its host (the ``host``
param); its host tasks must then go to that host's queue. An operator's queue is fixed when the DAG is parsed (the
default host's, where a scheduled run goes), so the scheduler moves a run's host tasks to the queue of the host
the run asked for, as it creates them. Nothing else is touched.
"""

from __future__ import annotations

from typing import Any

from benchflow.hosts import EDGE_EXECUTOR, RUN_HOST, edge_queue


def edge_queue_of_run(task: Any, conf: dict[str, Any] | None) -> str | None:
    """The queue a host task of a run with ``conf`` goes to, when its campaign picks among Edge hosts and the run
    asked for one (the ``host`` param, checked against the campaign's hosts when the run was triggered); None:
    the task's own queue stands."""
    host = (conf or {}).get("host")
    picks = getattr(task, "host_id", None) == RUN_HOST  # a host task of a campaign with several hosts
    if not picks or getattr(task, "executor", None) != EDGE_EXECUTOR or not isinstance(host, str):
        return None
    return edge_queue(host)


def task_instance_mutation_hook(task_instance: Any, dag_run: Any = None) -> None:
    """Airflow's hook on a task instance it creates (or finds again) for a run: see the module's docstring."""
    queue = edge_queue_of_run(getattr(task_instance, "task", None), getattr(dag_run, "conf", None))
    if queue:
        task_instance.queue = queue
