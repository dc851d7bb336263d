"""``bench run``, quiet: one line per task as it starts and ends, the wait's progress on one line, then the
table and where the results are. Airflow's own logs go to ``var/logs/bench-run-<dag>-<time>.log`` (``-v``
shows them as well).

The run itself is ``dag.test()`` in a child process (:mod:`.child`, its own session, its output into the log
file); this process watches the run's task instances and the log file (:mod:`.watch`, :mod:`.metadata`) and
prints the outcome (:mod:`.report`). Ctrl-C or SIGTERM ends the child, then undoes on the host what the run's
teardowns would have done (each teardown whose setup had started, through :mod:`benchflow.remote.cleanup`: stop the
benchmark's process group, stop servers, restore the services, release the host) and marks the run failed
through Airflow's models, so nothing is left running on the host and its services are back.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING

from benchflow.hosts.local import end_session
from benchtools.runner import metadata
from benchtools.runner.outcome import report
from benchtools.runner.watch import STARTED, Watch, clock, echo, log_path

if TYPE_CHECKING:
    from benchflow.spec import CampaignSpec

POLL_S = 0.3


def run_id_at(when: datetime) -> str:
    """The id of the run ``bench run`` makes at ``when`` (dag.test names it by its logical date)."""
    return f"manual__{when.isoformat()}"


def run(
    spec: CampaignSpec,
    spec_path: Path,
    conf: str | None,
    verbose: bool = False,
    out: IO[str] | None = None,
    when: datetime | None = None,
) -> int:
    """Run ``spec`` once through Airflow, quietly; returns the exit code of ``bench run``. ``when``: the run's
    logical date (its id is :func:`run_id_at` of it), now by default."""
    out = out or sys.stdout
    when = when or datetime.now(UTC)
    run_id = run_id_at(when)
    logs = log_path(spec.dag_id, when)
    result_file = logs.with_suffix(".result.json")
    print(f"bench run {spec.name}: {spec.dag_id} on host {spec.host}, run {run_id}", file=out)
    print(f"Airflow logs: {logs}" + ("" if verbose else "  (bench run -v shows them here)"), file=out)
    print(f"{clock()}  setting up: Airflow's metadata DB, the host pools, the warehouse", file=out, flush=True)
    started = time.monotonic()
    command = [
        sys.executable,
        "-m",
        "benchtools.runner.child",
        str(spec_path),
        when.isoformat(),
        conf or "",
        str(result_file),
    ]
    with logs.open("ab") as log_handle:
        child = subprocess.Popen(command, stdout=log_handle, stderr=subprocess.STDOUT, start_new_session=True)
    watch = Watch(spec.dag_id, run_id, logs, out, out.isatty())
    stop: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: stop.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        _follow(child, watch, stop, verbose)
        if stop:
            return _interrupted(spec, run_id, child, stop[0], watch)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return report(spec, run_id, result_file, logs, watch, time.monotonic() - started)


def _follow(child: subprocess.Popen[bytes], watch: Watch, stop: list[int], verbose: bool) -> None:
    """Until the child ends or a signal comes: task lines and the wait's progress (and, with ``-v``, the log)."""
    echo_offset = 0
    while child.poll() is None and not stop:
        time.sleep(POLL_S)
        if verbose:
            echo_offset = echo(watch.log_file, echo_offset, watch.out, watch)
        watch.update(metadata.task_states(watch.dag_id, watch.run_id))
        watch.read_log()
        watch.progress()
    if not stop:
        if verbose:
            echo(watch.log_file, echo_offset, watch.out, watch)
        watch.read_log()
        watch.update(metadata.task_states(watch.dag_id, watch.run_id))


def _interrupted(spec: CampaignSpec, run_id: str, child: subprocess.Popen[bytes], signum: int, watch: Watch) -> int:
    """Stop the child (its whole process group), undo what the run's started setups did on the host, fail the run."""
    from benchflow.factory import build_dag
    from benchflow.remote import cleanup

    name = signal.Signals(signum).name
    watch.say(f"\n{clock()}  {name}: stopping the run, its benchmark, and restoring the services")
    _end_group(child)
    states = _states(spec.dag_id, run_id, watch)
    host = metadata.run_host(spec.dag_id, run_id) or spec.host  # where the run ran, never the pool's first
    problems = cleanup.undo_started(
        build_dag(spec), run_id, states, lambda line: watch.say(f"{clock()}  {line}"), STARTED, host
    )
    metadata.mark_failed(spec.dag_id, run_id)
    watch.say(f"run {run_id} stopped by {name}" + (f"; {len(problems)} clean-up step(s) failed" if problems else ""))
    watch.say(f"Airflow logs: {watch.log_file}")
    return 128 + signum


def _states(dag_id: str, run_id: str, watch: Watch, tries: int = 5) -> dict[str, str | None]:
    """The run's task states for the clean-up: the metadata DB's, read again while it answers nothing (a busy or
    briefly unreachable database), over what this process last saw of them, so that a setup known to have run is
    never taken for one that did not."""
    seen: dict[str, str | None] = {task_id: view.state for task_id, view in watch.tasks.items() if view.state}
    for attempt in range(tries):
        found = metadata.task_states(dag_id, run_id)
        if found:
            return seen | {task_id: state for task_id, state, _, _ in found}
        time.sleep(0.5 * (attempt + 1))
    return seen


def _end_group(child: subprocess.Popen[bytes]) -> None:
    """End the child's whole process group at once (SIGKILL), never after it was reaped (its group id may then be
    another's). Not TERM: the child's ``dag.test()`` answers TERM with the running task's ``on_kill`` and goes on to
    run the DAG's teardowns, racing this process's own clean-up (a teardown done twice, or done by the child and so
    skipped here); KILL leaves the clean-up to one actor, :func:`_interrupted`."""
    end_session(child)


__all__ = ["Watch", "run"]
