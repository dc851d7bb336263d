"""The warehouse's backends, as Airflow ``DbApiHook``s: PostgreSQL (the provider's ``PostgresHook``) and a
DuckDB hook of the same shape. Each knows its placeholder, how to open a transaction and how to bulk-load a
DataFrame; nothing else in the project branches on the backend. A new backend is one hook class here, with its
``for_connection``, and its connection type in :data:`BACKENDS`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from copy import deepcopy
from pathlib import Path
from typing import Any, Protocol

from airflow.providers.common.sql.hooks.sql import DbApiHook
from airflow.providers.postgres.hooks.postgres import PostgresHook

from benchflow.warehouse import snapshot as snapshots
from benchflow.warehouse.readonly import RefusedStatement
from benchflow.warehouse.snapshot import READ_TIMEOUT_S

LOCK_WAIT_S = 300.0
LOCAL_PG = ("127.0.0.1", 5432, "postgres")  # the PostgreSQL server of a machine that runs it for Airflow (trust)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# Whether the session's role may write files or run programs on the server (what a read-only transaction allows)
_MIGHTY_ROLE = (
    "SELECT current_user, rolsuper OR pg_has_role(current_user, 'pg_write_server_files', 'MEMBER') "
    "OR pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER') FROM pg_roles WHERE rolname = current_user"
)


class SnapshotNotPublished(RuntimeError):
    """A DuckDB write was committed but readers cannot see it yet: its snapshot could not be written."""


def publish_snapshot(path: Path, snapshot: Path) -> None:
    """Copy ``path`` to a temporary file beside ``snapshot``, fsync it, rename it over ``snapshot`` and fsync the
    folder: readers see the old snapshot or the new one, never a part of one, also after a crash. On any error
    the temporary file is removed (as are those that processes no longer running left behind) and the old
    snapshot stays."""
    prefix = f".{snapshot.name}."
    for stale in snapshot.parent.glob(f"{prefix}*.partial"):
        pid = stale.name[len(prefix) : -len(".partial")]
        if pid.isdigit() and not _alive(int(pid)):
            stale.unlink(missing_ok=True)
    partial = snapshot.with_name(f"{prefix}{os.getpid()}.partial")
    try:
        with path.open("rb") as source, partial.open("wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(partial, snapshot)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    folder = os.open(snapshot.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WarehouseHook(Protocol):
    """What the warehouse needs of a backend: a ``DbApiHook`` (``run``, ``get_conn``, ``last_description``) that
    also knows its placeholder, how to open a transaction, a cursor inside it, what to do once it is committed,
    and how to bulk-load a DataFrame. ``read_only`` hooks refuse every write."""

    conn_type: str
    read_only: bool
    last_description: Any
    statement_timeout_s: float | None  # PostgreSQL: the session's statement_timeout (DuckDB reads a local file)

    @property
    def placeholder(self) -> str: ...

    def get_conn(self) -> Any: ...

    def run(self, sql: Any, autocommit: bool = ..., parameters: Any = ..., handler: Any = ...) -> Any: ...

    def begin(self, con: Any) -> None: ...

    def cursor(self, con: Any) -> Any: ...

    def after_commit(self, con: Any) -> None: ...

    def bulk_insert(self, con: Any, table: str, columns: list[str], frame: Any, key: list[Any]) -> None: ...

    def read_statement(
        self, sql: str, timeout_s: float = READ_TIMEOUT_S
    ) -> tuple[list[str], list[tuple[Any, ...]]]: ...


class DuckDBHook(DbApiHook):
    """A DuckDB file: ``path`` given, or the connection's ``host`` or extra ``path``.

    One process at a time may write a DuckDB file, and while any process has it open (even read-only) no
    other can write it. So readers never open it: every committed write publishes a snapshot next to it
    (``<name>.snapshot.duckdb``, checkpointed, copied, renamed into place while the writer still holds
    the file), and ``read_only`` hooks open that snapshot, with no access to files outside it (no
    ``COPY … TO``). An analyst's open notebook therefore never holds up a load, and a load never waits
    for readers. Writers that meet each other retry with backoff for up to ``lock_wait_s``.
    """

    conn_name_attr = "duckdb_conn_id"
    default_conn_name = "bench_warehouse"
    conn_type = "duckdb"
    hook_name = "DuckDB"
    _placeholder = "?"
    supports_autocommit = True

    def __init__(
        self,
        *args: Any,
        path: str | Path | None = None,
        read_only: bool = False,
        lock_wait_s: float = LOCK_WAIT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.path = Path(path) if path is not None else None
        self.read_only = read_only
        self.lock_wait_s = lock_wait_s
        self.statement_timeout_s: float | None = None

    def _run_command(self, cur: Any, sql_statement: str, parameters: Any) -> None:
        run_quietly(cur, sql_statement, parameters)

    @classmethod
    def for_connection(cls, conn: Any, read_only: bool) -> tuple[DuckDBHook, str]:
        """The hook of an Airflow connection of this type, and where it reads (the snapshot) or writes."""
        hook = cls(duckdb_conn_id=conn.conn_id, read_only=read_only, log_sql=False)
        hook._connection = conn
        return hook, str(hook.snapshot_path() if read_only else hook.database_path())

    @property
    def placeholder(self) -> str:
        return self._placeholder

    def database_path(self) -> Path:
        if self.path is None:
            extra = self.connection.extra_dejson
            located = extra.get("path") or self.connection.host
            if not located:
                raise ValueError(f"connection {self.get_conn_id()!r} names no DuckDB file (set 'host' or extra 'path')")
            self.path = Path(located)
        return self.path

    def snapshot_path(self) -> Path:
        return snapshots.snapshot_of(self.database_path())

    def snapshot_stale(self) -> bool:
        """Whether the warehouse file changed after its published snapshot was written (the last publish failed:
        what readers see is older than what was committed)."""
        path, snapshot = self.database_path(), self.snapshot_path()
        try:
            return path.stat().st_mtime > snapshot.stat().st_mtime + 1.0
        except OSError:
            return False

    def get_conn(self) -> Any:
        import duckdb

        if self.read_only:
            return snapshots.open_snapshot(self.snapshot_path())
        path = self.database_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_wait_s
        delay = 0.05
        while True:
            try:
                return duckdb.connect(str(path), read_only=self.read_only)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def set_autocommit(self, conn: Any, autocommit: bool) -> None:
        """A DuckDB connection commits each statement unless a transaction was begun: nothing to set."""

    def get_autocommit(self, conn: Any) -> bool:
        return True

    def begin(self, con: Any) -> None:
        con.begin()

    def cursor(self, con: Any) -> Any:
        """The connection itself: a DuckDB ``cursor()`` is a second connection, outside the transaction."""
        return con

    def after_commit(self, con: Any) -> None:
        """Publish what was committed for readers: checkpoint, then :func:`publish_snapshot`. A snapshot that
        cannot be written (a full disk) raises :class:`SnapshotNotPublished`, which says that the write is
        committed and what readers see; the previous snapshot stays whole and no partial file is left."""
        con.execute("CHECKPOINT")
        path, snapshot = self.database_path(), self.snapshot_path()
        try:
            publish_snapshot(path, snapshot)
        except OSError as exc:
            raise SnapshotNotPublished(
                f"the write is committed in {path}, but its snapshot for readers could not be published "
                f"({exc.strerror or exc}): readers (bench sql, the Benchmarks view) still see the previous "
                f"snapshot, {snapshot}. Free space there, then `bench migrate` publishes it."
            ) from exc

    def read_statement(self, sql: str, timeout_s: float = READ_TIMEOUT_S) -> tuple[list[str], list[tuple[Any, ...]]]:
        """One statement of an analyst (``bench sql``) on the read-only snapshot (:func:`.snapshot.read_statement`,
        which ``bench sql`` also calls without Airflow). (column names, rows)."""
        if not self.read_only:
            raise ValueError("an analyst's statement runs on the published snapshot: open the hook read_only")
        return snapshots.read_statement(self.get_conn, sql, timeout_s)

    def bulk_insert(self, con: Any, table: str, columns: list[str], frame: Any, key: list[Any]) -> None:
        """INSERT the frame's ``columns`` after the key ``(dag_id, run_id)``: DuckDB reads the frame in place."""
        cols = ", ".join(columns)
        con.register("staging_rows", frame)
        try:
            con.execute(f"INSERT INTO {table} (dag_id, run_id, {cols}) SELECT ?, ?, {cols} FROM staging_rows", key)
        finally:
            with contextlib.suppress(Exception):  # fails inside an aborted transaction; the error above counts
                con.unregister("staging_rows")


def run_quietly(cur: Any, sql: str, parameters: Any) -> None:
    """``DbApiHook._run_command`` without its ``Rows affected: N`` line at every statement of a load or a read (the
    warehouse says what it loaded in one line of its own) and without SQL lineage (no lineage backend here)."""
    if parameters:
        cur.execute(sql, tuple(parameters) if isinstance(parameters, list) else parameters)
    else:
        cur.execute(sql)


class WarehousePostgresHook(PostgresHook):
    """``PostgresHook`` plus the warehouse's extras: ``search_path`` (a schema, created by ``bench migrate``)
    becomes the session's search path, and ``read_only`` sessions refuse every write."""

    def __init__(self, *args: Any, read_only: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_only = read_only
        self.statement_timeout_s: float | None = None
        self._search_path: str | None = None
        self._base_options = self.options

    def _run_command(self, cur: Any, sql_statement: str, parameters: Any) -> None:
        run_quietly(cur, sql_statement, parameters)

    @classmethod
    def for_connection(cls, conn: Any, read_only: bool) -> tuple[WarehousePostgresHook, str]:
        """The hook of an Airflow connection of this type, and where it reads and writes."""
        hook = cls(postgres_conn_id=conn.conn_id, read_only=read_only, log_sql=False)
        hook.use(conn)
        where = f"postgres:{conn.host}:{conn.port or 5432}/{conn.schema}"
        return hook, where + (f" (schema {hook.search_path})" if hook.search_path else "")

    def use(self, connection: Any) -> None:
        """Take this connection (the extra ``search_path`` goes to the session, not to libpq)."""
        value = connection.extra_dejson.get("search_path")
        if value is not None and not _IDENT.match(str(value)):
            raise ValueError(f"connection {connection.conn_id!r}: extra search_path {value!r} is not a schema name")
        self._search_path = str(value) if value is not None else None
        connection = deepcopy(connection)
        connection.extra = json.dumps({k: v for k, v in connection.extra_dejson.items() if k != "search_path"})
        self._connection = connection

    @property
    def search_path(self) -> str | None:
        return self._search_path

    def get_conn(self) -> Any:
        if self._connection is None:
            self.use(self.connection)
        extra = self._connection.extra_dejson
        if self.statement_timeout_s and "connect_timeout" not in extra:  # a server that never answers: same bound
            self._connection.extra = json.dumps({**extra, "connect_timeout": max(2, int(self.statement_timeout_s))})
        schema = self._search_path
        options = [
            f"-c search_path={schema}" if schema else "",
            "-c default_transaction_read_only=on" if self.read_only else "",
            f"-c statement_timeout={max(1, int(self.statement_timeout_s * 1000))}" if self.statement_timeout_s else "",
        ]
        self.options = " ".join(o for o in [self._base_options or "", *options] if o) or None
        return super().get_conn()

    def begin(self, con: Any) -> None:
        """psycopg opens a transaction with the first statement."""

    def cursor(self, con: Any) -> Any:
        return con.cursor()

    def after_commit(self, con: Any) -> None:
        """Readers see a commit at once: nothing to publish."""

    def read_statement(self, sql: str, timeout_s: float = READ_TIMEOUT_S) -> tuple[list[str], list[tuple[Any, ...]]]:
        """One statement of an analyst (``bench sql``), inside a transaction this hook opens ``READ ONLY`` and
        always rolls back: a first query takes the snapshot (after which ``SET TRANSACTION READ WRITE`` and
        ``set_config('transaction_read_only', …)`` fail), then the statement goes alone through the extended
        protocol (``prepare``), which refuses a text of more than one statement, so nothing in it can end the
        transaction. A read-only transaction does not stop the server-side file functions (``lo_export``,
        ``COPY … TO PROGRAM``) of a superuser or of a member of ``pg_write_server_files`` /
        ``pg_execute_server_program``: such a role is refused. (column names, rows)."""
        import psycopg

        con = self.get_conn()
        try:
            con.autocommit = False
            con.read_only = True  # psycopg opens the transaction with BEGIN READ ONLY
            with con.cursor() as cur:
                cur.execute(_MIGHTY_ROLE)
                role, mighty = cur.fetchone()
                if mighty:
                    raise RefusedStatement(
                        f"the warehouse connection logs in as {role!r}, a superuser or a member of "
                        "pg_write_server_files / pg_execute_server_program, which can write on the database server "
                        "even from a read; give bench sql a reader role (SELECT grants only: docs/warehouse.md, "
                        "'Reading a PostgreSQL warehouse')"
                    )
                cur.execute("SELECT set_config('statement_timeout', %s, true)", [f"{int(timeout_s * 1000)}ms"])
                try:
                    cur.execute(sql, prepare=True)
                except psycopg.errors.QueryCanceled:
                    raise TimeoutError(f"the statement ran past {timeout_s:g} s and was cancelled") from None
                columns = [d[0] for d in cur.description or []]
                rows = cur.fetchall() if cur.description else []
            return columns, rows
        finally:
            with contextlib.suppress(Exception):
                con.rollback()
            con.close()

    def bulk_insert(self, con: Any, table: str, columns: list[str], frame: Any, key: list[Any]) -> None:
        """``COPY`` the frame into a temporary staging table, then INSERT it after the key columns.

        DuckDB writes the CSV about 5x faster than pandas does (bench/load_throughput.py).
        """
        import duckdb
        import numpy as np

        cols = ", ".join(columns)
        staging = f"staging_{table}"
        frame = frame[list(columns)].copy()
        for column in frame.columns:  # 1125.0 → 1125, so INTEGER columns take what NaN made a float
            values = frame[column]
            if values.dtype.kind == "f":
                known = values.dropna()
                # past ±2^63 no integer column could hold it: a float column's (a FLOP count of 1.2e20), kept
                whole = np.isfinite(known).all() and (known == np.round(known)).all()
                if whole and (known.abs() < 2.0**63).all():
                    frame[column] = values.astype("Int64")
        with tempfile.TemporaryDirectory() as tmp, con.cursor() as cur:
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
            cur.execute(f"INSERT INTO {table} (dag_id, run_id, {cols}) SELECT %s, %s, {cols} FROM {staging}", key)
            cur.execute(f"DROP TABLE {staging}")


# Connection type → the hook of that backend: adding a backend is one hook class above and one line here.
BACKENDS: dict[str, Any] = {
    "duckdb": DuckDBHook,
    "postgres": WarehousePostgresHook,
    "postgresql": WarehousePostgresHook,
}


def ensure_postgres_database(host: str, port: int, user: str, database: str, template: str | None = None) -> bool:
    """Create ``database`` on a PostgreSQL server when it is missing (``bench up``'s metadata database), as a copy
    of ``template`` when that database exists (an already migrated one); False when the server cannot be reached
    or refuses. Names are quoted as identifiers."""
    try:
        import psycopg2
        from psycopg2 import sql
    except ImportError:
        return False
    try:
        con = psycopg2.connect(host=host, port=port, user=user, dbname="postgres", connect_timeout=5)
    except psycopg2.Error:
        return False
    try:
        con.autocommit = True
        with con.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database])
            if cur.fetchone() is None:
                statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database))
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template or ""])
                try:  # the copy fails while another session reads the template: then an empty one
                    copy = template and cur.fetchone() is not None
                    cur.execute(
                        sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template)) if copy else statement
                    )
                except psycopg2.errors.ObjectInUse:
                    cur.execute(statement)
    except psycopg2.Error:
        return False
    finally:
        con.close()
    return True


def _admin(host: str, port: int, user: str) -> Any:
    import psycopg2

    con = psycopg2.connect(host=host, port=port, user=user, dbname="postgres", connect_timeout=10)
    con.autocommit = True
    return con


def create_postgres_database(name: str, template: str | None = None, server: tuple[str, int, str] = LOCAL_PG) -> None:
    """``CREATE DATABASE name [TEMPLATE template]`` on a PostgreSQL server (a test's or a stack's metadata DB; a
    template is an already migrated database, copied file by file). Names are quoted as identifiers."""
    from psycopg2 import sql

    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
    con = _admin(*server)
    try:
        with con.cursor() as cur:
            cur.execute(statement)
    finally:
        con.close()


def drop_postgres_database(name: str, server: tuple[str, int, str] = LOCAL_PG) -> None:
    """``DROP DATABASE IF EXISTS name WITH (FORCE)``: its sessions are ended first."""
    from psycopg2 import sql

    con = _admin(*server)
    try:
        with con.cursor() as cur:
            cur.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    finally:
        con.close()


def postgres_database_exists(name: str, server: tuple[str, int, str] = LOCAL_PG) -> bool:
    con = _admin(*server)
    try:
        with con.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
            return cur.fetchone() is not None
    finally:
        con.close()


def rename_postgres_database(name: str, new_name: str, server: tuple[str, int, str] = LOCAL_PG) -> None:
    """``ALTER DATABASE name RENAME TO new_name`` (a database built under a temporary name, published whole)."""
    from psycopg2 import sql

    con = _admin(*server)
    try:
        with con.cursor() as cur:
            cur.execute(
                sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(name), sql.Identifier(new_name))
            )
    finally:
        con.close()
