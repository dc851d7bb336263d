-- v5: per-request raw data of serving sweeps, when the client saves it (the local load generator does).

CREATE TABLE IF NOT EXISTS serving_requests (
    dag_id         TEXT NOT NULL,
    run_id         TEXT NOT NULL,
    config         TEXT NOT NULL,
    concurrency    INTEGER NOT NULL,
    seq            INTEGER NOT NULL,
    ok             BOOLEAN NOT NULL,
    input_len      INTEGER,
    output_tokens  INTEGER,
    ttft_ms        DOUBLE PRECISION,
    e2e_ms         DOUBLE PRECISION,
    mean_itl_ms    DOUBLE PRECISION,
    error          TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (dag_id, run_id, config, concurrency, seq)
);
