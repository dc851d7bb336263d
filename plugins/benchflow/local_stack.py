"""``bench up`` / ``bench down``: this project's Airflow on this machine, as processes, no Docker.

``airflow api-server``, ``scheduler``, ``dag-processor`` and ``triggerer`` with the LocalExecutor (tasks run as
children of the scheduler), the project's DAGs and plugins (the Benchmarks view included), the host pools
and the warehouse schema. Everything lives under ``var/``: ``var/local-airflow/`` (AIRFLOW_HOME, the state
file with the pids, the login), ``var/logs/<component>.log``.

One Airflow per project checkout: ``bench up`` and ``bench run`` share its home (``var/airflow/``, task logs
included) and its metadata database, so every run either makes is in the UI and every run link resolves. The
database is chosen on first use and recorded in ``var/airflow/metadata_db.json`` (mode 0600): the local
PostgreSQL server (127.0.0.1:5432, database ``benchflow_airflow_<8 hex of this checkout's var/ path>``, created
when missing) when it answers, else SQLite (``var/airflow/airflow.db``). PostgreSQL first because the
four components and every task process write the metadata database at the same time: SQLite takes one
writer at a time, so with the LocalExecutor running tasks in parallel (two campaigns on two hosts, a
campaign's teardowns side by side) writers wait on its lock and, past the busy timeout, fail with
"database is locked"; Airflow documents SQLite for development only. SQLite still works here for one
campaign at a time, which is what a laptop without PostgreSQL needs, so it is the fallback (parallelism 1
then, so tasks never compete for the lock). ``--db sqlite|postgres|<SQLAlchemy URI>`` (or ``BENCH_UP_DB``)
chooses, and changes the record (saying that the runs recorded in the other database stay there).

Health: ``bench up`` returns once Airflow's health endpoint says the metadata database, scheduler, triggerer and
dag-processor are healthy; a component that exits or is not healthy within ``BENCH_UP_TIMEOUT`` seconds (240)
fails it with that component's log lines, and nothing is left running. Everything listens on 127.0.0.1 only:
the api-server by ``--host``; the scheduler's and triggerer's log servers (8793, 8794) are not started
(``--skip-serve-logs``: Airflow 3.3 has no setting for their address and binds them to every interface, and on
one machine the api-server reads task and trigger logs from the shared log folder). A taken UI port is named
before anything starts.

Idempotent: ``bench up`` on a running stack prints its URL and login (``--port`` of another port is an error
that says so); a stack whose processes died is cleaned up and started again. ``bench up`` and ``bench down`` take
a lock (``var/local-airflow/stack.lock``), so two at once never start two stacks, and ``bench down`` stops every
process group that was started. ``stack.json`` (the pids, the metadata DB's URI) is mode 0600.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchflow.airflow_setup import IGNORE_FILE_SYNTAX
from benchflow.paths import PROJECT_ROOT, var_dir

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
USER = "admin"
PG_SERVER = ("127.0.0.1", 5432)
PG_DATABASE = "benchflow_airflow"
DEFAULT_PORT = 8080
REPORT_DAG = "bench_report"  # drawn on every load's asset event: unpaused under bench up
# What bench run's runs carry so that a running stack's scheduler and triggerer leave them to dag.test: a pool of
# no slots (the scheduler never queues its tasks) and a trigger queue no triggerer of the stack consumes.
BENCH_RUN_POOL = "bench_run"
BENCH_RUN_QUEUE = "bench_run"


@dataclass
class Paths:
    home: Path
    logs: Path
    state: Path
    passwords: Path
    secret: Path
    airflow_home: Path

    @classmethod
    def here(cls) -> Paths:
        home = var_dir() / "local-airflow"
        return cls(
            home, var_dir() / "logs", home / "stack.json", home / "passwords.json", home / "jwt_secret", airflow_home()
        )

    @property
    def lock(self) -> Path:
        return self.home / "stack.lock"


def airflow_home() -> Path:
    """This checkout's AIRFLOW_HOME, ``bench up``'s and ``bench run``'s alike."""
    return var_dir() / "airflow"


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (it may hold a password)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


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
    """The local PostgreSQL server's URI for ``database``, or None if no server answers. Imports nothing of
    Airflow (``bench run`` sets Airflow's connection from it before Airflow reads its configuration);
    :func:`ensure_database` creates the database."""
    if not port_open(*PG_SERVER):
        return None
    host, port = PG_SERVER
    user = os.environ.get("BENCH_UP_PG_USER", "postgres")
    return f"postgresql+psycopg2://{user}@{host}:{port}/{database}"


def ensure_database(uri: str) -> None:
    """Create the metadata database at ``uri`` on the local PostgreSQL server when it is missing."""
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    if not uri.startswith("postgresql") or (url.host, url.port or 5432) != PG_SERVER or not url.database:
        return
    if not port_open(*PG_SERVER):
        return
    from benchflow.warehouse.hooks import ensure_postgres_database

    if not ensure_postgres_database(PG_SERVER[0], PG_SERVER[1], url.username or "postgres", url.database):
        raise RuntimeError(f"could not create the metadata DB {url.database} on {PG_SERVER[0]}:{PG_SERVER[1]}")


def pg_database() -> str:
    """This checkout's PostgreSQL database: one per ``var/`` folder (``BENCH_UP_PG_DATABASE`` names another)."""
    digest = hashlib.sha256(str(var_dir()).encode()).hexdigest()[:8]
    return os.environ.get("BENCH_UP_PG_DATABASE", f"{PG_DATABASE}_{digest}")


def record_path() -> Path:
    return airflow_home() / "metadata_db.json"


def _matches(choice: str, uri: str) -> bool:
    if "://" in choice:
        return choice == uri
    return uri.startswith({"sqlite": "sqlite", "postgres": "postgresql"}.get(choice, uri))


def metadata_db(choice: str | None = None, out: Any = None) -> tuple[str, str]:
    """(SQLAlchemy URI, why) of this checkout's metadata database, shared by ``bench up`` and ``bench run``: the
    one recorded in ``var/airflow/metadata_db.json``, else (and when ``choice`` or ``BENCH_UP_DB`` asks for
    another) the one :func:`choose_database` picks, recorded."""
    choice = choice or os.environ.get("BENCH_UP_DB") or "auto"
    record = None
    with contextlib.suppress(OSError, ValueError, KeyError):
        found = json.loads(record_path().read_text())
        record = (str(found["uri"]), str(found["why"]))
    if record and (choice == "auto" or _matches(choice, record[0])):
        return record[0], f"{record[1]} (this checkout's since its first use, in {record_path()}; --db changes it)"
    uri, why = choose_database(choice)
    if record and record[0] != uri:
        print(
            f"metadata DB: this checkout's changes from {_shown(record[0])} to {_shown(uri)}; the runs recorded in "
            "the former stay there and are not shown",
            file=out or sys.stderr,
        )
    _write_private(record_path(), json.dumps({"uri": uri, "why": why}, indent=2))
    return uri, why


def _shown(uri: str) -> str:
    """A URI without its password."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(uri).render_as_string(hide_password=True)
    except Exception:
        return uri.split("://", 1)[0] + "://…"


def unreachable(uri: str) -> str | None:
    """Why the metadata database at ``uri`` cannot be used now (its server does not answer), or None."""
    if uri.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    try:
        url = make_url(uri)
    except Exception as exc:
        return f"the metadata DB URI is not readable: {exc}"
    host, port = url.host or "127.0.0.1", int(url.port or 5432)
    if port_open(host, port):
        return None
    return (
        f"this checkout's metadata DB ({_shown(uri)}, recorded in {record_path()}) does not answer at {host}:{port}: "
        "start it, or choose another with bench up --db sqlite|postgres|URI (the runs recorded in it stay there)"
    )


def choose_database(choice: str | None) -> tuple[str, str]:
    """(SQLAlchemy URI, why) for ``choice`` (``postgres``, ``sqlite``, a URI, or None: PostgreSQL if it answers)."""
    choice = choice or os.environ.get("BENCH_UP_DB") or "auto"
    database = pg_database()
    db_file = airflow_home() / "airflow.db"
    sqlite = f"sqlite:///{db_file}"
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
        f"SQLite ({db_file}): no PostgreSQL answers at {PG_SERVER[0]}:"
        f"{PG_SERVER[1]}; one campaign at a time (parallelism 1, SQLite takes one writer)"
    )


def _secret(path: Path, make: Any) -> str:
    if not path.exists():
        _write_private(path, make())
    return path.read_text().strip()


def environment(paths: Paths, db_uri: str, port: int) -> dict[str, str]:
    """The components' environment: this project's DAGs and plugins, LocalExecutor, the simple auth manager."""
    url = f"http://127.0.0.1:{port}"
    sqlite = db_uri.startswith("sqlite")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(
        {
            "AIRFLOW_HOME": str(paths.airflow_home),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_uri,
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAG_IGNORE_FILE_SYNTAX": IGNORE_FILE_SYNTAX,
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


def leave_to_dag_test(dag: Any) -> None:
    """For ``bench run``: the metadata database is the one this checkout's stack uses, so the run's tasks go to a
    pool of no slots (that stack's scheduler never queues them) and their triggers to a queue no triggerer of the
    stack consumes (it is started without ``--queues``): only ``dag.test()`` runs them."""
    from airflow.models.pool import Pool

    os.environ["AIRFLOW__TRIGGERER__QUEUES_ENABLED"] = "True"
    about = "bench run's runs: dag.test() runs their tasks, never a scheduler (no slots)"
    Pool.create_or_update_pool(BENCH_RUN_POOL, 0, about, include_deferred=False)
    for task in dag.tasks:
        task.pool = BENCH_RUN_POOL
        task.queue = BENCH_RUN_QUEUE


@contextlib.contextmanager
def _locked(paths: Paths, out: Any) -> Iterator[None]:
    """Hold ``var/local-airflow/stack.lock``: one ``bench up`` or ``bench down`` at a time on this checkout."""
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"another bench up or bench down holds {paths.lock}: waiting for it", file=out, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``host:port`` now (as the api-server would: SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def up(port: int | None = None, db: str | None = None, timeout: float | None = None, out: Any = None) -> dict[str, Any]:
    """Start the stack (or find it running); returns its state (url, db, pids). Raises RuntimeError naming what
    did not come up, with nothing left running."""
    out = out or sys.stdout
    paths = Paths.here()
    for folder in (paths.home, paths.logs, paths.airflow_home):
        folder.mkdir(parents=True, exist_ok=True)
    with _locked(paths, out):
        return _up(paths, port, db, timeout, out)


def _up(paths: Paths, port: int | None, db: str | None, timeout: float | None, out: Any) -> dict[str, Any]:
    state = read_state(paths)
    if state and all(_alive(pid) for pid in state["pids"].values()):
        if port and port != state["port"]:
            raise RuntimeError(
                f"already up on port {state['port']} ({state['url']}): --port {port} is not applied; "
                f"bench down, then bench up --port {port}"
            )
        if db and not _matches(db, state["db"]):
            raise RuntimeError(
                f"already up on the metadata DB {_shown(state['db'])}: --db {db} is not applied; bench down first"
            )
        print(f"already up (pids {', '.join(map(str, state['pids'].values()))})", file=out)
        _announce(state, paths, out)
        return state
    if state:
        print("a previous stack is partly down: stopping what is left of it", file=out)
        _down(paths, 30.0, out)
    timeout = timeout or float(os.environ.get("BENCH_UP_TIMEOUT", "240"))
    port = port or int(os.environ.get("BENCH_UP_PORT", DEFAULT_PORT))
    if not port_free(port):
        raise RuntimeError(
            f"port {port} (the api-server: the UI and the REST API) is taken on 127.0.0.1: free it, or bench up "
            "--port N (or BENCH_UP_PORT)"
        )
    db_uri, why = metadata_db(db, out)
    if problem := unreachable(db_uri):
        raise RuntimeError(problem)
    ensure_database(db_uri)
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
    state = {"url": url, "port": port, "db": db_uri, "db_why": why, "pids": pids, "started": time.time()}
    for component in COMPONENTS:
        with (paths.logs / f"{component}.log").open("ab") as log:
            proc = subprocess.Popen(
                [_bin("airflow"), component, *_component_args(component, port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=PROJECT_ROOT,
                start_new_session=True,
            )
        pids[component] = proc.pid
        _write_private(paths.home / f"{component}.pid", f"{proc.pid}\n")
        _write_private(paths.state, json.dumps(state, indent=2))  # written as each starts: bench down finds it
    print(f"starting {', '.join(COMPONENTS)} ...", file=out, flush=True)
    _wait_healthy(paths, state, timeout, out)
    _unpause_report(url, _login(paths), out)
    _announce(state, paths, out)
    return state


def _component_args(component: str, port: int) -> list[str]:
    """Everything on 127.0.0.1: the api-server by --host; the scheduler's and triggerer's log servers, which
    Airflow binds to every interface (no setting for their address), are not started."""
    if component == "api-server":
        return ["--port", str(port), "--host", "127.0.0.1"]
    if component in ("scheduler", "triggerer"):
        return ["--skip-serve-logs"]
    return []


HEALTH_KEYS = {
    "metadatabase": "metadata DB",
    "scheduler": "scheduler",
    "triggerer": "triggerer",
    "dag_processor": "dag-processor",
}


def _wait_healthy(paths: Paths, state: dict[str, Any], timeout: float, out: Any) -> None:
    """Until Airflow's health endpoint says every component is healthy; else stop everything and raise, naming
    the component and showing the end of its log."""
    pids: dict[str, int] = state["pids"]
    deadline = time.monotonic() + timeout
    unhealthy: list[str] = ["api-server"]
    while time.monotonic() < deadline:
        dead = [c for c, pid in pids.items() if not _alive(pid)]
        if dead:
            _fail(paths, dead, "exited", out)
        health = health_of(state["url"])
        if health is not None:
            unhealthy = [HEALTH_KEYS[k] for k in HEALTH_KEYS if (health.get(k) or {}).get("status") != "healthy"]
            if not unhealthy:
                return
        time.sleep(1)
    _fail(paths, unhealthy, f"not healthy within {timeout:.0f} s (Airflow's /api/v2/monitor/health)", out)


def _fail(paths: Paths, components: list[str], what: str, out: Any) -> None:
    parts = []
    for component in components:
        log = paths.logs / f"{'api-server' if component == 'metadata DB' else component}.log"
        try:
            lines = log.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            lines = []
        name = "the metadata DB" if component == "metadata DB" else f"airflow {component}"
        parts.append(f"{name} {what}; {log} ends:\n" + "\n".join(f"  {line[:300]}" for line in lines))
    with open(os.devnull, "w") as quiet:
        _down(paths, 30.0, quiet)
    print("stopped every component it had started", file=out)
    raise RuntimeError("\n".join(parts))


def health_of(url: str) -> dict[str, Any] | None:
    """Airflow's health report (metadatabase, scheduler, triggerer, dag_processor), or None when the api-server
    does not answer."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5) as reply:  # noqa: S310 (http://127.0.0.1)
            return dict(json.loads(reply.read())) if int(reply.status) == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _unpause_report(url: str, password: str, out: Any) -> None:
    """The report DAG draws every load's plots: unpaused (the DAG file creates it unpaused; this unpauses one an
    earlier run had left paused). The campaigns stay paused."""
    import urllib.error
    import urllib.request

    def call(method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        request = urllib.request.Request(  # noqa: S310 (http://127.0.0.1)
            f"{url}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})},
        )
        with urllib.request.urlopen(request, timeout=30) as reply:  # noqa: S310
            return json.loads(reply.read())

    try:
        token = call("POST", "/auth/token", {"username": USER, "password": password})["access_token"]
        dag = call("GET", f"/api/v2/dags/{REPORT_DAG}", token=token)
        if dag.get("is_paused"):
            call("PATCH", f"/api/v2/dags/{REPORT_DAG}", {"is_paused": False}, token=token)
            print(f"report DAG {REPORT_DAG}: unpaused (it draws each load's plots)", file=out)
    except urllib.error.HTTPError as exc:
        if exc.code != 404:  # 404: not parsed yet; the DAG file creates it unpaused
            print(f"report DAG {REPORT_DAG}: could not unpause it ({exc}); unpause it in the UI", file=out)
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        print(f"report DAG {REPORT_DAG}: could not unpause it ({exc}); unpause it in the UI", file=out)


def down(grace_s: float = 30.0, out: Any = None) -> list[str]:
    """Stop every component's process group (TERM, then KILL after ``grace_s``); returns what was stopped."""
    out = out or sys.stdout
    paths = Paths.here()
    if not paths.home.exists():
        print("not running (no var/local-airflow/)", file=out)
        return []
    with _locked(paths, out):
        return _down(paths, grace_s, out)


def _pids(paths: Paths) -> dict[str, int]:
    """The components' pids: the state file's, else the pid files a start left behind."""
    state = read_state(paths)
    if state:
        return {str(c): int(p) for c, p in state["pids"].items()}
    pids = {}
    for component in COMPONENTS:
        with contextlib.suppress(OSError, ValueError):
            pids[component] = int((paths.home / f"{component}.pid").read_text())
    return pids


def _down(paths: Paths, grace_s: float, out: Any) -> list[str]:
    state = read_state(paths) or {}
    pids = _pids(paths)
    if not pids:
        print("not running (no var/local-airflow/stack.json)", file=out)
        return []
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
    db = state.get("db") or metadata_db()[0]  # the stack's state file lost: this checkout's recorded DB
    env = environment(paths, db, int(state.get("port", DEFAULT_PORT)))
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
