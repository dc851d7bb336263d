"""``bench up`` / ``bench down``: this project's Airflow on this machine, as processes, no Docker.

``airflow api-server``, ``scheduler``, ``dag-processor`` and ``triggerer`` with the LocalExecutor (tasks run as
children of the scheduler), the project's DAGs and plugins (the Benchmarks view included), the host pools
and the warehouse schema. Everything lives under ``var/``: ``var/local-airflow/`` (AIRFLOW_HOME, the state
file with the pids, the login), ``var/logs/<component>.log``.

One Airflow per project checkout: ``bench up`` and ``bench run`` share its home (``var/airflow/``, task logs
included) and its metadata database (:mod:`benchtools.metadata_db`: the local PostgreSQL when it answers, else
SQLite with parallelism 1), so every run either makes is in the UI and every run link resolves. The components
are started by :mod:`benchtools.stack`, the launcher the tests' stack tier uses too.

Health: ``bench up`` returns once Airflow's health endpoint says the metadata database, scheduler, triggerer and
dag-processor are healthy; a component that exits or is not healthy within ``BENCH_UP_TIMEOUT`` seconds (240)
fails it with that component's log lines, and nothing is left running. Everything listens on 127.0.0.1 only.
A taken UI port is named before anything starts.

Idempotent: ``bench up`` on a running stack prints its URL and login (``--port`` of another port is an error
that says so); a stack whose processes died is cleaned up and started again. ``bench up`` and ``bench down`` take
a lock (``var/local-airflow/stack.lock``), so two at once never start two stacks, and ``bench down`` stops every
process group that was started. ``stack.json`` (the pids, the metadata DB's URI) is mode 0600.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchflow.paths import PROJECT_ROOT, var_dir
from benchtools import stack
from benchtools.metadata_db import (
    airflow_home,
    ensure_database,
    matches,
    metadata_db,
    shown,
    unreachable,
    write_private,
)
from benchtools.net import port_free

COMPONENTS = stack.LOCAL_COMPONENTS
USER = stack.USER
DEFAULT_PORT = 8080
REPORT_DAG = "bench_report"  # drawn on every load's asset event: unpaused under bench up


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


def _secret(path: Path, make: Any) -> str:
    if not path.exists():
        write_private(path, make())
    return path.read_text().strip()


def environment(paths: Paths, db_uri: str, port: int) -> dict[str, str]:
    """The components' environment: :func:`benchtools.stack.base_environment` with the LocalExecutor, one task
    at a time on SQLite, this checkout's ``var/``."""
    secret = _secret(paths.secret, lambda: secrets.token_urlsafe(32))
    spec_repo = os.environ.get("BENCH_SPEC_REPO")  # campaign specs from git too (docs/campaigns.md, "Specs from git")
    env = stack.base_environment(paths.airflow_home, db_uri, port, secret, paths.passwords, spec_repo=spec_repo)
    env["AIRFLOW__CORE__PARALLELISM"] = "1" if db_uri.startswith("sqlite") else "16"
    env["AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL"] = "10"
    env.setdefault("BENCH_VAR_DIR", str(var_dir()))
    if edge_queue():
        env |= stack.edge_settings(env["AIRFLOW__CORE__EXECUTOR"], f"http://127.0.0.1:{port}")
    return env


def edge_queue() -> str | None:
    """``BENCH_EDGE_QUEUE``: the queue of a local Edge worker bench up runs beside the stack (the Edge executor
    beside the LocalExecutor), for trying a campaign on host ``edge:<queue>`` here."""
    queue = os.environ.get("BENCH_EDGE_QUEUE") or None
    if queue is not None and not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,99}", queue):
        raise RuntimeError(f"BENCH_EDGE_QUEUE={queue!r}: a queue is a letter, then letters, digits, '_', '.', '-'")
    return queue


def _start_edge_worker(env: dict[str, str], port: int, logs: Path) -> int:
    """The local Edge worker of ``BENCH_EDGE_QUEUE``, one slot, with a var folder of its own (its host's
    workdirs), as a GPU host would run it: its pid."""
    queue = str(edge_queue())
    worker_env = stack.edge_worker_env(env, var_dir() / f"edge-{queue}")
    extra = ["--queues", queue, "--concurrency", "1"]
    return stack.start_component(stack.EDGE_WORKER, port, worker_env, logs, extra).pid


def read_state(paths: Paths | None = None) -> dict[str, Any] | None:
    paths = paths or Paths.here()
    try:
        return dict(json.loads(paths.state.read_text()))
    except (OSError, ValueError):
        return None


def _login(paths: Paths) -> str:
    return str(json.loads(paths.passwords.read_text())[USER])


def _announce(state: dict[str, Any], paths: Paths, out: Any) -> None:
    print(f"Airflow UI:  {state['url']}   (Benchmarks view: {state['url']}/plugin/benchmarks)", file=out)
    print(f"login:       user {USER}, password {_login(paths)}   (in {paths.passwords})", file=out)
    print(f"metadata DB: {state['db_why']}", file=out)
    print(f"logs:        {paths.logs}/<component>.log; pids in {paths.state}", file=out)
    print("stop it:     make down   (or bench down)", file=out)


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


def up(port: int | None = None, db: str | None = None, timeout: float | None = None, out: Any = None) -> dict[str, Any]:
    """Start the stack (or find it running); returns its state (url, db, pids). Raises RuntimeError naming what
    did not come up, with nothing left running."""
    out = out or sys.stdout
    paths = Paths.here()
    for folder in (paths.home, paths.logs, paths.airflow_home):
        folder.mkdir(parents=True, exist_ok=True)
    with _locked(paths, out):
        return _up(paths, port, db, timeout, out)


def _running(paths: Paths, port: int | None, db: str | None, out: Any) -> dict[str, Any] | None:
    """The stack's state when it runs (``--port``/``--db`` of another one are errors that say so); a stack
    partly down is stopped, and None returned."""
    state = read_state(paths)
    if state and all(stack.alive(pid) for pid in state["pids"].values()):
        if port and port != state["port"]:
            raise RuntimeError(
                f"already up on port {state['port']} ({state['url']}): --port {port} is not applied; "
                f"bench down, then bench up --port {port}"
            )
        if db and not matches(db, state["db"]):
            raise RuntimeError(
                f"already up on the metadata DB {shown(state['db'])}: --db {db} is not applied; bench down first"
            )
        print(f"already up (pids {', '.join(map(str, state['pids'].values()))})", file=out)
        _announce(state, paths, out)
        return state
    if state:
        print("a previous stack is partly down: stopping what is left of it", file=out)
        _down(paths, 30.0, out)
    return None


def _up(paths: Paths, port: int | None, db: str | None, timeout: float | None, out: Any) -> dict[str, Any]:
    if running := _running(paths, port, db, out):
        return running
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
    _set_up(env, paths.logs / "bench-up.log", out)
    url = f"http://127.0.0.1:{port}"
    pids: dict[str, int] = {}
    created: dict[int, float | None] = {}  # pid → start time: bench down signals a pid only while it is that process
    state = {"url": url, "port": port, "db": db_uri, "db_why": why, "pids": pids, "started": time.time()}
    state["created"] = created
    dead = lambda: [c for c, pid in pids.items() if not stack.alive(pid)]  # noqa: E731
    print(f"starting {', '.join(COMPONENTS)} ...", file=out, flush=True)
    for component in COMPONENTS:
        pids[component] = stack.start_component(component, port, env, paths.logs).pid
        created[pids[component]] = stack.created(pids[component])
        write_private(paths.home / f"{component}.pid", f"{pids[component]}\n")
        write_private(paths.state, json.dumps(state, indent=2))  # written as each starts: bench down finds it
        if component == "api-server":
            # the scheduler starts what waits for it (a report of an earlier bench run's load) at once, and its
            # tasks report to the api-server: one started before it listens fails, a red run on the first page
            _wait_answering(url, dead, timeout)
    if edge_queue():
        pids[stack.EDGE_WORKER] = _start_edge_worker(env, port, paths.logs)
        write_private(paths.state, json.dumps(state, indent=2))
    at_fault, what = stack.wait_healthy(url, dead, timeout)
    if at_fault:
        report = stack.failure_report(paths.logs, at_fault, what)
        with open(os.devnull, "w") as quiet:
            _down(paths, 30.0, quiet)
        print("stopped every component it had started", file=out)
        raise RuntimeError(report)
    _unpause_report(url, _login(paths), out)
    _announce(state, paths, out)
    return state


def _wait_answering(url: str, dead: Any, timeout: float) -> None:
    """Until the api-server answers its health endpoint (or it exited, or ``timeout``: wait_healthy then says)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not dead() and stack.health_of(url) is None:
        time.sleep(0.3)


def _set_up(env: dict[str, str], log: Path, out: Any) -> None:
    """Airflow's tables, the warehouse's, the host pools."""
    print("airflow db migrate ...", file=out, flush=True)
    stack.run_step([stack.airflow_bin(), "db", "migrate"], env, log, "airflow db migrate")
    print("bench migrate, bench pools ...", file=out, flush=True)
    bench = [sys.executable, "-m", "benchtools.cli"]
    stack.run_step([*bench, "migrate"], env, log, "bench migrate")
    stack.run_step([*bench, "pools"], env, log, "bench pools")


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
    started = {int(pid): float(when) for pid, when in (state.get("created") or {}).items() if when is not None}
    stack.stop_groups(pids.values(), grace_s, started)
    for component in pids:
        (paths.home / f"{component}.pid").unlink(missing_ok=True)
    print(f"stopped {', '.join(f'{c} ({pid})' for c, pid in pids.items())}", file=out)
    _end_runs(paths, state, out)
    paths.state.unlink(missing_ok=True)
    return list(pids)


def _end_runs(paths: Paths, state: dict[str, Any], out: Any, timeout: float = 600) -> None:
    """With nothing of the stack left to finish them, end the runs still going (:mod:`benchtools.runner.abandon`):
    their benchmarks stopped, services restored, hosts released, the runs marked failed."""
    db = state.get("db") or metadata_db()[0]  # the stack's state file lost: this checkout's recorded DB
    env = environment(paths, db, int(state.get("port", DEFAULT_PORT)))
    command = [sys.executable, "-m", "benchtools.runner.abandon"]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"ending the runs still going took over {timeout:.0f} s: see their hosts", file=out)
        return
    if done.stdout:
        print(done.stdout.rstrip("\n"), file=out)
    if done.returncode != 0:
        print(f"ending the runs still going failed (exit {done.returncode}): {done.stderr[-2000:]}", file=out)
