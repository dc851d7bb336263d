"""Operators for the remote steps of a campaign. Each works on one host through :mod:`benchflow.hosts`.

All of a run's state lives in its run directory on the host (``<workdir>/<dag_id>/<run key>``), so
any task can be retried or cleared and find what it needs there.
"""

from __future__ import annotations

import shlex
from datetime import timedelta
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from benchflow import remote
from benchflow.hosts import Host, HostError, get_host
from benchflow.manifest import MANIFEST_NAME
from benchflow.paths import artifacts_dir, kernels_dir

LOG_TAIL_LINES = 20
BENCH_JOB = "bench"


class HostOperator(BaseOperator):
    """Base for a step on a benchmark host: knows the host and the run's directory on it."""

    ui_color = "#e8f0fe"

    def __init__(self, *, host_id: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.host_id = host_id

    @cached_property
    def host(self) -> Host:
        return get_host(self.host_id)

    def rundir(self, context: Any) -> str:
        return remote.run_dir(self.host.workdir, context["dag"].dag_id, context["run_id"])

    def job(self, context: Any) -> Any:
        return remote.job_paths(self.rundir(context), BENCH_JOB)

    def log_tail(self, context: Any, lines: int = LOG_TAIL_LINES) -> str:
        return self.host.run(remote.tail_command(self.job(context).log_file, lines), timeout=60).stdout


class PreflightOperator(HostOperator):
    """Host facts (GPUs, driver, disk, python/torch versions); fails when the payload cannot run there."""

    def execute(self, context: Any) -> dict[str, str]:
        result = self.host.check(
            remote.preflight_command(self.host.python, self.host.workdir),
            timeout=self.execution_timeout.total_seconds() if self.execution_timeout else 120,
            what="preflight (python and torch must import on the host)",
        )
        facts = remote.parse_facts(result.stdout)
        for key, value in sorted(facts.items()):
            self.log.info("host fact %s = %s", key, value)
        return facts


class ServicesOperator(HostOperator):
    """Stop the services that hold the GPUs (``action='stop'``) or start them again (``'start'``).

    A stop that fails part-way starts again what it had stopped before failing, since a teardown
    only runs after its setup succeeded.
    """

    def __init__(self, *, services: list[dict[str, str]], action: str, **kwargs: Any):
        super().__init__(**kwargs)
        if action not in ("stop", "start"):
            raise ValueError(f"action must be 'stop' or 'start', got {action!r}")
        self.services = services
        self.action = action

    def _run(self, service: dict[str, str], action: str) -> None:
        self.log.info("%s service %s: %s", action, service["name"], service[action])
        self.host.check(service[action], timeout=300, what=f"{action} service {service['name']!r}")

    def execute(self, context: Any) -> list[str]:
        if not self.services:
            self.log.info("no services to %s on host %s", self.action, self.host_id)
            return []
        if self.action == "start":
            failures = []
            for service in self.services:
                try:
                    self._run(service, "start")
                except HostError as exc:
                    failures.append(str(exc))
            if failures:
                raise AirflowFailException("could not restore every service:\n" + "\n".join(failures))
            return [s["name"] for s in self.services]
        stopped: list[dict[str, str]] = []
        for service in self.services:
            try:
                self._run(service, "stop")
            except HostError:
                for done in reversed(stopped):
                    self._run(done, "start")
                raise
            stopped.append(service)
        return [s["name"] for s in stopped]


class DeployPayloadOperator(HostOperator):
    """Copy ``kernels/<payload>`` into ``<run dir>/payload`` with a sha256 manifest; unchanged files stay."""

    def __init__(self, *, payload: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.payload = payload

    def execute(self, context: Any) -> dict[str, Any]:
        target = f"{self.rundir(context)}/payload"
        report = self.host.put_tree(kernels_dir() / self.payload, target)
        self.log.info(
            "payload %s: %d files, %d copied, sha256 %s (manifest: %s/%s)",
            self.payload, report.files, len(report.copied), report.payload_sha256, target, MANIFEST_NAME,
        )  # fmt: skip
        return {"payload_sha256": report.payload_sha256, "files": report.files, "copied": report.copied}


class LaunchBenchmarkOperator(HostOperator):
    """Start the payload's bench script detached; re-attach when this run's job already exists.

    The script is called as ``python <script> <args> --out <run dir>/<output> --marker <marker>``.
    """

    def __init__(self, *, script: str, args: dict[str, Any], output: str, marker: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.script, self.args, self.output_file, self.marker = script, args, output, marker

    def execute(self, context: Any) -> dict[str, Any]:
        paths = self.job(context)
        status = remote.parse_status(self.host.check(remote.status_command(paths, self.marker), 60, "status").stdout)
        if status.alive or status.exit_code is not None:
            self.log.info("job of this run already exists (pid %s, exit %s): attaching", status.pid, status.exit_code)
            return {"pid": status.pid, "attached": True}
        rundir = self.rundir(context)
        command = (
            f"exec {shlex.quote(self.host.python)} {shlex.quote(self.script)} {remote.render_args(self.args)}"
            f" --out {shlex.quote(f'{rundir}/{self.output_file}')} --marker {shlex.quote(self.marker)}"
        )
        self.log.info("launching on %s: %s", self.host_id, command)
        launch = remote.launch_command(paths, command, cwd=f"{rundir}/payload", env={"PYTHONUNBUFFERED": "1"})
        pid = self.host.check(launch, timeout=60, what="launch benchmark").stdout.strip().splitlines()[-1]
        self.log.info("benchmark running as process group %s; log %s", pid, paths.log_file)
        return {"pid": int(pid), "attached": False}


class StopBenchmarkOperator(HostOperator):
    """Teardown: end the benchmark's whole process group if anything of it is still alive."""

    def execute(self, context: Any) -> None:
        paths = self.job(context)
        status = remote.parse_status(self.host.run(remote.status_command(paths, "ALL_DONE"), 60).stdout)
        if not status.alive:
            self.log.info("benchmark not running (exit %s)", status.exit_code)
            return
        self.log.warning("benchmark process group %s still alive: TERM, then KILL", status.pid)
        self.host.check(remote.kill_command(paths), timeout=60, what="kill benchmark")


class FetchArtifactsOperator(HostOperator):
    """Copy the log and the result file(s) of the run here; missing files are reported, not fatal."""

    def __init__(self, *, output: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.output_file = output

    def execute(self, context: Any) -> dict[str, Any]:
        rundir = self.rundir(context)
        local = artifacts_dir(context["dag"].dag_id, remote.run_key(context["run_id"]))
        wanted = {
            "bench.log": self.job(context).log_file,
            self.output_file: f"{rundir}/{self.output_file}",
            "exit_code": self.job(context).exit_code_file,
            MANIFEST_NAME: f"{rundir}/payload/{MANIFEST_NAME}",
        }
        fetched: list[str] = []
        missing: list[str] = []
        for name, source in wanted.items():
            (fetched if self.host.get_file(source, local / name) else missing).append(name)
        self.log.info("fetched %s to %s; missing: %s", fetched, local, missing or "none")
        return {"dir": str(local), "fetched": fetched, "missing": missing}


class DoneMarkerSensor(HostOperator, BaseSensorOperator):
    """Wait for the done marker in the benchmark's log.

    marker → success; exit file or dead process group without marker → fail at once with the log
    tail; past ``benchmark_timeout`` → kill the process group and fail. Each check logs the newest
    line of the log. Deferrable by default: the wait runs in the triggerer
    (:class:`~benchflow.triggers.DoneMarkerTrigger`) and holds no worker slot.
    """

    ui_color = "#fdf3e1"

    def __init__(self, *, marker: str, benchmark_timeout: float, deferrable: bool = True, **kwargs: Any):
        kwargs.setdefault("timeout", benchmark_timeout + 300)
        super().__init__(**kwargs)
        self.marker = marker
        self.benchmark_timeout = benchmark_timeout
        self.deferrable = deferrable
        self._checks = 0

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from benchflow.triggers import DoneMarkerTrigger

        trigger = DoneMarkerTrigger(
            host_id=self.host_id, workdir=self.host.workdir, rundir=self.rundir(context), marker=self.marker,
            timeout_s=self.benchmark_timeout, check_interval=self.poke_interval,
        )  # fmt: skip
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            timeout=timedelta(seconds=self.benchmark_timeout + trigger.unreachable_grace_s + 300),
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        self.log.info("wait ended: %s after %s checks and %s log lines", event["status"], event.get("checks"),
                      event.get("lines"))  # fmt: skip
        if event["status"] != "done":
            raise AirflowFailException(event["message"])
        return event

    def poke(self, context: Any) -> bool:
        paths = self.job(context)
        status = remote.parse_status(self.host.check(remote.status_command(paths, self.marker), 60, "status").stdout)
        self._checks += 1
        elapsed = "?" if status.elapsed_s is None else f"{status.elapsed_s}s"
        self.log.info("progress [check %d, %s, pid %s]: %s", self._checks, elapsed, status.pid, status.last_line)
        if status.marker:
            return True
        if not status.started:
            raise AirflowFailException(f"no benchmark job in {paths.job_dir}: was launch_benchmark run?")
        if status.exit_code is not None or not status.alive:
            how = f"exited with code {status.exit_code}" if status.exit_code is not None else "died"
            raise AirflowFailException(
                f"benchmark {how} without writing {self.marker!r} (check {self._checks}); "
                f"last {LOG_TAIL_LINES} log lines:\n" + self.log_tail(context)
            )
        if status.elapsed_s is not None and status.elapsed_s > self.benchmark_timeout:
            tail = self.log_tail(context)
            self.host.check(remote.kill_command(paths), timeout=60, what="kill benchmark")
            raise AirflowFailException(
                f"benchmark ran past its timeout of {self.benchmark_timeout:.0f} s; its process group was "
                f"killed; last {LOG_TAIL_LINES} log lines:\n{tail}"
            )
        return False
