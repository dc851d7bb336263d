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
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from benchflow import params, remote
from benchflow.hosts import Host, HostError, get_host
from benchflow.manifest import MANIFEST_NAME
from benchflow.paths import artifacts_dir, kernels_dir

LOG_TAIL_LINES = 20
BENCH_JOB = "bench"


class HostOperator(BaseOperator):
    """Base for a step on a benchmark host: knows the host and the run's directory on it."""

    ui_color = "#e8f0fe"

    def __init__(self, *, host_id: str, job: str = BENCH_JOB, **kwargs: Any):
        super().__init__(**kwargs)
        self.host_id = host_id
        self.job_name = job

    @cached_property
    def host(self) -> Host:
        return get_host(self.host_id)

    def rundir(self, context: Any) -> str:
        return remote.run_dir(self.host.workdir, context["dag"].dag_id, context["run_id"])

    def lease_owner(self, context: Any) -> str:
        """Who holds the host's lease during this run: ``<dag_id>/<run key>``."""
        return remote.lease_owner(context["dag"].dag_id, context["run_id"])

    def job(self, context: Any, name: str | None = None) -> Any:
        return remote.job_paths(self.rundir(context), name or self.job_name)

    def status(self, paths: Any, marker: str = "-") -> remote.JobStatus:
        """One round trip for a job's exit code, liveness, marker and newest log line."""
        return remote.parse_status(self.host.check(remote.status_command(paths, marker), 60, "status").stdout)

    def log_tail(self, context: Any, lines: int = LOG_TAIL_LINES) -> str:
        return self.host.run(remote.tail_command(self.job(context).log_file, lines), timeout=60).stdout


class PreflightOperator(HostOperator):
    """Check the run's params, then read host facts (GPUs, driver, disk, python/torch versions); fail when
    the payload cannot run there. A bad param fails here, before any command reaches the host."""

    def __init__(self, *, benchmark_args: dict[str, Any] | None = None, serving: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.benchmark_args = benchmark_args or {}
        self.serving = serving

    def execute(self, context: Any) -> dict[str, str]:
        try:
            params.check_conf(self.benchmark_args, self.serving, context.get("params"))
        except ValueError as exc:
            raise AirflowFailException(f"trigger conf refused, nothing ran on the host: {exc}") from None
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
    """Copy ``kernels/<payload>`` into ``<run dir>/payload`` with a sha256 manifest; unchanged files stay.

    Payloads it ``requires`` go inside it, as ``payload/<name>/`` (the serving target uses ``moe``).
    """

    def __init__(self, *, payload: str, requires: list[str] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.payload = payload
        self.requires = requires or []

    def execute(self, context: Any) -> dict[str, Any]:
        target = f"{self.rundir(context)}/payload"
        for name in self.requires:
            self.host.put_tree(kernels_dir() / name, f"{target}/{name}")
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
        status = self.status(paths, self.marker)
        if status.alive or status.exit_code is not None:
            self.log.info("job of this run already exists (pid %s, exit %s): attaching", status.pid, status.exit_code)
            return {"pid": status.pid, "attached": True}
        rundir = self.rundir(context)
        try:
            args = params.overlay(self.args, context.get("params"))
        except ValueError as exc:
            raise AirflowFailException(str(exc)) from None
        command = (
            f"exec {shlex.quote(self.host.python)} {shlex.quote(self.script)} {remote.render_args(args)}"
            f" --out {shlex.quote(f'{rundir}/{self.output_file}')} --marker {shlex.quote(self.marker)}"
        )
        self.log.info("launching on %s: %s", self.host_id, command)
        launch = remote.launch_command(paths, command, cwd=f"{rundir}/payload", env={"PYTHONUNBUFFERED": "1"})
        pid = self.host.check(launch, timeout=60, what="launch benchmark").stdout.strip().splitlines()[-1]
        self.log.info("benchmark running as process group %s; log %s", pid, paths.log_file)
        return {"pid": int(pid), "attached": False}


def server_job(config: str, server: dict[str, Any]) -> str:
    return f"server_{config}_{server['name']}"


class LaunchServersOperator(HostOperator):
    """Start a config's servers (and router) detached, each with its GPU set and NUMA binding.

    A server of this run that is already alive is attached to, not started twice.
    """

    def __init__(self, *, config: str, servers: list[dict[str, Any]], **kwargs: Any):
        super().__init__(**kwargs)
        self.config = config
        self.servers = servers

    def execute(self, context: Any) -> dict[str, int]:
        rundir = self.rundir(context)
        pids = {}
        for server in self.servers:
            name = server_job(self.config, server)
            paths = self.job(context, name)
            status = self.status(paths)
            if status.alive:
                self.log.info("%s already running (pid %s): attaching", name, status.pid)
                pids[name] = status.pid or 0
                continue
            command = server["command"].replace("{python}", shlex.quote(self.host.python))
            command = command.replace("{port}", str(int(server["port"])))
            try:
                extra = params.server_args(context.get("params"))
            except ValueError as exc:
                raise AirflowFailException(str(exc)) from None
            if extra and server.get("role") != "router":
                command = f"{command} {extra}"
            if server.get("numa_node") is not None:
                node = int(server["numa_node"])
                command = f"numactl --cpunodebind={node} --membind={node} {command}"
            env = {"PYTHONUNBUFFERED": "1"}
            if server.get("visible_devices"):
                env["CUDA_VISIBLE_DEVICES"] = server["visible_devices"]
            self.log.info("launching %s on %s (env %s): %s", name, self.host_id, env, command)
            launch = remote.launch_command(paths, command, cwd=f"{rundir}/payload", env=env)
            pids[name] = int(self.host.check(launch, timeout=60, what=f"launch {name}").stdout.split()[-1])
        return pids


class ServersReadySensor(HostOperator, BaseSensorOperator):
    """Wait until every server of a config answers its health URL (checked on the host itself);
    fail at once, with the server's log tail, if one of them has died."""

    def __init__(self, *, config: str, servers: list[dict[str, Any]], **kwargs: Any):
        super().__init__(**kwargs)
        self.config = config
        self.servers = servers

    def poke(self, context: Any) -> bool:
        probe = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)"
        ready = []
        for server in self.servers:
            name = server_job(self.config, server)
            paths = self.job(context, name)
            status = self.status(paths)
            if not status.alive:
                tail = self.host.run(remote.tail_command(paths.log_file, LOG_TAIL_LINES), 60).stdout
                raise AirflowFailException(f"server {name} is not running (exit {status.exit_code}); "
                                           f"last {LOG_TAIL_LINES} log lines:\n{tail}")  # fmt: skip
            url = f"http://127.0.0.1:{int(server['port'])}{server['health_path']}"
            check = f"{shlex.quote(self.host.python)} -c {shlex.quote(probe)} {shlex.quote(url)}"
            healthy = self.host.run(check, 30).rc == 0
            self.log.info("%s %s: %s", name, url, "healthy" if healthy else f"not yet ({status.last_line})")
            ready.append(healthy)
        return all(ready)


class StopServersOperator(HostOperator):
    """Teardown: stop every server (and the router) of a config."""

    def __init__(self, *, config: str, servers: list[dict[str, Any]], **kwargs: Any):
        super().__init__(**kwargs)
        self.config = config
        self.servers = servers

    def execute(self, context: Any) -> None:
        for server in reversed(self.servers):
            paths = self.job(context, server_job(self.config, server))
            self.host.check(remote.kill_command(paths), timeout=60, what=f"stop {server['name']}")
            self.log.info("stopped %s", server_job(self.config, server))


class StopBenchmarkOperator(HostOperator):
    """Teardown: end the benchmark's whole process group if anything of it is still alive.

    A benchmark that has printed its marker is still exiting (the wait notices the marker at once):
    it gets ``exit_grace_s`` to finish and write its exit code before anything is killed.
    """

    def __init__(self, *, marker: str = "ALL_DONE", exit_grace_s: float = 30.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.marker = marker
        self.exit_grace_s = exit_grace_s

    def execute(self, context: Any) -> None:
        paths = self.job(context)
        status = self.status(paths, self.marker)
        if status.alive and status.marker:
            self.host.run(remote.wait_exit_command(paths, self.exit_grace_s), self.exit_grace_s + 30)
            status = self.status(paths, self.marker)
        if not status.alive:
            self.log.info("benchmark not running (exit %s)", status.exit_code)
            return
        self.log.warning("benchmark process group %s still alive: TERM, then KILL", status.pid)
        self.host.check(remote.kill_command(paths), timeout=60, what="kill benchmark")


class FetchArtifactsOperator(HostOperator):
    """Copy the logs and the result file of the run here; missing files are reported, not fatal.

    ``jobs``: the benchmark jobs whose logs to fetch, each saved as ``<job>.log``.
    """

    def __init__(self, *, output: str, jobs: list[str] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.output_file = output
        self.jobs = jobs or [BENCH_JOB]

    def execute(self, context: Any) -> dict[str, Any]:
        if context["ti"].xcom_pull(task_ids="deploy_payload") is None:
            raise AirflowSkipException("the payload was never deployed: nothing ran, nothing to fetch")
        rundir = self.rundir(context)
        local = artifacts_dir(context["dag"].dag_id, remote.run_key(context["run_id"]))
        wanted = {f"{job}.log": self.job(context, job).log_file for job in self.jobs}
        wanted |= {f"{job}.exit_code": self.job(context, job).exit_code_file for job in self.jobs}
        wanted |= {
            self.output_file: f"{rundir}/{self.output_file}",
            "requests.jsonl": f"{rundir}/requests.jsonl",  # per-request data, when the client saves it
            MANIFEST_NAME: f"{rundir}/payload/{MANIFEST_NAME}",
        }
        fetched: list[str] = []
        missing: list[str] = []
        for name, source in wanted.items():
            (fetched if self.host.get_file(source, local / name) else missing).append(name)
        self.log.info("fetched %s to %s; missing: %s", fetched, local, missing or "none")
        return {"dir": str(local), "fetched": fetched, "missing": missing, "logs": [f"{j}.log" for j in self.jobs]}


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
            timeout_s=self.benchmark_timeout, check_interval=self.poke_interval, job=self.job_name,
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
        status = self.status(paths, self.marker)
        self._checks += 1
        self.log.info("%s", remote.progress_line(status, self._checks))
        outcome, message = remote.judge(status, self.marker, self.benchmark_timeout, self._checks, paths.job_dir)
        if outcome == "done":
            return True
        if outcome == "running":
            return False
        if outcome in ("dead", "timeout"):
            message = f"{message}; last {LOG_TAIL_LINES} log lines:\n{self.log_tail(context)}"
        if outcome == "timeout":
            self.host.check(remote.kill_command(paths), timeout=60, what="kill benchmark")
        raise AirflowFailException(message)


class AcquireHostSensor(HostOperator, BaseSensorOperator):
    """Take the host's lease before anything touches its GPUs; wait while another campaign holds it.

    One campaign per host at a time: the host's pool keeps two campaigns' tasks from running at the
    same instant, but only the lease keeps one campaign's launch from landing between another's
    stop_services and restore_services (a deferred wait frees its pool slot). Waits in reschedule
    mode, so a queued campaign holds no worker slot. The lease expires after ``lease_ttl_s`` (the DAG
    run's timeout), so a run whose teardown never ran cannot keep the host forever.
    """

    ui_color = "#e6f4ea"

    def __init__(self, *, lease_ttl_s: float, **kwargs: Any):
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.lease_ttl_s = lease_ttl_s

    def poke(self, context: Any) -> bool:
        command = remote.lease_acquire_command(self.host.workdir, self.lease_owner(context), self.lease_ttl_s)
        result = self.host.check(command, 60, "take the host lease")
        state, _, rest = result.stdout.strip().partition(" ")
        holder, _, expires = rest.rpartition(" ")
        if state == "acquired":
            self.log.info("host %s leased to %s until %s", self.host_id, holder, _epoch(expires))
            return True
        self.log.info("host %s is leased by %s until %s: waiting", self.host_id, holder, _epoch(expires))
        return False


class ReleaseHostOperator(HostOperator):
    """Teardown: give the host's lease back, so the next campaign queued for the host can start."""

    def execute(self, context: Any) -> str:
        owner = self.lease_owner(context)
        result = self.host.check(remote.lease_release_command(self.host.workdir, owner), 60, "release the host lease")
        outcome = result.stdout.strip()
        self.log.info("host %s lease of %s: %s", self.host_id, owner, outcome)
        return outcome


def _epoch(value: str) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(int(value), UTC).isoformat() if value.isdigit() else "?"
