"""The host pools a campaign's tasks run in, made when a run starts without them.

Every task that touches a host runs in its pool ``bench_host_<host>`` (one slot). Airflow's scheduler never queues a
task whose pool does not exist: it logs "Tasks using non-existent pool" and the run stays "running" until its
timeout, hours later. ``bench pools`` (and ``bench up``, ``bench run``) create the pools of every spec ahead; for
a spec added since (a new host), this listener creates the missing pool with one slot when the scheduler starts
the run, in the scheduler's own transaction (committed with the run's start), and logs that it did. The UI plugin
registers it (``plugins/benchflow_ui_plugin.py``), so every scheduler that loads the project's plugins does this.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)
POOL_PREFIX = "bench_host_"  # benchflow.spec.host_pool


def missing_pools(dag: Any, existing: set[str]) -> list[str]:
    """The host pools the DAG's tasks name that are not in ``existing``."""
    named = {str(getattr(task, "pool", "") or "") for task in getattr(dag, "tasks", [])}
    return sorted(name for name in named if name.startswith(POOL_PREFIX) and name not in existing)


def ensure_run_pools(dag_run: Any) -> list[str]:
    """Create (one slot) each host pool the run's DAG needs and that does not exist; returns the pools created.
    In the session the run is in (the scheduler's transaction), else in one of its own."""
    from sqlalchemy.orm import Session

    dag = getattr(dag_run, "dag", None)
    if dag is None or not missing_pools(dag, set()):
        return []
    session = Session.object_session(dag_run)
    if session is not None:
        return _create(session, dag_run, dag)
    from airflow.utils.session import create_session

    with create_session() as own:
        return _create(own, dag_run, dag)


def _create(session: Any, dag_run: Any, dag: Any) -> list[str]:
    from airflow.models.pool import Pool
    from sqlalchemy import select

    wanted = missing_pools(dag, set())
    existing = {str(name) for name in session.scalars(select(Pool.pool).where(Pool.pool.in_(wanted)))}
    created = []
    for name in missing_pools(dag, existing):
        host = name.removeprefix(POOL_PREFIX)
        # No savepoint and no commit here: the scheduler's loop forbids commits but its own (a savepoint's release
        # counts as one), so the pool is written with the run's start.
        session.add(
            Pool(
                pool=name,
                slots=1,
                description=f"one benchmark campaign at a time on host {host} (made for {dag_run.run_id})",
                include_deferred=False,
            )
        )
        created.append(name)
        log.warning(
            "pool %s did not exist: created it with 1 slot for run %s of %s (`bench pools` creates the pools of "
            "every spec ahead; change its slots in Admin > Pools)",
            name,
            dag_run.run_id,
            dag_run.dag_id,
        )
    return created


@hookimpl
def on_dag_run_running(dag_run: Any, msg: str) -> None:
    try:
        ensure_run_pools(dag_run)
    except Exception:  # a listener must never fail the scheduler's loop
        log.exception("checking the host pools of %s failed", getattr(dag_run, "dag_id", "?"))
