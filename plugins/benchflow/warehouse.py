"""The results warehouse: a DuckDB file by default, or what the connection ``bench_warehouse`` names.

Schema lives in ``include/sql/NNNN_*.sql``, applied in order and recorded in ``schema_migrations``.
Every write for one run happens in one transaction that first deletes the run's rows, so a rerun
replaces and a crash mid-load leaves the previous state.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchflow.parsers.serving import COLUMNS as SERVING_COLUMNS
from benchflow.paths import SQL_DIR, var_dir

CONN_ID = "bench_warehouse"
DUCKDB_LOCK_WAIT_S = 300
RUN_STATUSES = ("ok", "incomplete", "failed", "invalid")
# result kind → (table, columns in load order). Identifiers here are the only ones spliced into SQL.
RESULT_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "kernel_sweep": ("kernel_results", ("m", "ms_per_call", "tok_per_s", "us_per_token", "note")),
    "serving": ("serving_results", SERVING_COLUMNS),
    "generic": ("generic_results", ("seq", "metric", "value", "unit", "line")),
}
REQUEST_COLUMNS = ("config", "concurrency", "seq", "ok", "input_len", "output_tokens", "ttft_ms", "e2e_ms",
                   "mean_itl_ms", "error")  # fmt: skip


@dataclass
class RunRecord:
    dag_id: str
    run_id: str
    campaign: str
    host: str
    spec_hash: str
    status: str
    payload_sha256: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    rows_loaded: int = 0
    host_facts: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    logical_date: datetime | None = None
    run_type: str | None = None
    conf: dict[str, Any] = field(default_factory=dict)
    git_sha: str | None = None

    def gpu(self) -> tuple[str, int, str | None]:
        """(model, count, driver) from the preflight facts; ('none', 0, None) on a CPU host."""
        first = str(self.host_facts.get("gpu", "none")).split("; ")[0]
        if first in ("", "none"):
            return "none", 0, None
        parts = [p.strip() for p in first.split(",")]
        return parts[0], int(self.host_facts.get("gpu_count", 1)), parts[1] if len(parts) > 1 else None

    def __post_init__(self) -> None:
        if self.status not in RUN_STATUSES:
            raise ValueError(f"run status {self.status!r} is not one of {RUN_STATUSES}")


def default_path() -> Path:
    return var_dir() / "warehouse.duckdb"


def _lookup_connection() -> Any:
    if os.environ.get(f"AIRFLOW_CONN_{CONN_ID.upper()}") is None and not _in_task():
        return None
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(CONN_ID)
    except AirflowNotFoundException:
        return None


def _in_task() -> bool:
    """True inside a running Airflow task, where connections come from the API server or secrets."""
    try:
        from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS
    except ImportError:
        return False
    return SUPERVISOR_COMMS is not None


class _Session:
    """One open connection: the few operations the warehouse needs, in either dialect.

    SQL is written once with ``?`` placeholders; PostgreSQL gets ``%s``.
    """

    def __init__(self, con: Any, dialect: str):
        self.con, self.dialect = con, dialect

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgres" else sql

    def execute(self, sql: str, params: list[Any] | None = None) -> None:
        if self.dialect == "postgres":
            with self.con.cursor() as cur:
                cur.execute(self._sql(sql), params)
        else:
            self.con.execute(sql, params or [])

    def executemany(self, sql: str, rows: list[list[Any]]) -> None:
        if self.dialect == "postgres":
            with self.con.cursor() as cur:
                cur.executemany(self._sql(sql), rows)
        else:
            self.con.executemany(sql, rows)

    def fetchall(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        if self.dialect == "postgres":
            with self.con.cursor() as cur:
                cur.execute(self._sql(sql), params)
                return list(cur.fetchall())
        return list(self.con.execute(sql, params or []).fetchall())

    def frame(self, sql: str, params: list[Any] | None = None) -> Any:
        import pandas as pd

        if self.dialect == "duckdb":
            return self.con.execute(sql, params or []).df()
        with self.con.cursor() as cur:
            cur.execute(self._sql(sql), params)
            columns = [c.name for c in cur.description] if cur.description else []
            return pd.DataFrame.from_records(cur.fetchall(), columns=columns)

    def begin(self) -> None:
        if self.dialect == "duckdb":
            self.con.execute("BEGIN TRANSACTION")  # psycopg opens one with the first statement

    def commit(self) -> None:
        self.con.commit() if self.dialect == "postgres" else self.con.execute("COMMIT")

    def rollback(self) -> None:
        self.con.rollback() if self.dialect == "postgres" else self.con.execute("ROLLBACK")

    def insert_frame(self, table: str, columns: tuple[str, ...], frame: Any, key: list[Any]) -> None:
        """Bulk-insert ``frame`` (its ``columns``) after the key columns ``(dag_id, run_id) = key``,
        through a staging table: DuckDB reads the frame in place, PostgreSQL gets it by ``COPY``."""
        cols = ", ".join(columns)
        if self.dialect == "duckdb":
            self.con.register("staging_rows", frame)
            try:
                self.con.execute(
                    f"INSERT INTO {table} (dag_id, run_id, {cols}) SELECT ?, ?, {cols} FROM staging_rows", key
                )
            finally:
                with contextlib.suppress(Exception):  # fails inside an aborted transaction; the error above counts
                    self.con.unregister("staging_rows")
            return
        import tempfile

        import duckdb
        import numpy as np

        staging = f"staging_{table}"
        frame = frame[list(columns)].copy()
        for column in frame.columns:  # 1125.0 → 1125, so INTEGER columns take what NaN made a float
            values = frame[column]
            if values.dtype.kind == "f":
                known = values.dropna()
                if np.isfinite(known).all() and (known == np.round(known)).all():
                    frame[column] = values.astype("Int64")
        with tempfile.TemporaryDirectory() as tmp, self.con.cursor() as cur:
            # DuckDB writes the CSV about 5x faster than pandas does
            path = Path(tmp) / "rows.csv"
            writer = duckdb.connect()
            writer.register("frame", frame)
            writer.execute(f"COPY frame TO '{path}' (FORMAT csv, HEADER false, NULLSTR '\\N')")
            writer.close()
            cur.execute(f"CREATE TEMP TABLE {staging} (LIKE {table} INCLUDING DEFAULTS) ON COMMIT DROP")
            cur.execute(f"ALTER TABLE {staging} ALTER COLUMN dag_id DROP NOT NULL, ALTER COLUMN run_id DROP NOT NULL")
            with cur.copy(f"COPY {staging} ({cols}) FROM STDIN WITH (FORMAT csv, NULL '\\N')") as copy:
                with path.open("rb") as csv:
                    while block := csv.read(1 << 20):
                        copy.write(block)
            cur.execute(
                f"INSERT INTO {table} (dag_id, run_id, {cols}) SELECT %s, %s, {cols} FROM {staging}", key
            )
            cur.execute(f"DROP TABLE {staging}")


class Warehouse:
    """The results tables, in a DuckDB file (``path``) or a PostgreSQL database (``postgres``: an Airflow
    connection id, or a libpq URI in tests and benchmarks). ``Warehouse()`` picks what the Airflow
    connection ``bench_warehouse`` names, else ``var/warehouse.duckdb``."""

    def __init__(
        self, path: Path | None = None, *, postgres: str | None = None, search_path: str | None = None
    ) -> None:
        self.search_path = search_path
        self.postgres: str | None = postgres
        self.path: Path | None = None
        if postgres is None and path is None:
            conn = _lookup_connection()
            if conn is not None and conn.conn_type in ("postgres", "postgresql"):
                self.postgres = CONN_ID
                self.search_path = search_path or conn.extra_dejson.get("search_path")
            elif conn is not None and conn.conn_type == "duckdb":
                located = conn.extra_dejson.get("path") or conn.host
                if not located:
                    raise ValueError(f"connection {CONN_ID!r} names no DuckDB file (set 'host' or extra 'path')")
                self.path = Path(located)
            elif conn is not None:
                raise ValueError(
                    f"connection {CONN_ID!r} has type {conn.conn_type!r}; use 'postgres' or 'duckdb'"
                )
            else:
                self.path = default_path()
        elif postgres is None:
            self.path = Path(path)  # type: ignore[arg-type]
        self.dialect = "postgres" if self.postgres else "duckdb"

    @property
    def location(self) -> str:
        if self.postgres:
            where = f"postgres:{self.postgres.split('@')[-1]}"
            return where + (f" (schema {self.search_path})" if self.search_path else "")
        return str(self.path)

    def _connect(self) -> Any:
        if self.dialect == "duckdb":
            import duckdb

            assert self.path is not None
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # One process at a time may open a DuckDB file: campaigns that load at the same moment
            # (several Celery workers) take turns, each session being short.
            deadline = time.monotonic() + DUCKDB_LOCK_WAIT_S
            delay = 0.05
            while True:
                try:
                    return duckdb.connect(str(self.path))
                except duckdb.IOException as exc:
                    if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                        raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        assert self.postgres is not None
        con: Any
        if "://" in self.postgres or "=" in self.postgres:
            import psycopg

            con = psycopg.connect(self.postgres)
        else:
            from airflow.providers.postgres.hooks.postgres import PostgresHook

            con = PostgresHook(postgres_conn_id=self.postgres).get_conn()
        if self.search_path:
            with con.cursor() as cur:
                cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.search_path}"')
                cur.execute(f'SET search_path TO "{self.search_path}"')
            con.commit()
        return con

    @contextmanager
    def session(self) -> Iterator[_Session]:
        con = self._connect()
        try:
            session = _Session(con, self.dialect)
            self._migrate(session)
            yield session
        finally:
            con.close()

    @contextmanager
    def transaction(self) -> Iterator[_Session]:
        """All or nothing: a crash or error inside leaves the previous state."""
        with self.session() as session:
            session.begin()
            try:
                yield session
            except BaseException:
                session.rollback()
                raise
            session.commit()

    @staticmethod
    def _migrate(session: _Session) -> None:
        session.begin()
        session.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMP WITH TIME ZONE NOT NULL)"
        )
        done = {row[0] for row in session.fetchall("SELECT version FROM schema_migrations")}
        for script in sorted(SQL_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")):
            version = int(script.name[:4])
            if version not in done:
                for statement in _statements(script.read_text()):
                    session.execute(statement)
                session.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", [version, script.name, _now()])
        for statement in _statements((SQL_DIR / "views.sql").read_text()):
            session.execute(statement)
        session.commit()

    def load(
        self, run: RunRecord, kind: str, rows: list[dict[str, Any]], requests: list[dict[str, Any]] | None = None
    ) -> int:
        """Replace the run's record and its result rows (and per-request rows, when a serving client saved
        them) in one transaction; returns result rows loaded."""
        import pandas as pd

        table, columns = RESULT_TABLES[kind]
        frame = pd.DataFrame.from_records(rows, columns=list(columns))
        run.rows_loaded = len(frame)
        key = [run.dag_id, run.run_id]
        with self.transaction() as tx:
            self._put_run(tx, run)
            tx.execute(f"DELETE FROM {table} WHERE dag_id = ? AND run_id = ?", key)
            if len(frame):
                tx.insert_frame(table, columns, frame, key)
            if requests is not None:
                raw = pd.DataFrame.from_records(requests, columns=list(REQUEST_COLUMNS))
                raw["error"] = raw["error"].fillna("")
                tx.execute("DELETE FROM serving_requests WHERE dag_id = ? AND run_id = ?", key)
                if len(raw):
                    tx.insert_frame("serving_requests", REQUEST_COLUMNS, raw, key)
        return run.rows_loaded

    def quarantine(self, run: RunRecord, kind: str, rows: list[dict[str, Any]], reasons: dict[int, list[str]],
                   summary: str) -> None:
        """Keep rows that failed validation out of the results, with the reason for each."""
        table, _ = RESULT_TABLES[kind]
        now = _now()
        records = [
            [run.dag_id, run.run_id, kind, n, json.dumps(row, default=str),
             "; ".join(reasons.get(n, [])) or f"run failed validation: {summary.splitlines()[0]}", now]
            for n, row in enumerate(rows)
        ]  # fmt: skip
        run.rows_loaded = 0
        with self.transaction() as tx:
            self._put_run(tx, run)
            tx.execute(f"DELETE FROM {table} WHERE dag_id = ? AND run_id = ?", [run.dag_id, run.run_id])
            tx.execute(
                "DELETE FROM quarantine WHERE dag_id = ? AND run_id = ? AND result_kind = ?",
                [run.dag_id, run.run_id, kind],
            )
            if records:
                tx.executemany("INSERT INTO quarantine VALUES (?, ?, ?, ?, ?, ?, ?)", records)

    def record_run(self, run: RunRecord) -> None:
        with self.transaction() as tx:
            self._put_run(tx, run)

    @staticmethod
    def _put_run(tx: _Session, run: RunRecord) -> None:
        tx.execute("DELETE FROM runs WHERE dag_id = ? AND run_id = ?", [run.dag_id, run.run_id])
        model, count, driver = run.gpu()
        facts = run.host_facts
        versions = {k: facts[k] for k in ("python", "torch", "os") if k in facts}
        tx.execute(
            "INSERT INTO runs (dag_id, run_id, campaign, host, payload_sha256, spec_hash, status, started_at,"
            " ended_at, rows_loaded, host_facts, detail, logical_date, run_type, conf, gpu_model, gpu_count,"
            " gpu_driver, cuda, git_sha, versions)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run.dag_id, run.run_id, run.campaign, run.host, run.payload_sha256, run.spec_hash, run.status,
             run.started_at, run.ended_at, run.rows_loaded, json.dumps(facts, sort_keys=True), run.detail,
             run.logical_date, run.run_type, json.dumps(run.conf, sort_keys=True, default=str), model, count,
             driver, facts.get("cuda") if facts.get("cuda") not in (None, "None") else "none", run.git_sha,
             json.dumps(versions, sort_keys=True)],
        )  # fmt: skip

    def record_validation(self, run: RunRecord, suite: str, success: bool, evaluated: int, failures: list[str],
                          rows_checked: int) -> None:  # fmt: skip
        """Keep every validation's outcome (a rerun of the same suite on the same run replaces it)."""
        with self.transaction() as tx:
            tx.execute("DELETE FROM validations WHERE dag_id = ? AND run_id = ? AND suite = ?",
                       [run.dag_id, run.run_id, suite])  # fmt: skip
            tx.execute(
                "INSERT INTO validations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run.dag_id, run.run_id, suite, success, evaluated, len(failures), rows_checked,
                 json.dumps(failures), _now()],
            )  # fmt: skip

    def query(self, sql: str, params: list[Any] | None = None) -> Any:
        """Run a read query and return a pandas DataFrame."""
        with self.session() as session:
            return session.frame(sql, params)


def _statements(script: str) -> list[str]:
    """A migration file's statements, comments removed (the files hold no ';' or '--' inside literals)."""
    body = "\n".join(line.split("--", 1)[0] for line in script.splitlines())
    return [s.strip() for s in body.split(";") if s.strip()]


def _now() -> datetime:
    return datetime.now(UTC)
