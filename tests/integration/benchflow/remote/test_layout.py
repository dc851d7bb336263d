"""Two run ids that read alike (``coll:1``, ``coll_1``: both valid Airflow run ids) never share a run directory, a
lease or an artifact folder, and a launch never re-attaches to a job of another run (issue 20, High 3). Over the
real loopback sshd, through the launch operator."""

from __future__ import annotations

import shlex
import time
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException

from benchflow import artifacts
from benchflow.hosts import get_host
from benchflow.operators import AcquireHostSensor, LaunchBenchmarkOperator
from benchflow.remote import jobs, layout

pytestmark = pytest.mark.integration
DAG = "bench_collide"
TWINS = ("coll:1", "coll_1", "coll+1", "coll~1")


def test_run_ids_that_sanitise_alike_get_their_own_keys_dirs_leases_and_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_ARTIFACTS_URL", f"file://{tmp_path}/store")
    keys = {artifacts.run_key(run_id) for run_id in TWINS}
    assert len(keys) == len(TWINS)
    assert len({layout.run_dir("/w", DAG, run_id) for run_id in TWINS}) == len(TWINS)
    assert len({layout.lease_owner(DAG, run_id) for run_id in TWINS}) == len(TWINS)
    assert len({str(artifacts.store(DAG, run_id)) for run_id in TWINS}) == len(TWINS)
    key = artifacts.run_key("manual__2026-11-29T21:14:22+00:00")
    assert key.startswith("manual__2026-11-29T21_14_22_00_00-")  # still readable
    assert artifacts.run_key("manual__2026-11-29T21:14:22+00:00") == key  # and stable


def context(run_id: str) -> dict:
    return {"dag": SimpleNamespace(dag_id=DAG), "run_id": run_id, "params": {}}


def launcher(host_id: str) -> LaunchBenchmarkOperator:
    return LaunchBenchmarkOperator(
        task_id="launch_benchmark",
        host_id=host_id,
        script="emit.py",
        run_args={},
        output="results.jsonl",
        marker="ALL_DONE",
    )


def prepare(host, run_id: str) -> str:
    """The run's payload on the host: a script that writes where it ran into its output."""
    rundir = layout.run_dir(host.workdir, DAG, run_id)
    script = "import os, sys; open(sys.argv[sys.argv.index('--out') + 1], 'w').write(os.getcwd()); print('ALL_DONE')"
    host.check(
        f"mkdir -p {shlex.quote(rundir)}/payload && printf '%s\\n' {shlex.quote(script)} > "
        f"{shlex.quote(rundir)}/payload/emit.py",
        30,
        "payload",
    )
    return rundir


def finished(host, paths) -> jobs.JobStatus:
    deadline = time.monotonic() + 30
    while True:
        status = jobs.parse_status(host.check(jobs.status_command(paths, "ALL_DONE"), 30, "status").stdout)
        if status.exit_code is not None or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


def test_the_second_run_launches_its_own_job_over_ssh(sshd):
    host = get_host("gpu_loopback")
    first, second = f"coll:{time.time_ns()}", None
    second = first.replace(":", "_")
    dirs = [prepare(host, first), prepare(host, second)]
    assert dirs[0] != dirs[1]
    assert launcher("gpu_loopback").execute(context(first))["attached"] is False
    assert finished(host, layout.job_paths(dirs[0])).exit_code == 0
    # the old key sent this run into the first one's directory: it "re-attached" to the finished job
    assert launcher("gpu_loopback").execute(context(second))["attached"] is False
    assert finished(host, layout.job_paths(dirs[1])).exit_code == 0
    for rundir, run_id in zip(dirs, (first, second), strict=True):
        owner = host.check(jobs.owner_command(layout.job_paths(rundir)), 30, "owner").stdout
        assert jobs.parse_owner(owner) == run_id
        assert host.check(f"cat {shlex.quote(rundir)}/results.jsonl", 30, "out").stdout == f"{rundir}/payload"
    # a retry of the same run finds its own job and attaches
    assert launcher("gpu_loopback").execute(context(first))["attached"] is True


def test_a_job_of_another_run_in_the_directory_is_refused_not_attached(sshd):
    host = get_host("gpu_loopback")
    run_id = f"coll:{time.time_ns()}"
    rundir = prepare(host, run_id)
    assert launcher("gpu_loopback").execute(context(run_id))["attached"] is False
    paths = layout.job_paths(rundir)
    assert finished(host, paths).exit_code == 0
    for found in ("coll_1", None):  # another run's job, or one that names no run (an older layout, by hand)
        write = f"printf '%s\\n' {shlex.quote(found)} >" if found else "rm -f"
        host.check(f"{write} {shlex.quote(layout.owner_file(paths))}", 30, "forge")
        with pytest.raises(AirflowFailException, match="refusing to re-attach") as refused:
            launcher("gpu_loopback").execute(context(run_id))
        assert (repr(found) if found else "no run id") in str(refused.value)
        assert repr(run_id) in str(refused.value) and paths.job_dir in str(refused.value)


def test_two_lookalike_runs_do_not_share_the_hosts_lease(sshd):
    first, second = "coll:1", "coll_1"
    sensor = AcquireHostSensor(task_id="acquire_host", host_id="gpu_loopback", lease_ttl_s=600)
    assert sensor.poke(context(first)) is True
    try:
        assert sensor.poke(context(second)) is False  # the old owner was the same for both: it was "re-entrant"
    finally:
        from benchflow.remote import cleanup

        cleanup.release_host(get_host("gpu_loopback"), layout.lease_owner(DAG, first))
