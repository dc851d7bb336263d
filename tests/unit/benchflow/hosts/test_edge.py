"""Edge hosts (benchflow.hosts.edge): a spec's ``edge:<queue>`` host sends the host tasks to that Edge worker's queue,
a pool of them is routed per run by the scheduler's policy, and they share a campaign with no other kind of host."""

from __future__ import annotations

import re

import pytest

from benchflow.spec import SpecError, load_spec
from tests.unit.benchflow.test_spec import GOOD, write

pytestmark = pytest.mark.unit


def test_an_edge_host_sends_the_host_tasks_to_its_queue_and_waits_there_without_the_triggerer(tmp_path):
    """host: edge:<queue> is the Edge worker of that queue: every host task goes to it (the Edge executor), the
    rest of the run to the default executor, and the wait checks the log there in reschedule mode."""
    from benchflow.factory import build_dag

    dag = build_dag(load_spec(write(tmp_path, GOOD.replace("host: local", "host: edge:gpu_edge"))), register=False)
    on_edge = {t.task_id for t in dag.tasks if (t.executor, t.queue) == ("EdgeExecutor", "gpu_edge")}
    assert {"acquire_host", "launch_benchmark", "wait_done", "fetch_artifacts", "release_host"} <= on_edge
    assert {"parse", "validate", "load"}.isdisjoint(on_edge) and dag.task_dict["parse"].executor is None
    wait = dag.task_dict["wait_done"]
    assert (wait.deferrable, wait.mode, wait.poke_interval) == (False, "reschedule", 15.0)  # 5 s asked: see factory
    assert dag.task_dict["acquire_host"].poke_interval >= 15.0
    local = build_dag(load_spec(write(tmp_path, GOOD)), register=False)
    assert local.task_dict["wait_done"].executor is None and local.task_dict["wait_done"].deferrable


@pytest.mark.parametrize(
    ("host", "says"),
    [
        ("host: edge:gpu_edge\nhosts: [edge:gpu_edge, gpu_b]", "Edge hosts (edge:<queue>) and other hosts cannot"),
        ("host: edge:bad;queue", "host"),
        ("host: edge:", "host"),
    ],
)
def test_edge_hosts_share_a_campaign_with_no_other_kind_of_host_and_are_queue_names(tmp_path, host, says):
    with pytest.raises(SpecError, match=re.escape(says)):
        load_spec(write(tmp_path, GOOD.replace("host: local", host)))


def test_a_run_of_a_pool_of_edge_hosts_goes_to_the_queue_of_the_host_it_picked(tmp_path):
    """The scheduler's policy (benchflow.hosts.edge) moves a run's host tasks to the Edge queue of its host param; a
    scheduled run (no conf) keeps the default host's queue, and tasks off the host are never moved."""
    from benchflow.factory import build_dag
    from benchflow.hosts.edge import edge_queue_of_run

    pool = GOOD.replace("host: local", "host: edge:gpu_a\nhosts: [edge:gpu_a, edge:gpu_b]")
    dag = build_dag(load_spec(write(tmp_path, pool)), register=False)
    launch, parse = dag.task_dict["launch_benchmark"], dag.task_dict["parse"]
    assert (launch.executor, launch.queue) == ("EdgeExecutor", "gpu_a")  # the default host's
    assert edge_queue_of_run(launch, {"host": "edge:gpu_b"}) == "gpu_b"
    assert edge_queue_of_run(launch, {}) is None and edge_queue_of_run(launch, None) is None
    assert edge_queue_of_run(parse, {"host": "edge:gpu_b"}) is None
    single = build_dag(load_spec(write(tmp_path, GOOD.replace("host: local", "host: edge:gpu_a"))), register=False)
    assert edge_queue_of_run(single.task_dict["launch_benchmark"], {"host": "edge:gpu_b"}) is None  # no host param


def test_an_edge_spec_in_a_deployment_without_the_edge_executor_is_refused_alone(tmp_path):
    """This process runs Airflow's default executor alone (as a deployment without Edge does): the Edge spec is
    refused naming the missing executor, through the DAG file's path (bench validate's too), and every other
    campaign of the folder is built."""
    from airflow.configuration import conf

    from benchflow.factory import build_all

    assert "Edge" not in conf.get("core", "executor")  # the premise: no Edge executor here
    write(tmp_path, GOOD.replace("host: local", "host: edge:gpu_edge"), "on_edge")
    write(tmp_path, GOOD, "on_local")
    dags, errors = build_all(register=False, folder=tmp_path)
    assert [d.dag_id for d in dags] == ["bench_on_local"]
    (error,) = errors
    assert error.path.name == "on_edge.yaml" and "host: 'edge:gpu_edge' needs the EdgeExecutor" in str(error)
    assert "which this deployment does not run ([core] executor = " in str(error), str(error)
