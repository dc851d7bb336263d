"""Airflow's components as processes on this machine: the one launcher behind ``bench up`` (LocalExecutor, this
checkout's home and metadata DB), the tests' stack tier and ``bench/fleet.py`` (CeleryExecutor with the Redis
broker at 127.0.0.1:6379 and a PostgreSQL database of its own).

Each component is ``airflow <component>`` from this interpreter's environment, in a process group of its own,
logging to ``<logs>/<component>.log``; a stack is up once Airflow's health endpoint
(``/api/v2/monitor/health``) says the metadata DB, scheduler, triggerer and dag-processor are healthy, and a
component that exits first fails the start with its log lines. Everything listens on 127.0.0.1 only: the
api-server by ``--host``; the scheduler's and triggerer's log servers, which Airflow 3.3 binds to every
interface (no setting for their address), are not started (``--skip-serve-logs``: on one machine the api-server
reads task and trigger logs from the shared log folder).

:class:`AirflowStack` is the Celery stack with the REST API as the way in (log in, unpause, trigger with a conf,
read runs and task instances); :mod:`benchtools.up` keeps ``bench up``'s stack across processes with the
functions below (its pids in a state file, stopped by ``bench down``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import psutil

from benchflow.hosts.local import end_session
from benchflow.paths import PROJECT_ROOT
from benchtools.airflow_env import IGNORE_FILE_SYNTAX, PROCESS_CONTEXT
from benchtools.net import free_port

LOCAL_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
EDGE_EXECUTOR = "airflow.providers.edge3.executors.EdgeExecutor"
EDGE_WORKER = "edge worker"
CELERY_COMPONENTS = (*LOCAL_COMPONENTS, "celery worker")
USER = "admin"
REDIS = os.environ.get("BENCH_TEST_REDIS", "redis://127.0.0.1:6379")
FINISHED = ("success", "failed")
HEALTH_KEYS = {
    "metadatabase": "metadata DB",
    "scheduler": "scheduler",
    "triggerer": "triggerer",
    "dag_processor": "dag-processor",
}


class StackError(RuntimeError):
    """A component did not come up: which, and the end of its log."""


def airflow_bin(name: str = "airflow") -> str:
    """A console script of this interpreter's environment (the venv's ``airflow``)."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else (shutil.which(name) or name)


def spec_bundles(spec_repo: str) -> list[dict[str, Any]]:
    """Airflow's DAG bundles when campaign specs also come from git: the DAGs folder (this project's DAGs, the
    campaigns folder's specs), and ``spec_repo`` (a URL or path, its ``main``; a file of ``include/spec-repo/``
    beside the specs) through the git provider's bundle. Its connection ``bench_specs_git``, when there is one,
    brings the credentials (a token, a key and the host key it pins); a public or local repository needs none."""
    return [
        {"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}},
        {
            "name": "campaign-specs",
            "classpath": "airflow.providers.git.bundles.git.GitDagBundle",
            "kwargs": {"tracking_ref": "main", "repo_url": spec_repo, "git_conn_id": "bench_specs_git"},
        },
    ]


def base_environment(
    home: Path,
    db_uri: str,
    port: int,
    jwt_secret: str,
    passwords: Path,
    executor: str = "LocalExecutor",
    spec_repo: str | None = None,
) -> dict[str, str]:
    """The components' environment: this project's DAGs and plugins (and the specs of ``spec_repo``, a git
    repository, when given), ``executor``, the simple auth manager with one admin (its password in
    ``passwords``), everything else of this process's environment but its Airflow settings."""
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != PROCESS_CONTEXT}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__EXECUTOR": executor,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_uri,
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAG_IGNORE_FILE_SYNTAX": IGNORE_FILE_SYNTAX,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_STORAGE_PATH": str(home / "dag_bundles"),
            "GX_ANALYTICS_ENABLED": "false",
        }
    )
    if spec_repo:
        env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps(spec_bundles(spec_repo))
    return env


def edge_settings(executor: str, url: str) -> dict[str, str]:
    """The settings that add Airflow's Edge executor beside ``executor``: its API on the api-server (Edge workers
    poll it over HTTP for their queue's tasks and report back; they need no database and take no inbound
    connection), polled every second."""
    return {
        "AIRFLOW__CORE__EXECUTOR": f"{executor},{EDGE_EXECUTOR}",
        "AIRFLOW__EDGE__API_ENABLED": "True",
        "AIRFLOW__EDGE__API_URL": f"{url}/edge_worker/v1/rpcapi",
        "AIRFLOW__EDGE__JOB_POLL_INTERVAL": "1",
    }


def edge_worker_env(env: Mapping[str, str], var: Path) -> dict[str, str]:
    """An Edge worker's environment, as on a GPU host: the api-server's URL and the shared secret its tokens are
    signed with, its own ``var`` folder (its host's workdirs), no metadata DB. Its artifacts go to the store every
    worker reads (``BENCH_ARTIFACTS_URL``), never to its own disk."""
    worker = {k: v for k, v in env.items() if k != "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"}
    store = env.get("BENCH_ARTIFACTS_URL") or f"file://{Path(env['BENCH_VAR_DIR']) / 'artifacts'}"
    return worker | {"BENCH_VAR_DIR": str(var), "BENCH_ARTIFACTS_URL": store}


def component_args(component: str, port: int) -> list[str]:
    """``airflow <component>``'s arguments: everything on 127.0.0.1 (see the module's docstring)."""
    if component == "api-server":
        return ["--port", str(port), "--host", "127.0.0.1"]
    if component in ("scheduler", "triggerer"):
        return ["--skip-serve-logs"]
    return []


def log_of(logs: Path, component: str) -> Path:
    return logs / f"{component.replace(' ', '-')}.log"


def start_component(
    component: str, port: int, env: Mapping[str, str], logs: Path, extra: Iterable[str] = ()
) -> subprocess.Popen[bytes]:
    """``airflow <component>`` in a process group of its own, its output appended to its log."""
    with log_of(logs, component).open("ab") as log:
        return subprocess.Popen(
            [airflow_bin(), *component.split(), *component_args(component, port), *extra],
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_ROOT,
            start_new_session=True,
        )


def run_step(command: list[str], env: Mapping[str, str], log: Path, what: str, timeout: float = 900) -> str:
    """A set-up step (``airflow db migrate``, ``bench pools``) to the end; its output appended to ``log``.
    Raises :class:`StackError` with the end of the log when it fails."""
    done = subprocess.run(
        command, env=dict(env), capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=timeout, check=False
    )
    with log.open("a") as handle:
        handle.write(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise StackError(f"{what} failed (exit {done.returncode}); {log}:\n{tail}")
    return done.stdout


def health_of(url: str) -> dict[str, Any] | None:
    """Airflow's health report (metadatabase, scheduler, triggerer, dag_processor), or None when the api-server
    does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5) as reply:  # noqa: S310 (http://127.0.0.1)
            return dict(json.loads(reply.read())) if int(reply.status) == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def wait_healthy(url: str, dead: Callable[[], list[str]], timeout: float) -> tuple[list[str], str]:
    """Until the health endpoint says every component is healthy: ``([], "")``. Else the components at fault
    and what happened to them: those ``dead()`` names as exited, or those still not healthy at the timeout."""
    deadline = time.monotonic() + timeout
    unhealthy: list[str] = ["api-server"]
    while time.monotonic() < deadline:
        if gone := dead():
            return gone, "exited"
        health = health_of(url)
        if health is not None:
            unhealthy = [HEALTH_KEYS[k] for k in HEALTH_KEYS if (health.get(k) or {}).get("status") != "healthy"]
            if not unhealthy:
                return [], ""
        time.sleep(0.5)
    return unhealthy, f"not healthy within {timeout:.0f} s (Airflow's /api/v2/monitor/health)"


def failure_report(logs: Path, components: list[str], what: str, lines: int = 15) -> str:
    """Each component at fault with the last lines of its log (the metadata DB's are the api-server's)."""
    parts = []
    for component in components:
        log = log_of(logs, "api-server" if component == "metadata DB" else component)
        try:
            tail = log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            tail = []
        name = "the metadata DB" if component == "metadata DB" else f"airflow {component}"
        parts.append(f"{name} {what}; {log} ends:\n" + "\n".join(f"  {line[:300]}" for line in tail))
    return "\n".join(parts)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def created(pid: int) -> float | None:
    """When process ``pid`` started (psutil's reading of /proc: the same process reads the same each time)."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def stop_groups(pgids: Iterable[int], grace_s: float = 30.0, started: Mapping[int, float] | None = None) -> None:
    """TERM every process of these process groups, then KILL what is left of them after ``grace_s``.

    A group is taken only while its leader is still the process that was started: alive, leading its group, and,
    where ``started`` records it (pid → :func:`created`), started at that time. A leader that is gone leaves a
    number that another job's group may have by now. The members are then signalled one by one through psutil,
    which checks each is still the process it found, so nothing recycled in the grace is signalled either."""
    ours: dict[int, float] = {}  # pgid -> its leader's start: every member started then or later
    for pgid in pgids:
        with contextlib.suppress(psutil.Error, OSError):
            when = psutil.Process(pgid).create_time()
            if os.getpgid(pgid) == pgid and (not started or started.get(pgid) in (None, when)):
                ours[pgid] = when
    members = _members(ours)
    for proc in members:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, left = psutil.wait_procs(members, timeout=grace_s)
    for _ in range(3):  # what is left, and what a group started while it was being stopped (a respawned worker)
        late = list({p.pid: p for p in [*left, *_members(ours)]}.values())
        if not late:
            return
        for proc in late:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        _, left = psutil.wait_procs(late, timeout=10)


def _members(groups: Mapping[int, float]) -> list[psutil.Process]:
    """The live processes of these groups (pgid → its leader's start) that started no earlier than their leader:
    a group's process that outlived its leader is still found, one of another group that took the number is not."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            pgid = os.getpgid(proc.pid)
            if pgid in groups and proc.create_time() >= groups[pgid] and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


class AirflowStack:
    """The production shape on this machine: CeleryExecutor with the Redis broker, a PostgreSQL metadata
    database of its own, and the api-server, scheduler, dag-processor, triggerer and a Celery worker. The
    campaigns are those of a folder the caller fills, the hosts Airflow connections passed as ``AIRFLOW_CONN_*``
    variables (as docker-compose.yaml does). Start with :meth:`start`, stop with :meth:`stop` (every component,
    and its database)."""

    def __init__(
        self,
        root: Path,
        campaigns: Path,
        kernels: Path,
        connections: dict[str, dict[str, Any]],
        worker_concurrency: int = 8,
        extra_env: dict[str, str] | None = None,
        spec_repo: Path | None = None,
        edge: bool = False,
    ):
        self.root = Path(root)
        self.name = f"benchflow_stack_{os.getpid()}_{secrets.token_hex(3)}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.home = self.root / "airflow"
        self.var = self.root / "var"
        self.password = secrets.token_urlsafe(12)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._token: str | None = None
        self.home.mkdir(parents=True, exist_ok=True)
        passwords = self.home / "passwords.json"
        passwords.write_text(json.dumps({USER: self.password}))
        db = f"postgresql+psycopg2://postgres@127.0.0.1:5432/{self.name}"
        jwt = secrets.token_urlsafe(32)
        self.env = base_environment(
            self.home, db, self.port, jwt, passwords, "CeleryExecutor", str(spec_repo) if spec_repo else None
        )
        self.env = {k: v for k, v in self.env.items() if not k.startswith(("AIRFLOW_CONN_", "BENCH_"))}
        self.env.update(
            {
                "AIRFLOW__CELERY__BROKER_URL": f"{REDIS}/{1 + os.getpid() % 15}",
                "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://postgres@127.0.0.1:5432/{self.name}",
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(worker_concurrency),
                "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.name,  # a queue of its own on the shared Redis
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                "AIRFLOW__CORE__PARALLELISM": "64",
                "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "16",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                # a new DAG file is parsed on sight; parsing the unchanged ones again took a fifth of a core at
                # 10 s, a twenty-fifth at 60 s (dag-processor CPU, idle stack), and no stack test edits a DAG file
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "60",
                "AIRFLOW__TRIGGERER__CAPACITY": "1000",
                # every component's key, given: left to them, each `airflow <component>` started at once writes
                # airflow.cfg with a key of its own, and a trigger one of them encrypts another cannot read
                "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
                "BENCH_VAR_DIR": str(self.var),
                # one store for every worker, the Edge workers' included (each has a var folder of its own)
                "BENCH_ARTIFACTS_URL": f"file://{self.var / 'artifacts'}",
                "BENCH_CAMPAIGNS_DIR": str(campaigns),
                "BENCH_KERNELS_DIR": str(kernels),
                **{f"AIRFLOW_CONN_{cid.upper()}": json.dumps(conn) for cid, conn in connections.items()},
                **(edge_settings("CeleryExecutor", self.url) if edge else {}),
                # a worker gone is noticed in 25 s, its task's last heartbeat is old after 60 s (not 150 and 300)
                **({"AIRFLOW__EDGE__HEARTBEAT_INTERVAL": "5"} if edge else {}),
                **({"AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60"} if edge else {}),
                **(extra_env or {}),
            }
        )

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 240, template: str | None = None) -> AirflowStack:
        """Create the database (a copy of ``template``, an already migrated one, when given; else migrated
        here), create the host pools, start every component and wait until they are healthy."""
        from benchflow.warehouse.hooks import create_postgres_database

        create_postgres_database(self.name, template)
        log = self.root / "setup.log"
        if template is None:
            run_step([airflow_bin(), "db", "migrate"], self.env, log, "airflow db migrate")
        run_step([airflow_bin("bench"), "pools"], self.env, log, "bench pools")
        for component in CELERY_COMPONENTS:
            extra = ["--queues", self.name] if component == "celery worker" else []
            self.procs[component] = start_component(component, self.port, self.env, self.root, extra)
        at_fault, what = wait_healthy(self.url, self._dead, timeout)
        if at_fault:
            report = failure_report(self.root, at_fault, what)
            self.stop()
            raise StackError(report)
        return self

    def _dead(self) -> list[str]:
        return [component for component, proc in self.procs.items() if proc.poll() is not None]

    def start_edge_worker(self, queue: str, name: str) -> Path:
        """An Edge worker ``name`` serving ``queue`` with one slot (``airflow edge worker``), as a GPU host runs
        one: its environment :func:`edge_worker_env`. Returns its var folder, the queue's (its ``edge:<queue>``
        host's workdir is under ``hosts/``). A worker that replaces a killed one takes another name: Airflow holds
        a name until it has seen the worker gone."""
        var = self.root / f"edge-{queue}"
        extra = ["--queues", queue, "--concurrency", "1", "--edge-hostname", name]
        env = edge_worker_env(self.env, var)
        self.procs[EDGE_WORKER] = start_component(EDGE_WORKER, self.port, env, self.root, extra)
        return var

    def kill_edge_worker(self) -> None:
        """The Edge worker's process group killed at once (SIGKILL), as a host that lost power or its network."""
        end_session(self.procs.pop(EDGE_WORKER), timeout=10)

    def check_alive(self) -> None:
        if dead := self._dead():
            raise StackError(failure_report(self.root, dead, "exited"))

    def log_tail(self, component: str, chars: int = 4000) -> str:
        path = log_of(self.root, component)
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def stop(self) -> None:
        stop_groups([proc.pid for proc in self.procs.values() if proc.returncode is None], grace_s=30)
        for proc in self.procs.values():
            proc.wait(10)
        self.procs.clear()
        from benchflow.warehouse.hooks import drop_postgres_database

        drop_postgres_database(self.name)

    def cpu_seconds(self, component: str) -> float:
        """User + system CPU of a component's process tree so far: live processes, and the children they have
        reaped (a Celery worker's task processes come and go)."""
        import psutil

        try:
            top = psutil.Process(self.procs[component].pid)
            total = 0.0
            for proc in [top, *top.children(recursive=True)]:
                times = proc.cpu_times()
                total += times.user + times.system + times.children_user + times.children_system
            return total
        except psutil.NoSuchProcess:
            return 0.0

    # -- REST API --------------------------------------------------------------------------------

    @property
    def token(self) -> str:
        if self._token is None:
            import requests

            reply = requests.post(
                f"{self.url}/auth/token", json={"username": USER, "password": self.password}, timeout=30
            )
            reply.raise_for_status()
            self._token = reply.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """A call of the REST API (``/api/v2`` + ``path``) as the admin; the ``requests`` response."""
        import requests

        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        return requests.request(method, f"{self.url}/api/v2{path}", headers=headers, timeout=60, **kwargs)

    def wait_for_dags(self, dag_ids: list[str], timeout: float = 240) -> None:
        """Until the dag-processor has parsed every DAG; then unpause them."""
        deadline = time.monotonic() + timeout
        missing = list(dag_ids)
        while missing and time.monotonic() < deadline:
            self.check_alive()
            missing = [d for d in missing if self.api("GET", f"/dags/{d}").status_code != 200]
            if missing:
                time.sleep(1)
        if missing:
            errors = self.api("GET", "/importErrors").json()
            raise StackError(f"DAGs {missing} not parsed after {timeout:.0f} s; import errors: {errors}")
        for dag_id in dag_ids:
            self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> Any:
        return self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})

    def run_state(self, dag_id: str, run_id: str) -> str:
        reply = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
        reply.raise_for_status()
        return str(reply.json()["state"])

    def wait_runs(self, runs: list[tuple[str, str]], timeout: float = 600) -> dict[tuple[str, str], str]:
        deadline = time.monotonic() + timeout
        states: dict[tuple[str, str], str] = {}
        while time.monotonic() < deadline:
            self.check_alive()
            states = {run: self.run_state(*run) for run in runs}
            if all(state in FINISHED for state in states.values()):
                return states
            time.sleep(1)
        raise TimeoutError(f"runs not finished after {timeout:.0f} s: {states}")

    def failures(self, runs: list[tuple[str, str]], chars: int = 3000) -> str:
        """The tasks that failed in ``runs``, each with the end of its log (what a failed wait should show)."""
        parts = []
        for dag_id, run_id in runs:
            tasks = self.task_instances(dag_id, run_id).items()
            for task_id, ti in sorted(tasks, key=lambda item: str(item[1].get("end_date") or "")):
                if ti["state"] != "failed":  # the first to fail says why; the ones after only followed it
                    continue
                path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{max(1, ti['try_number'])}"
                reply = self.api("GET", path, params={"full_content": "true"}, headers={"Accept": "application/json"})
                parts.append(f"{dag_id} {run_id} {task_id}: {ti['state']}\n{log_text(reply)[-chars:]}")
        return "\n\n".join(parts) or "(no failed task)"

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        reply = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100})
        reply.raise_for_status()
        return {ti["task_id"]: ti for ti in reply.json()["task_instances"]}


def log_text(reply: Any) -> str:
    """A task log from the REST API (JSON: its structured lines under ``content``) as lines of text."""
    try:
        content = reply.json().get("content", [])
    except ValueError:
        return str(reply.text)
    if isinstance(content, str):
        return content
    lines = []
    for entry in content:
        if isinstance(entry, dict):
            fields = ("timestamp", "level", "event", "error_detail")
            lines.append(" ".join(str(entry[k]) for k in fields if entry.get(k)))
        else:
            lines.append(str(entry))
    return "\n".join(lines)


def campaign_folder(root: Path, specs: dict[str, str], payloads: dict[str, Path]) -> tuple[Path, Path]:
    """Write specs (name → YAML) and copy payloads (name → source dir) under ``root``."""
    (root / "specs").mkdir(parents=True, exist_ok=True)
    for name, text in specs.items():
        (root / "specs" / f"{name}.yaml").write_text(text)
    for name, source in payloads.items():
        shutil.copytree(source, root / "kernels" / name, dirs_exist_ok=True)
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    return root / "specs", root / "kernels"
