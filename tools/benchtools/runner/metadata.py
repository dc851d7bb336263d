"""The run in Airflow's metadata database, through Airflow's own models (``DagRun``, ``TaskInstance``): its
tasks' states while ``bench run`` watches, and marking it failed when a signal ended it."""

from __future__ import annotations

from typing import Any

TaskState = tuple[str, str | None, Any, Any]  # (task_id, state, start, end)
FINISHED = ("success", "failed", "skipped", "upstream_failed", "removed")


def _dag_run(session: Any, dag_id: str, run_id: str) -> Any:
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    return session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))


def run_host(dag_id: str, run_id: str) -> str | None:
    """The host a run asked for (its ``host`` param, in the conf it was triggered with); None when it named none
    (a scheduled run: the campaign's default host) or the run is not there."""
    from airflow.utils.session import create_session

    with create_session() as session:
        dag_run = _dag_run(session, dag_id, run_id)
        conf = (dag_run.conf or {}) if dag_run is not None else {}
    host = conf.get("host") if isinstance(conf, dict) else None
    return host if isinstance(host, str) and host else None


def task_states(dag_id: str, run_id: str) -> list[TaskState]:
    """``[(task_id, state, start, end)]`` of the run's task instances, by start; ``[]`` until the run exists (or
    while the child is still creating Airflow's tables)."""
    from airflow.utils.session import create_session
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with create_session() as session:
            dag_run = _dag_run(session, dag_id, run_id)
            if dag_run is None:
                return []
            tis = dag_run.get_task_instances(session=session)
            rows = [(ti.task_id, _state(ti.state), ti.start_date, ti.end_date) for ti in tis]
    except SQLAlchemyError:  # tables not there yet (the child is migrating), or a locked SQLite file
        return []
    return sorted(rows, key=lambda r: (r[2] is None, str(r[2] or "")))


def mark_failed(dag_id: str, run_id: str) -> int:
    """Fail the run and every task of it that has not finished (nothing runs them any more); returns how many
    tasks were failed."""
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState

    with create_session() as session:
        dag_run = _dag_run(session, dag_id, run_id)
        if dag_run is None:
            return 0
        unfinished = [ti for ti in dag_run.get_task_instances(session=session) if _state(ti.state) not in FINISHED]
        for ti in unfinished:
            ti.set_state(TaskInstanceState.FAILED, session=session)
        dag_run.set_state(DagRunState.FAILED)
        session.merge(dag_run)
    return len(unfinished)


def _state(value: Any) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def unfinished_runs(dag_ids: list[str]) -> list[tuple[str, str]]:
    """``[(dag_id, run_id)]`` of the runs of ``dag_ids`` that are queued or running, oldest first."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    if not dag_ids:
        return []
    with create_session() as session:
        found = session.execute(
            select(DagRun.dag_id, DagRun.run_id)
            .where(DagRun.dag_id.in_(dag_ids), DagRun.state.in_([DagRunState.RUNNING, DagRunState.QUEUED]))
            .order_by(DagRun.id)
        ).all()
    return [(str(dag_id), str(run_id)) for dag_id, run_id in found]
