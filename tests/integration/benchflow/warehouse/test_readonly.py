"""``bench sql`` as an analyst runs it (the console script, in a subprocess) against both backends: one read
statement, never a write (issue 20), and its output as text, CSV, JSON or Parquet (issue 22)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest

from benchflow import kinds
from benchflow.warehouse import Warehouse
from benchflow.warehouse.readonly import RefusedStatement, check
from tests.conftest import PG_URI, PROJECT_ROOT
from tests.integration.benchflow.warehouse.test_warehouse import ROWS, record

pytestmark = pytest.mark.integration
BENCH = str(Path(sys.executable).parent / "bench")
KERNEL = kinds.get("kernel")


def postgres_conn(schema: str, login: str) -> str:
    return json.dumps(
        {
            "conn_type": "postgres",
            "host": "127.0.0.1",
            "port": 5432,
            "login": login,
            "schema": PG_URI.rsplit("/", 1)[1],
            "extra": {"search_path": schema},
        }
    )


def postgres_warehouse() -> tuple[Warehouse, str, str]:
    """A migrated schema with one run of two kernel rows, and a reader role as the README describes it."""
    schema, reader = f"sql_{uuid.uuid4().hex[:10]}", f"bench_reader_{uuid.uuid4().hex[:10]}"
    with Warehouse.postgres(PG_URI).transaction() as tx:
        tx.execute(f'CREATE SCHEMA "{schema}"')
    writer = Warehouse.postgres(PG_URI, search_path=schema)
    writer.migrate()
    writer.load(record(), KERNEL, ROWS)
    with Warehouse.postgres(PG_URI).transaction() as tx:
        tx.execute(f'CREATE ROLE "{reader}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE')
        tx.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{reader}"')
        tx.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{reader}"')
    return writer, schema, reader


def drop_role(reader: str, schema: str) -> None:
    with Warehouse.postgres(PG_URI).transaction() as tx:
        tx.execute(f'DROP SCHEMA "{schema}" CASCADE')
        tx.execute(f'DROP OWNED BY "{reader}"')
        tx.execute(f'DROP ROLE "{reader}"')


@pytest.fixture(params=["duckdb", "postgres"])
def backend(request, tmp_path):
    """A migrated warehouse with one run of two kernel rows, and the environment that points bench at it (on
    PostgreSQL as a reader role)."""
    if request.param == "duckdb":
        writer = Warehouse.at(tmp_path / "wh.duckdb")
        writer.migrate()
        writer.load(record(), KERNEL, ROWS)
        yield (
            request.param,
            writer,
            {
                **os.environ,
                "AIRFLOW_CONN_BENCH_WAREHOUSE": json.dumps(
                    {"conn_type": "duckdb", "host": str(tmp_path / "wh.duckdb")}
                ),
            },
        )
        return
    writer, schema, reader = postgres_warehouse()
    yield request.param, writer, {**os.environ, "AIRFLOW_CONN_BENCH_WAREHOUSE": postgres_conn(schema, reader)}
    drop_role(reader, schema)


def bench(env, *args):
    return subprocess.run([BENCH, "sql", *args], capture_output=True, text=True, cwd=PROJECT_ROOT, env=env, timeout=120)


@pytest.fixture
def sql(monkeypatch, capsys):
    """``bench sql`` in this process (the attack matrix: one interpreter start instead of fifty)."""

    def run(env, *args):
        from benchtools import cli

        monkeypatch.setenv("AIRFLOW_CONN_BENCH_WAREHOUSE", env["AIRFLOW_CONN_BENCH_WAREHOUSE"])
        code = cli.main(["sql", *args])
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return run


def intact(writer: Warehouse) -> None:
    assert writer.query("SELECT count(*) AS n FROM runs")["n"].tolist() == [1]
    assert writer.query("SELECT count(*) AS n FROM kernel_results")["n"].tolist() == [2]
    tables = writer.query("SELECT table_name FROM information_schema.tables WHERE table_name = 'stolen'")
    assert tables.empty


ATTACKS = [
    "SET TRANSACTION READ WRITE; DELETE FROM runs; COMMIT",
    "COMMIT; DELETE FROM runs",
    "BEGIN READ WRITE; DELETE FROM runs; COMMIT",
    "DELETE FROM runs",
    "COPY runs TO '{leak}'",
    "COPY (SELECT 1) TO PROGRAM 'touch {leak}'",
    "WITH gone AS (DELETE FROM runs RETURNING *) SELECT count(*) FROM gone",
    "SELECT * INTO stolen FROM runs",
    "EXPLAIN ANALYZE DELETE FROM runs",
    "SELECT * FROM runs FOR UPDATE",
    "SELECT 1; DROP TABLE runs",
    "CALL nothing()",
    "DO $$ BEGIN DELETE FROM runs; END $$",
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_bench_sql_never_writes(backend, attack, tmp_path, sql):
    _, writer, env = backend
    leak = tmp_path / "leak"
    refused = sql(env, attack.format(leak=leak))
    assert refused.returncode == 1, refused.stdout
    assert "bench sql is read-only" in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    assert not leak.exists()
    intact(writer)


POSTGRES_ONLY = [
    # readings by their first word whose work the server refuses: in the read-only transaction the tool opens,
    # or for want of the rights a reader role does not have
    "SELECT set_config('transaction_read_only', 'off', true), query_to_xml('DELETE FROM runs RETURNING 1', true, "
    "true, '')",
    "SELECT lo_export(lo_from_bytea(0, 'x'), '{leak}')",
    "SELECT pg_read_file('/etc/hostname')",
]


@pytest.mark.parametrize("attack", POSTGRES_ONLY)
def test_a_read_that_writes_through_a_function_is_refused_by_postgresql(attack, tmp_path, sql):
    writer, schema, reader = postgres_warehouse()
    leak = tmp_path / "leak"
    try:
        refused = sql(
            {**os.environ, "AIRFLOW_CONN_BENCH_WAREHOUSE": postgres_conn(schema, reader)}, attack.format(leak=leak)
        )
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stdout
        assert (
            "read-only transaction" in refused.stderr
            or "permission denied" in refused.stderr
            or ("read-write mode must be set before any query" in refused.stderr)
        ), refused.stderr
        assert not leak.exists()
        intact(writer)
    finally:
        drop_role(reader, schema)


def test_a_superuser_connection_is_refused():
    _writer, schema, reader = postgres_warehouse()
    try:
        refused = bench({**os.environ, "AIRFLOW_CONN_BENCH_WAREHOUSE": postgres_conn(schema, "postgres")}, "SELECT 1")
        assert refused.returncode == 1
        assert "logs in as 'postgres', a superuser" in refused.stderr and "reader role" in refused.stderr
    finally:
        drop_role(reader, schema)


def test_the_backends_refuse_a_write_the_check_let_through(backend, tmp_path):
    """The statement check aside (as if it had a hole), each backend still refuses: PostgreSQL's extended
    protocol takes one statement and its transaction is read-only; DuckDB's parser counts one SELECT."""
    name, writer, env = backend
    if name == "postgres":
        conn = json.loads(env["AIRFLOW_CONN_BENCH_WAREHOUSE"])
        uri = f"postgresql://{conn['login']}@127.0.0.1:5432/{conn['schema']}"
        reader = Warehouse.postgres(uri, search_path=writer.hook.search_path, read_only=True)
    else:
        reader = Warehouse.at(writer.location, read_only=True)
    for text in (
        "SET TRANSACTION READ WRITE; DELETE FROM runs; COMMIT",
        "SELECT 1; DELETE FROM runs",
        "DELETE FROM runs",
    ):
        with pytest.raises(Exception, match=r"(?i)read-only|multiple commands|one SELECT|syntax error"):
            reader.hook.read_statement(text)
    intact(writer)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1",
        "  -- a note\n  select count(*) from runs ;  ",
        "WITH a AS (SELECT 1 AS x) SELECT x FROM a",
        "VALUES (1, 'a')",
        "EXPLAIN SELECT * FROM runs",
        "SHOW search_path",
        "TABLE runs",
        "FROM runs",
        "SELECT count(*) AS deleted FROM runs WHERE detail NOT LIKE '%DELETE%'",
    ],
)
def test_reads_pass_the_check(text):
    assert check(text) == text.strip().rstrip(";").strip()  # raises RefusedStatement for anything else


def test_the_check_says_why():
    with pytest.raises(RefusedStatement, match="exactly one statement; this text has 3"):
        check("SET TRANSACTION READ WRITE; DELETE FROM runs; COMMIT")
    with pytest.raises(RefusedStatement, match="this statement has DELETE"):
        check("WITH gone AS (DELETE FROM runs RETURNING *) SELECT 1")


def test_reads_are_answered_on_both_backends(backend):
    name, _writer, env = backend
    answered = bench(env, "SELECT count(*) AS n, 6 * 7 AS answer FROM runs")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.split() == ["n", "answer", "1", "42"]
    shown = bench(env, "SHOW search_path" if name == "postgres" else "DESCRIBE runs")
    assert shown.returncode == 0, shown.stderr
    summed = bench(env, "SELECT sum(m) AS s, avg(m) AS a FROM kernel_results", "--format", "json")
    assert json.loads(summed.stdout) == [{"s": 3, "a": 1.5}], summed.stdout  # numbers (PostgreSQL: numeric), not text


def test_csv_json_and_parquet_hold_the_same_rows(backend, tmp_path):
    import duckdb

    _, writer, env = backend
    query = "SELECT run_id, m, ms_per_call, note FROM kernel_results ORDER BY m"
    expected = writer.query(query)
    csv = bench(env, query, "--format", "csv")
    assert csv.returncode == 0, csv.stderr
    assert csv.stdout.splitlines()[0] == "run_id,m,ms_per_call,note"
    assert len(csv.stdout.splitlines()) == 3
    as_json = bench(env, query, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == json.loads(expected.to_json(orient="records"))
    out = tmp_path / "rows.parquet"
    written = bench(env, query, "--format", "parquet", "--out", str(out))
    assert written.returncode == 0, written.stderr
    assert f"{out}: 2 rows, 4 columns (parquet)" in written.stderr
    back = duckdb.connect().execute(f"SELECT * FROM read_parquet('{out}') ORDER BY m").df()
    assert back.columns.tolist() == expected.columns.tolist()
    assert back.astype(str).values.tolist() == expected.astype(str).values.tolist()
    assert pd.api.types.is_numeric_dtype(back["ms_per_call"])
    to_file = bench(env, query, "--format", "csv", "--out", str(tmp_path / "rows.csv"))
    assert to_file.returncode == 0 and to_file.stdout == ""
    assert (tmp_path / "rows.csv").read_text() == csv.stdout


def test_parquet_needs_a_file(backend):
    _, _, env = backend
    refused = bench(env, "SELECT 1", "--format", "parquet")
    assert refused.returncode == 2 and "--out FILE" in refused.stderr


def test_output_keeps_every_column_null_and_date_as_they_are(backend, tmp_path, sql):
    """Two result columns of one name, a NULL and a DATE, in every format: nothing crashes, NULL is not NaN,
    a DATE is a date; --out never writes through a symbolic link."""
    _, _, env = backend
    query = "SELECT run_id, run_id, CAST(NULL AS INTEGER) AS nothing, CAST('2026-12-01' AS DATE) AS night FROM runs"
    done = sql(env, query, "--format", "json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert set(row) == {"run_id", "run_id_2", "nothing", "night"} and row["run_id"] == row["run_id_2"]
    assert row["nothing"] is None and row["night"] == "2026-12-01"
    assert "two result columns are named 'run_id': the second is 'run_id_2'" in done.stderr
    text = sql(env, query)
    assert text.returncode == 0 and "NULL" in text.stdout and "NaN" not in text.stdout and "2026-12-01" in text.stdout
    assert "00:00:00" not in text.stdout
    parquet = tmp_path / "out.parquet"
    assert sql(env, query, "--format", "parquet", "--out", str(parquet)).returncode == 0
    assert list(pd.read_parquet(parquet).columns) == ["run_id", "run_id_2", "nothing", "night"]
    target, link = tmp_path / "target.txt", tmp_path / "link.csv"
    target.write_text("keep me\n")
    link.symlink_to(target)
    refused = sql(env, query, "--format", "csv", "--out", str(link))
    assert refused.returncode == 1 and "is a symbolic link: not followed" in refused.stderr
    assert target.read_text() == "keep me\n"


def test_a_statement_past_its_timeout_is_cancelled(backend, sql):
    _, _, env = backend
    slow = "SELECT count(*) FROM range(100000000) a, range(100000000) b"
    if backend[0] == "postgres":
        slow = "SELECT count(*) FROM generate_series(1, 100000000) a, generate_series(1, 100000000) b"
    done = sql(env, slow, "--timeout", "1")
    assert done.returncode == 1 and "ran past 1 s and was cancelled (--timeout 1)" in done.stderr


def test_a_load_and_a_read_on_postgresql_log_no_line_per_statement():
    """bench run on PostgreSQL printed a "Rows affected" line for every statement of its load and reads (Airflow's
    DbApiHook logs one): a process that migrates, loads and reads prints none."""
    schema = f"quiet_{uuid.uuid4().hex[:10]}"
    script = (
        "from benchflow import kinds\n"
        "from benchflow.warehouse import Warehouse\n"
        "from tests.integration.benchflow.warehouse.test_warehouse import ROWS, record\n"
        f"w = Warehouse.postgres({PG_URI!r}, search_path={schema!r})\n"
        "w.migrate()\n"
        "w.load(record(), kinds.get('kernel'), ROWS)\n"
        "print('runs', len(w.query('SELECT * FROM runs')))\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120
        )
        assert done.returncode == 0 and "runs 1" in done.stdout, done.stderr[-2000:]
        assert "Rows affected" not in done.stdout + done.stderr
    finally:
        with Warehouse.postgres(PG_URI).transaction() as tx:
            tx.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
