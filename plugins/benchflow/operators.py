"""Operators for the remote steps of a campaign: behaviour only. Each works on one host through
:mod:`benchflow.hosts`, builds its commands with :mod:`benchflow.remote` (the only shell text they pass on is
the campaign author's own: service and server commands) and undoes a run with :mod:`benchflow.remote.cleanup`.

All of a run's state lives in its run directory on the host (``<workdir>/<dag_id>/<run key>``), so any task
can be retried or cleared and find what it needs there. A teardown's work is its :meth:`undo`, a call of
plain clean-up functions with the run's ids only, which ``bench run`` also calls when a signal ends a run.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from benchflow import artifacts, params, payloads
from benchflow.hosts import Host, HostError, get_host
from benchflow.hosts.base import RESCHEDULE_MIN_S
from benchflow.paths import HOST_CORE, HOST_CORE_DIR, kernels_dir
from benchflow.payloads.manifest import MANIFEST_NAME, cached_sha256
from benchflow.pipeline import Fetched
from benchflow.records import SERVER_ERROR_KEY
from benchflow.remote import cleanup, gpus, jobs, layout, lease, preflight

if TYPE_CHECKING:
    from airflow.providers.ssh.utils.remote_job import RemoteJobPaths
    from airflow.sdk.definitions.context import Context

    from benchflow.spec import Server, Service, ServingConfig

BENCH_JOB = "bench"
LOG_TAIL_LINES = jobs.LOG_TAIL_LINES
ARGS_KEY = "args"  # preflight's XCom of the run's resolved benchmark arguments


class HostOperator(BaseOperator):
    """Base for a step on a benchmark host: knows the host and the run's directory on it."""

    ui_color = "#e8f0fe"
    # A campaign with several hosts names the run's host by its ``host`` param ("{{ params.host }}", checked
    # against the spec's hosts by the Param's enum and again here); one host is a plain id.
    template_fields: tuple[str, ...] = ("host_id",)

    def __init__(self, *, host_id: str, job: str = BENCH_JOB, host_ids: list[str] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.host_id = host_id
        self.host_ids = host_ids or []
        self.job_name = job

    @cached_property
    def host(self) -> Host:
        host_id = self.host_id
        if self.host_ids and host_id not in self.host_ids:
            if "{{" not in host_id:
                raise AirflowFailException(f"host {host_id!r} is not one of the campaign's hosts {self.host_ids}")
            host_id = self.host_ids[0]  # not rendered (bench run's clean-up after a signal): the default host
        return get_host(host_id)

    def rundir(self, context: Context) -> str:
        return layout.run_dir(self.host.workdir, context["dag"].dag_id, context["run_id"])

    def job(self, context: Context, name: str | None = None) -> RemoteJobPaths:
        return self.job_of(context["dag"].dag_id, context["run_id"], name)

    def job_of(self, dag_id: str, run_id: str, name: str | None = None) -> RemoteJobPaths:
        return layout.job_paths(layout.run_dir(self.host.workdir, dag_id, run_id), name or self.job_name)

    def status(self, paths: RemoteJobPaths, marker: str = "-") -> jobs.JobStatus:
        """One round trip for a job's exit code, liveness, marker and newest log line."""
        return jobs.parse_status(self.host.check(jobs.status_command(paths, marker), 60, "status").stdout)

    def claim(self, paths: RemoteJobPaths, run_id: str) -> None:
        """Before re-attaching to a job found in this run's directory: it must be this exact run's (the run id
        written in its folder at launch), else fail naming both, and launch nothing."""
        owner = jobs.parse_owner(self.host.check(jobs.owner_command(paths), 60, "read the job's run id").stdout)
        if owner != run_id:
            found = f"run {owner!r}" if owner else "no run id (launched by another version, or by hand)"
            raise AirflowFailException(
                f"refusing to re-attach: the job in {paths.job_dir} on host {self.host_id!r} belongs to {found}, "
                f"not to this run {run_id!r}; its numbers would be stored as this run's. Remove that folder "
                "(or clear the other run) and retry."
            )

    def log_tail(self, paths: RemoteJobPaths, lines: int = LOG_TAIL_LINES) -> str:
        return self.host.run(jobs.tail_command(paths.log_file, lines), timeout=60).stdout

    def timeout_s(self, default: float = 120) -> float:
        return self.execution_timeout.total_seconds() if self.execution_timeout else default


class TeardownOperator(HostOperator):
    """A step that undoes part of a run: its work is :meth:`undo` (plain clean-up functions, the run's ids only),
    so that ``bench run`` can do the same when a signal ends a run before its teardowns ran."""

    def execute(self, context: Context) -> Any:
        outcome = self.undo(context["dag"].dag_id, context["run_id"])
        self.log.info("%s", outcome)
        return outcome

    def undo(self, dag_id: str, run_id: str) -> Any:
        raise NotImplementedError


def run_configs(context: Context) -> list[str]:
    """The configs this run measures (its ``configs`` param); empty: all of the spec's."""
    return list((context.get("params") or {}).get(params.CONFIGS) or [])


def searching(stage_args: dict[str, Any], context: Context) -> dict[str, Any]:
    """A config's stage arguments with this run's load-search settings (its ``search`` param) over the spec's."""
    override = dict((context.get("params") or {}).get(params.SEARCH) or {})
    if not override or "search" not in stage_args:
        return stage_args
    search = {**json.loads(stage_args["search"]), **override}
    return {**stage_args, "search": json.dumps(search, separators=(",", ":"))}


class PreflightOperator(HostOperator):
    """Check the run's params, then read host facts (GPUs, driver, disk, python/torch versions); fail when
    the payload cannot run there. A bad param fails here, before any command reaches the host."""

    def __init__(
        self,
        *,
        benchmark_args: dict[str, Any] | None = None,
        with_servers: bool = False,
        form: dict[str, Any] | None = None,
        run_options: dict[str, tuple[Any, dict[str, Any]]] | None = None,
        paired: tuple[tuple[str, ...], ...] = (),
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.benchmark_args = benchmark_args or {}
        self.with_servers = with_servers
        self.form = form or {}
        self.run_options = run_options or {}  # params of the run that are not benchmark arguments, with their schemas
        self.paired = paired

    def execute(self, context: Context) -> dict[str, str]:
        try:
            resolved = params.check_conf(
                self.benchmark_args, self.with_servers, context.get("params"), self.form, self.run_options, self.paired
            )
        except ValueError as exc:
            raise AirflowFailException(f"trigger conf refused, nothing ran on the host: {exc}") from None
        context["ti"].xcom_push(key=ARGS_KEY, value=resolved)
        result = self.host.check(
            preflight.facts_command(self.host.python, self.host.workdir),
            timeout=self.timeout_s(),
            what="preflight (python and torch must import on the host)",
        )
        facts = preflight.parse_facts(result.stdout)
        for key, value in sorted(facts.items()):
            self.log.info("host fact %s = %s", key, value)
        return facts


class StopServicesOperator(HostOperator):
    """Stop the services that hold the GPUs. A stop that fails part-way starts again what it had stopped before
    failing, since its teardown (:class:`RestoreServicesOperator`) only runs after it succeeded."""

    def __init__(self, *, services: list[Service], **kwargs: Any):
        super().__init__(**kwargs)
        self.services = services

    def execute(self, context: Context) -> list[str]:
        stopped: list[Service] = []
        for service in self.services:
            self.log.info("stop service %s: %s", service.name, service.stop)
            try:
                self.host.check(service.stop, timeout=self.timeout_s(300), what=f"stop service {service.name!r}")
            except HostError:
                cleanup.restore_services(self.host, reversed(stopped), self.timeout_s(300))
                raise
            stopped.append(service)
        return [s.name for s in stopped]


class RestoreServicesOperator(TeardownOperator):
    """Teardown: start the stopped services again."""

    def __init__(self, *, services: list[Service], **kwargs: Any):
        super().__init__(**kwargs)
        self.services = services

    def undo(self, dag_id: str, run_id: str) -> list[str]:
        return cleanup.restore_services(self.host, self.services, self.timeout_s(300))


class GpusFreeSensor(HostOperator, BaseSensorOperator):
    """After the services are stopped: wait until every GPU of the host uses at most ``max_used_mib`` and no
    compute process remains; past ``wait_s``, fail naming what still holds them. A host without GPUs
    (no ``nvidia-smi``) passes at once, and says so."""

    ui_color = "#e6f4ea"

    def __init__(self, *, max_used_mib: float, wait_s: float, **kwargs: Any):
        kwargs.setdefault("timeout", wait_s + 60)
        super().__init__(**kwargs)
        self.max_used_mib = max_used_mib
        self.wait_s = wait_s
        self._first: float | None = None

    def poke(self, context: Context) -> bool:
        import time

        state = gpus.parse_state(self.host.check(gpus.query_command(), 60, "query the GPUs").stdout)
        if not state.present:
            self.log.info("host %s has no GPUs (no nvidia-smi): nothing to wait for", self.host_id)
            return True
        busy = state.busy(self.max_used_mib)
        if not busy:
            self.log.info("GPUs free: %s MiB in use", dict(sorted(state.used_mib.items())))
            return True
        self._first = self._first or time.monotonic()
        if time.monotonic() - self._first > self.wait_s:
            raise AirflowFailException(
                f"GPUs of host {self.host_id!r} still busy {self.wait_s:.0f} s after the "
                "services stopped:\n  " + "\n  ".join(busy)
            )
        self.log.info("GPUs not free yet: %s", "; ".join(busy))
        return False


class DeployPayloadOperator(HostOperator):
    """Copy ``kernels/<payload>`` into ``<run dir>/payload`` with a sha256 manifest; unchanged files stay.

    A git payload (``git``: repo, ref, path) is the tree of the commit its ref names (the run's ``payload_ref``
    param, else the spec's ref), resolved once to a full sha and shipped the same way; the commit is in the
    XCom and in the run's record. Payloads it ``requires`` go inside it, as ``payload/<name>/`` (the serving
    target uses ``moe``), and so does the host core (``payload/benchhost/``: the GPU sampler, the phase log, the
    load search), whatever the payload.
    """

    def __init__(
        self,
        *,
        payload: str,
        git: dict[str, str] | None = None,
        requires: list[str] | None = None,
        shipped: list[str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.payload = payload
        self.git = git
        self.requires = requires or []
        self.shipped = shipped or []

    def execute(self, context: Context) -> dict[str, Any]:
        target = f"{self.rundir(context)}/payload"
        self.host.put_tree(HOST_CORE_DIR, f"{target}/{HOST_CORE}")
        for name in self.requires:
            self.host.put_tree(kernels_dir() / name, f"{target}/{name}")
        commit = ref = None
        if self.git is None:
            report = self.host.put_tree(kernels_dir() / self.payload, target)
        else:
            ref = str((context.get("params") or {}).get(params.PAYLOAD_REF) or self.git["ref"])
            try:
                commit = payloads.resolve(self.git["repo"], ref)
                with payloads.materialised(self.git["repo"], commit, self.git.get("path", "")) as tree:
                    report = self.host.put_tree(tree.path, target)
            except payloads.PayloadError as exc:
                raise AirflowFailException(f"payload: {exc}") from None
            self.log.info("payload %s ref %s is commit %s", self.git["repo"], ref, commit)
        for local in map(Path, self.shipped):
            self._ship(local, f"{target}/{SHIPPED_DIR}/{local.name}")
        self.log.info(
            "payload %s: %d files, %d copied, sha256 %s (manifest: %s/%s)",
            self.payload,
            report.files,
            len(report.copied),
            report.payload_sha256,
            target,
            MANIFEST_NAME,
        )
        return {
            "payload_sha256": report.payload_sha256,
            "files": report.files,
            "copied": report.copied,
            "payload_commit": commit,
            "payload_ref": ref,
        }

    def _ship(self, local: Path, remote: str) -> None:
        """One file the spec names (a dataset), sent unless the host already has it with the same sha256."""
        want = cached_sha256(local)
        have = self.host.run(f"sha256sum {shlex.quote(remote)} 2>/dev/null || true", timeout=600).stdout.split()
        if have[:1] == [want]:
            self.log.info("%s: on the host already (sha256 %s)", remote, want)
            return
        self.host.put_file(local, remote)
        self.log.info("%s: shipped (%d bytes, sha256 %s)", remote, local.stat().st_size, want)


SHIPPED_DIR = "datasets"  # in the payload on the host: the files a spec names beside it (benchmark.shipped())


class LaunchBenchmarkOperator(HostOperator):
    """Start the payload's bench script detached; re-attach when this run's job already exists.

    The script is called as ``python <script> <args> --out <run dir>/<output> --marker <marker>``, its arguments
    the run's as preflight resolved them (``run_args``, an XCom) plus the stage's own (``stage_args``: a serving
    config's label and endpoint).
    """

    template_fields = ("host_id", "run_args")

    def __init__(
        self,
        *,
        script: str,
        run_args: Any,
        stage_args: dict[str, Any] | None = None,
        output: str,
        marker: str,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.script, self.run_args, self.stage_args = script, run_args, stage_args or {}
        self.output_file, self.marker = output, marker

    def execute(self, context: Context) -> dict[str, Any]:
        paths = self.job(context)
        status = self.status(paths, self.marker)
        if status.alive or status.exit_code is not None:
            self.claim(paths, context["run_id"])
            self.log.info("job of this run already exists (pid %s, exit %s): attaching", status.pid, status.exit_code)
            return {"pid": status.pid, "attached": True}
        rundir = self.rundir(context)
        args = layout.render_args({**dict(self.run_args), **searching(self.stage_args, context)})
        command = jobs.benchmark_command(
            self.host.python, self.script, args, f"{rundir}/{self.output_file}", self.marker
        )
        self.log.info("launching on %s: %s", self.host_id, command)
        launch = jobs.launch_command(
            paths, command, cwd=f"{rundir}/payload", env={"PYTHONUNBUFFERED": "1"}, run_id=context["run_id"]
        )
        pid = jobs.parse_pid(self.host.check(launch, timeout=60, what="launch benchmark").stdout)
        self.log.info("benchmark running as process group %s; log %s", pid, paths.log_file)
        return {"pid": pid, "attached": False}


class ServersOperator(HostOperator):
    """Base for the steps on a serving config's servers (and router, launched last, stopped first)."""

    def __init__(self, *, config: ServingConfig, **kwargs: Any):
        super().__init__(**kwargs)
        self.config = config

    def members(self) -> list[tuple[Server, bool]]:
        """Every server of the config, then its router: ``(server, is_router)``."""
        router = [(self.config.router, True)] if self.config.router else []
        return [(s, False) for s in self.config.servers] + router


class LaunchServersOperator(ServersOperator):
    """Start a config's servers (and router) detached, each with its GPU set and NUMA binding.

    A server of this run that is already alive is attached to, not started twice.
    """

    def execute(self, context: Context) -> dict[str, int]:
        if (chosen := run_configs(context)) and self.config.name not in chosen:
            raise AirflowSkipException(f"config {self.config.name} is not one of this run's configs {chosen}")
        rundir = self.rundir(context)
        try:
            extra = params.server_args(context.get("params"))
        except ValueError as exc:
            raise AirflowFailException(str(exc)) from None
        pids = {}
        for server, is_router in self.members():
            name = layout.server_job(self.config.name, server.name)
            paths = self.job(context, name)
            status = self.status(paths)
            if status.alive:
                self.claim(paths, context["run_id"])
                self.log.info("%s already running (pid %s): attaching", name, status.pid)
                pids[name] = status.pid or 0
                continue
            words = "" if is_router else extra
            command = jobs.server_command(server.command, self.host.python, server.port, words, server.numa_node)
            env = {"PYTHONUNBUFFERED": "1"} | server.env()
            self.log.info("launching %s on %s (env %s): %s", name, self.host_id, env, command)
            launch = jobs.launch_command(paths, command, cwd=f"{rundir}/payload", env=env, run_id=context["run_id"])
            pids[name] = jobs.parse_pid(self.host.check(launch, timeout=60, what=f"launch {name}").stdout)
        return pids


class ServersReadySensor(ServersOperator, BaseSensorOperator):
    """Wait until every server of a config answers its health URL (checked on the host itself);
    fail at once, with the server's log tail, if one of them has died."""

    def poke(self, context: Context) -> bool:
        ready = []
        for server, _ in self.members():
            name = layout.server_job(self.config.name, server.name)
            paths = self.job(context, name)
            status = self.status(paths)
            if not status.alive:
                tail = self.log_tail(paths)
                said = f"server {name} is not running (exit {status.exit_code})"
                last = [line.strip() for line in tail.splitlines() if line.strip()][-3:]
                context["ti"].xcom_push(key=SERVER_ERROR_KEY, value=f"{said}: {' | '.join(last)}"[:800])
                raise AirflowFailException(f"{said}; last {LOG_TAIL_LINES} log lines:\n{tail}")
            url = f"http://127.0.0.1:{server.port}{server.health_path}"
            healthy = self.host.run(jobs.http_ok_command(self.host.python, url), 30).rc == 0
            self.log.info("%s %s: %s", name, url, "healthy" if healthy else f"not yet ({status.last_line})")
            ready.append(healthy)
        return all(ready)


class StopServersOperator(ServersOperator, TeardownOperator):
    """Teardown: stop every server of a config, its router first."""

    def undo(self, dag_id: str, run_id: str) -> list[str]:
        names = [layout.server_job(self.config.name, server.name) for server, _ in reversed(self.members())]
        return cleanup.stop_jobs(self.host, [self.job_of(dag_id, run_id, name) for name in names])


class StopBenchmarkOperator(TeardownOperator):
    """Teardown: end the benchmark's whole process group if anything of it is still alive (a benchmark that
    printed its marker first gets ``exit_grace_s`` to exit by itself)."""

    def __init__(self, *, marker: str = "ALL_DONE", exit_grace_s: float = cleanup.EXIT_GRACE_S, **kwargs: Any):
        super().__init__(**kwargs)
        self.marker = marker
        self.exit_grace_s = exit_grace_s

    def undo(self, dag_id: str, run_id: str) -> str:
        return cleanup.stop_job(self.host, self.job_of(dag_id, run_id), self.marker, self.exit_grace_s)


class FetchArtifactsOperator(HostOperator):
    """Copy the logs and result files of the run into the artifact store that every worker reads;
    missing files are reported, not fatal. Skips when nothing ran (no log of any job exists).

    ``jobs``: the benchmark jobs whose logs to fetch, each saved as ``<job>.log``; ``files``: result files
    in the run directory (the script's output, a kind's side files).
    """

    def __init__(self, *, files: list[str], jobs: list[str] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.files = files
        self.jobs = jobs or [BENCH_JOB]

    def execute(self, context: Context) -> dict[str, Any]:
        rundir = self.rundir(context)
        store = artifacts.store(context["dag"].dag_id, context["run_id"])
        chosen = run_configs(context)  # a run of some configs has the jobs of those only
        jobs = [j for j in self.jobs if not chosen or j.removeprefix(f"{BENCH_JOB}_") in chosen]
        wanted = {f"{job}.log": self.job(context, job).log_file for job in jobs}
        wanted |= {f"{job}.exit_code": self.job(context, job).exit_code_file for job in jobs}
        wanted |= {name: f"{rundir}/{name}" for name in self.files}
        wanted[MANIFEST_NAME] = f"{rundir}/payload/{MANIFEST_NAME}"
        fetched: list[str] = []
        missing: list[str] = []
        for name, source in wanted.items():
            (fetched if artifacts.store_file(self.host, source, store / name) else missing).append(name)
        logs = [f"{job}.log" for job in jobs]
        if not set(logs) & set(fetched):
            raise AirflowSkipException(f"no benchmark log on the host (nothing ran); missing: {missing}")
        self.log.info("fetched %s to %s; missing: %s", fetched, store, missing or "none")
        return Fetched(str(store), fetched, missing, logs).to_xcom()


class DoneMarkerSensor(HostOperator, BaseSensorOperator):
    """Wait for the done marker in the benchmark's log.

    marker → success; exit file or dead process group without marker → fail at once with the log
    tail; past ``benchmark_timeout`` → kill the process group and fail. Each check logs the newest
    line of the log. Deferrable by default: one check here first (a benchmark that already finished
    needs no triggerer), then the wait runs in the triggerer
    (:class:`~benchflow.triggers.DoneMarkerTrigger`) and holds no worker slot.
    """

    ui_color = "#fdf3e1"
    EVENT_KEYS = frozenset({"status", "message", "checks", "lines"})

    def __init__(self, *, marker: str, benchmark_timeout: float, deferrable: bool = True, **kwargs: Any):
        kwargs.setdefault("timeout", benchmark_timeout + 300)
        super().__init__(**kwargs)
        self.marker = marker
        self.benchmark_timeout = benchmark_timeout
        self.deferrable = deferrable
        self._checks = 0

    def execute(self, context: Context) -> Any:
        if not self.deferrable or self.poke(context):
            return super().execute(context) if not self.deferrable else None
        from benchflow.triggers import DoneMarkerTrigger  # the triggerer's code: not at DAG parse

        trigger = DoneMarkerTrigger(
            host_id=self.host_id,
            rundir=self.rundir(context),
            marker=self.marker,
            timeout_s=self.benchmark_timeout,
            check_interval=self.poke_interval,
            job=self.job_name,
        )
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            timeout=timedelta(seconds=self.benchmark_timeout + trigger.unreachable_grace_s + 300),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(event, dict) or not self.EVENT_KEYS <= set(event):
            raise AirflowFailException(f"malformed event from the trigger: {event!r}")
        self.log.info(
            "wait ended: %s after %s checks and %s log lines", event["status"], event["checks"], event["lines"]
        )
        if event["status"] != "done":
            raise AirflowFailException(event["message"])
        return event

    def poke(self, context: Context) -> bool:
        paths = self.job(context)
        status = self.status(paths, self.marker)
        self._checks += 1
        self.log.info("%s", jobs.progress_line(status, self._checks))
        outcome, message = jobs.judge(status, self.marker, self.benchmark_timeout, self._checks, paths.job_dir)
        if outcome == "done":
            return True
        if outcome == "running":
            return False
        if outcome in ("dead", "timeout"):
            message = f"{message}; last {LOG_TAIL_LINES} log lines:\n{self.log_tail(paths)}"
        if outcome == "timeout":
            self.host.check(jobs.kill_command(paths), timeout=60, what="kill benchmark")
        raise AirflowFailException(message)


ACQUIRE_TASK = "acquire_host"
LEASE_ASKED_KEY = "lease_asked"  # acquire_host's XCom: the owner it asked the host's lease for


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
        if kwargs["mode"] == "reschedule":  # whatever interval the spec gives: see RESCHEDULE_MIN_S
            kwargs["poke_interval"] = max(float(kwargs.get("poke_interval", RESCHEDULE_MIN_S)), RESCHEDULE_MIN_S)
        super().__init__(**kwargs)
        self.lease_ttl_s = lease_ttl_s

    _owner: str | None = None  # who this try asks the lease for: on_kill gives back what it may have taken

    def poke(self, context: Context) -> bool:
        owner = self._owner = layout.lease_owner(context["dag"].dag_id, context["run_id"])
        if (ti := context.get("ti")) is not None:  # before asking: release_host then gives back what this takes
            ti.xcom_push(key=LEASE_ASKED_KEY, value=owner)
        command = lease.acquire_command(self.host.workdir, owner, self.lease_ttl_s)
        state = lease.parse_acquire(self.host.check(command, 60, "take the host lease").stdout)
        if state.acquired:
            self.log.info("host %s leased to %s until %s", self.host_id, state.holder, state.until)
            return True
        self.log.info("host %s is leased by %s until %s: waiting", self.host_id, state.holder, state.until)
        return False

    def on_kill(self) -> None:
        """Killed mid-poke (its run marked failed): the lease this poke may just have taken is given back at once,
        not only by the run's ``release_host`` teardown, which a run ended this way may never get to run."""
        if self._owner is None:
            return
        try:
            self.log.info(
                "killed: host %s lease of %s: %s",
                self.host_id,
                self._owner,
                cleanup.release_host(self.host, self._owner),
            )
        except Exception as exc:  # the kill goes on; the lease then lapses at its TTL
            self.log.warning("killed: giving the lease of host %s back failed: %s", self.host_id, exc)


class ReleaseHostOperator(TeardownOperator):
    """Teardown: give the host's lease back, so the next campaign queued for the host can start.

    It runs once everything before it is done, whatever state ``acquire_host`` ended in (the factory gives it the
    trigger rule ``all_done``), and acts whenever the run asked for the lease (``acquire_host``'s XCom, pushed
    before each ask): a poke that took the lease and could not report its success (its run was marked failed at
    that instant) leaves the task failed, not the lease held. A run that never asked skips it."""

    def execute(self, context: Context) -> Any:
        if context["ti"].xcom_pull(task_ids=ACQUIRE_TASK, key=LEASE_ASKED_KEY) is None:
            raise AirflowSkipException(f"the run never asked for host {self.host_id}'s lease")
        return super().execute(context)

    def undo(self, dag_id: str, run_id: str) -> str:
        owner = layout.lease_owner(dag_id, run_id)
        return f"host {self.host_id} lease of {owner}: {cleanup.release_host(self.host, owner)}"


TELEMETRY_JOB = "telemetry"
METRICS_JOB = "metrics"


class LaunchSamplerOperator(HostOperator):
    """Start the GPU sampler detached beside the benchmark (``python -m benchhost.sampler`` in the payload: NVML, else
    ``nvidia-smi -lms``), writing into the run directory's ``telemetry/`` job folder, and wait for its first
    samples; a host without GPUs (preflight's facts) runs none and says so once. With ``metrics_urls`` (the
    servers' and routers' Prometheus endpoints), the server-metrics sampler too, in the ``metrics/`` job folder.
    Its teardown stops both."""

    template_fields = ("host_id", "facts")

    def __init__(self, *, facts: Any, period_ms: int, max_bytes: int, metrics_urls: Sequence[str] = (), **kwargs: Any):
        super().__init__(job=TELEMETRY_JOB, **kwargs)
        self.facts, self.period_ms, self.max_bytes = facts, period_ms, max_bytes
        self.metrics_urls = list(metrics_urls)

    def execute(self, context: Context) -> dict[str, Any]:
        started = {"metrics": self._start_metrics(context)} if self.metrics_urls else {}
        return {**self._start_gpus(context), **started}

    def _start_gpus(self, context: Context) -> dict[str, Any]:
        from benchflow.remote import sampler  # the sampler's commands: in the telemetry tasks only

        paths = self.job(context)
        if str(dict(self.facts or {}).get("gpu_count", "0")) == "0":
            self.log.info("host %s has no GPUs (preflight): no telemetry sampler", self.host_id)
            note = sampler.none_command(paths.job_dir, "no GPU on the host (preflight found no nvidia-smi)")
            self.host.check(note, timeout=60, what="note that the host has no GPUs")
            return {"sampler": "none"}

        def command(ready: str, payload: str) -> str:
            return sampler.sampler_command(
                self.host.python, paths.job_dir, self.period_ms, self.max_bytes, ready, payload=payload
            )

        return self._start(context, paths, command, "telemetry sampler", "sampler")

    def _start_metrics(self, context: Context) -> str:
        from benchflow.remote import sampler  # the sampler's commands: in the telemetry tasks only

        paths = self.job(context, METRICS_JOB)

        def command(ready: str, payload: str) -> str:
            return sampler.metrics_command(
                self.host.python, paths.job_dir, self.metrics_urls, self.period_ms, self.max_bytes, ready, payload
            )

        return str(self._start(context, paths, command, "server-metrics sampler", "metrics")["metrics"])

    def _start(self, context: Context, paths: Any, command: Any, what: str, key: str) -> dict[str, Any]:
        """Attach to the job when it runs (a retry), else launch it and wait for its first samples."""
        from benchflow.remote import sampler  # the sampler's commands: in the telemetry tasks only

        if (running := self.status(paths)).alive:
            self.claim(paths, context["run_id"])
            return {key: "attached", "pid": running.pid}
        ready = f"{paths.job_dir}/ready"
        env = {"PYTHONUNBUFFERED": "1"}
        rundir = self.rundir(context)
        launch = jobs.launch_command(
            paths, command(ready, f"{rundir}/payload"), cwd=rundir, env=env, run_id=context["run_id"]
        )
        pid = jobs.parse_pid(self.host.check(launch, timeout=60, what=f"launch the {what}").stdout)
        if self.host.run(sampler.wait_ready_command(ready, 30), 60).rc != 0:
            self.log.warning("the %s wrote no samples within 30 s; last lines:\n%s", what, self.log_tail(paths))
        return {key: "running", "pid": pid}


class StopSamplerOperator(TeardownOperator):
    """Teardown: stop the GPU sampler and the server-metrics sampler (each writes its last samples and exits on
    TERM; a job that never started is nothing to stop)."""

    def __init__(self, **kwargs: Any):
        super().__init__(job=TELEMETRY_JOB, **kwargs)

    def undo(self, dag_id: str, run_id: str) -> str:
        said = [cleanup.stop_job(self.host, self.job_of(dag_id, run_id, job), exit_grace_s=0)
                for job in (TELEMETRY_JOB, METRICS_JOB)]  # fmt: skip
        return "; ".join(said)
