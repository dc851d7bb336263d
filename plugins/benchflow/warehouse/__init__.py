"""The results warehouse: a DuckDB file by default, or what the Airflow connection ``bench_warehouse`` names.

Every SQL statement of the project lives in this package: backends are ``DbApiHook``s behind one protocol
(:mod:`.hooks`); the schema is numbered migrations in ``include/sql/`` plus the analyst views, whose SQL is
derived from the result kinds' declarations (:mod:`.kindsql`, :mod:`.schema`), applied by ``bench migrate``;
every read that the UI, the analyses, the CLI and the pipeline make is a named function of :mod:`.queries`.
Reads never migrate. Every write for one run happens in one transaction that first deletes the run's rows, so
a rerun replaces and a crash mid-load leaves the previous state. A new backend is audited in this folder alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchflow.kinds import typed_frame
from benchflow.paths import var_dir
from benchflow.records import Finding, RunRecord, Validation, Verdict
from benchflow.warehouse.readonly import check
from benchflow.warehouse.schema import SINCE, migrate

if TYPE_CHECKING:
    import pandas as pd

    from benchflow.kinds import ResultKind, SideTable
    from benchflow.warehouse.hooks import WarehouseHook

CONN_ID = "bench_warehouse"


def default_path() -> Path:
    return var_dir() / "warehouse.duckdb"


def frame_of(columns: list[str], rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """An analyst statement's answer as a DataFrame; a column of decimals (PostgreSQL's numeric: the sum or average
    of integers) as numbers, not text."""
    from decimal import Decimal

    import pandas as pd

    frame = pd.DataFrame.from_records(rows, columns=columns)
    for i in range(len(frame.columns)):
        values = frame.iloc[:, i].dropna()
        if len(values) and frame.iloc[:, i].dtype == object and all(isinstance(v, Decimal) for v in values):
            frame.isetitem(i, frame.iloc[:, i].astype("float64"))
    return frame


class Transaction:
    """An open transaction on one connection; statements use the backend's placeholder ``p``."""

    def __init__(self, hook: WarehouseHook, con: Any):
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

    def __init__(self, hook: WarehouseHook, location: str):
        self.hook = hook
        self.location = location
        self.p: str = hook.placeholder

    @classmethod
    def from_airflow(cls, read_only: bool = False, statement_timeout_s: float | None = None) -> Warehouse:
        """The connection ``bench_warehouse`` (conn type ``postgres`` or ``duckdb``) if defined, else
        ``var/warehouse.duckdb``. ``statement_timeout_s`` bounds each statement on PostgreSQL (a lock held
        elsewhere, a slow query): the server cancels it."""
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = BaseHook.get_connection(CONN_ID)
        except AirflowNotFoundException:
            return cls.at(default_path(), read_only=read_only)
        warehouse = cls._from_connection(conn, read_only)
        warehouse.hook.statement_timeout_s = statement_timeout_s
        return warehouse

    @classmethod
    def _from_connection(cls, conn: Any, read_only: bool) -> Warehouse:
        from benchflow.warehouse.hooks import BACKENDS  # Airflow's DbApiHook: `bench sql` alone imports no Airflow

        backend = BACKENDS.get(conn.conn_type)
        if backend is None:
            known = ", ".join(repr(t) for t in sorted(BACKENDS))
            raise ValueError(f"connection {conn.conn_id!r} has type {conn.conn_type!r}; use one of {known}")
        hook, where = backend.for_connection(conn, read_only)
        return cls(hook, where)

    @classmethod
    def at(cls, path: Path | str, read_only: bool = False) -> Warehouse:
        from benchflow.warehouse.hooks import DuckDBHook  # Airflow's DbApiHook: `bench sql` alone imports no Airflow

        hook = DuckDBHook(path=path, read_only=read_only, log_sql=False)
        return cls(hook, str(hook.snapshot_path() if read_only else path))

    @classmethod
    def postgres(
        cls, uri: str, search_path: str | None = None, read_only: bool = False, statement_timeout_s: float | None = None
    ) -> Warehouse:
        from airflow.models.connection import Connection

        conn = Connection(conn_id=CONN_ID, uri=uri)
        if search_path:
            conn.set_extra(json.dumps({**conn.extra_dejson, "search_path": search_path}))
        warehouse = cls._from_connection(conn, read_only)
        warehouse.hook.statement_timeout_s = statement_timeout_s
        return warehouse

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
        """Run one read statement (placeholders: ``self.p``) through the hook's ``run``; a DataFrame. Never
        migrates. The named reads are in :mod:`benchflow.warehouse.queries`."""
        import pandas as pd
        from airflow.providers.common.sql.hooks.handlers import fetch_all_handler

        rows = self.hook.run(sql, parameters=list(params), handler=fetch_all_handler)
        description = self.hook.last_description or []
        return pd.DataFrame.from_records(rows or [], columns=[d[0] for d in description])

    def read(self, text: str, timeout_s: float | None = None) -> pd.DataFrame:
        """An analyst's statement (``bench sql``): exactly one of a reading kind (:mod:`.readonly`), run where it
        cannot write (:meth:`~.hooks.WarehouseHook.read_statement`); a DataFrame. Raises
        :class:`~.readonly.RefusedStatement` for any other text, :class:`TimeoutError` past ``timeout_s`` (five
        minutes by default)."""

        columns, rows = (
            self.hook.read_statement(check(text))
            if timeout_s is None
            else self.hook.read_statement(check(text), timeout_s)
        )
        return frame_of(columns, rows)

    def schema_version(self) -> int:
        """The newest migration applied here: 0 for a warehouse never migrated (no table yet, nothing loaded). What
        a reader checks instead of catching the error of a table that is not there."""
        found = self.query(
            "SELECT COUNT(*) AS n FROM information_schema.tables "
            "WHERE table_name = 'schema_migrations' AND table_schema = current_schema()"
        )
        if not int(found["n"].iloc[0]):
            return 0
        return int(self.query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations")["v"].iloc[0])

    def has(self, what: str) -> bool:
        """Whether this warehouse's schema holds ``what`` (a table or column of :data:`.schema.SINCE`): a page reads
        a table only where the migration that made it was applied, instead of catching the error of its absence."""

        return self.schema_version() >= SINCE[what]

    def migrate(self) -> list[str]:
        """Apply pending migrations and (re)create the analyst views; returns what was applied."""

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
        run.rows_ok = _ok_rows(frame, kind)
        with self.transaction() as tx:
            self._put_run(tx, run)
            tx.delete_run(kind.table, run.dag_id, run.run_id)
            tx.delete_run("quarantine", run.dag_id, run.run_id, f" AND result_kind = {tx.p}", [kind.name])
            if frame is not None and len(frame):
                self.hook.bulk_insert(tx.con, kind.table, list(kind.column_names), frame, [run.dag_id, run.run_id])
            if not valid:
                assert validation is not None
                self._quarantine(tx, run, kind, rows, validation)
            if validation is not None:
                self._put_validation(tx, run, validation)
            for side in kind.side_tables:
                tx.delete_run(side.table, run.dag_id, run.run_id)
                side_frame = _side_frame(side, (side_rows or {}).get(side.table) or [])
                if valid and len(side_frame):
                    self.hook.bulk_insert(
                        tx.con, side.table, [c.name for c in side.columns], side_frame, [run.dag_id, run.run_id]
                    )
        return run.rows_loaded

    def record_failed_run(self, run: RunRecord) -> bool:
        """The ``runs`` row of a run that failed before its results were loaded (no rows, ``run.status``
        ``failed``), unless the run already has one (its load wrote it: an invalid run keeps its quarantine).
        True when written."""
        with self.transaction() as tx:
            if tx.rows(f"SELECT 1 FROM runs WHERE dag_id = {tx.p} AND run_id = {tx.p}", [run.dag_id, run.run_id]):
                return False
            run.rows_loaded = 0
            self._put_run(tx, run)
        return True

    def record_findings(
        self, dag_id: str, run_id: str, findings: list[Finding], verdict: Verdict | None = None
    ) -> None:
        """Replace a run's regression findings and their count on ``runs``, and its verdict (by default: regressed
        when there are findings, else left as it was: nothing here says the run was judged fine)."""
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
            if verdict is None and findings:
                nights = max(f.baseline_runs for f in findings)
                verdict = Verdict("regressed", nights, findings=findings)
            if verdict is not None:
                tx.execute(
                    f"UPDATE runs SET verdict = {p}, verdict_detail = {p}, baseline_runs = {p} "
                    f"WHERE dag_id = {p} AND run_id = {p}",
                    [verdict.state, verdict.detail, verdict.baseline_runs, dag_id, run_id],
                )
                tx.delete_run("change_points", dag_id, run_id)
                for case_key, metric, point, _ in verdict.change_points:
                    tx.insert("change_points", [dag_id, run_id, case_key, metric, *_point_row(point)])

    def record_decision(self, run: dict[str, Any]) -> None:
        """Replace a night's decision (``decisions``' columns but ``recorded_at``, by name)."""
        columns = "dag_id run_id campaign gpu_model night_at verdict decision reason decided_by decided_at timed_out"
        with self.transaction() as tx:
            tx.delete_run("decisions", run["dag_id"], run["run_id"])
            tx.insert("decisions", [*(run[c] for c in columns.split()), _now()])

    def record_auto_bisections(
        self, dag_id: str, run_id: str, bisect_dag_id: str, rows: list[tuple[Any, str, bool]]
    ) -> None:
        """Replace a night's automatic bisection rows: (``benchflow.nightly.auto_bisect.Suspect``, the bisect
        run id it links to or '', whether this night started it)."""
        now = _now()
        with self.transaction() as tx:
            tx.delete_run("auto_bisections", dag_id, run_id)
            for suspect, bisect_run_id, started in rows:
                key = [dag_id, run_id, suspect.case_key, suspect.metric, suspect.reason, suspect.change]
                link = [suspect.good, suspect.bad, bisect_dag_id, bisect_run_id, started, now]
                tx.insert("auto_bisections", [*key, *link])

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
            "cuda, git_sha, versions, payload_commit, payload_ref, rows_ok, "
            "spec_bundle, spec_commit"
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
            run.payload_commit,
            run.payload_ref,
            run.rows_ok,
            run.spec_bundle,
            run.spec_commit,
        ]
        tx.execute(f"INSERT INTO runs ({columns}) VALUES ({', '.join([tx.p] * len(values))})", values)


def _ok_rows(frame: pd.DataFrame | None, kind: ResultKind) -> int:
    """Rows judged ok (a kind without a validity column counts every row; an unjudged row counts as ok)."""
    if frame is None or not len(frame):
        return 0
    if not kind.validity or kind.validity not in frame.columns:
        return len(frame)
    column = frame[kind.validity]
    return int((column.isna() | (column == "ok")).sum())


def _side_frame(side: SideTable, rows: list[dict[str, Any]]) -> pd.DataFrame:
    prepared = [side.prepare(row) for row in rows] if side.prepare else rows
    return typed_frame([{**side.defaults, **row} for row in prepared], side.columns)


def _now() -> datetime:
    return datetime.now(UTC)


__all__ = ["CONN_ID", "Finding", "RunRecord", "Transaction", "Validation", "Verdict", "Warehouse", "default_path"]


def _point_row(point: Any) -> list[Any]:
    """A change point (benchflow.nightly.changepoints.ChangePoint) as ``change_points`` stores it, after the key."""
    return [
        point.night,
        point.run_id,
        point.good_commit,
        point.bad_commit,
        point.before,
        point.after,
        point.ratio,
        point.ratio_low,
        point.ratio_high,
        point.p_value,
        point.worse,
    ]
