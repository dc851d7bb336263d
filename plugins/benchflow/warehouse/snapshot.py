"""The published DuckDB snapshot, as every reader opens it: read-only, with no access to files outside it, and an
analyst's one statement on it (``bench sql``). DuckDB alone, no Airflow: ``bench sql`` on the default warehouse
reads it without importing Airflow (:func:`benchtools.airflow_env.default_warehouse_only` says when it may)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchflow.warehouse.readonly import RefusedStatement

READ_TIMEOUT_S = 300.0  # an analyst's statement (bench sql) is cancelled past it (bench sql --timeout)


def snapshot_of(path: Path) -> Path:
    """``warehouse.duckdb`` → ``warehouse.snapshot.duckdb``: the copy each committed write publishes for readers."""
    return path.with_name(f"{path.stem}.snapshot{path.suffix}")


def open_snapshot(snapshot: Path) -> Any:
    import duckdb

    if not snapshot.exists():
        raise FileNotFoundError(f"no published warehouse at {snapshot}: run `bench migrate` (or a campaign)")
    return duckdb.connect(str(snapshot), read_only=True, config={"enable_external_access": False})


def read_statement(
    connect: Callable[[], Any], sql: str, timeout_s: float = READ_TIMEOUT_S
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """One statement of an analyst, on the snapshot ``connect()`` opens once the statement is accepted (and closes
    after): DuckDB's own parser must find exactly one ``SELECT`` (``FROM``, ``SHOW``, ``DESCRIBE``, ``SUMMARIZE``
    and ``VALUES`` parse as one) or ``EXPLAIN``. (column names, rows); TimeoutError past ``timeout_s`` (DuckDB has
    no statement timeout of its own)."""
    import duckdb

    kinds = [s.type for s in duckdb.extract_statements(sql)]
    if kinds not in ([duckdb.StatementType.SELECT], [duckdb.StatementType.EXPLAIN]):
        names = ", ".join(k.name for k in kinds) or "none"
        raise RefusedStatement(f"bench sql runs one SELECT or EXPLAIN; DuckDB reads this text as: {names}")
    con = connect()
    try:
        timer = threading.Timer(timeout_s, con.interrupt)
        timer.daemon = True
        timer.start()
        try:
            cur = con.execute(sql)
            return [d[0] for d in cur.description or []], cur.fetchall()
        except duckdb.InterruptException:
            raise TimeoutError(f"the statement ran past {timeout_s:g} s and was cancelled") from None
        finally:
            timer.cancel()
    finally:
        con.close()
