-- Warehouse schema v1. Dialect-neutral SQL (DuckDB and PostgreSQL).
-- Key of every result row: (dag_id, run_id, case). A reload of a run replaces its rows.

CREATE TABLE IF NOT EXISTS runs (
    dag_id          TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    campaign        TEXT NOT NULL,
    host            TEXT NOT NULL,
    payload_sha256  TEXT,
    spec_hash       TEXT NOT NULL,
    status          TEXT NOT NULL,       -- ok | incomplete | failed | invalid
    started_at      TIMESTAMP WITH TIME ZONE,
    ended_at        TIMESTAMP WITH TIME ZONE,
    rows_loaded     INTEGER NOT NULL DEFAULT 0,
    host_facts      TEXT,                -- JSON object from preflight
    detail          TEXT,                -- why a run is not ok
    PRIMARY KEY (dag_id, run_id)
);

CREATE TABLE IF NOT EXISTS kernel_results (
    dag_id        TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    m             INTEGER NOT NULL,
    ms_per_call   DOUBLE PRECISION NOT NULL,
    tok_per_s     DOUBLE PRECISION NOT NULL,
    us_per_token  DOUBLE PRECISION NOT NULL,
    note          TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (dag_id, run_id, m)
);

CREATE TABLE IF NOT EXISTS quarantine (
    dag_id          TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    result_kind     TEXT NOT NULL,
    row_number      INTEGER NOT NULL,
    row_json        TEXT NOT NULL,
    reason          TEXT NOT NULL,
    quarantined_at  TIMESTAMP WITH TIME ZONE NOT NULL,
    PRIMARY KEY (dag_id, run_id, result_kind, row_number)
);
