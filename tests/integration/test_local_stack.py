"""``bench up`` / ``bench down`` as a user runs them: the real CLI starts the project's Airflow here (LocalExecutor,
the local PostgreSQL as metadata DB), the campaigns appear in the REST API, one runs to success and shows in
the Benchmarks view, and ``bench down`` leaves no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import requests

from tests.airflow_stack import pg_admin
from tests.conftest import FIXTURES, PROJECT_ROOT, live_group_members
from tests.sshd import free_port

pytestmark = pytest.mark.integration
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


@pytest.fixture
def local_env(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "up_smoke.yaml").write_text(SPEC)
    (tmp_path / "kernels").mkdir()
    os.symlink(FIXTURES / "payloads" / "fault", tmp_path / "kernels" / "fault")
    database = f"benchflow_up_{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "BENCH_VAR_DIR": str(tmp_path / "var"),
            "BENCH_CAMPAIGNS_DIR": str(tmp_path / "specs"),
            "BENCH_KERNELS_DIR": str(tmp_path / "kernels"),
            "BENCH_UP_PG_DATABASE": database,
            "PYTHONPATH": str(PROJECT_ROOT / "plugins"),
        }
    )
    yield env, tmp_path / "var"
    subprocess.run([str(BENCH), "down"], env=env, capture_output=True, timeout=120)
    pg_admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def test_bench_up_runs_a_campaign_and_bench_down_stops_everything(local_env):
    env, var = local_env
    port = free_port()
    started = subprocess.run(
        [str(BENCH), "up", "--port", str(port)], env=env, capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT
    )
    assert started.returncode == 0, started.stdout + started.stderr
    url = f"http://127.0.0.1:{port}"
    password = json.loads((var / "local-airflow" / "passwords.json").read_text())["admin"]
    assert f"Airflow UI:  {url}" in started.stdout and f"password {password}" in started.stdout
    assert "metadata DB: the local PostgreSQL" in started.stdout
    state = json.loads((var / "local-airflow" / "stack.json").read_text())
    assert set(state["pids"]) == {"api-server", "scheduler", "dag-processor", "triggerer"}

    again = subprocess.run(
        [str(BENCH), "up", "--port", str(port)], env=env, capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT
    )
    assert again.returncode == 0 and "already up" in again.stdout  # idempotent

    token = requests.post(f"{url}/auth/token", json={"username": "admin", "password": password}, timeout=30)
    headers = {"Authorization": f"Bearer {token.json()['access_token']}"}
    api = f"{url}/api/v2"
    deadline = time.monotonic() + 120
    while requests.get(f"{api}/dags/bench_up_smoke", headers=headers, timeout=30).status_code != 200:
        assert time.monotonic() < deadline, "the campaign never appeared"
        time.sleep(2)
    pools = requests.get(f"{api}/pools", headers=headers, timeout=30).json()["pools"]
    assert "bench_host_local" in {p["name"] for p in pools}
    requests.patch(f"{api}/dags/bench_up_smoke", json={"is_paused": False}, headers=headers, timeout=30)
    run = requests.post(
        f"{api}/dags/bench_up_smoke/dagRuns", json={"logical_date": None, "conf": {}}, headers=headers, timeout=30
    ).json()
    run_id = run["dag_run_id"]
    deadline = time.monotonic() + 180
    while (
        state_now := requests.get(f"{api}/dags/bench_up_smoke/dagRuns/{run_id}", headers=headers, timeout=30).json()[
            "state"
        ]
    ) not in ("success", "failed"):
        assert time.monotonic() < deadline, state_now
        time.sleep(2)
    assert state_now == "success"

    assert requests.get(f"{url}/benchmarks/", timeout=30).status_code == 401  # for signed-in users only
    view = requests.get(f"{url}/benchmarks/campaign/up_smoke", headers=headers, timeout=30)
    assert view.status_code == 200 and run_id in view.text and ">2000<" in view.text  # the run's tok/s
    nav = requests.get(f"{api}/plugins", headers=headers, timeout=30).json()["plugins"]
    assert any(v["name"] == "Benchmarks" for p in nav for v in p["external_views"])

    stopped = subprocess.run([str(BENCH), "down"], env=env, capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0 and "stopped api-server" in stopped.stdout
    for pid in state["pids"].values():
        assert live_group_members(pid) == []
    assert not (var / "local-airflow" / "stack.json").exists()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{api}/monitor/health", timeout=5)


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


def test_bench_down_during_a_deferred_wait_stops_the_benchmark_and_restores_the_services(local_env):
    """Stopping the stack used to leave the benchmark running on the host and its services stopped, the run
    "running" with nothing left to end it (issue 20, Low)."""
    env, var = local_env
    (Path(env["BENCH_CAMPAIGNS_DIR"]) / "down_hang.yaml").write_text(HANG_SPEC)
    port = free_port()
    started = subprocess.run(
        [str(BENCH), "up", "--port", str(port)], env=env, capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT
    )
    assert started.returncode == 0, started.stdout + started.stderr
    url = f"http://127.0.0.1:{port}"
    password = json.loads((var / "local-airflow" / "passwords.json").read_text())["admin"]
    token = requests.post(f"{url}/auth/token", json={"username": "admin", "password": password}, timeout=30)
    headers = {"Authorization": f"Bearer {token.json()['access_token']}"}
    api = f"{url}/api/v2"
    deadline = time.monotonic() + 120
    while requests.get(f"{api}/dags/bench_down_hang", headers=headers, timeout=30).status_code != 200:
        assert time.monotonic() < deadline, "the campaign never appeared"
        time.sleep(2)
    requests.patch(f"{api}/dags/bench_down_hang", json={"is_paused": False}, headers=headers, timeout=30)
    run = requests.post(
        f"{api}/dags/bench_down_hang/dagRuns", json={"logical_date": None, "conf": {}}, headers=headers, timeout=30
    ).json()
    run_id = run["dag_run_id"]
    wait = f"{api}/dags/bench_down_hang/dagRuns/{run_id}/taskInstances/wait_done"
    deadline = time.monotonic() + 240
    while requests.get(wait, headers=headers, timeout=30).json().get("state") != "deferred":
        assert time.monotonic() < deadline, requests.get(wait, headers=headers, timeout=30).json()
        time.sleep(2)
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
