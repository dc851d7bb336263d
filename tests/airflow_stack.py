"""The production Airflow stack on this machine, as processes: CeleryExecutor with the Redis broker at
127.0.0.1:6379, a PostgreSQL metadata database of its own, and the api-server, scheduler,
dag-processor, triggerer and a Celery worker, each started with ``airflow <component>``.

The campaigns are those of a folder the caller fills, the hosts are Airflow connections passed as
``AIRFLOW_CONN_*`` variables (as docker-compose.yaml does), and the REST API is the way in:
log in, unpause, trigger with a conf, read runs and task instances. Used by tests/stack/ and by
bench/fleet.py.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg2
import requests

from tests.sshd import free_port

PROJECT_ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PG_ADMIN = os.environ.get("BENCH_TEST_PG", "host=127.0.0.1 port=5432 user=postgres dbname=postgres")
REDIS = os.environ.get("BENCH_TEST_REDIS", "redis://127.0.0.1:6379")
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer", "celery worker")
USER, PASSWORD = "admin", secrets.token_urlsafe(12)
FINISHED = ("success", "failed")


def pg_admin(sql: str) -> None:
    """One statement on the PostgreSQL server as its superuser (CREATE/DROP DATABASE)."""
    con = psycopg2.connect(PG_ADMIN)
    con.autocommit = True
    try:
        con.cursor().execute(sql)
    finally:
        con.close()


class AirflowStack:
    """Start with :meth:`start`, stop with :meth:`stop` (every component, and its database)."""

    def __init__(
        self,
        root: Path,
        campaigns: Path,
        kernels: Path,
        connections: dict[str, dict[str, Any]],
        worker_concurrency: int = 8,
        extra_env: dict[str, str] | None = None,
    ):
        self.root = Path(root)
        self.name = f"benchflow_stack_{os.getpid()}_{secrets.token_hex(3)}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.home = self.root / "airflow"
        self.var = self.root / "var"
        self.db_uri = f"postgresql://postgres@127.0.0.1:5432/{self.name}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._token: str | None = None
        self.home.mkdir(parents=True, exist_ok=True)
        passwords = self.home / "passwords.json"
        passwords.write_text(json.dumps({USER: PASSWORD}))
        broker_db = 1 + os.getpid() % 15
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BENCH_"))},
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://postgres@127.0.0.1:5432/{self.name}",
            "AIRFLOW__CELERY__BROKER_URL": f"{REDIS}/{broker_db}",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://postgres@127.0.0.1:5432/{self.name}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(worker_concurrency),
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.name,  # a queue of its own on the shared Redis
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAG_IGNORE_FILE_SYNTAX": "regexp",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__PARALLELISM": "64",
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "16",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__TRIGGERER__CAPACITY": "1000",
            "BENCH_VAR_DIR": str(self.var),
            "BENCH_CAMPAIGNS_DIR": str(campaigns),
            "BENCH_KERNELS_DIR": str(kernels),
            "GX_ANALYTICS_ENABLED": "false",
            **{f"AIRFLOW_CONN_{cid.upper()}": json.dumps(conn) for cid, conn in connections.items()},
            **(extra_env or {}),
        }

    # -- lifecycle -------------------------------------------------------------------------------

    def _run(self, *command: str, timeout: float = 600) -> str:
        """``airflow …`` or ``bench …`` from the venv, in the stack's environment; fails with its output."""
        proc = subprocess.run(
            [str(BIN / command[0]), *command[1:]],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        return proc.stdout

    def _log(self, component: str) -> Path:
        return self.root / f"{component.replace(' ', '-')}.log"

    def start(self, timeout: float = 240) -> AirflowStack:
        pg_admin(f'CREATE DATABASE "{self.name}"')
        self._run("airflow", "db", "migrate")
        self._run("bench", "pools")
        for component in COMPONENTS:
            args = component.split()
            if component == "api-server":
                args += ["--port", str(self.port), "--host", "127.0.0.1"]
            if component == "celery worker":
                args += ["--queues", self.name]
            log = self._log(component).open("ab")
            self.procs[component] = subprocess.Popen(
                [str(BIN / "airflow"), *args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if requests.get(f"{self.url}/api/v2/monitor/health", timeout=5).status_code == 200:
                    return self
            except requests.ConnectionError:
                pass
            time.sleep(1)
        raise RuntimeError(f"the api-server did not answer within {timeout:.0f} s:\n{self.log_tail('api-server')}")

    def _check_alive(self) -> None:
        for component, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"airflow {component} exited ({proc.returncode}):\n{self.log_tail(component)}")

    def log_tail(self, component: str, chars: int = 4000) -> str:
        path = self._log(component)
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def stop(self) -> None:
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, 15)
            except ProcessLookupError:
                pass
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(10)
        self.procs.clear()
        pg_admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def cpu_seconds(self, component: str) -> float:
        """User + system CPU of a component's process tree so far: live processes, and the children
        they have reaped (a Celery worker's task processes come and go)."""
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
            reply = requests.post(f"{self.url}/auth/token", json={"username": USER, "password": PASSWORD}, timeout=30)
            reply.raise_for_status()
            self._token = reply.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        return requests.request(method, f"{self.url}/api/v2{path}", headers=headers, timeout=60, **kwargs)

    def wait_for_dags(self, dag_ids: list[str], timeout: float = 240) -> None:
        """Until the dag-processor has parsed every DAG; then unpause them."""
        deadline = time.monotonic() + timeout
        missing = list(dag_ids)
        while missing and time.monotonic() < deadline:
            self._check_alive()
            missing = [d for d in missing if self.api("GET", f"/dags/{d}").status_code != 200]
            if missing:
                time.sleep(2)
        if missing:
            errors = self.api("GET", "/importErrors").json()
            raise RuntimeError(f"DAGs {missing} not parsed after {timeout:.0f} s; import errors: {errors}")
        for dag_id in dag_ids:
            self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> requests.Response:
        return self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})

    def run_state(self, dag_id: str, run_id: str) -> str:
        reply = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
        reply.raise_for_status()
        return str(reply.json()["state"])

    def wait_runs(self, runs: list[tuple[str, str]], timeout: float = 600) -> dict[tuple[str, str], str]:
        deadline = time.monotonic() + timeout
        states: dict[tuple[str, str], str] = {}
        while time.monotonic() < deadline:
            self._check_alive()
            states = {run: self.run_state(*run) for run in runs}
            if all(state in FINISHED for state in states.values()):
                return states
            time.sleep(2)
        raise TimeoutError(f"runs not finished after {timeout:.0f} s: {states}")

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        reply = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100})
        reply.raise_for_status()
        return {ti["task_id"]: ti for ti in reply.json()["task_instances"]}


def campaign_folder(root: Path, specs: dict[str, str], payloads: dict[str, Path]) -> tuple[Path, Path]:
    """Write specs (name → YAML) and copy payloads (name → source dir) under ``root``."""
    (root / "specs").mkdir(parents=True, exist_ok=True)
    for name, text in specs.items():
        (root / "specs" / f"{name}.yaml").write_text(text)
    for name, source in payloads.items():
        shutil.copytree(source, root / "kernels" / name, dirs_exist_ok=True)
    return root / "specs", root / "kernels"
