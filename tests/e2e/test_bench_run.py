"""``bench run``, quiet (benchtools.runner), as a user runs it: the real CLI in a subprocess, campaigns of the
fault payload on the local host, Airflow's metadata in the test PostgreSQL database.

A good run prints a line per task, the wait's progress and the table, with Airflow's logs only in the file it
names; a crash names the failed task, its error and the log; SIGTERM in the middle of the wait ends the
benchmark's whole process group, brings the services back and releases the host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchflow.remote import layout
from benchflow.remote.lease import LEASE_FILE
from tests.conftest import FIXTURES, PROJECT_ROOT, live_group_members

pytestmark = pytest.mark.e2e
BENCH = Path(sys.executable).parent / "bench"
DB_CONN = "gpu_made_by_cli"  # a connection in Airflow's metadata DB, as the UI, the REST API and the CLI make it


def spec(mode: str, rows: int, delay: float, timeout: int = 300, extra: str = "", **args: object) -> str:
    return textwrap.dedent(f"""\
        description: quiet bench run, {mode}
        host: local
        payload: fault
        schedule: null
        benchmark:
          script: bench_fault.py
          args: {json.dumps({"mode": mode, "rows": rows, "delay": delay, **args})}
        {extra}
        timeouts:
          benchmark: {timeout}
          poke_interval: 1
        services:
          - name: gpu_holder
            stop: "echo stopped >> services.log"
            start: "echo started >> services.log"
        """)


@pytest.fixture(scope="module")
def env(tmp_path_factory, airflow_db):
    root = tmp_path_factory.mktemp("quiet")
    (root / "specs").mkdir()
    for name, text in {
        "quiet_ok": spec("ok", 4, 0.2, gate_at=2),  # held after 2 rows until the test saw the wait's progress
        "quiet_crash": spec("crash", 2, 0.0),
        "quiet_hang": spec("hang", 2, 0.0),
        "quiet_bar": spec("bar", 2, 0.0, timeout=30),  # the wait must start before the timeout, on a busy machine too
        "quiet_busy": spec("ok", 2, 0.0, extra="gpus_free: {max_used_mib: 1024, wait: 0.5, poke_interval: 0.5}"),
        "quiet_dbconn": spec("ok", 3, 0.5).replace("host: local", f"host: {DB_CONN}"),
    }.items():
        (root / "specs" / f"{name}.yaml").write_text(text)
    (root / "kernels").mkdir()
    os.symlink(FIXTURES / "payloads" / "fault", root / "kernels" / "fault")
    return {
        **os.environ,
        "BENCH_CAMPAIGNS_DIR": str(root / "specs"),
        "BENCH_KERNELS_DIR": str(root / "kernels"),
        "PYTHONUNBUFFERED": "1",
    }


def services_log(var_dir: Path) -> list[str]:
    path = var_dir / "hosts" / "local" / "services.log"
    lines = path.read_text().split() if path.exists() else []
    path.unlink(missing_ok=True)
    return lines


def bench_run(env: dict[str, str], campaign: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BENCH), "run", campaign], env=env, capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT
    )


def failed_tasks(out: str) -> list[str]:
    """The ``failed task:`` entries of bench run's report, each with the lines under it."""
    entries: list[str] = []
    for line in out.splitlines():
        if line.startswith("failed task: "):
            entries.append(line)
        elif entries and line.startswith("    ") and not entries[-1].endswith("\n<end>"):
            entries[-1] += "\n" + line
        elif entries:
            entries[-1] += "\n<end>"
    return [entry.removesuffix("\n<end>") for entry in entries]


def run_states(dag_id: str, run_id: str) -> set[str]:
    """The states of a run and of its task instances, as Airflow's models read them."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        (dag_run,) = DagRun.find(dag_id=dag_id, run_id=run_id, session=session)
        unfinished = {
            str(ti.state)
            for ti in dag_run.get_task_instances(session=session)
            if ti.state not in ("success", "skipped", "upstream_failed", "removed")
        }
        return {str(dag_run.state)} | unfinished


def log_file(stdout: str) -> Path:
    line = next(line for line in stdout.splitlines() if line.startswith("Airflow logs: "))
    return Path(line.split(": ", 1)[1].split("  ")[0])


def test_a_good_run_prints_task_lines_progress_and_the_table(env, var_dir):
    services_log(var_dir)
    proc = subprocess.Popen(
        [str(BENCH), "run", "quiet_ok"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    seen = [proc.stdout.readline()]
    run_id = seen[0].split(", run ", 1)[1].strip()
    gate = Path(layout.run_dir(str(var_dir / "hosts" / "local"), "bench_quiet_ok", run_id)) / "gate"
    try:  # the benchmark waits at its gate until the wait's progress was shown, however slow the machine
        while not (" wait    wait_done: " in seen[-1] and "check" in seen[-1]):
            seen.append(proc.stdout.readline())
            assert seen[-1] or proc.poll() is None, "".join(seen)
    finally:
        gate.parent.mkdir(parents=True, exist_ok=True)
        gate.touch()
    rest, err = proc.communicate(timeout=300)
    out = "".join(seen) + rest
    assert proc.returncode == 0, out + err
    lines = out.splitlines()
    assert len(lines) < 70, out  # not hundreds of log lines
    assert not [line for line in lines if "[info" in line or "[debug" in line], out
    for task in ("preflight", "launch_benchmark", "wait_done", "release_host", "load", "verdict"):
        assert any(line.split()[1:3] == ["ok", task] for line in lines if len(line.split()) > 2), (task, out)
    assert any(" start   wait_done" in line for line in lines), out
    progress = [line for line in lines if " wait    wait_done: " in line]
    assert progress and any("check" in line for line in progress), out  # elapsed, check, newest log line
    assert any(line.startswith("bench_quiet_ok run manual__") and ": success in " in line for line in lines), out
    table = lines.index(next(line for line in lines if line.split()[:4] == ["m", "(tokens)", "ms_per_call", "(ms)"]))
    assert [line.split()[0] for line in lines[table + 1 : table + 5]] == ["1", "2", "4", "8"]
    assert "verdict: not judged (manual run)" in lines, out  # never "0 regressions" for a run never judged
    results = next(line for line in lines if line.startswith("results: "))
    assert results.startswith(f"results: {var_dir / 'warehouse.snapshot.duckdb'} (read it with bench sql"), out
    artifacts = Path(next(line for line in lines if line.startswith("artifacts: ")).split(": ", 1)[1])
    assert (artifacts / "bench.log").read_text().count("ALL_DONE") == 1  # the run's own fetched log
    assert json.loads((artifacts / "rows.json").read_text())[0]["m"] == 1
    log = log_file(out)
    assert log.exists() and "[DAG TEST] starting task_id=wait_done" in log.read_text()
    assert services_log(var_dir) == ["stopped", "started"]


def test_a_failed_run_names_the_task_its_error_and_the_log(env, var_dir):
    services_log(var_dir)
    done = bench_run(env, "quiet_crash")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    failed = [line for line in out.splitlines() if line.startswith("failed task: ")]
    assert failed and failed[0].startswith("failed task: wait_done: "), out
    assert "exited with code 3 without writing 'ALL_DONE'" in failed[0], failed
    assert "    RuntimeError: CUDA error" in out  # the last lines of the benchmark's log, under it
    assert any(line.split()[1:3] == ["FAIL", "wait_done"] for line in out.splitlines() if len(line.split()) > 2)
    assert log_file(out).exists()
    assert services_log(var_dir) == ["stopped", "started"]


def test_busy_gpus_are_named_as_the_cause_before_the_verdict(env, var_dir, tmp_path):
    """The GPU check's message spans lines (one per busy GPU): it used to read as "no error line found"."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$*" in\n'
        "  *--query-gpu=index,memory.used*) printf '0, 70000\\n1, 3\\n' ;;\n"
        "  *--query-compute-apps*) printf '4242, python3 -m sglang.launch_server, 69990\\n' ;;\n"
        "esac\n"
    )
    smi.chmod(0o755)
    done = bench_run({**env, "PATH": f"{bin_dir}:{env['PATH']}"}, "quiet_busy")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    entries = failed_tasks(out)
    assert entries and entries[0].startswith("failed task: gpus_free: AirflowFailException: GPUs of host 'local'"), out
    assert "GPU 0: 70000 MiB in use (limit 1024)" in entries[0] and "process 4242" in entries[0], out
    assert "no error line found" not in out, out
    names = [entry.split(":")[1].strip() for entry in entries]
    assert "verdict" not in names or names[-1] == "verdict", names


def test_a_benchmark_timeout_is_named_and_the_wait_shows_the_clients_progress(env, var_dir):
    """A client that draws a progress bar, then warns: the wait shows the bar, and the failure its timeout."""
    done = bench_run(env, "quiet_bar")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    entries = failed_tasks(out)
    assert entries[0].startswith(
        "failed task: wait_done: AirflowFailException: benchmark ran past its timeout of 30 s"
    ), out
    names = [entry.split(":")[1].strip() for entry in entries]
    assert "verdict" not in names or names[-1] == "verdict", names
    progress = [line for line in out.splitlines() if " wait    wait_done: " in line]
    assert any("100%|##########| 10/10" in line for line in progress), out
    assert not [line for line in progress if "Warning" in line or "warnings.warn" in line], out


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_in_the_wait_kills_the_benchmark_and_restores_the_services(env, var_dir, signum):
    services_log(var_dir)
    proc = subprocess.Popen(
        [str(BENCH), "run", "quiet_hang"], env=env, stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT
    )
    assert proc.stdout is not None
    try:
        signalled(proc, var_dir, signum)
    finally:
        if proc.poll() is None:  # a failed check above: never leave the run (and its benchmark) behind
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)


def signalled(proc: subprocess.Popen[str], var_dir: Path, signum: int) -> None:
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen.append(line)
        if " wait    wait_done: " in line and "hanging" in line:
            break
        assert line or proc.poll() is None, "".join(seen)
    else:
        pytest.fail("no progress line of the hanging wait:\n" + "".join(seen))
    run_id = seen[0].split(", run ", 1)[1].strip()
    pid_file = Path(layout.run_dir(str(var_dir / "hosts" / "local"), "bench_quiet_hang", run_id)) / "bench" / "pid"
    pgid = int(pid_file.read_text())
    assert live_group_members(pgid)  # the benchmark and its child are running
    proc.send_signal(signum)
    rest, _ = proc.communicate(timeout=120)
    out = "".join(seen) + rest
    assert proc.returncode == 128 + signum, out
    assert f"{signal.Signals(signum).name}: stopping the run" in out
    for task in ("stop_benchmark", "restore_services", "release_host"):
        assert any(line.split()[1:3] == ["ok", task] for line in out.splitlines() if len(line.split()) > 2), out
    assert live_group_members(pgid) == []
    assert services_log(var_dir) == ["stopped", "started"]
    assert run_states("bench_quiet_hang", run_id) == {"failed"}  # the run and every unfinished task, through the ORM
    lease = var_dir / "hosts" / "local" / LEASE_FILE  # released: the next campaign may take the host
    assert not lease.exists() or "bench_quiet_hang" not in lease.read_text()


def test_on_a_terminal_the_progress_line_is_rewritten_in_place(tmp_path):
    import io

    from benchtools.runner import Watch

    log = tmp_path / "run.log"
    log.write_text(
        "2026-01-01T00:00:00Z [info     ] [DAG TEST] starting task_id=wait_done map_index=-1 [airflow.sdk] loc=x\n"
        "2026-01-01T00:00:01Z [info     ] progress [check 1, 0s, pid 42]:  [benchflow.triggers.DoneMarkerTrigger] x\n"
        "2026-01-01T00:00:02Z [info     ] log: 1 0.500 2000 500.00 [benchflow.triggers.DoneMarkerTrigger] loc=x\n"
    )
    screen = io.StringIO()
    watch = Watch("bench_x", "manual__1", log, screen, tty=True)
    watch.read_log()
    watch.progress()
    with log.open("a") as handle:
        handle.write("2026-01-01T00:00:03Z [info     ] log: 2 1.000 2000 500.00 [benchflow.triggers.Done] loc=x\n")
    watch.read_log()
    watch.progress()
    watch.update([("wait_done", "success", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:04+00:00")])
    text = screen.getvalue()
    assert text.count("\r\033[K") >= 3  # each progress line replaces the last; the end line clears it
    assert "(check 1, pid 42)  1 0.500 2000 500.00" in text and "(check 1, pid 42)  2 1.000 2000 500.00" in text
    last = text.rsplit("\r\033[K", 1)[1]
    assert " ok      wait_done " in last and "4.0 s" in last and last.endswith("\n")
    assert text.splitlines()[0].endswith("start   wait_done")


def test_a_connection_made_with_the_airflow_cli_carries_a_run_over_ssh(env, sshd):
    """The README's way to define a host: `bench airflow connections add` (Airflow's CLI on this checkout's metadata
    DB: the table the UI and the REST API write too), no AIRFLOW_CONN_ variable. Every task and the deferred wait
    (the triggerer's async SSH hook) find it, and the run over the loopback sshd loads its rows."""
    environ = {k: v for k, v in env.items() if not k.startswith("AIRFLOW_CONN_")}
    added = subprocess.run(
        [str(BENCH), "airflow", "connections", "add", DB_CONN, "--conn-json", json.dumps(sshd.connection())],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )
    assert added.returncode == 0 and "Successfully added" in added.stdout, added.stdout + added.stderr
    try:
        done = bench_run(environ, "quiet_dbconn")
        if done.returncode != 0:  # what the log says beside bench run's report
            text = log_file(done.stdout).read_text()
            at = text.find("Error running task")
            pytest.fail(done.stdout[-1500:] + "\n" + text[at - 3000 : at + 4000])
        assert ": success in " in done.stdout and "warehouse status: ok (3 rows)" in done.stdout, done.stdout[-3000:]
    finally:
        subprocess.run(
            [str(BENCH), "airflow", "connections", "delete", DB_CONN],
            env=environ,
            capture_output=True,
            timeout=300,
            cwd=PROJECT_ROOT,
        )
