"""Edge hosts, one module: a GPU host that takes no inbound connection runs an Airflow Edge worker that serves the
queue ``<queue>``; a campaign names it ``edge:<queue>``. Everything that treats such a host differently is here:

* **Where its tasks run** (:func:`routing`): on the Edge provider's executor, in the host's queue, so the worker on
  the host runs them through the local transport; its sensors wait in reschedule mode (the triggerer cannot see the
  host's files), never deferred, and check no more often than :data:`RESCHEDULE_S`.
* **The cluster policy** (:func:`task_instance_mutation_hook`, named by ``plugins/airflow_local_settings.py``, which
  Airflow imports in the api-server and the scheduler, where task instances are made). A campaign whose hosts are
  Edge hosts (``hosts: [edge:a, edge:b]``) lets each run pick its host (the ``host`` param); its host tasks must then
  go to that host's queue. An operator's queue is fixed when the DAG is parsed (the default host's, where a scheduled
  run goes), so the scheduler moves a run's host tasks to the queue of the host the run asked for, as it creates
  them. Nothing else is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from benchflow.hosts.base import RESCHEDULE_MIN_S, RUN_HOST

PREFIX = "edge:"
EXECUTOR = "EdgeExecutor"  # Airflow's name for the Edge provider's executor (its class's name)
RESCHEDULE_S = 3 * RESCHEDULE_MIN_S  # its waits reschedule (benchflow.hosts.base says why), reported through the DB


def edge_queue(host_id: str) -> str | None:
    """The Edge worker queue of an ``edge:<queue>`` host; None for any other host."""
    return host_id.removeprefix(PREFIX) if host_id.startswith(PREFIX) else None


@dataclass(frozen=True)
class Routing:
    """Where a host's tasks run and how its sensors wait: what a kind of host declares for the DAG factory."""

    executor: str | None = None
    queue: str | None = None
    wait_mode: Literal["poke", "reschedule"] = "poke"
    deferrable: bool = True
    min_interval_s: float = 0.0

    def task_kwargs(self) -> dict[str, str]:
        """What every host task of the campaign takes: its executor and queue, where they are not the default."""
        return {"executor": self.executor, "queue": self.queue} if self.executor and self.queue else {}

    def interval(self, seconds: float) -> float:
        """A sensor's interval between two checks."""
        return max(seconds, self.min_interval_s)


def routing(host_id: str) -> Routing:
    """An ``edge:<queue>`` host's routing; any other host's tasks run on the default executor's workers."""
    queue = edge_queue(host_id)
    if queue is None:
        return Routing()
    return Routing(EXECUTOR, queue, wait_mode="reschedule", deferrable=False, min_interval_s=RESCHEDULE_S)


def executor_missing(executor: str | None) -> str | None:
    """What a host's executor lacks in this deployment, in words (None: nothing; a host on the default executor
    needs none): the executors Airflow runs are ``[core] executor``'s."""
    if executor is None:
        return None
    from airflow.configuration import conf
    from airflow.exceptions import UnknownExecutorException
    from airflow.executors.executor_loader import ExecutorLoader

    try:
        ExecutorLoader.lookup_executor_name_by_str(executor, validate_teams=False)
    except UnknownExecutorException:
        configured = conf.get("core", "executor", fallback="")
        return f"the {executor}, which this deployment does not run ([core] executor = {configured!r})"
    return None


def edge_queue_of_run(task: Any, conf: dict[str, Any] | None) -> str | None:
    """The queue a host task of a run with ``conf`` goes to, when its campaign picks among Edge hosts and the run
    asked for one (the ``host`` param, checked against the campaign's hosts when the run was triggered); None:
    the task's own queue stands."""
    host = (conf or {}).get("host")
    picks = getattr(task, "host_id", None) == RUN_HOST  # a host task of a campaign with several hosts
    if not picks or getattr(task, "executor", None) != EXECUTOR or not isinstance(host, str):
        return None
    return edge_queue(host)


def task_instance_mutation_hook(task_instance: Any, dag_run: Any = None) -> None:
    """Airflow's hook on a task instance it creates (or finds again) for a run: see the module's docstring."""
    queue = edge_queue_of_run(getattr(task_instance, "task", None), getattr(dag_run, "conf", None))
    if queue:
        task_instance.queue = queue
