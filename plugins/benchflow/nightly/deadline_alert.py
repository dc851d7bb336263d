"""What a campaign run that missed its deadline (the spec's ``deadline``, an Airflow deadline alert) does: it calls
the campaign's notifier (``regressions.notify``, the hook findings go to) once, with what is still running.

The callback runs in Airflow's triggerer (an ``AsyncCallback``): the run's task states come through the triggerer's
own channel to the API server, and the notifier, a plain function that may block on the network, runs in a thread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from airflow.utils.state import State

log = logging.getLogger(__name__)


def missed_event(deadline: str, deadline_time: Any, states: dict[str, Any]) -> dict[str, Any]:
    """What the notifier is given: the deadline, when it fell, and every task not yet finished with its state
    (``None``: not started)."""
    still = {task: state for task, state in sorted(states.items()) if state not in State.finished}
    return {
        "event": "deadline missed",
        "deadline": deadline,
        "deadline_time": str(deadline_time),
        "still_running": still,
    }


def run_of(context: dict[str, Any]) -> tuple[str, str]:
    """The DAG id and run id of the run a deadline alert's context names (the REST API's shape of a DAG run)."""
    dag_run = context["dag_run"]
    return str(dag_run["dag_id"]), str(dag_run.get("dag_run_id") or dag_run["run_id"])


async def missed(notify: str | None, deadline: str, context: dict[str, Any]) -> None:
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from asgiref.sync import sync_to_async

    dag_id, run_id = run_of(context)
    found = await sync_to_async(RuntimeTaskInstance.get_task_states)(dag_id=dag_id, run_ids=[run_id])
    event = missed_event(deadline, context.get("deadline", {}).get("deadline_time"), dict(found.get(run_id, {})))
    log.warning("%s %s missed its deadline %s; still running: %s", dag_id, run_id, deadline, event["still_running"])
    if notify:
        from benchflow.nightly.regressions import hook  # the nightly check: in its task, never at DAG parse

        await asyncio.to_thread(hook(notify), dag_id, run_id, [event])
