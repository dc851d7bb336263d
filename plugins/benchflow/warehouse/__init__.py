"""The results warehouse: a DuckDB file by default, or what the Airflow connection ``bench_warehouse`` names.

Backends are ``DbApiHook``s (:mod:`benchflow.warehouse.hooks`). The schema is numbered migrations in
``include/sql/`` plus the analyst views, applied by ``bench migrate`` (:mod:`benchflow.warehouse.schema`);
reads never migrate. Every write for one run happens in one transaction that first deletes the run's rows,
so a rerun replaces and a crash mid-load leaves the previous state.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchflow.paths import var_dir

if TYPE_CHECKING:
    import pandas as pd

    from benchflow.kinds import ResultKind

CONN_ID = "bench_warehouse"
RUN_STATUSES = ("ok", "incomplete", "failed", "invalid")


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


@dataclass
class Validation:
    """What the validate step found, as load stores it."""

    suite: str
    success: bool
    evaluated: int
    failures: list[str]
    rows_checked: int
    row_reasons: dict[int, list[str]] = field(default_factory=dict)

    def summary(self) -> str:
        if self.success:
            return f"GX suite {self.suite!r}: all {self.evaluated} expectations passed on {self.rows_checked} rows"
        lines = [f"GX suite {self.suite!r}: {len(self.failures)} of {self.evaluated} expectations failed:"]
        return "\n".join(lines + [f"  - {item}" for item in self.failures])


@dataclass
class Finding:
    """A metric of a case worse than its baseline beyond noise (judged by the analysis package's regression check)."""

    case_key: str
    metric: str
    value: float
    baseline_mean: float
    baseline_std: float
    baseline_runs: int
    relative_change: float
    z_score: float
    direction: str
    ci_low: float | None = None  # 95 % interval of value / baseline, when tonight had repeats
    ci_high: float | None = None
    p_value: float | None = None
    test: str = "z"  # 'welch-log' (tonight's repeats against the baseline's) or 'z' (one value a night)


class Transaction:
    """An open transaction on one connection; statements use the backend's placeholder ``p``."""

    def __init__(self, hook: Any, con: Any):
        self.hook, self.con = hook, con
        self.p: str = hook.placeholder

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """A cursor inside this transaction (DuckDB's ``cursor()`` would open a second connection)."""
        cur = self.hook.cursor(self.con)
        try:
            yield cur
        finally:
            if cur is not self.con:
                cur.close()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self.cursor() as cur:
            cur.execute(sql, list(params))

    def executemany(self, sql: str, rows: list[list[Any]]) -> None:
        with self.cursor() as cur:
            cur.executemany(sql, rows)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.cursor() as cur:
            cur.execute(sql, list(params))
            return list(cur.fetchall())

    def insert(self, table: str, values: Sequence[Any]) -> None:
        self.execute(f"INSERT INTO {table} VALUES ({', '.join([self.p] * len(values))})", values)

    def delete_run(self, table: str, dag_id: str, run_id: str, extra: str = "", params: Sequence[Any] = ()) -> None:
        self.execute(
            f"DELETE FROM {table} WHERE dag_id = {self.p} AND run_id = {self.p}{extra}", [dag_id, run_id, *params]
        )


class Warehouse:
    """The results tables behind one hook. Build it with :meth:`from_airflow` (what tasks use),
    :meth:`at` (a DuckDB file) or :meth:`postgres` (a libpq URI, for tests and benchmarks)."""

    def __init__(self, hook: Any, location: str):
        self.hook = hook
        self.location = location
        self.p: str = hook.placeholder

    @classmethod
    def from_airflow(cls, read_only: bool = False) -> Warehouse:
        """The connection ``bench_warehouse`` (conn type ``postgres`` or ``duckdb``) if defined, else
        ``var/warehouse.duckdb``."""
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = BaseHook.get_connection(CONN_ID)
        except AirflowNotFoundException:
            return cls.at(default_path(), read_only=read_only)
        return cls._from_connection(conn, read_only)

    @classmethod
    def _from_connection(cls, conn: Any, read_only: bool) -> Warehouse:
        from benchflow.warehouse.hooks import DuckDBHook, WarehousePostgresHook

        hook: Any
        if conn.conn_type in ("postgres", "postgresql"):
            hook = WarehousePostgresHook(postgres_conn_id=conn.conn_id, read_only=read_only)
            hook.use(conn)
            schema = hook.search_path
            where = f"postgres:{conn.host}:{conn.port or 5432}/{conn.schema}"
            where += f" (schema {schema})" if schema else ""
            return cls(hook, where)
        if conn.conn_type == "duckdb":
            hook = DuckDBHook(duckdb_conn_id=conn.conn_id, read_only=read_only)
            hook._connection = conn
            return cls(hook, str(hook.snapshot_path() if read_only else hook.database_path()))
        raise ValueError(f"connection {conn.conn_id!r} has type {conn.conn_type!r}; use 'postgres' or 'duckdb'")

    @classmethod
    def at(cls, path: Path | str, read_only: bool = False) -> Warehouse:
        from benchflow.warehouse.hooks import DuckDBHook

        hook = DuckDBHook(path=path, read_only=read_only)
        return cls(hook, str(hook.snapshot_path() if read_only else path))

    @classmethod
    def postgres(cls, uri: str, search_path: str | None = None, read_only: bool = False) -> Warehouse:
        from airflow.models.connection import Connection

        conn = Connection(conn_id=CONN_ID, uri=uri)
        if search_path:
            conn.set_extra(json.dumps({**conn.extra_dejson, "search_path": search_path}))
        return cls._from_connection(conn, read_only)

    @property
    def dialect(self) -> str:
        return self.hook.conn_type

    @contextmanager
    def connection(self) -> Iterator[Any]:
        con = self.hook.get_conn()
        try:
            yield con
        finally:
            con.close()

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """All or nothing: a crash or error inside leaves the previous state."""
        with self.connection() as con:
            self.hook.begin(con)
            try:
                yield Transaction(self.hook, con)
            except BaseException:
                con.rollback()
                raise
            con.commit()
            self.hook.after_commit(con)

    def query(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        """Run a read query (placeholders: ``self.p``) and return a DataFrame. Never migrates."""
        import pandas as pd

        with self.connection() as con:
            cur = con.cursor()
            try:
                cur.execute(sql, list(params))
                columns = [d[0] for d in cur.description] if cur.description else []
                return pd.DataFrame.from_records(cur.fetchall(), columns=columns)
            finally:
                cur.close()

    def migrate(self) -> list[str]:
        """Apply pending migrations and (re)create the analyst views; returns what was applied."""
        from benchflow.warehouse.schema import migrate

        return migrate(self)

    def load(
        self,
        run: RunRecord,
        kind: ResultKind,
        rows: list[dict[str, Any]],
        validation: Validation | None = None,
        side_rows: Mapping[str, list[dict[str, Any]]] | None = None,
    ) -> int:
        """The one write of a run: its record, its rows (or, when validation failed, the rows in
        ``quarantine`` with their reasons), the validation's outcome and side tables, in one transaction.
        Returns the result rows loaded."""
        valid = validation is None or validation.success
        frame = kind.frame(rows) if valid else None
        run.rows_loaded = len(frame) if frame is not None else 0
        with self.transaction() as tx:
            self._put_run(tx, run)
            tx.delete_run(kind.table, run.dag_id, run.run_id)
            tx.delete_run("quarantine", run.dag_id, run.run_id, f" AND result_kind = {tx.p}", [kind.name])
            if frame is not None and len(frame):
                self.hook.bulk_insert(tx.con, kind.table, list(kind.columns), frame, [run.dag_id, run.run_id])
            if not valid:
                assert validation is not None
                self._quarantine(tx, run, kind, rows, validation)
            if validation is not None:
                self._put_validation(tx, run, validation)
            for side in kind.side_tables:
                tx.delete_run(side.table, run.dag_id, run.run_id)
                side_frame = _side_frame(side, (side_rows or {}).get(side.table) or [])
                if valid and len(side_frame):
                    self.hook.bulk_insert(tx.con, side.table, list(side.columns), side_frame, [run.dag_id, run.run_id])
        return run.rows_loaded

    def record_findings(self, dag_id: str, run_id: str, findings: list[Finding]) -> None:
        """Replace a run's regression findings and their count on ``runs``."""
        now = _now()
        p = self.p
        with self.transaction() as tx:
            tx.delete_run("regressions", dag_id, run_id)
            for f in findings:
                tx.insert(
                    "regressions",
                    [
                        dag_id,
                        run_id,
                        f.case_key,
                        f.metric,
                        f.value,
                        f.baseline_mean,
                        f.baseline_std,
                        f.baseline_runs,
                        f.relative_change,
                        f.z_score,
                        f.direction,
                        now,
                        f.ci_low,
                        f.ci_high,
                        f.p_value,
                        f.test,
                    ],
                )
            tx.execute(
                f"UPDATE runs SET regressions = {p} WHERE dag_id = {p} AND run_id = {p}",
                [len(findings), dag_id, run_id],
            )

    @staticmethod
    def _quarantine(
        tx: Transaction, run: RunRecord, kind: ResultKind, rows: list[dict[str, Any]], validation: Validation
    ) -> None:
        first = validation.failures[0] if validation.failures else "run failed validation"
        now = _now()
        tx.executemany(
            f"INSERT INTO quarantine VALUES ({', '.join([tx.p] * 7)})",
            [
                [
                    run.dag_id,
                    run.run_id,
                    kind.name,
                    n,
                    json.dumps(row, default=str),
                    "; ".join(validation.row_reasons.get(n, [])) or f"run failed validation: {first}",
                    now,
                ]
                for n, row in enumerate(rows)
            ],
        )

    @staticmethod
    def _put_validation(tx: Transaction, run: RunRecord, v: Validation) -> None:
        tx.delete_run("validations", run.dag_id, run.run_id, f" AND suite = {tx.p}", [v.suite])
        tx.insert(
            "validations",
            [
                run.dag_id,
                run.run_id,
                v.suite,
                v.success,
                v.evaluated,
                len(v.failures),
                v.rows_checked,
                json.dumps(v.failures),
                _now(),
            ],
        )

    @staticmethod
    def _put_run(tx: Transaction, run: RunRecord) -> None:
        tx.delete_run("runs", run.dag_id, run.run_id)
        model, count, driver = run.gpu()
        facts = run.host_facts
        versions = {k: facts[k] for k in ("python", "torch", "os") if k in facts}
        columns = (
            "dag_id, run_id, campaign, host, payload_sha256, spec_hash, status, started_at, ended_at, "
            "rows_loaded, host_facts, detail, logical_date, run_type, conf, gpu_model, gpu_count, gpu_driver, "
            "cuda, git_sha, versions"
        )
        values = [
            run.dag_id,
            run.run_id,
            run.campaign,
            run.host,
            run.payload_sha256,
            run.spec_hash,
            run.status,
            run.started_at,
            run.ended_at,
            run.rows_loaded,
            json.dumps(facts, sort_keys=True),
            run.detail,
            run.logical_date,
            run.run_type,
            json.dumps(run.conf, sort_keys=True, default=str),
            model,
            count,
            driver,
            facts.get("cuda") if facts.get("cuda") not in (None, "None") else "none",
            run.git_sha,
            json.dumps(versions, sort_keys=True),
        ]
        tx.execute(f"INSERT INTO runs ({columns}) VALUES ({', '.join([tx.p] * len(values))})", values)


def _side_frame(side: Any, rows: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame.from_records([{**side.defaults, **row} for row in rows], columns=list(side.columns))
    for column, kind in side.columns.items():
        if kind == "text":
            frame[column] = frame[column].astype("object")
    return frame


def _now() -> datetime:
    return datetime.now(UTC)
