"""Undoing a run on its host, as plain functions: end the benchmark's process group, stop a config's servers,
restore the services, give the host's lease back. The teardown operators call them from a DAG run, and
``bench run`` calls them (through :func:`undo_started`) when a signal ends a run before its teardowns ran.

Each takes a :class:`~benchflow.hosts.Host` and the run's paths on it, and returns what it did in a line of text.
A step that has nothing to undo (the benchmark already exited, the lease is someone else's) says so and
succeeds; a step that cannot do its work raises :class:`~benchflow.hosts.HostError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from benchflow.hosts.base import RUN_HOST
from benchflow.remote import jobs, lease

if TYPE_CHECKING:
    from airflow.providers.ssh.utils.remote_job import RemoteJobPaths

    from benchflow.hosts import Host
    from benchflow.spec import Service

EXIT_GRACE_S = 30.0  # a benchmark that printed its marker gets this long to exit by itself


def stop_job(host: Host, paths: RemoteJobPaths, marker: str = "-", exit_grace_s: float = EXIT_GRACE_S) -> str:
    """End a job's whole process group if anything of it is still alive (TERM, then KILL).

    A job that has printed its marker is still exiting: it gets ``exit_grace_s`` to finish and write its exit
    code before anything is killed."""
    status = jobs.parse_status(host.check(jobs.status_command(paths, marker), 60, "status").stdout)
    if status.alive and status.marker:
        host.run(jobs.wait_exit_command(paths, exit_grace_s), exit_grace_s + 30)
        status = jobs.parse_status(host.check(jobs.status_command(paths, marker), 60, "status").stdout)
    if not status.alive:
        return f"{paths.job_id} not running (exit {status.exit_code})"
    host.check(jobs.kill_command(paths), timeout=60, what=f"stop {paths.job_id}")
    return f"{paths.job_id}: process group {status.pid} ended (TERM, then KILL)"


def stop_jobs(host: Host, jobs_in_order: Iterable[RemoteJobPaths]) -> list[str]:
    """Stop several jobs (a config's router first, then its servers), each whatever happened to the others."""
    return [stop_job(host, paths, exit_grace_s=0) for paths in jobs_in_order]


def restore_services(host: Host, services: Iterable[Service], timeout: float = 300) -> list[str]:
    """Start again the services a run stopped, in the spec's order."""
    done = []
    for service in services:
        host.check(service.start, timeout=timeout, what=f"start service {service.name!r}")
        done.append(service.name)
    return done


def on_run_host(dag: Any, host: str) -> None:
    """Point every host task of ``dag`` whose host is its run's pick (the unrendered ``{{ params.host }}``) at
    ``host``, checked against the campaign's hosts: the clean-up of a run acts where the run ran."""
    for task in dag.tasks:
        if getattr(task, "host_id", None) != RUN_HOST:
            continue
        if host not in (getattr(task, "host_ids", None) or [host]):
            raise ValueError(f"host {host!r} of the run is not one of the campaign's hosts {task.host_ids}")
        task.host_id = host
        task.__dict__.pop("host", None)  # a Host resolved before, from the default


def release_host(host: Host, owner: str) -> str:
    """Give the host's lease back if ``owner`` holds it: ``released``, ``not held`` or who holds it."""
    return host.check(lease.release_command(host.workdir, owner), 60, "release the host lease").stdout.strip()


def undo_started(
    dag: Any,
    run_id: str,
    states: dict[str, str | None],
    say: Callable[[str], None],
    started: Iterable[str],
    host: str | None = None,
) -> list[str]:
    """What a run's teardowns would have done, for a run ended before they ran: each teardown task of ``dag``
    whose setup had started (its state in ``started``) and that has not itself finished, in the DAG's order,
    through the task's :meth:`undo`, on ``host``: the host the run itself used (its ``host`` param), which a
    campaign with a pool of hosts names only in the run, never in the DAG. Returns the task ids whose clean-up
    failed."""
    if host is not None:
        on_run_host(dag, host)
    problems: list[str] = []
    began = set(started)
    for task in _in_order(dag):
        if not getattr(task, "is_teardown", False) or states.get(task.task_id) in ("success", "skipped"):
            continue
        setups = [t for t in task.upstream_list if getattr(t, "is_setup", False)]
        if setups and not any(states.get(t.task_id) in began for t in setups):
            continue
        try:
            outcome = task.undo(dag.dag_id, run_id)
        except Exception as exc:  # one failed step must not keep the others from running
            problems.append(task.task_id)
            say(f"FAIL    {task.task_id:<28} clean-up failed: {exc}")
            continue
        say(f"ok      {task.task_id:<28} clean-up: {outcome}")
    return problems


def _in_order(dag: Any) -> list[Any]:
    """The DAG's tasks, each after its upstream tasks."""
    tasks = {t.task_id: t for t in dag.tasks}
    done: list[Any] = []
    seen: set[str] = set()

    def visit(task_id: str) -> None:
        if task_id in seen:
            return
        seen.add(task_id)
        for upstream in sorted(tasks[task_id].upstream_task_ids):
            visit(upstream)
        done.append(tasks[task_id])

    for task_id in tasks:
        visit(task_id)
    return done
