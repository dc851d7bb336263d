"""What ``bench sql`` accepts: exactly one statement of a reading kind, checked before it reaches a backend.

The text is parsed with ``sqlparse`` (the SQL parser Airflow itself depends on, pinned in ``constraints.txt``):
it must hold one statement (comments and a trailing ``;`` aside) that starts with ``SELECT``, ``WITH``,
``VALUES``, ``TABLE``, ``EXPLAIN``, ``SHOW`` or DuckDB's ``FROM``, ``DESCRIBE``, ``SUMMARIZE``, and that names no
writing keyword anywhere (``INSERT``/``UPDATE``/``DELETE``/``MERGE`` in a CTE, ``SELECT … INTO``, ``FOR UPDATE``,
DDL). This check is the first of three: each backend then runs the statement where it cannot write (DuckDB: the
read-only snapshot, no file access, its own parser counting one ``SELECT`` or ``EXPLAIN``; PostgreSQL: a
``READ ONLY`` transaction the tool opens and rolls back, the statement sent alone through the extended protocol,
which refuses a second one). See :meth:`benchflow.warehouse.Warehouse.read`.
"""

from __future__ import annotations

READS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "EXPLAIN", "SHOW", "FROM", "DESCRIBE", "SUMMARIZE"})
WRITES = frozenset(
    {"INSERT", "UPDATE", "DELETE", "MERGE", "UPSERT", "REPLACE", "INTO", "COPY", "TRUNCATE", "CALL", "COMMIT"}
)


class RefusedStatement(ValueError):
    """A text ``bench sql`` will not run: why, in one line."""


def check(text: str) -> str:
    """The one reading statement of ``text`` (without a trailing ``;``); :class:`RefusedStatement` otherwise."""
    import sqlparse
    from sqlparse import tokens as T

    statements = [s for s in sqlparse.parse(text) if s.token_first(skip_cm=True, skip_ws=True) is not None]
    if len(statements) != 1:
        raise RefusedStatement(
            f"bench sql runs exactly one statement; this text has {len(statements)}" if statements else "no statement"
        )
    statement = statements[0]
    keywords = [t for t in statement.flatten() if t.ttype in T.Keyword]
    first = keywords[0].normalized.upper() if keywords else ""
    if first not in READS:
        raise RefusedStatement(
            f"bench sql runs reads only (SELECT, WITH, VALUES, TABLE, EXPLAIN, SHOW, DESCRIBE); not {first or 'this'}"
        )
    for token in keywords:
        word = token.normalized.upper()
        if word in WRITES or token.ttype in T.Keyword.DDL:
            raise RefusedStatement(f"bench sql runs reads only; this statement has {word}")
    return str(statement).strip().rstrip(";").strip()
