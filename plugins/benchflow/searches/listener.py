"""What the scheduler and the api-server do for a search's DAG run (:mod:`benchflow.searches.dag`).

* **As it starts**: a search's probes are runs of the campaign's own DAG, and campaign DAGs start paused: Airflow's
  scheduler never starts a run of a paused DAG, so every probe would wait, queued, until the search's own time ran out
  (days). This unpauses the campaign's DAG in the scheduler's own transaction (committed with the run's start), logs it
  and says so in the search run's note, which the UI shows on the run: the campaign's schedule then runs too (pause it
  again once the search is over if it should not). A search's ``start`` task refuses a campaign that is still paused
  (a scheduler without this plugin), naming the DAG and how to unpause it.
* **As it fails** (a person marked it failed, or a step failed): its probe runs still queued or running are marked
  failed too, which runs their teardowns (the services restored, the host's lease released), and the search's
  ``start`` task gets an XCom saying it was cancelled, which its ``finish`` step (a teardown, so it runs all the same)
  writes as the search's state with what it knew.

The UI plugin registers this listener (``plugins/benchflow_ui_plugin.py``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from airflow.listeners import hookimpl

from benchflow.searches.engine import CANCELLED_KEY, STRATEGIES, run_tag

log = logging.getLogger(__name__)
SEARCH_DAGS = {kind.dag_id: kind.run_prefix for kind in STRATEGIES.values()}  # DAG id -> its probe runs' prefix
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")  # a campaign name (benchflow.spec.Ident)


def campaign_dag(dag_run: Any) -> str | None:
    """The campaign DAG a search run probes (``bench_<campaign>`` of its conf), None for any other run."""
    if getattr(dag_run, "dag_id", None) not in SEARCH_DAGS:
        return None
    conf = getattr(dag_run, "conf", None) or {}
    name = conf.get("campaign") if isinstance(conf, dict) else None
    return f"bench_{name}" if isinstance(name, str) and _NAME.match(name) else None


def _in_session(dag_run: Any, work: Any) -> Any:
    from sqlalchemy.orm import Session

    session = Session.object_session(dag_run)
    if session is not None:
        return work(session, dag_run)
    from airflow.utils.session import create_session

    with create_session() as own:  # a run outside any session (a test's): its note is not written
        return work(own, None)


def unpause_probed(dag_run: Any) -> str | None:
    """Unpause the campaign DAG of a starting search run if it is paused; returns the note written, else None."""
    dag_id = campaign_dag(dag_run)
    if dag_id is None:
        return None
    return _in_session(dag_run, lambda session, run: _unpause(session, run, dag_id))


def _unpause(session: Any, dag_run: Any | None, dag_id: str) -> str | None:
    from airflow.models.dag import DagModel
    from sqlalchemy import select

    model = session.scalar(select(DagModel).where(DagModel.dag_id == dag_id))
    if model is None or not model.is_paused:
        return None
    model.is_paused = False  # written with the run's start: no commit here (the scheduler's loop owns it)
    note = (
        f"unpaused {dag_id}: this search's probes are runs of it, which a paused DAG never starts "
        "(its schedule runs too now; pause it again when the search is over if it should not)"
    )
    if dag_run is not None:
        dag_run.note = note
    log.warning("%s", note)
    return note


def end_probes(dag_run: Any, why: str) -> list[str]:
    """A failed search run's probe runs that are still queued or running, marked failed (their teardowns run); the
    search's ``start`` task told it was cancelled. Returns the probe run ids ended."""
    dag_id = campaign_dag(dag_run)
    if dag_id is None:
        return []
    return list(_in_session(dag_run, lambda session, _: _end(session, dag_run, dag_id, why)))


def _end(session: Any, dag_run: Any, dag_id: str, why: str) -> list[str]:
    from airflow.api.common.mark_tasks import set_dag_run_state_to_failed
    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    tag = run_tag(SEARCH_DAGS[dag_run.dag_id], dag_run.run_id)
    live = session.scalars(
        select(DagRun.run_id).where(
            DagRun.dag_id == dag_id,
            DagRun.run_id.startswith(tag, autoescape=True),
            DagRun.state.in_([DagRunState.QUEUED, DagRunState.RUNNING]),
        )
    ).all()
    dag = DBDagBag().get_latest_version_of_dag(dag_id, session=session) if live else None
    for run_id in live:
        if dag is not None:
            set_dag_run_state_to_failed(dag=dag, run_id=run_id, commit=True, session=session)
    said = f"{why}; its probe runs still under way were ended: {', '.join(live)}" if live else why
    XComModel.set(CANCELLED_KEY, said, dag_id=dag_run.dag_id, task_id="start", run_id=dag_run.run_id, session=session)
    log.warning("search run %s/%s failed: %s", dag_run.dag_id, dag_run.run_id, said)
    return list(live)


@hookimpl
def on_dag_run_running(dag_run: Any, msg: str) -> None:
    try:
        unpause_probed(dag_run)
    except Exception:  # a listener must never fail the scheduler's loop
        log.exception("unpausing the campaign of search run %s failed", getattr(dag_run, "run_id", "?"))


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    try:
        end_probes(dag_run, msg or "its run failed")
    except Exception:  # a listener must never fail the scheduler's loop or the API's answer
        log.exception("ending the probe runs of search run %s failed", getattr(dag_run, "run_id", "?"))
