"""The warehouse schema: numbered migrations in ``include/sql/NNNN_*.sql`` (each applied once, in order,
recorded in ``schema_migrations``) and the analyst views: ``include/sql/views.sql`` plus one wide view per
result kind and ``metric_history``, made from the kinds. Views are rebuilt only when their text changes.

``bench migrate`` applies it (the compose init service and ``make demo`` call it); a load applies what is
pending before it writes; reads never migrate.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from benchflow import kinds
from benchflow.paths import SQL_DIR
from benchflow.warehouse import kindsql

if TYPE_CHECKING:
    from benchflow.warehouse import Warehouse

CREATE_VIEW = re.compile(r"^CREATE\s+VIEW\s+(\w+)", re.IGNORECASE)


def statements(script: str) -> list[str]:
    """A SQL file's statements, comments removed (the files hold no ';' or '--' inside literals)."""
    body = "\n".join(line.split("--", 1)[0] for line in script.splitlines())
    return [s.strip() for s in body.split(";") if s.strip()]


def view_statements() -> tuple[list[str], list[str]]:
    """(drops, creates) for every analyst view, dependents first in the drops.

    Each kind adds its wide view and its trend metrics; ``metric_samples`` has one row per repeat of a
    case and metric (warm-ups left out) with the row's validity, ``case_summary`` the mean, median, standard
    deviation and 95 % Student-t interval over a run's ``ok`` repeats (noisy, throttled or contended rows are
    stored but never summarised, so never a baseline), and ``metric_history`` each run's mean, which the
    regression check reads as the nightly series.
    """
    creates = statements((SQL_DIR / "views.sql").read_text())
    base_views = [m[1] for s in creates if (m := CREATE_VIEW.match(s))]  # views.sql's own, in its order
    creates += [kindsql.wide_view(kind) for kind in kinds.all_kinds()]
    samples = [kindsql.samples_select(kind, t.column) for kind in kinds.all_kinds() for t in kind.trend]
    samples += [
        kindsql.side_samples_select(kind, side, t.column)
        for kind in kinds.all_kinds()
        for side in kind.side_tables
        for t in side.trend
    ]
    group = "campaign, dag_id, run_id, night, host, gpu_model, run_type, config, point, case_key, metric"
    creates += [
        "CREATE VIEW metric_samples AS " + " UNION ALL ".join(samples),
        # the interval as benchflow.analysis.stats.summarize takes it: on the logs for positive values, else linear
        f"CREATE VIEW case_summary AS SELECT {', '.join('g.' + c for c in group.split(', '))}, "
        "g.n, g.mean, g.median, g.std, "
        "CASE WHEN g.low > 0 THEN g.mean / EXP(t.t975 * g.std_log / SQRT(g.n)) "
        "ELSE g.mean - t.t975 * g.std / SQRT(g.n) END AS ci_low, "
        "CASE WHEN g.low > 0 THEN g.mean * EXP(t.t975 * g.std_log / SQRT(g.n)) "
        "ELSE g.mean + t.t975 * g.std / SQRT(g.n) END AS ci_high "
        f"FROM (SELECT {group}, COUNT(*) AS n, AVG(value) AS mean, "
        f"percentile_cont(0.5) WITHIN GROUP (ORDER BY value) AS median, STDDEV_SAMP(value) AS std, "
        "MIN(value) AS low, STDDEV_SAMP(LN(CASE WHEN value > 0 THEN value END)) AS std_log "
        f"FROM metric_samples WHERE validity = 'ok' GROUP BY {group}) g "
        "LEFT JOIN student_t t ON t.df = CASE WHEN g.n - 1 > 200 THEN 200 ELSE g.n - 1 END",
        "CREATE VIEW metric_history AS SELECT campaign, dag_id, run_id, night, host, gpu_model, run_type, case_key, "
        "metric, mean AS value, n FROM case_summary",
    ]
    views = [
        "metric_history",
        "case_summary",
        "metric_samples",
        *(k.wide_view for k in kinds.all_kinds()),
        *reversed(base_views),
    ]
    return [f"DROP VIEW IF EXISTS {name}" for name in views], creates


# The migration that made each table (or column) a reader may find missing in an older warehouse.
SINCE = {
    "payload_commit": 13,
    "bisections": 13,
    "config_searches": 16,
    "auto_bisections": 19,
    "decisions": 20,
    "searches": 22,
}


def migrate(warehouse: Warehouse) -> list[str]:
    applied: list[str] = []
    with warehouse.transaction() as tx:
        schema = getattr(warehouse.hook, "search_path", None)
        if schema:
            tx.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        tx.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMP WITH TIME ZONE NOT NULL)"
        )
        tx.execute("CREATE TABLE IF NOT EXISTS schema_state (name TEXT PRIMARY KEY, sha256 TEXT NOT NULL)")
        done = {row[0] for row in tx.rows("SELECT version FROM schema_migrations")}
        pending = [s for s in sorted(SQL_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")) if int(s.name[:4]) not in done]
        drops, creates = view_statements()
        if pending:  # a migration may rebuild a table the views read: they go first and come back after
            for statement in drops:
                tx.execute(statement)
        for script in pending:
            version = int(script.name[:4])
            for statement in statements(script.read_text()):
                tx.execute(statement)
            tx.insert("schema_migrations", [version, script.name, datetime.now(UTC)])
            applied.append(script.name)
        digest = hashlib.sha256("\n".join(creates).encode()).hexdigest()
        current = tx.rows(f"SELECT sha256 FROM schema_state WHERE name = {tx.p}", ["views"])
        if applied or not current or current[0][0] != digest:
            for statement in drops + creates:
                tx.execute(statement)
            tx.execute(f"DELETE FROM schema_state WHERE name = {tx.p}", ["views"])
            tx.insert("schema_state", ["views", digest])
            applied.append("views")
    return applied
