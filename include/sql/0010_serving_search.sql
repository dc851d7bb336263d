-- A serving campaign's load search (benchmark.search): per run and config, the highest load that met the SLO and
-- the lowest that did not, how the search stopped and what it spent; each probe is also a row of serving_results.
-- Loaded from the sweep driver's search.jsonl; the SLO and the probes' trail (loads, verdicts, the bounds of
-- each percentile) as JSON text.

CREATE TABLE IF NOT EXISTS serving_search (
    dag_id             TEXT NOT NULL,
    run_id             TEXT NOT NULL,
    config             TEXT NOT NULL,
    over               TEXT NOT NULL,              -- concurrency
    range_low          DOUBLE PRECISION,
    range_high         DOUBLE PRECISION,
    slo                TEXT NOT NULL,              -- JSON: {"p99_ttft_ms": 2000, ...}
    confidence         DOUBLE PRECISION,
    precision          DOUBLE PRECISION,
    prompts_per_probe  INTEGER,
    repeats            INTEGER,
    budget_probes      INTEGER,
    budget_seconds     DOUBLE PRECISION,
    reason             TEXT NOT NULL,              -- converged | budget | range
    pass_load          DOUBLE PRECISION,           -- the answer; NULL when no load passed
    fail_load          DOUBLE PRECISION,           -- NULL when no load failed
    fail_verdict       TEXT,                       -- fail | undecided
    probes             INTEGER,
    loads              INTEGER,
    seconds            DOUBLE PRECISION,
    goodput_rps        DOUBLE PRECISION,           -- requests/s meeting every SLO at the answer
    trail              TEXT NOT NULL,              -- JSON: every probe with its verdict and bounds
    PRIMARY KEY (dag_id, run_id, config)
);
