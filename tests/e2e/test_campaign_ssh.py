"""Campaigns over real SSH (sshd on loopback, host key pinned), and the faults a GPU host has.

Nothing may be lost: an outage of the SSH server mid-wait, a killed benchmark, a hung one, a
restarted triggerer. The wait runs deferred, as in production (``dag.test`` runs the trigger inline).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from benchflow.remote import layout
from benchflow.warehouse import Warehouse
from tests.conftest import FIXTURES, PROJECT_ROOT, live_group_members
from tests.e2e.conftest import campaign_dags, run_dag

pytestmark = pytest.mark.e2e


def fault_spec(args: dict, benchmark_timeout: int = 120, workdir: Path | None = None) -> str:
    return textwrap.dedent(
        f"""\
        description: e2e over ssh
        host: gpu_loopback
        payload: fault
        services:
          - name: gpu_holder
            stop: "echo stopped >> services.log"
            start: "echo started >> services.log"
        benchmark:
          script: bench_fault.py
          args: {json.dumps(args)}
        timeouts:
          benchmark: {benchmark_timeout}
          poke_interval: 1
        """
    )


CAMPAIGNS = {
    # held at a row until the test has acted (the gate file), then on at its pace: what the test does happens while
    # the benchmark runs and the wait streams it, however long a busy machine takes to get there
    "ssh_outage": fault_spec({"mode": "ok", "rows": 6, "delay": 1, "gate_at": 1}, benchmark_timeout=900),
    "ssh_killed": fault_spec({"mode": "ok", "rows": 30, "delay": 0.1, "gate_at": 3}, benchmark_timeout=900),
    "ssh_hang": fault_spec({"mode": "hang", "rows": 2}, benchmark_timeout=4),
}


@pytest.fixture(scope="module")
def bag(tmp_path_factory, airflow_db, sshd):
    shipped = (PROJECT_ROOT / "include" / "campaigns" / "moe_kernel_ssh.yaml").read_text()
    with campaign_dags(tmp_path_factory.mktemp("ssh-campaigns"), {**CAMPAIGNS, "moe_kernel_ssh": shipped}) as dags:
        yield dags


run = run_dag


def when_rows(sshd, name: str, rows: int, action, timeout: float = 600) -> Watcher:
    """In the background: once the running benchmark has written ``rows`` rows and the deferred wait is on (its
    stream of the benchmark's log runs on the host), call ``action(job dir)``, then open the benchmark's gate (its
    ``gate_at`` holds it until then). :meth:`Watcher.done` ends the watch with the run, so that a late action never
    reaches into the next test."""
    watcher = Watcher(threading.Event(), [])

    def watch():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not watcher.stop.is_set():
            for results in (sshd.workdir / f"bench_{name}").glob("*/results.jsonl"):
                job = results.parent / "bench"
                if len(results.read_text().splitlines()) >= rows and streaming(job / "stdout.log"):
                    try:
                        action(job)
                        watcher.outcome.append("acted")
                    except Exception as error:  # the test reports it (a thread's exception goes nowhere)
                        watcher.outcome.append(f"action failed: {error!r}")
                    (results.parent / "gate").touch()
                    return
            time.sleep(0.1)

    watcher.thread = threading.Thread(target=watch, daemon=True)
    watcher.thread.start()
    return watcher


@dataclass
class Watcher:
    stop: threading.Event
    outcome: list[str]
    thread: threading.Thread | None = None

    def done(self, timeout: float = 30) -> list[str]:
        """End the watch, wait for an action under way, and say what happened: ``["acted"]`` when it acted."""
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the watcher's action is still running"
        return self.outcome


def streaming(log: Path) -> bool:
    """Whether the deferred wait streams ``log`` now: its ``tail -F`` runs on the host (this machine)."""
    for proc in psutil.process_iter(["cmdline"]):
        command = proc.info["cmdline"] or []
        if command and os.path.basename(command[0]) == "tail" and str(log) in command:
            return True
    return False


@pytest.fixture(autouse=True)
def no_services_log(sshd):
    """Each test reads the services log its own run wrote, whatever a test before it left."""
    (sshd.workdir / "services.log").unlink(missing_ok=True)


def rows_of(run_id):
    sql = "SELECT m FROM kernel_results WHERE run_id = ? ORDER BY m"
    return Warehouse.from_airflow().query(sql, [run_id])["m"].tolist()


def status_of(run_id):
    return Warehouse.from_airflow().query("SELECT status FROM runs WHERE run_id = ?", [run_id])["status"].tolist()


def services_log(sshd) -> list[str]:
    path = sshd.workdir / "services.log"
    lines = path.read_text().split() if path.exists() else []
    path.unlink(missing_ok=True)
    return lines


def test_demo_campaign_over_ssh_end_to_end(bag, sshd, var_dir):
    before = sshd.connections_accepted()
    run_id, state, tasks = run(bag, "moe_kernel_ssh")
    assert state == "success", tasks
    assert rows_of(run_id) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert status_of(run_id) == ["ok"]
    # Artifacts came back over SFTP into the artifact store (file:// under var/ here), keyed by dag_id/run_id.
    artifacts = var_dir / "artifacts" / "bench_moe_kernel_ssh" / layout.run_key(run_id)
    assert (artifacts / "results.jsonl").exists() and "ALL_DONE" in (artifacts / "bench.log").read_text()
    # One connection for each task that touches the host (preflight, acquire_host, gpus_free, deploy,
    # start_telemetry, launch, wait_done's first check before it defers, stop_benchmark, stop_telemetry, fetch,
    # release_host; this spec has no services) and one for the whole deferred wait, if it deferred (a busy machine
    # may start the wait after the sweep ended): never one per check.
    assert sshd.connections_accepted() - before in (11, 12)


def test_sshd_outage_mid_wait_reconnects_and_loses_nothing(bag, sshd, capfd):
    def outage(_job):
        sshd.stop()  # ends the wait's connection and its stream
        try:
            time.sleep(3)  # the outage: three of the wait's check intervals, its reconnects refused
        finally:
            sshd.start()

    watcher = when_rows(sshd, "ssh_outage", 1, outage)
    try:
        run_id, state, tasks = run(bag, "ssh_outage")
    finally:
        outcome = watcher.done()
        if sshd.proc is None:  # the outage outlived the run: the module's next tests need the server
            sshd.start()
    assert outcome == ["acted"]
    log = "".join(capfd.readouterr())
    assert "connection to gpu_loopback lost" in log and "reconnected to gpu_loopback" in log
    assert state == "success", tasks
    assert rows_of(run_id) == [1, 2, 4, 8, 16, 32]
    assert status_of(run_id) == ["ok"]
    assert services_log(sshd) == ["stopped", "started"]


def test_killed_benchmark_fails_within_one_check_and_keeps_its_rows(bag, sshd, capfd):
    killed = {}

    def kill(job: Path):
        killed["pgid"] = int((job / "pid").read_text())
        os.killpg(killed["pgid"], signal.SIGKILL)
        killed["at"] = datetime.now(UTC)

    watcher = when_rows(sshd, "ssh_killed", 3, kill)
    try:
        run_id, state, tasks = run(bag, "ssh_killed")
    finally:
        outcome = watcher.done()
    assert outcome == ["acted"]
    log = "".join(capfd.readouterr())
    assert killed and state == "failed" and tasks["wait_done"] == "failed"
    assert "benchmark died without writing 'ALL_DONE'" in log
    # Within one check: the wait fails at the first check that started after the kill, the first or the second
    # one logged after it (the first may have been under way, its answer "alive", when the group was killed).
    after_kill = [
        int(line.split("progress [check ")[1].split(",")[0])
        for line in log.splitlines()
        if "progress [check" in line and datetime.fromisoformat(line.split()[0]) > killed["at"]
    ]
    assert any(f"benchmark died without writing 'ALL_DONE' (check {n})" in log for n in after_kill[:2]), after_kill
    loaded = rows_of(run_id)
    assert len(loaded) >= 3 and loaded[:3] == [1, 2, 4]
    assert status_of(run_id) == ["incomplete"]
    assert tasks["restore_services"] == "success" and services_log(sshd) == ["stopped", "started"]


def test_hung_benchmark_is_killed_at_timeout_with_its_group(bag, sshd, capfd):
    run_id, state, _ = run(bag, "ssh_hang")
    log = "".join(capfd.readouterr())
    assert state == "failed" and "ran past its timeout of 4 s; its process group was killed" in log
    job = Path(layout.run_dir(str(sshd.workdir), "bench_ssh_hang", run_id)) / "bench"
    assert live_group_members(int((job / "pid").read_text())) == []
    assert rows_of(run_id) == [1, 2] and status_of(run_id) == ["incomplete"]
    assert services_log(sshd) == ["stopped", "started"]


TRIGGER_PROCESS = """
import asyncio, json, sys
from benchflow.triggers import DoneMarkerTrigger
trigger = DoneMarkerTrigger(**json.loads(sys.argv[1]))
async def main():
    async for event in trigger.run():
        print(json.dumps(event.payload), flush=True)
        return
asyncio.run(main())
"""


def test_restarted_triggerer_resumes_the_wait_and_launch_reattaches(sshd, tmp_path, airflow_db):
    """A triggerer killed mid-wait: a new one, from the serialized trigger, finishes the same wait."""
    from benchflow.operators import DeployPayloadOperator, LaunchBenchmarkOperator

    os.environ["BENCH_KERNELS_DIR"] = str(FIXTURES / "payloads")
    try:
        context = {"dag": SimpleNamespace(dag_id="bench_restart"), "run_id": f"manual__{time.time()}"}
        DeployPayloadOperator(task_id="deploy", host_id="gpu_loopback", payload="fault").execute(context)
        launch = LaunchBenchmarkOperator(
            task_id="launch",
            host_id="gpu_loopback",
            script="bench_fault.py",
            run_args={"rows": 8, "delay": 0.75},
            output="results.jsonl",
            marker="ALL_DONE",
        )
        first = launch.execute(context)
        rundir = launch.rundir(context)
        trigger_kwargs = {
            "host_id": "gpu_loopback",
            "rundir": rundir,
            "marker": "ALL_DONE",
            "timeout_s": 120,
            "check_interval": 1,
        }
        command = [sys.executable, "-c", TRIGGER_PROCESS, json.dumps(trigger_kwargs)]
        doomed = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        time.sleep(2)
        doomed.kill()  # the triggerer dies mid-wait
        doomed.wait()
        assert doomed.stdout is not None
        assert not any(line.startswith("{") for line in doomed.stdout.read().splitlines())  # no event fired

        again = launch.execute(context)  # a cleared/retried launch attaches to the same process
        assert again == {"pid": first["pid"], "attached": True}

        resumed = subprocess.run(command, capture_output=True, text=True, timeout=120)
        events = [line for line in resumed.stdout.splitlines() if line.startswith("{")]
        assert events, resumed.stderr[-3000:]
        event = json.loads(events[-1])
        assert event["status"] == "done", resumed.stderr[-2000:]
        log = (Path(rundir) / "bench" / "stdout.log").read_text()
        assert log.count("GPU: none (fault payload)") == 1  # launched once
        assert len((Path(rundir) / "results.jsonl").read_text().splitlines()) == 8
    finally:
        os.environ.pop("BENCH_KERNELS_DIR", None)
