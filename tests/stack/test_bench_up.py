"""``bench up`` / ``bench down`` as a user runs them: the real CLI starts the project's Airflow here (LocalExecutor,
the local PostgreSQL as metadata DB), the campaigns appear in the REST API, one runs to success and shows in
the Benchmarks view, and ``bench down`` leaves no process behind. A ``bench run`` made before is in the same
Airflow; two ``bench up`` at once start one stack; it listens on 127.0.0.1 only (8793/8794 taken changes
nothing); a component that does not come up fails ``bench up`` naming it, with nothing left running."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import stat
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import requests

from benchflow.warehouse.hooks import drop_postgres_database
from benchtools.net import free_port
from tests.conftest import FIXTURES, PROJECT_ROOT, live_group_members, wait_for

pytestmark = [pytest.mark.stack, pytest.mark.timeout(1500)]  # bench run, two stacks' starts, campaign runs
BENCH = Path(sys.executable).parent / "bench"
SPEC = textwrap.dedent("""\
    description: bench up smoke campaign
    host: local
    payload: fault
    schedule: null
    benchmark:
      script: bench_fault.py
      args: {mode: ok, rows: 3, delay: 0.2}
    timeouts:
      benchmark: 120
      poke_interval: 1
    """)
HANG_SPEC = textwrap.dedent("""\
    description: bench down during the wait
    host: local
    payload: fault
    schedule: null
    benchmark:
      script: bench_fault.py
      args: {mode: hang, rows: 2, delay: 0.0}
    timeouts:
      benchmark: 600
      poke_interval: 1
    services:
      - name: gpu_holder
        stop: "echo stopped >> services.log"
        start: "echo started >> services.log"
    """)


def environment(root: Path) -> tuple[dict[str, str], Path]:
    """A checkout's worth of state under ``root``: its specs (the smoke campaign, and one whose benchmark hangs),
    the fault payload, a var/ folder and a PostgreSQL database of its own for ``bench up``."""
    (root / "specs").mkdir()
    (root / "specs" / "up_smoke.yaml").write_text(SPEC)
    (root / "specs" / "down_hang.yaml").write_text(HANG_SPEC)
    (root / "kernels").mkdir()
    os.symlink(FIXTURES / "payloads" / "fault", root / "kernels" / "fault")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "BENCH_VAR_DIR": str(root / "var"),
            "BENCH_CAMPAIGNS_DIR": str(root / "specs"),
            "BENCH_KERNELS_DIR": str(root / "kernels"),
            "BENCH_UP_PG_DATABASE": f"benchflow_up_{uuid.uuid4().hex[:8]}",
        }
    )
    return env, root / "var"


def finish(env: dict[str, str]) -> None:
    subprocess.run([str(BENCH), "down"], env=env, capture_output=True, timeout=600)
    drop_postgres_database(env["BENCH_UP_PG_DATABASE"])


@pytest.fixture
def local_env(tmp_path):
    env, var = environment(tmp_path)
    yield env, var
    finish(env)


@dataclass
class Up:
    """One ``bench up`` for the module's tests (a ``bench run`` made before it, two ``bench up`` at once)."""

    env: dict[str, str]
    var: Path
    port: int
    ran: subprocess.CompletedProcess[str]
    outputs: list[tuple[int, str, str]]  # (exit status, stdout, stderr) of the two

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict[str, str]:
        password = json.loads((self.var / "local-airflow" / "passwords.json").read_text())["admin"]
        token = requests.post(f"{self.url}/auth/token", json={"username": "admin", "password": password}, timeout=30)
        return {"Authorization": f"Bearer {token.json()['access_token']}"}


@pytest.fixture(scope="module")
def up(tmp_path_factory) -> Iterator[Up]:
    env, var = environment(tmp_path_factory.mktemp("up"))
    ran = subprocess.run(
        [str(BENCH), "run", "up_smoke"], env=env, capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT
    )
    port = free_port()
    command = [str(BENCH), "up", "--port", str(port)]
    with held(8793, 8794):  # the log servers' ports, taken: bench up starts none
        both = [
            subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROJECT_ROOT
            )
            for _ in range(2)
        ]
        texts = [proc.communicate(timeout=400) for proc in both]
        outputs = [(proc.returncode, out, err) for proc, (out, err) in zip(both, texts, strict=True)]
    try:
        yield Up(env, var, port, ran, outputs)
    finally:
        finish(env)


def listening_on(var: Path) -> set[tuple[str, int]]:
    """The addresses this test's stack listens on; a process that ends while it is read (a task's, the report's
    run starting at once now) listens on nothing."""
    found = set()
    for proc in ours(var):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            found |= {
                (c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
            }
    return found


def ours(var: Path) -> list[psutil.Process]:
    """This test's processes of the stack: those writing into its var folder (the components' output goes to
    var/logs/) or whose BENCH_VAR_DIR is it (setproctitle can hide a process's environment)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if os.readlink(f"/proc/{proc.pid}/fd/1").startswith(str(var)):
                found.append(proc)
            elif proc.environ().get("BENCH_VAR_DIR") == str(var):
                found.append(proc)
    return found


@contextlib.contextmanager
def held(*ports: int):
    """Listen on these ports (on every interface, as another program would); one already taken stays taken."""
    sockets = []
    for port in ports:
        sock = socket.socket()
        try:
            sock.bind(("0.0.0.0", port))  # as another program holding it would
            sock.listen()
            sockets.append(sock)
        except OSError:
            sock.close()  # taken by someone else already: the condition holds
    try:
        yield
    finally:
        for sock in sockets:
            sock.close()


def test_bench_up_shares_bench_runs_airflow_runs_a_campaign_and_shows_it(up):
    """The stack the module's tests share: ``bench run`` before it used this checkout's metadata DB, two ``bench
    up`` at once started one stack, on loopback only; a campaign triggered through its REST API runs and shows in
    the Benchmarks view. ``bench down`` is the next test's."""
    env, var, port, ran = up.env, up.var, up.port, up.ran
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run_by_bench_run = re.search(r"run (manual__\S+): success", ran.stdout)
    assert run_by_bench_run, ran.stdout
    assert re.search(r"ok +preflight +success", ran.stdout), ran.stdout  # it watched its run in that database
    record = var / "airflow" / "metadata_db.json"
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert json.loads(record.read_text())["uri"].endswith("/" + env["BENCH_UP_PG_DATABASE"])

    for code, stdout, stderr in up.outputs:
        assert code == 0, stdout + stderr
    assert sum("already up" in stdout for _, stdout, _ in up.outputs) == 1  # two at once: one stack
    started = next(stdout for _, stdout, _ in up.outputs if "already up" not in stdout)
    url = up.url
    password = json.loads((var / "local-airflow" / "passwords.json").read_text())["admin"]
    assert f"Airflow UI:  {url}" in started and f"password {password}" in started
    assert "metadata DB: the local PostgreSQL" in started
    state_file = var / "local-airflow" / "stack.json"
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600  # it holds the metadata DB's URI
    state = json.loads(state_file.read_text())
    assert set(state["pids"]) == {"api-server", "scheduler", "dag-processor", "triggerer"}
    assert sorted(p.pid for p in ours(var) if p.pid in state["pids"].values()) == sorted(state["pids"].values())
    listening = listening_on(var)
    assert listening == {("127.0.0.1", port)}, listening  # the api-server alone, on loopback

    command = [str(BENCH), "up", "--port", str(port)]
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT)
    assert again.returncode == 0 and "already up" in again.stdout  # idempotent
    other = subprocess.run(
        [str(BENCH), "up", "--port", str(free_port())], env=env, capture_output=True, text=True, timeout=300
    )
    assert other.returncode == 1 and f"already up on port {port}" in other.stderr and "not applied" in other.stderr

    headers = up.headers()
    api = f"{url}/api/v2"
    health = requests.get(f"{api}/monitor/health", timeout=30).json()
    assert {health[k]["status"] for k in ("metadatabase", "scheduler", "triggerer", "dag_processor")} == {"healthy"}
    listed = requests.get(f"{api}/dags/bench_up_smoke/dagRuns", headers=headers, timeout=30).json()["dag_runs"]
    assert run_by_bench_run[1] in {r["dag_run_id"] for r in listed}  # bench run's run, in bench up's Airflow
    page = requests.get(f"{api}/dags/bench_up_smoke/dagRuns/{run_by_bench_run[1]}", headers=headers, timeout=30)
    assert page.status_code == 200 and page.json()["state"] == "success"
    wait_for(lambda: dag_parsed(api, headers, "bench_report"), 300, "the report DAG")
    report = requests.get(f"{api}/dags/bench_report", headers=headers, timeout=30)
    assert report.json()["is_paused"] is False  # it draws the plots of every load
    wait_for(lambda: dag_parsed(api, headers, "bench_up_smoke"), 300, "the campaign's DAG")
    pools = requests.get(f"{api}/pools", headers=headers, timeout=30).json()["pools"]
    assert "bench_host_local" in {p["name"] for p in pools}
    requests.patch(f"{api}/dags/bench_up_smoke", json={"is_paused": False}, headers=headers, timeout=30)
    run = requests.post(
        f"{api}/dags/bench_up_smoke/dagRuns", json={"logical_date": None, "conf": {}}, headers=headers, timeout=30
    ).json()
    run_id = run["dag_run_id"]
    states: list[str] = []

    def finished() -> bool:
        reply = requests.get(f"{api}/dags/bench_up_smoke/dagRuns/{run_id}", headers=headers, timeout=30)
        states.append(reply.json()["state"])
        return states[-1] in ("success", "failed")

    wait_for(finished, 600, "the campaign's run")
    assert states[-1] == "success"
    # the reports of the loads (bench run's, before the stack was up, and this one) never fail for a late api-server
    reports = requests.get(f"{api}/dags/bench_report/dagRuns", headers=headers, timeout=30).json()["dag_runs"]
    assert "failed" not in {r["state"] for r in reports}, reports

    anonymous = requests.get(f"{url}/benchmarks/", timeout=30, allow_redirects=False)  # for signed-in users only
    assert anonymous.status_code == 303 and "/auth/login" in anonymous.headers["location"]  # a browser: the login
    view = requests.get(f"{url}/benchmarks/campaign/up_smoke", headers=headers, timeout=30)
    assert view.status_code == 200 and run_id in view.text and ">2000<" in view.text  # the run's tok/s
    assert 'src="../static/plotly.min.js"' in view.text  # the charts' library, from the view itself (offline)
    bundle = requests.get(f"{url}/benchmarks/static/plotly.min.js", timeout=30)
    assert bundle.status_code == 200 and bundle.headers["content-type"].startswith("text/javascript")
    assert len(bundle.content) > 1_000_000 and b"plotly.js" in bundle.content[:2000]
    nav = requests.get(f"{api}/plugins", headers=headers, timeout=30).json()["plugins"]
    assert any(v["name"] == "Benchmarks" for p in nav for v in p["external_views"])


def dag_parsed(api: str, headers: dict[str, str], dag_id: str) -> bool:
    return requests.get(f"{api}/dags/{dag_id}", headers=headers, timeout=30).status_code == 200


def test_bench_up_fails_naming_what_did_not_come_up_and_leaves_nothing_running(local_env):
    env, var = local_env
    port = free_port()
    with held(port):
        taken = subprocess.run([str(BENCH), "up", "--port", str(port)], env=env, capture_output=True, text=True)
    assert taken.returncode == 1 and f"port {port} (the api-server" in taken.stderr, taken.stderr
    assert ours(var) == [] and not (var / "local-airflow" / "stack.json").exists()

    impatient = {**env, "BENCH_UP_TIMEOUT": "1"}  # no component gets healthy in one second
    failed = subprocess.run(
        [str(BENCH), "up", "--port", str(port)], env=impatient, capture_output=True, text=True, timeout=300
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "not healthy within 1 s" in failed.stderr and "airflow api-server" in failed.stderr, failed.stderr
    assert "api-server.log ends:" in failed.stderr and "Traceback" not in failed.stderr
    assert "stopped every component" in failed.stdout
    assert ours(var) == [] and not (var / "local-airflow" / "stack.json").exists()
    assert "not running" in subprocess.run([str(BENCH), "down"], env=env, capture_output=True, text=True).stdout


def test_bench_down_during_a_deferred_wait_stops_the_benchmark_and_restores_the_services(up):
    """Stopping the stack used to leave the benchmark running on the host and its services stopped, the run
    "running" with nothing left to end it (issue 20, Low). ``bench down`` of the module's stack, in the middle of a
    campaign's deferred wait: the benchmark's process group ends, the services come back, the host is released,
    the run is marked failed, and no process of the stack is left."""
    env, var = up.env, up.var
    state = json.loads((var / "local-airflow" / "stack.json").read_text())
    headers = up.headers()
    api = f"{up.url}/api/v2"
    wait_for(lambda: dag_parsed(api, headers, "bench_down_hang"), 300, "the campaign's DAG")
    requests.patch(f"{api}/dags/bench_down_hang", json={"is_paused": False}, headers=headers, timeout=30)
    run = requests.post(
        f"{api}/dags/bench_down_hang/dagRuns", json={"logical_date": None, "conf": {}}, headers=headers, timeout=30
    ).json()
    run_id = run["dag_run_id"]
    wait = f"{api}/dags/bench_down_hang/dagRuns/{run_id}/taskInstances/wait_done"
    deferred = lambda: requests.get(wait, headers=headers, timeout=30).json().get("state") == "deferred"  # noqa: E731
    wait_for(deferred, 480, "the wait to be deferred")
    from benchflow.remote import layout

    host = var / "hosts" / "local"
    pgid = int((Path(layout.run_dir(str(host), "bench_down_hang", run_id)) / "bench" / "pid").read_text())
    assert live_group_members(pgid)  # the benchmark runs, the services are stopped
    assert (host / "services.log").read_text().split() == ["stopped"]

    stopped = subprocess.run([str(BENCH), "down"], env=env, capture_output=True, text=True, timeout=600)
    out = stopped.stdout + stopped.stderr
    assert stopped.returncode == 0 and "stopped api-server" in out, out
    assert f"run {run_id} of bench_down_hang was still going" in out, out
    for task in ("stop_benchmark", "restore_services", "release_host"):
        assert f"ok      {task}" in out, out
    assert f"run {run_id} marked failed" in out, out
    assert live_group_members(pgid) == []
    assert (host / "services.log").read_text().split() == ["stopped", "started"]
    for pid in state["pids"].values():
        assert live_group_members(pid) == []
    assert not (var / "local-airflow" / "stack.json").exists()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{api}/monitor/health", timeout=5)
    assert ours(var) == []
