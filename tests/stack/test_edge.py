"""GPU hosts that take no inbound SSH: the stack's Edge worker (``airflow edge worker``: its own queue, its own var
folder standing in for the GPU host's disk, no metadata DB) runs the host tasks of the campaigns on host
``edge:gpu_edge`` through the local transport; the rest of each run (parse, validate, load) runs on Celery."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchflow.remote import layout
from benchflow.warehouse import Warehouse
from tests.conftest import live_group_members, wait_for
from tests.stack.conftest import EDGE_QUEUE
from tests.stack.test_stack import lease_interval

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]  # a whole stack's start, then campaign runs


@pytest.fixture(scope="module")
def edge_var(stack) -> Iterator[Path]:
    yield stack.start_edge_worker(EDGE_QUEUE, "gpu-node-1")
    stack.kill_edge_worker()  # a worker told to stop drains first: gone at once, as a host that is switched off


def bench_job(edge_var: Path, dag_id: str, run_id: str) -> tuple[Path, Path]:
    """The pid file and log of a run's benchmark on the Edge host."""
    workdir = str(edge_var / "hosts" / f"edge-{EDGE_QUEUE}")
    paths = layout.job_paths(layout.run_dir(workdir, dag_id, run_id))
    return Path(paths.pid_file), Path(paths.log_file)


def started(stack, edge_var: Path, dag_id: str, conf: dict) -> tuple[tuple[str, str], int]:
    """Trigger ``dag_id`` and wait until its benchmark printed its first row on the Edge host: the run and the
    benchmark's process group."""
    reply = stack.trigger(dag_id, conf)
    assert reply.status_code == 200, reply.text
    run = (dag_id, reply.json()["dag_run_id"])
    pid_file, log = bench_job(edge_var, *run)
    wait_for(lambda: log.exists() and "0.500" in log.read_text(), 600, f"{dag_id}'s first row", every=0.5)
    return run, int(pid_file.read_text())


def test_campaigns_on_an_edge_host_run_there_one_at_a_time_and_a_killed_benchmark_fails_its_wait(stack, edge_var):
    """The shipped moe_kernel_local, retargeted at edge:gpu_edge, loads its rows; edge_fault, queued behind it on
    the same host, has its benchmark killed mid-run: its wait fails with the log tail and its teardowns run."""
    reply = stack.trigger("bench_edge_moe")
    assert reply.status_code == 200, reply.text
    moe = ("bench_edge_moe", reply.json()["dag_run_id"])
    fault, pgid = started(stack, edge_var, "bench_edge_fault", {"rows": 30})
    os.killpg(pgid, signal.SIGKILL)
    states = stack.wait_runs([moe, fault], timeout=600)
    assert states == {moe: "success", fault: "failed"}, stack.failures([moe, fault])

    failed = stack.failures([fault], chars=4000)
    assert "wait_done" in failed and "without writing 'ALL_DONE'" in failed and "last 20 log lines" in failed, failed
    assert "M ms/call" in failed, failed  # the benchmark's own lines, read on the Edge host
    for run in (moe, fault):
        tis = stack.task_instances(*run)
        teardowns = {t: tis[t]["state"] for t in ("stop_benchmark", "restore_services", "release_host")}
        assert set(teardowns.values()) == {"success"}, (run, teardowns, stack.failures([run]))
        for task in ("acquire_host", "launch_benchmark", "wait_done", "fetch_artifacts", "release_host"):
            assert (tis[task]["queue"], tis[task]["executor"]) == (EDGE_QUEUE, "EdgeExecutor"), task
        assert tis["parse"]["queue"] != EDGE_QUEUE, tis["parse"]
    first, second = sorted([lease_interval(stack, *moe), lease_interval(stack, *fault)])
    assert first[1] <= second[0], f"two campaigns held the Edge host at once: {first} {second}"
    assert live_group_members(pgid) == []

    warehouse = Warehouse.at(stack.var / "warehouse.duckdb")
    loaded = warehouse.query("SELECT status, rows_loaded, host FROM runs WHERE run_id = ?", [moe[1]])
    assert [tuple(r) for r in loaded.itertuples(index=False)] == [("ok", 9, f"edge:{EDGE_QUEUE}")], loaded
    # the Edge worker fetched into the store every worker reads, not onto its own disk
    assert not (edge_var / "artifacts").exists()
    assert any((stack.var / "artifacts" / "bench_edge_moe").rglob("results.jsonl"))


def test_a_killed_edge_worker_leaves_nothing_running_on_its_host_once_it_is_back(stack, edge_var):
    """A run of a pool of two Edge hosts picks edge:gpu_edge (the default, edge:gpu_far, has no worker: the run
    only goes on if the scheduler sent its host tasks to gpu_edge's queue). Its Edge worker dies (SIGKILL) while
    the benchmark runs, and comes back: the run ends, its teardowns run on the worker, the benchmark is not
    running."""
    run, pgid = started(stack, edge_var, "bench_edge_pool", {"host": f"edge:{EDGE_QUEUE}", "rows": 12})
    stack.kill_edge_worker()
    stack.start_edge_worker(EDGE_QUEUE, "gpu-node-1-again")  # as the host comes back
    stack.wait_runs([run], timeout=600)
    tis = stack.task_instances(*run)
    assert {t: tis[t]["state"] for t in ("stop_benchmark", "release_host")} == {
        "stop_benchmark": "success",
        "release_host": "success",
    }, stack.failures([run])
    assert live_group_members(pgid) == []
