-- v3: metrics read by the spec-configured generic parser, one row per match, in output order.

CREATE TABLE IF NOT EXISTS generic_results (
    dag_id   TEXT NOT NULL,
    run_id   TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    metric   TEXT NOT NULL,
    value    DOUBLE PRECISION NOT NULL,
    unit     TEXT NOT NULL DEFAULT '',
    line     INTEGER NOT NULL,
    PRIMARY KEY (dag_id, run_id, seq)
);
