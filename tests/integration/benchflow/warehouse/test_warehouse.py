from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pytest

from benchflow import kinds
from benchflow.warehouse import RunRecord, Validation, Warehouse
from benchflow.warehouse.hooks import DuckDBHook

KERNEL = kinds.get("kernel")
SERVING = kinds.get("serving")

pytestmark = pytest.mark.integration

ROWS = [
    {"m": 1, "ms_per_call": 0.151, "tok_per_s": 6622.5, "us_per_token": 151.0, "note": "AR"},
    {"m": 2, "ms_per_call": 0.2, "tok_per_s": 10000.0, "us_per_token": 100.0, "note": ""},
]


def record(status="ok", run_id="r1"):
    return RunRecord(
        dag_id="bench_t",
        run_id=run_id,
        campaign="t",
        host="local",
        spec_hash="h" * 64,
        status=status,
        payload_sha256="p" * 64,
        started_at=datetime.now(UTC),
        host_facts={"gpu": "none"},
    )


@pytest.fixture
def warehouse(warehouse_backend):
    """Every test runs against both backends, migrated."""
    warehouse_backend.migrate()
    return warehouse_backend


def count(warehouse, table, run_id="r1"):
    return int(warehouse.query(f"SELECT count(*) AS n FROM {table} WHERE run_id = {warehouse.p}", [run_id])["n"][0])


def test_load_is_idempotent_per_run(warehouse):
    assert warehouse.load(record(), KERNEL, ROWS) == 2
    assert warehouse.load(record(), KERNEL, ROWS) == 2
    assert count(warehouse, "kernel_results") == 2 and count(warehouse, "runs") == 1
    warehouse.load(record(run_id="r2"), KERNEL, ROWS[:1])
    assert count(warehouse, "kernel_results", "r2") == 1 and count(warehouse, "kernel_results") == 2


def test_reload_replaces_rows_and_status(warehouse):
    warehouse.load(record(status="incomplete"), KERNEL, ROWS[:1])
    warehouse.load(record(status="ok"), KERNEL, ROWS)
    run = warehouse.query("SELECT status, rows_loaded, host_facts FROM runs")
    assert run.to_dict("records") == [{"status": "ok", "rows_loaded": 2, "host_facts": '{"gpu": "none"}'}]


def test_failed_load_leaves_previous_state(warehouse):
    warehouse.load(record(), KERNEL, ROWS)
    broken = [*ROWS, {"m": 2, "ms_per_call": 1.0, "tok_per_s": 1.0, "us_per_token": 1.0, "note": ""}]  # duplicate key
    with pytest.raises(Exception, match=r"(?i)duplicate|constraint"):
        warehouse.load(record(status="incomplete"), KERNEL, broken)
    assert count(warehouse, "kernel_results") == 2
    assert warehouse.query("SELECT status FROM runs")["status"].tolist() == ["ok"]


def test_quarantine_keeps_rows_out_of_results_with_reasons(warehouse):
    warehouse.load(record(), KERNEL, ROWS)
    failed = Validation("kernel", False, 6, ["unique(m): 1 unexpected"], 2, {1: ["unique(m)"]})
    assert warehouse.load(record(status="invalid"), KERNEL, ROWS, failed) == 0
    assert count(warehouse, "kernel_results") == 0
    reasons = warehouse.query("SELECT row_number, reason FROM quarantine ORDER BY row_number")["reason"].tolist()
    assert reasons == ["run failed validation: unique(m): 1 unexpected", "unique(m)"]
    assert warehouse.query("SELECT status FROM runs")["status"].tolist() == ["invalid"]
    stored = warehouse.query("SELECT suite, success, failed, rows_checked FROM validations").to_dict("records")
    assert stored == [{"suite": "kernel", "success": False, "failed": 1, "rows_checked": 2}]
    warehouse.load(record(), KERNEL, ROWS, Validation("kernel", True, 6, [], 2))  # a rerun that passes
    assert count(warehouse, "kernel_results") == 2 and count(warehouse, "quarantine") == 0


def test_migrations_are_recorded_once(warehouse):
    from benchflow.paths import SQL_DIR

    assert warehouse.migrate() == []  # the fixture migrated: nothing left to apply, views unchanged
    shipped = sorted(int(p.name[:4]) for p in SQL_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    assert shipped == list(range(1, len(shipped) + 1))
    assert warehouse.query("SELECT version FROM schema_migrations ORDER BY version")["version"].tolist() == shipped


def test_a_query_never_migrates(tmp_path):
    fresh = Warehouse.at(tmp_path / "fresh.duckdb")
    assert fresh.query("SELECT 42 AS answer")["answer"].tolist() == [42]
    tables = fresh.query("SELECT table_name FROM information_schema.tables")["table_name"].tolist()
    assert tables == []
    assert (
        "views" in fresh.migrate()
        and "schema_migrations"
        in fresh.query("SELECT table_name FROM information_schema.tables")["table_name"].tolist()
    )


def test_unknown_status_is_refused():
    with pytest.raises(ValueError, match="run status 'great'"):
        record(status="great")


def test_serving_rows_load_with_infinities_and_nulls(warehouse):
    from tests.conftest import FIXTURES

    row = kinds.parse_text((FIXTURES / "sglang_bench_serving_sgl-cookbook_DeepSeek-R1.txt").read_text()).rows[0]
    rows = [dict(row, config="TP4", concurrency=1), dict(row, config="TP4", concurrency=8, p99_ttft_ms=float("inf"))]
    assert warehouse.load(record(), SERVING, rows) == 2
    assert warehouse.load(record(), SERVING, rows) == 2
    loaded = warehouse.query(
        "SELECT config, concurrency, output_throughput, p99_ttft_ms, p90_ttft_ms "
        "FROM serving_results ORDER BY concurrency"
    ).to_dict("records")
    got = [(r["config"], r["concurrency"], r["output_throughput"]) for r in loaded]
    assert got == [("TP4", 1, 105.24), ("TP4", 8, 105.24)]
    assert loaded[1]["p99_ttft_ms"] == float("inf")
    assert pd.isna(loaded[0]["p90_ttft_ms"])  # not reported by the tool: NULL


def test_per_request_rows_go_to_their_own_table_and_are_replaced(warehouse):
    from tests.conftest import FIXTURES

    row = dict(
        kinds.parse_text((FIXTURES / "sglang_bench_serving_sgl-cookbook_DeepSeek-R1.txt").read_text()).rows[0],
        config="pd",
        concurrency=2,
    )
    requests = [
        {
            "config": "pd",
            "concurrency": 2,
            "seq": i,
            "ok": i != 1,
            "input_len": 256,
            "output_tokens": 256,
            "ttft_ms": 10.0 + i,
            "e2e_ms": 900.0,
            "mean_itl_ms": 3.5,
            "error": "" if i != 1 else "HTTP 500",
        }
        for i in range(3)
    ]
    for _ in range(2):
        warehouse.load(record(), SERVING, [row], side_rows={"serving_requests": requests})
    raw = warehouse.query("SELECT seq, ok, error FROM serving_requests ORDER BY seq").to_dict("records")
    got = [(r["seq"], bool(r["ok"]), r["error"]) for r in raw]
    assert got == [(0, True, ""), (1, False, "HTTP 500"), (2, True, "")]


def test_a_duckdb_file_held_by_another_process_is_waited_for(tmp_path):
    """Celery workers load at the same moment; DuckDB lets one process at a time open the file."""
    import subprocess
    import sys

    path = tmp_path / "wh.duckdb"
    Warehouse.at(path).migrate()
    Warehouse.at(path).load(record(), KERNEL, ROWS)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            # holds the file until told to let go (a line on its stdin): no fixed time a busy machine could outlast
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True);"
            " sys.stdin.readline(); time.sleep(1); c.close(); print('released', flush=True); time.sleep(30)",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        import duckdb

        impatient = Warehouse(DuckDBHook(path=path, lock_wait_s=0), str(path))
        with pytest.raises(duckdb.IOException, match="lock"):  # not waiting: the lock is really held
            impatient.load(record(run_id="r2"), KERNEL, ROWS)
        holder.stdin.write("let go\n")
        holder.stdin.flush()  # it lets go a second later: the load below starts while it still holds the file
        Warehouse.at(path).load(record(run_id="r2"), KERNEL, ROWS)  # waits for the holder
        assert holder.stdout.readline().strip() == "released"
        assert count(Warehouse.at(path), "kernel_results", "r2") == 2
    finally:
        holder.kill()
        holder.wait()


def test_a_warehouse_of_the_previous_release_upgrades_in_place(warehouse_backend):
    """Schema v5 with its views (what the last release left), a serving run in it, then today's migrate."""
    from benchflow.paths import SQL_DIR
    from benchflow.warehouse.schema import statements
    from tests.conftest import FIXTURES

    old = warehouse_backend
    with old.transaction() as tx:
        tx.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at TIMESTAMP WITH TIME ZONE NOT NULL)"
        )
        for script in sorted(SQL_DIR.glob("000[1-5]_*.sql")):
            for statement in statements(script.read_text()):
                tx.execute(statement)
            tx.insert("schema_migrations", [int(script.name[:4]), script.name, datetime.now(UTC)])
        for statement in statements((FIXTURES / "warehouse_v5_views.sql").read_text()):
            tx.execute(statement)
        tx.execute(
            "INSERT INTO runs (dag_id, run_id, campaign, host, spec_hash, status) "
            "VALUES ('bench_t', 'r1', 't', 'local', 'h', 'ok')"
        )
        tx.execute(
            "INSERT INTO serving_results (dag_id, run_id, config, concurrency, num_prompts, completed, "
            "output_throughput) VALUES ('bench_t', 'r1', 'pd', 8, 24, 24, 100.0)"
        )
    applied = old.migrate()
    assert applied[0] == "0006_serving_columns.sql" and applied[-1] == "views"
    rows = old.query("SELECT config, concurrency, repeat, warmup, output_throughput FROM serving_results")
    assert rows.to_dict("records") == [
        {"config": "pd", "concurrency": 8, "repeat": 1, "warmup": False, "output_throughput": 100.0}
    ]
    summary = old.query("SELECT case_key, metric, n, mean FROM case_summary WHERE metric = 'output_throughput'")
    assert summary.to_dict("records") == [
        {"case_key": "config=pd,concurrency=8", "metric": "output_throughput", "n": 1, "mean": 100.0}
    ]
    # today's rows beside it: a concurrency phase (the client's rate "inf": no limit) keeps the same case key, a
    # request-rate phase (no cap) is keyed by its rate, and a rerun of the run replaces its rows (the unique index)
    new = [
        {"config": "pd", "concurrency": 8, "request_rate": float("inf"), "output_throughput": 110.0},
        {"config": "pd", "concurrency": None, "request_rate": 4.0, "output_throughput": 90.0},
    ]
    for _ in range(2):
        old.load(record(run_id="r2"), SERVING, new)
    keys = old.query(
        "SELECT case_key, value FROM metric_samples WHERE run_id = 'r2' AND metric = 'output_throughput' ORDER BY 1"
    )
    assert keys.to_dict("records") == [
        {"case_key": "config=pd,concurrency=8", "value": 110.0},
        {"case_key": "config=pd,request_rate=4", "value": 90.0},
    ]
