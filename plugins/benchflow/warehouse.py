"""The results warehouse: a DuckDB file by default, or what the connection ``bench_warehouse`` names.

Schema lives in ``include/sql/NNNN_*.sql``, applied in order and recorded in ``schema_migrations``.
Every write for one run happens in one transaction that first deletes the run's rows, so a rerun
replaces and a crash mid-load leaves the previous state.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchflow.parsers.serving import COLUMNS as SERVING_COLUMNS
from benchflow.paths import SQL_DIR, var_dir

CONN_ID = "bench_warehouse"
RUN_STATUSES = ("ok", "incomplete", "failed", "invalid")
# result kind → (table, columns in load order). Identifiers here are the only ones spliced into SQL.
RESULT_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "kernel_sweep": ("kernel_results", ("m", "ms_per_call", "tok_per_s", "us_per_token", "note")),
    "serving": ("serving_results", SERVING_COLUMNS),
    "generic": ("generic_results", ("seq", "metric", "value", "unit", "line")),
}


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

    def __post_init__(self) -> None:
        if self.status not in RUN_STATUSES:
            raise ValueError(f"run status {self.status!r} is not one of {RUN_STATUSES}")


def default_path() -> Path:
    return var_dir() / "warehouse.duckdb"


def resolve_path() -> Path:
    """The DuckDB file: from the Airflow connection ``bench_warehouse`` when defined, else var/."""
    conn = _lookup_connection()
    if conn is None:
        return default_path()
    if conn.conn_type != "duckdb":
        raise ValueError(
            f"connection {CONN_ID!r} has type {conn.conn_type!r}; this release loads into DuckDB only "
            "(conn_type 'duckdb', the file path in 'host' or extra 'path')"
        )
    path = conn.extra_dejson.get("path") or conn.host
    if not path:
        raise ValueError(f"connection {CONN_ID!r} names no DuckDB file (set 'host' or extra 'path')")
    return Path(path)


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


class Warehouse:
    def __init__(self, path: Path | None = None):
        self.path = Path(path or resolve_path())

    @contextmanager
    def connect(self) -> Iterator[Any]:
        import duckdb

        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(self.path))
        try:
            self._migrate(con)
            yield con
        finally:
            con.close()

    @staticmethod
    def _migrate(con: Any) -> None:
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMP WITH TIME ZONE NOT NULL)"
        )
        done = {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()}
        for script in sorted(SQL_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")):
            version = int(script.name[:4])
            if version in done:
                continue
            con.execute("BEGIN TRANSACTION")
            con.execute(script.read_text())
            con.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", [version, script.name, _now()])
            con.execute("COMMIT")

    def load(self, run: RunRecord, kind: str, rows: list[dict[str, Any]]) -> int:
        """Replace the run's record and its result rows in one transaction; returns rows loaded."""
        import pandas as pd

        table, columns = RESULT_TABLES[kind]
        frame = pd.DataFrame.from_records(rows, columns=list(columns))
        run.rows_loaded = len(frame)
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                self._put_run(con, run)
                con.execute(f"DELETE FROM {table} WHERE dag_id = ? AND run_id = ?", [run.dag_id, run.run_id])
                if len(frame):
                    con.register("staging_rows", frame)
                    cols = ", ".join(columns)
                    con.execute(
                        f"INSERT INTO {table} (dag_id, run_id, {cols}) SELECT ?, ?, {cols} FROM staging_rows",
                        [run.dag_id, run.run_id],
                    )
                    con.unregister("staging_rows")
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
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
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                self._put_run(con, run)
                con.execute(f"DELETE FROM {table} WHERE dag_id = ? AND run_id = ?", [run.dag_id, run.run_id])
                con.execute(
                    "DELETE FROM quarantine WHERE dag_id = ? AND run_id = ? AND result_kind = ?",
                    [run.dag_id, run.run_id, kind],
                )
                if records:
                    con.executemany("INSERT INTO quarantine VALUES (?, ?, ?, ?, ?, ?, ?)", records)
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise

    def record_run(self, run: RunRecord) -> None:
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            self._put_run(con, run)
            con.execute("COMMIT")

    @staticmethod
    def _put_run(con: Any, run: RunRecord) -> None:
        con.execute("DELETE FROM runs WHERE dag_id = ? AND run_id = ?", [run.dag_id, run.run_id])
        con.execute(
            "INSERT INTO runs (dag_id, run_id, campaign, host, payload_sha256, spec_hash, status, started_at,"
            " ended_at, rows_loaded, host_facts, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run.dag_id, run.run_id, run.campaign, run.host, run.payload_sha256, run.spec_hash, run.status,
             run.started_at, run.ended_at, run.rows_loaded, json.dumps(run.host_facts, sort_keys=True),
             run.detail],
        )  # fmt: skip

    def query(self, sql: str, params: list[Any] | None = None) -> Any:
        """Run a read query and return a pandas DataFrame."""
        with self.connect() as con:
            return con.execute(sql, params or []).df()


def _now() -> datetime:
    return datetime.now(UTC)
