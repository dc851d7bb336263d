"""A benchmark that writes one 100 MB line without a newline (issue 20, High 4): each status check, the first check
of the wait, the deferred wait's stream and checks, and ``bench run``'s watcher read a bounded part of it, over the
real loopback sshd, and log a bounded line."""

from __future__ import annotations

import asyncio
import io
import logging
import shlex
import time
from types import SimpleNamespace

import pytest

from benchflow.hosts import get_host
from benchflow.operators import DoneMarkerSensor
from benchflow.remote import jobs, layout
from benchflow.triggers import DoneMarkerTrigger
from benchtools.runner.watch import READ_CHUNK, Watch, echo

pytestmark = pytest.mark.integration
LINE = 100_000_000  # bytes, no newline
DAG = "bench_long_line"
WRITER = (  # a 100 MB line, then another without newline, still being written
    f"import sys, time; sys.stdout.write('x' * {LINE} + '\\n' + 'z' * {LINE}); sys.stdout.flush(); time.sleep(120)"
)


@pytest.fixture
def long_line_job(sshd):
    """A job on the sshd host whose log is a 100 MB line, then another without newline; still running."""
    host = get_host("gpu_loopback")
    run_id = f"long:{time.time_ns()}"
    rundir = layout.run_dir(host.workdir, DAG, run_id)
    paths = layout.job_paths(rundir)
    host.check(f"mkdir -p {shlex.quote(rundir)}", 30, "mkdir")
    command = f"exec {shlex.quote(host.python)} -c {shlex.quote(WRITER)}"
    host.check(jobs.launch_command(paths, command, cwd=rundir, run_id=run_id), 60, "launch")
    deadline = time.monotonic() + 60
    size = f"stat -c %s {shlex.quote(paths.log_file)} 2>/dev/null || echo 0"
    while int(host.check(size, 30, "size").stdout.split()[0] or 0) < 2 * LINE + 1:
        assert time.monotonic() < deadline, "the writer did not write its line"
        time.sleep(0.2)
    yield host, run_id, rundir, paths
    host.check(jobs.kill_command(paths, grace_s=1), 60, "kill")


def test_status_and_log_tail_read_a_bounded_part_of_the_line(long_line_job):
    host, _, _, paths = long_line_job
    result = host.check(jobs.status_command(paths, "ALL_DONE"), 60, "status")
    assert len(result.stdout) < 2 * jobs.LINE_BYTES
    status = jobs.parse_status(result.stdout)
    assert status.alive and not status.marker
    assert status.last_line == "z" * jobs.LINE_BYTES
    tail = host.check(jobs.tail_command(paths.log_file), 60, "tail").stdout
    assert tail.strip() == "z" * jobs.LINE_BYTES


def logged(capfd, caplog) -> list[str]:
    """Everything the task (and the SSH hook under it) logged, as lines."""
    out, err = capfd.readouterr()
    return (out + err).splitlines() + [r.getMessage() for r in caplog.records]


def test_the_first_check_of_the_wait_logs_a_bounded_line(long_line_job, capfd, caplog):
    _, run_id, _, _ = long_line_job
    sensor = DoneMarkerSensor(
        task_id="wait_done", host_id="gpu_loopback", marker="ALL_DONE", benchmark_timeout=600, deferrable=False
    )
    capfd.readouterr()
    with caplog.at_level(logging.INFO):
        for _ in range(3):  # every check: the line is read again
            assert sensor.poke({"dag": SimpleNamespace(dag_id=DAG), "run_id": run_id}) is False
    lines = logged(capfd, caplog)
    assert sum("progress [check" in line for line in lines) >= 3, lines[-20:]
    assert max(len(line) for line in lines) < 2 * jobs.LINE_BYTES + 500, max(len(line) for line in lines)
    assert sum(len(line) for line in lines) < 100_000


def test_the_deferred_wait_streams_and_checks_bounded_lines(long_line_job, capfd, caplog):
    host, _, rundir, paths = long_line_job
    elapsed = jobs.parse_status(host.check(jobs.status_command(paths, "ALL_DONE"), 60, "status").stdout).elapsed_s
    trigger = DoneMarkerTrigger(  # a few checks, and the stream of the line, before its timeout
        host_id="gpu_loopback", rundir=rundir, marker="ALL_DONE", timeout_s=(elapsed or 0) + 45, check_interval=3
    )

    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    capfd.readouterr()
    with caplog.at_level(logging.INFO):
        event = asyncio.run(asyncio.wait_for(first(), 120))
    assert event["status"] == "timeout", str(event)[:500]  # the writer sleeps: killed at its timeout
    assert len(event["message"]) < 30 * jobs.LINE_BYTES
    lines = logged(capfd, caplog)
    assert sum("progress [check" in line for line in lines) >= 2
    assert event["lines"] == 1 and any("log: " + "x" * 900 in line for line in lines)  # the whole line, cut
    assert max(len(line) for line in lines) < jobs.STREAM_LINE_BYTES + 500, max(len(line) for line in lines)
    assert sum(len(line) for line in lines) < 200_000


def test_bench_runs_watcher_skips_a_line_longer_than_one_look(tmp_path):
    log = tmp_path / "run.log"
    with log.open("w") as handle:
        handle.write("2026-01-01T00:00:00Z [info     ] [DAG TEST] starting task_id=wait_done map_index=-1 [x]\n")
        handle.write("y" * (3 * READ_CHUNK))  # dag.test's log with a line that never ends (yet)
    watch = Watch("bench_x", "manual__1", log, io.StringIO(), tty=False)
    for _ in range(5):
        watch.read_log()
    assert watch.offset == log.stat().st_size  # read once, in bounded looks, never again from its start
    assert watch.current == "wait_done"
    shown, offset = io.StringIO(), 0
    for _ in range(5):  # bench run -v echoes the log: the line's start once, cut
        offset = echo(log, offset, shown, watch)
    assert offset == log.stat().st_size and len(shown.getvalue()) < 3 * 1100, len(shown.getvalue())
