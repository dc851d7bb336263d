"""A bisection's campaign, unpaused when the bisection starts.

A bisection's probes are runs of the campaign's own DAG, and campaign DAGs start paused: Airflow's scheduler never
starts a run of a paused DAG, so every probe would wait, queued, until the bisection's own time ran out (days).
When the scheduler starts a ``bench_bisect`` run, this listener unpauses the DAG of the campaign its conf names, in
the scheduler's own transaction (committed with the run's start), logs it and says so in the bisect run's note,
which the UI shows on the run: the campaign's schedule then runs too (pause it again once the bisection is over if
it should not). The bisect DAG's ``start`` task refuses a campaign that is still paused (a scheduler without this
plugin), naming the DAG and how to unpause it. The UI plugin registers this listener
(``plugins/benchflow_ui_plugin.py``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)
BISECT_DAG = "bench_bisect"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")  # a campaign name (benchflow.spec.Ident)


def campaign_dag(dag_run: Any) -> str | None:
    """The campaign DAG a bisect run probes (``bench_<campaign>`` of its conf), None for any other run."""
    if getattr(dag_run, "dag_id", None) != BISECT_DAG:
        return None
    conf = getattr(dag_run, "conf", None) or {}
    name = conf.get("campaign") if isinstance(conf, dict) else None
    return f"bench_{name}" if isinstance(name, str) and _NAME.match(name) else None


def unpause_probed(dag_run: Any) -> str | None:
    """Unpause the campaign DAG of a starting bisect run if it is paused; returns the note written, else None."""
    from sqlalchemy.orm import Session

    dag_id = campaign_dag(dag_run)
    if dag_id is None:
        return None
    session = Session.object_session(dag_run)
    if session is not None:
        return _unpause(session, dag_run, dag_id)
    from airflow.utils.session import create_session

    with create_session() as own:  # a run outside any session (a test's): its note is not written
        return _unpause(own, None, dag_id)


def _unpause(session: Any, dag_run: Any | None, dag_id: str) -> str | None:
    from airflow.models.dag import DagModel
    from sqlalchemy import select

    model = session.scalar(select(DagModel).where(DagModel.dag_id == dag_id))
    if model is None or not model.is_paused:
        return None
    model.is_paused = False  # written with the run's start: no commit here (the scheduler's loop owns it)
    note = (
        f"unpaused {dag_id}: this bisection's probes are runs of it, which a paused DAG never starts "
        "(its schedule runs too now; pause it again when the bisection is over if it should not)"
    )
    if dag_run is not None:
        dag_run.note = note
    log.warning("%s", note)
    return note


@hookimpl
def on_dag_run_running(dag_run: Any, msg: str) -> None:
    try:
        unpause_probed(dag_run)
    except Exception:  # a listener must never fail the scheduler's loop
        log.exception("unpausing the campaign of bisect run %s failed", getattr(dag_run, "run_id", "?"))
