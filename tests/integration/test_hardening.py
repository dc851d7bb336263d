"""What a careless user, a chatty benchmark or an open notebook used to break (issue: hardening)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime

import pytest

from benchflow import artifacts, kinds, pipeline
from benchflow.hosts.local import LocalHost
from benchflow.remote import jobs, layout
from benchflow.triggers import DoneMarkerTrigger
from benchflow.warehouse import RunRecord, Warehouse
from tests.conftest import PG_URI

pytestmark = pytest.mark.integration
KERNEL = kinds.get("kernel")
ROWS = [{"m": 1, "ms_per_call": 0.5, "tok_per_s": 2000.0, "us_per_token": 500.0, "note": ""}]


def first_event(trigger: DoneMarkerTrigger, timeout: float = 120) -> dict:
    async def wait() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    return asyncio.run(asyncio.wait_for(wait(), timeout))


def test_the_local_wait_finishes_after_a_chatty_benchmark(tmp_path, monkeypatch):
    """100,000 log lines, then the marker, all written before the wait starts (a triggerer restarted after a
    chatty run): the stream is never drained to its end, and the wait must still finish."""
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path))
    host = LocalHost()
    rundir = layout.run_dir(host.workdir, "bench_chatty", "run1")
    paths = layout.job_paths(rundir)
    script = tmp_path / "chatty.py"
    script.write_text("for i in range(100000):\n    print(f'NCCL INFO channel {i} ' + 'x' * 40)\nprint('ALL_DONE')\n")
    launch = jobs.launch_command(paths, f"{sys.executable} {script}", cwd=host.workdir)
    host.check(launch, 60, "launch")
    deadline = time.monotonic() + 60
    while jobs.parse_status(host.check(jobs.status_command(paths, "ALL_DONE"), 60, "s").stdout).exit_code is None:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    trigger = DoneMarkerTrigger(host_id="local", rundir=rundir, marker="ALL_DONE", timeout_s=60, check_interval=0.2)
    event = first_event(trigger, timeout=90)
    assert event["status"] == "done", event


def test_a_host_unreachable_past_the_timeout_and_grace_fails_the_wait(monkeypatch, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")], check=True)
    host_key = " ".join((tmp_path / "key.pub").read_text().split()[:2])
    conn = {"conn_type": "ssh", "host": "127.0.0.1", "port": 1, "login": "nobody", "extra": {"host_key": host_key}}
    monkeypatch.setenv("AIRFLOW_CONN_NOWHERE", json.dumps(conn))  # nothing listens on port 1
    trigger = DoneMarkerTrigger(
        host_id="nowhere", rundir="/tmp/x", marker="ALL_DONE", timeout_s=0, check_interval=1, unreachable_grace_s=0
    )
    event = first_event(trigger)
    assert event["status"] == "failed"
    assert "unreachable past the benchmark's timeout" in event["message"] and "may still be running" in event["message"]


def test_a_chatty_log_keeps_runs_detail_and_xcom_small(tmp_path, monkeypatch):
    """A kernel table interleaved with 100,000 NCCL INFO lines: every row is kept, the notes are capped."""
    monkeypatch.setenv("BENCH_ARTIFACTS_URL", f"file://{tmp_path / 'store'}")
    store = artifacts.store("bench_chatty", "run1")
    noise = "".join(f"[rank0] NCCL INFO ring {i}: 0 -> 1 via P2P/IPC\n" for i in range(50000))
    table = "M ms/call tok/s us/token note\n" + noise + "1 0.5 2000 500.0\n" + noise + "2 1.0 2000 500.0\nALL_DONE\n"
    (store / "bench.log").write_text(table)
    fetched = pipeline.Fetched(str(store), ["bench.log"], [], ["bench.log"])
    parsed = pipeline.parse(fetched, KERNEL, None, "ALL_DONE", {}, {})
    assert (parsed.status, parsed.rows) == ("ok", 2)
    assert len(parsed.detail) <= pipeline.DETAIL_CAP and "more" in parsed.detail
    assert len(json.dumps(parsed.to_xcom())) < 2 * pipeline.DETAIL_CAP


def test_fetch_and_parse_on_workers_with_different_local_disks(tmp_path, monkeypatch):
    """Nothing worker-local passes between tasks: the store (BENCH_ARTIFACTS_URL) is all they share."""
    monkeypatch.setenv("BENCH_ARTIFACTS_URL", f"file://{tmp_path / 'shared-store'}")
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path / "worker-a"))
    host = LocalHost()
    log = tmp_path / "host-bench.log"
    log.write_text("M ms/call tok/s us/token\n1 0.5 2000 500.0\nALL_DONE\n")
    store = artifacts.store("bench_two_disks", "run1")
    assert artifacts.store_file(host, str(log), store / "bench.log")
    assert not artifacts.store_file(host, str(tmp_path / "missing"), store / "missing")
    fetched = pipeline.Fetched(str(store), ["bench.log"], ["missing"], ["bench.log"]).to_xcom()

    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path / "worker-b"))  # another machine: another var/
    parsed = pipeline.parse(pipeline.Fetched.from_xcom(fetched), KERNEL, None, "ALL_DONE", {}, {})
    assert (parsed.status, parsed.rows) == ("ok", 1)
    assert artifacts.read_rows(parsed.store)[0]["m"] == 1
    assert not (tmp_path / "worker-b" / "artifacts").exists()


def record(run_id: str) -> RunRecord:
    return RunRecord(
        dag_id="bench_t",
        run_id=run_id,
        campaign="t",
        host="local",
        spec_hash="h" * 64,
        status="ok",
        started_at=datetime.now(UTC),
    )


def test_an_open_notebook_never_holds_up_a_load(tmp_path):
    """The README's own example (a read-only DuckDB connection left open in another process) and a load."""
    path = tmp_path / "warehouse.duckdb"
    writer = Warehouse.at(path)
    writer.migrate()
    writer.load(record("r1"), KERNEL, ROWS)
    snapshot = Warehouse.at(path, read_only=True).location
    notebook = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1], read_only=True);"
            " print(c.execute('SELECT count(*) FROM runs').fetchone()[0], flush=True); time.sleep(120)",
            snapshot,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert notebook.stdout.readline().strip() == "1"  # the notebook is open on the published snapshot
        writer.load(record("r2"), KERNEL, ROWS)  # not waiting for the notebook: it holds its snapshot for 2 minutes
        assert notebook.poll() is None  # the load finished while the notebook still held its connection
        reader = Warehouse.at(path, read_only=True)
        assert sorted(reader.query("SELECT run_id FROM runs")["run_id"]) == ["r1", "r2"]  # published at commit
    finally:
        notebook.kill()
        notebook.wait()


@pytest.mark.parametrize("extras", ["postgres", "postgres_search_path", "duckdb_host", "duckdb_extra_path"])
def test_the_bench_warehouse_connection_with_each_documented_extra(extras, tmp_path, monkeypatch):
    schema = f"conn_{uuid.uuid4().hex[:10]}"
    conn = {
        "postgres": PG_URI,
        "postgres_search_path": json.dumps(
            {
                "conn_type": "postgres",
                "host": "127.0.0.1",
                "port": 5432,
                "login": "postgres",
                "schema": PG_URI.rsplit("/", 1)[1],
                "extra": {"search_path": schema},
            }
        ),
        "duckdb_host": json.dumps({"conn_type": "duckdb", "host": str(tmp_path / "a.duckdb")}),
        "duckdb_extra_path": json.dumps({"conn_type": "duckdb", "extra": {"path": str(tmp_path / "b.duckdb")}}),
    }[extras]
    monkeypatch.setenv("AIRFLOW_CONN_BENCH_WAREHOUSE", conn)
    warehouse = Warehouse.from_airflow()
    warehouse.migrate()
    warehouse.load(record(f"r_{extras}"), KERNEL, ROWS)
    reader = Warehouse.from_airflow(read_only=True)
    runs = reader.query(f"SELECT run_id FROM runs WHERE run_id = {reader.p}", [f"r_{extras}"])["run_id"].tolist()
    assert runs == [f"r_{extras}"]
    if extras == "postgres_search_path":
        assert f"(schema {schema})" in warehouse.location
        tables = Warehouse.postgres(PG_URI).query(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'kernel_results'"
        )
        assert schema in set(tables["table_schema"])
    if extras.startswith("duckdb"):
        assert warehouse.location == str(tmp_path / ("a.duckdb" if extras == "duckdb_host" else "b.duckdb"))


def test_a_warehouse_connection_of_another_type_is_refused(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_BENCH_WAREHOUSE", json.dumps({"conn_type": "mysql", "host": "x"}))
    with pytest.raises(ValueError, match="has type 'mysql'; use one of 'duckdb', 'postgres', 'postgresql'"):
        Warehouse.from_airflow()


def test_a_snapshot_older_than_the_warehouse_is_said_and_bench_migrate_publishes_it_again(tmp_path):
    """A publish that failed (a full disk) leaves readers on an older snapshot: bench run's report says so instead
    of "(no rows loaded)", and the next write (bench migrate) publishes the warehouse again."""
    import os

    path = tmp_path / "warehouse.duckdb"
    Warehouse.at(path).migrate()
    reader = Warehouse.at(path, read_only=True).hook
    assert not reader.snapshot_stale()
    earlier = path.stat().st_mtime - 60
    os.utime(reader.snapshot_path(), (earlier, earlier))  # a commit after it whose publish failed
    assert reader.snapshot_stale()
    Warehouse.at(path).migrate()  # nothing to apply, but the write publishes
    assert not reader.snapshot_stale()
