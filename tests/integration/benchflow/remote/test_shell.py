"""The command builders against a real bash: detached launch, status, kill of the whole group."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchflow.hosts.local import LocalHost
from benchflow.remote import jobs, layout, lease, preflight
from tests.conftest import live_group_members

pytestmark = pytest.mark.integration


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def group_alive(pgid: int) -> bool:
    return bool(live_group_members(pgid))


@pytest.fixture
def host(tmp_path):
    return LocalHost(workdir=tmp_path / "host")


def launch(host, command, name="job"):
    rundir = f"{host.workdir}/d/r"
    paths = layout.job_paths(rundir, name)
    host.check(f"mkdir -p {rundir}", 10, "mkdir")
    pid = int(host.check(jobs.launch_command(paths, command, cwd=rundir), 30, "launch").stdout.split()[-1])
    return paths, pid


def status(host, paths, marker="ALL_DONE"):
    return jobs.parse_status(host.check(jobs.status_command(paths, marker), 30, "status").stdout)


def test_job_writes_marker_and_exit_code(host):
    paths, pid = launch(host, "echo step1; echo ALL_DONE")
    assert wait_for(lambda: not status(host, paths).alive)
    final = status(host, paths)
    assert final.marker and final.exit_code == 0 and not final.alive and final.pid == pid
    assert final.last_line == "ALL_DONE"
    assert final.elapsed_s is not None and final.elapsed_s >= 0


def test_job_that_dies_without_marker_is_seen_dead(host):
    paths, _ = launch(host, "echo working; exit 7")
    assert wait_for(lambda: not status(host, paths).alive)
    final = status(host, paths)
    assert not final.marker and final.exit_code == 7


def test_kill_ends_the_whole_process_group(host):
    paths, pid = launch(host, "sleep 300 & sleep 300; echo never")
    assert status(host, paths).alive and group_alive(pid)
    host.check(jobs.kill_command(paths, grace_s=2), 30, "kill")
    assert wait_for(lambda: not group_alive(pid), timeout=5)
    assert not status(host, paths).alive


def test_kill_escalates_to_sigkill_when_term_is_ignored(host):
    paths, pid = launch(host, "trap '' TERM; sleep 300 & trap '' TERM; while true; do sleep 1; done")
    host.check(jobs.kill_command(paths, grace_s=0.5), 30, "kill")
    assert wait_for(lambda: not group_alive(pid), timeout=5)


def test_quoted_values_reach_the_program_as_data(host, tmp_path):
    evil = "x; touch pwned; $(touch pwned2) `touch pwned3`"
    args = layout.render_args({"name": evil})
    paths, _ = launch(host, f"printf '%s\\n' {args}")
    assert wait_for(lambda: status(host, paths).exit_code is not None)
    log = open(paths.log_file).read()
    assert evil in log
    assert not any((tmp_path / "host" / "d" / "r" / f).exists() for f in ("pwned", "pwned2", "pwned3"))


def test_preflight_reports_facts_of_this_machine(host):
    command = preflight.facts_command(host.python, host.workdir)
    facts = preflight.parse_facts(host.check(command, 60, "preflight").stdout)
    assert facts["gpu"] == "none" and facts["gpu_count"] == "0"
    assert facts["torch"].startswith("2.")


def take_lease(host, owner, ttl=3600):
    return host.check(lease.acquire_command(host.workdir, owner, ttl), 60, "lease").stdout.split()[:2]


def release(host, owner):
    return host.check(lease.release_command(host.workdir, owner), 60, "release").stdout.strip()


def test_host_lease_one_holder_reentrant_released_by_its_owner_only(host):
    assert take_lease(host, "bench_a/run1") == ["acquired", "bench_a/run1"]
    assert take_lease(host, "bench_b/run1") == ["held", "bench_a/run1"]
    assert take_lease(host, "bench_a/run1") == ["acquired", "bench_a/run1"]  # a retry of the holder
    assert release(host, "bench_b/run1").startswith("held bench_a/run1")  # not b's to give back
    assert take_lease(host, "bench_b/run1") == ["held", "bench_a/run1"]
    assert release(host, "bench_a/run1") == "released"
    assert release(host, "bench_a/run1") == "not held"
    assert take_lease(host, "bench_b/run1") == ["acquired", "bench_b/run1"]


def test_an_expired_lease_is_taken_over(host):
    assert take_lease(host, "bench_a/crashed", ttl=-10) == ["acquired", "bench_a/crashed"]
    assert take_lease(host, "bench_b/run1") == ["acquired", "bench_b/run1"]


def test_racing_campaigns_get_one_lease(host):
    import subprocess

    owners = [f"bench_{i}/run" for i in range(12)]
    procs = [
        subprocess.Popen(
            ["bash", "-c", lease.acquire_command(host.workdir, o, 3600)], text=True, stdout=subprocess.PIPE
        )
        for o in owners
    ]
    outcomes = [proc.communicate(timeout=60)[0].split()[0] for proc in procs]
    assert outcomes.count("acquired") == 1 and outcomes.count("held") == 11


def test_lease_owner_is_validated_before_reaching_a_shell():
    with pytest.raises(ValueError, match="lease owner"):
        lease.acquire_command("/tmp/w", "bench_a/x; rm -rf ~", 60)


def test_a_full_disk_never_reports_the_lease_acquired(host):
    """Writes to /dev/full fail with ENOSPC, as on a full disk: two campaigns racing both get an error."""
    workdir = Path(host.workdir)
    for owner in ("bench_a/run1", "bench_b/run1"):
        (workdir / f"{lease.LEASE_FILE}.new").symlink_to("/dev/full")  # still full at each attempt
        result = host.run(lease.acquire_command(host.workdir, owner, 3600), 60)
        assert result.rc == 74 and "acquired" not in result.stdout
        assert "cannot write the host lease (disk full?)" in result.stderr
    assert not (workdir / lease.LEASE_FILE).exists()


def test_preflight_fails_on_a_workdir_that_cannot_be_written(host):
    (Path(host.workdir) / ".bench-write-probe").symlink_to("/dev/full")
    result = host.run(preflight.facts_command(host.python, host.workdir), 60)
    assert result.rc == 74 and "cannot be written (disk full or read-only)" in result.stderr


def test_the_progress_line_is_the_newest_line_that_is_not_a_librarys_noise(host):
    """A client's start-up chatter (vLLM's import warning, its INFO lines, a Python warning and its source line)
    never becomes the progress line; the newest line the benchmark itself printed does."""
    noise = [
        "===== single c=4 (n=16) =====",
        "INFO 12-02 17:00:00 [__init__.py:239] Automatically detected platform cpu.",
        "WARNING 12-02 17:00:01 [_custom_ops.py:21] Failed to import from vllm._C with ModuleNotFoundError",
        "/x/site-packages/torch/cuda/__init__.py:61: FutureWarning: The pynvml package is deprecated.",
        "  warnings.warn(",
        "[2026-12-02 17:00:02,123] INFO loading tokenizer",
        "",
    ]
    script = "; ".join(f"echo {line!r}" for line in noise) + "; sleep 30"
    paths, _ = launch(host, script)
    assert wait_for(lambda: status(host, paths).last_line == "===== single c=4 (n=16) =====")
    assert status(host, paths).alive
    host.check(jobs.kill_command(paths, grace_s=1), 30, "kill")


def test_a_recycled_pid_is_never_taken_for_the_job(host):
    """A job that exited long ago: its pid file's number now belongs to another job's group (pids recycle within
    minutes where pid_max is 32,768). Its status says it is gone, and a kill of it signals nothing of the other."""
    import subprocess

    paths, _ = launch(host, "echo done early")
    assert wait_for(lambda: not status(host, paths).alive)
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)  # a group leader that started later
    try:
        Path(paths.pid_file).write_text(str(other.pid))  # as if the number had come round to it
        assert not status(host, paths).alive
        host.check(jobs.kill_command(paths, grace_s=0.5), 30, "kill")
        assert other.poll() is None and group_alive(other.pid)  # the other group lives on
    finally:
        other.kill()
        other.wait()
