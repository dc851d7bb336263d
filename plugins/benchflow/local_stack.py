"""``bench up`` / ``bench down``: this project's Airflow on this machine, as processes, no Docker.

``airflow api-server``, ``scheduler``, ``dag-processor`` and ``triggerer`` with the LocalExecutor (tasks run as
children of the scheduler), the project's DAGs and plugins (the Benchmarks view included), the host pools
and the warehouse schema. Everything lives under ``var/``: ``var/local-airflow/`` (AIRFLOW_HOME, the state
file with the pids, the login), ``var/logs/<component>.log``.

The metadata database: the local PostgreSQL server (127.0.0.1:5432, database ``benchflow_airflow``, created
when missing) when it answers, else SQLite (``var/local-airflow/airflow.db``). PostgreSQL first because the
four components and every task process write the metadata database at the same time: SQLite takes one
writer at a time, so with the LocalExecutor running tasks in parallel (two campaigns on two hosts, a
campaign's teardowns side by side) writers wait on its lock and, past the busy timeout, fail with
"database is locked"; Airflow documents SQLite for development only. SQLite still works here for one
campaign at a time, which is what a laptop without PostgreSQL needs, so it is the fallback (parallelism 1
then, so tasks never compete for the lock). ``--db sqlite|postgres|<SQLAlchemy URI>`` (or ``BENCH_UP_DB``)
chooses.

Idempotent: ``bench up`` on a running stack prints its URL and login; a stack whose processes died is
cleaned up and started again. ``bench down`` stops every process group it started.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchflow.paths import PROJECT_ROOT, var_dir

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
USER = "admin"
PG_SERVER = ("127.0.0.1", 5432)
PG_DATABASE = "benchflow_airflow"
DEFAULT_PORT = 8080


@dataclass
class Paths:
    home: Path
    logs: Path
    state: Path
    passwords: Path
    secret: Path

    @classmethod
    def here(cls) -> Paths:
        home = var_dir() / "local-airflow"
        return cls(home, var_dir() / "logs", home / "stack.json", home / "passwords.json", home / "jwt_secret")


def _bin(name: str) -> str:
    """A console script of this interpreter's environment (the venv's ``airflow``)."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else (shutil.which(name) or name)


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _postgres_uri(database: str) -> str | None:
    """The local PostgreSQL server's URI for ``database`` (created when missing), or None if it is not there."""
    if not port_open(*PG_SERVER):
        return None
    host, port = PG_SERVER
    user = os.environ.get("BENCH_UP_PG_USER", "postgres")
    from benchflow.warehouse.hooks import ensure_postgres_database

    if not ensure_postgres_database(host, port, user, database):
        return None
    return f"postgresql+psycopg2://{user}@{host}:{port}/{database}"


def choose_database(choice: str | None, paths: Paths) -> tuple[str, str]:
    """(SQLAlchemy URI, why) for ``choice`` (``postgres``, ``sqlite``, a URI, or None: PostgreSQL if it answers)."""
    choice = choice or os.environ.get("BENCH_UP_DB") or "auto"
    database = os.environ.get("BENCH_UP_PG_DATABASE", PG_DATABASE)
    sqlite = f"sqlite:///{paths.home / 'airflow.db'}"
    if "://" in choice:
        return choice, "as given"
    if choice == "sqlite":
        return sqlite, "SQLite as asked: one campaign at a time (parallelism 1)"
    uri = _postgres_uri(database)
    if uri:
        return uri, (
            f"the local PostgreSQL at {PG_SERVER[0]}:{PG_SERVER[1]}, database {database}: the components "
            "and parallel tasks write it at once, which SQLite cannot take"
        )
    if choice == "postgres":
        raise RuntimeError(f"no PostgreSQL server answers at {PG_SERVER[0]}:{PG_SERVER[1]} (user postgres, trust)")
    return sqlite, (
        f"SQLite ({paths.home / 'airflow.db'}): no PostgreSQL answers at {PG_SERVER[0]}:"
        f"{PG_SERVER[1]}; one campaign at a time (parallelism 1, SQLite takes one writer)"
    )


def _secret(path: Path, make: Any) -> str:
    if not path.exists():
        path.write_text(make())
        path.chmod(0o600)
    return path.read_text().strip()


def environment(paths: Paths, db_uri: str, port: int) -> dict[str, str]:
    """The components' environment: this project's DAGs and plugins, LocalExecutor, the simple auth manager."""
    url = f"http://127.0.0.1:{port}"
    sqlite = db_uri.startswith("sqlite")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(
        {
            "AIRFLOW_HOME": str(paths.home),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_uri,
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": "1" if sqlite else "16",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": _secret(paths.secret, lambda: secrets.token_urlsafe(32)),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(paths.passwords),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "GX_ANALYTICS_ENABLED": "false",
        }
    )
    if "BENCH_VAR_DIR" not in env:
        env["BENCH_VAR_DIR"] = str(var_dir())
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def read_state(paths: Paths | None = None) -> dict[str, Any] | None:
    paths = paths or Paths.here()
    try:
        return dict(json.loads(paths.state.read_text()))
    except (OSError, ValueError):
        return None


def _login(paths: Paths) -> str:
    return json.loads(paths.passwords.read_text())[USER]


def _announce(state: dict[str, Any], paths: Paths, out: Any) -> None:
    print(f"Airflow UI:  {state['url']}   (Benchmarks view: {state['url']}/plugin/benchmarks)", file=out)
    print(f"login:       user {USER}, password {_login(paths)}   (in {paths.passwords})", file=out)
    print(f"metadata DB: {state['db_why']}", file=out)
    print(f"logs:        {paths.logs}/<component>.log; pids in {paths.state}", file=out)
    print("stop it:     make down   (or bench down)", file=out)


def _run_step(command: list[str], env: dict[str, str], log: Path, what: str) -> None:
    with log.open("ab") as handle:
        done = subprocess.run(command, env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, timeout=900)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{what} failed (exit {done.returncode}); {log}:\n{tail}")


def up(port: int | None = None, db: str | None = None, timeout: float = 240, out: Any = None) -> dict[str, Any]:
    """Start the stack (or find it running); returns its state (url, db, pids)."""
    out = out or sys.stdout
    paths = Paths.here()
    paths.home.mkdir(parents=True, exist_ok=True)
    paths.logs.mkdir(parents=True, exist_ok=True)
    state = read_state(paths)
    if state and all(_alive(pid) for pid in state["pids"].values()):
        print(f"already up (pids {', '.join(map(str, state['pids'].values()))})", file=out)
        _announce(state, paths, out)
        return state
    if state:
        print("a previous stack is partly down: stopping what is left of it", file=out)
        down(out=out)
    port = port or int(os.environ.get("BENCH_UP_PORT", DEFAULT_PORT))
    if port_open("127.0.0.1", port):
        raise RuntimeError(f"port {port} is taken: bench up --port N")
    db_uri, why = choose_database(db, paths)
    print(f"metadata DB: {why}", file=out, flush=True)
    _secret(paths.passwords, lambda: json.dumps({USER: secrets.token_urlsafe(12)}))
    env = environment(paths, db_uri, port)
    setup_log = paths.logs / "bench-up.log"
    print("airflow db migrate ...", file=out, flush=True)
    _run_step([_bin("airflow"), "db", "migrate"], env, setup_log, "airflow db migrate")
    print("bench migrate, bench pools ...", file=out, flush=True)
    bench = [sys.executable, "-m", "benchflow.cli"]
    _run_step([*bench, "migrate"], env, setup_log, "bench migrate")
    _run_step([*bench, "pools"], env, setup_log, "bench pools")
    url = f"http://127.0.0.1:{port}"
    pids: dict[str, int] = {}
    for component in COMPONENTS:
        args = [component] + (["--port", str(port), "--host", "127.0.0.1"] if component == "api-server" else [])
        with (paths.logs / f"{component}.log").open("ab") as log:
            proc = subprocess.Popen(
                [_bin("airflow"), *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=PROJECT_ROOT,
                start_new_session=True,
            )
        pids[component] = proc.pid
        (paths.home / f"{component}.pid").write_text(f"{proc.pid}\n")
    state = {"url": url, "port": port, "db": db_uri, "db_why": why, "pids": pids, "started": time.time()}
    paths.state.write_text(json.dumps(state, indent=2))
    print(f"starting {', '.join(COMPONENTS)} ...", file=out, flush=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = [c for c, pid in pids.items() if not _alive(pid)]
        if dead:
            tail = (paths.logs / f"{dead[0]}.log").read_text(errors="replace")[-3000:]
            with open(os.devnull, "w") as quiet:
                down(out=quiet)
            raise RuntimeError(f"airflow {dead[0]} exited; {paths.logs / (dead[0] + '.log')}:\n{tail}")
        if _healthy(url):
            _announce(state, paths, out)
            return state
        time.sleep(1)
    raise RuntimeError(f"the api-server did not answer at {url} within {timeout:.0f} s; logs in {paths.logs}")


def _healthy(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5) as reply:  # noqa: S310 (http://127.0.0.1)
            return int(reply.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def down(grace_s: float = 30.0, out: Any = None) -> list[str]:
    """Stop every component's process group (TERM, then KILL after ``grace_s``); returns what was stopped."""
    out = out or sys.stdout
    paths = Paths.here()
    state = read_state(paths)
    if not state:
        print("not running (no var/local-airflow/stack.json)", file=out)
        return []
    pids: dict[str, int] = state["pids"]
    for pid in pids.values():
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_group_alive(pid) for pid in pids.values()):
        time.sleep(0.5)
    for pid in pids.values():
        if _group_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for component in pids:
        (paths.home / f"{component}.pid").unlink(missing_ok=True)
    print(f"stopped {', '.join(f'{c} ({pid})' for c, pid in pids.items())}", file=out)
    _end_runs(paths, state, out)
    paths.state.unlink(missing_ok=True)
    return list(pids)


def _end_runs(paths: Paths, state: dict[str, Any], out: Any, timeout: float = 600) -> None:
    """With nothing of the stack left to finish them, end the runs still going (:mod:`benchflow.runner.abandon`):
    their benchmarks stopped, services restored, hosts released, the runs marked failed."""
    env = environment(paths, state["db"], int(state.get("port", DEFAULT_PORT)))
    command = [sys.executable, "-m", "benchflow.runner.abandon"]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"ending the runs still going took over {timeout:.0f} s: see their hosts", file=out)
        return
    if done.stdout:
        print(done.stdout.rstrip("\n"), file=out)
    if done.returncode != 0:
        print(f"ending the runs still going failed (exit {done.returncode}): {done.stderr[-2000:]}", file=out)


def _group_alive(pgid: int) -> bool:
    """Any live (non-zombie) process in the process group (the scheduler's task processes included)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
