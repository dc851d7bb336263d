"""A spec whose host has no Airflow pool (issue 20, Medium: its run stayed "running" for hours): when the run
starts, Airflow's listener hook (registered by the project's plugin) creates the pool with one slot, in Airflow's
metadata database (PostgreSQL)."""

from __future__ import annotations

import logging
import textwrap
import time

import pytest

from benchflow.factory import build_dag
from benchflow.spec import host_pool, load_spec

pytestmark = pytest.mark.integration


def spec_for(tmp_path, host: str):
    path = tmp_path / "new_host.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        description: a campaign on a host added since the pools were made
        kind: kernel
        host: {host}
        payload: moe
        schedule: null
        benchmark:
          script: bench_moe.py
        """)
    )
    return load_spec(path)


def pool_slots(name: str) -> int | None:
    from airflow.models.pool import Pool

    pool = Pool.get_pool(name)
    return None if pool is None else int(pool.slots)


def test_the_run_of_a_host_without_pool_creates_it_when_it_starts(airflow_db, tmp_path, caplog):
    from airflow.listeners.listener import get_listener_manager
    from airflow.models.dagrun import DagRun
    from airflow.utils.state import DagRunState

    from benchflow.hosts import pools as pool_listener

    host = f"gpu_new_{time.time_ns()}"
    spec = spec_for(tmp_path, host)
    dag = build_dag(spec)
    assert pool_slots(host_pool(host)) is None
    manager = get_listener_manager()
    assert pool_listener in manager.pm.get_plugins()  # the project's plugin registered it
    run = DagRun(dag_id=dag.dag_id, run_id="manual__new_host", run_type="manual", state=DagRunState.RUNNING)
    run.dag = dag
    with caplog.at_level(logging.WARNING):
        run.notify_dagrun_state_changed(msg="started")  # what the scheduler calls as it starts a queued run
    assert pool_slots(host_pool(host)) == 1
    assert f"pool {host_pool(host)} did not exist: created it with 1 slot" in caplog.text
    run.notify_dagrun_state_changed(msg="started")  # a second run: the pool is there, left as it is
    assert pool_slots(host_pool(host)) == 1


def test_an_existing_pool_is_left_as_its_operators_set_it(airflow_db, tmp_path):
    from airflow.models.dagrun import DagRun
    from airflow.models.pool import Pool
    from airflow.utils.state import DagRunState

    host = f"gpu_kept_{time.time_ns()}"
    Pool.create_or_update_pool(host_pool(host), 3, "set by an operator", include_deferred=False)
    run = DagRun(dag_id="bench_new_host", run_id="manual__kept", run_type="manual", state=DagRunState.RUNNING)
    run.dag = build_dag(spec_for(tmp_path, host))
    run.notify_dagrun_state_changed(msg="started")
    assert pool_slots(host_pool(host)) == 3


def test_in_the_schedulers_transaction_the_pool_is_written_with_its_commit(airflow_db, tmp_path):
    """The scheduler starts runs in a session that forbids any commit but its own (HA locks): the pool is added
    to that session, and exists once the scheduler commits."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.sqlalchemy import prohibit_commit
    from airflow.utils.state import DagRunState

    host = f"gpu_sched_{time.time_ns()}"
    dag = build_dag(spec_for(tmp_path, host))
    with create_session() as session, prohibit_commit(session) as guard:
        run = DagRun(dag_id=dag.dag_id, run_id=f"manual__{host}", run_type="manual", state=DagRunState.QUEUED)
        session.add(run)
        run.dag = dag
        run.state = DagRunState.RUNNING
        run.notify_dagrun_state_changed(msg="started")
        guard.commit()
    assert pool_slots(host_pool(host)) == 1


def test_a_starting_bisection_unpauses_the_campaign_it_probes_and_says_so(airflow_db, caplog):
    """Campaign DAGs start paused and a paused DAG's runs never start: a bisection's probes would wait for days.
    The listener unpauses the campaign its conf names as the scheduler starts the bisect run, and logs why; a run
    of any other DAG, or a conf naming no campaign, changes nothing."""
    from airflow.listeners.listener import get_listener_manager
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    from benchflow.searches import listener as bisect_listener

    assert bisect_listener in get_listener_manager().pm.get_plugins()
    campaign = f"paused_{time.time_ns()}"
    from airflow.models.dagbundle import DagBundleModel

    with create_session() as session:
        if session.get(DagBundleModel, "dags-folder") is None:
            session.add(DagBundleModel(name="dags-folder"))
            session.flush()
        session.add(DagModel(dag_id=f"bench_{campaign}", is_paused=True, bundle_name="dags-folder"))

    def paused() -> bool:
        with create_session() as session:
            return bool(session.get(DagModel, f"bench_{campaign}").is_paused)

    def start(dag_id: str, conf: dict) -> None:
        run = DagRun(dag_id=dag_id, run_id=f"manual__{time.time_ns()}", run_type="manual", conf=conf)
        run.state = DagRunState.RUNNING
        run.notify_dagrun_state_changed(msg="started")

    start("bench_other", {"campaign": campaign})  # not a bisection
    start("bench_bisect", {"campaign": "Robert'; --"})  # not a campaign name
    assert paused()
    with caplog.at_level(logging.WARNING):
        start("bench_bisect", {"campaign": campaign, "case": "m=64", "metric": "tok_per_s"})
    assert not paused()
    assert f"unpaused bench_{campaign}: this search's probes are runs of it" in caplog.text
