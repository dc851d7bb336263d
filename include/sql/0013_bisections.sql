-- v13: bisection over payload commits.
-- * runs.payload_commit: the git commit a run's payload was shipped from (NULL for a folder payload), and
--   runs.payload_ref, the ref it was asked for; a bisection reuses earlier runs of the same commit.
-- * kernel_results: a case may be measured several times in one run (an M listed n times is n repeats, the
--   way a bisection probe measures its case), so the key gains `repeat` (rows of earlier runs are repeat 1).
-- * bisections and bisection_probes: one bisect DAG run and every commit it measured or reused.

ALTER TABLE runs ADD COLUMN payload_commit TEXT;
ALTER TABLE runs ADD COLUMN payload_ref TEXT;

CREATE TABLE kernel_results_v12 AS SELECT * FROM kernel_results;
DROP TABLE kernel_results;
CREATE TABLE kernel_results (
    dag_id                TEXT NOT NULL,
    run_id                TEXT NOT NULL,
    m                     INTEGER NOT NULL,
    repeat                INTEGER NOT NULL DEFAULT 1,
    ms_per_call           DOUBLE PRECISION NOT NULL,
    tok_per_s             DOUBLE PRECISION NOT NULL,
    us_per_token          DOUBLE PRECISION NOT NULL,
    note                  TEXT NOT NULL DEFAULT '',
    p10_ms                DOUBLE PRECISION,
    p90_ms                DOUBLE PRECISION,
    kernel_ms             DOUBLE PRECISION,
    experts               INTEGER,
    bytes_read            DOUBLE PRECISION,
    gbps                  DOUBLE PRECISION,
    tflops                DOUBLE PRECISION,
    roofline_ms           DOUBLE PRECISION,
    pct_roofline          DOUBLE PRECISION,
    pct_copy_bw           DOUBLE PRECISION,
    bound                 TEXT,
    spread_ratio          DOUBLE PRECISION,
    energy_window         TEXT,
    energy_s              DOUBLE PRECISION,
    energy_calls          BIGINT,
    energy_samples        BIGINT,
    energy_j              DOUBLE PRECISION,
    energy_method         TEXT,
    energy_coverage       DOUBLE PRECISION,
    j_per_call            DOUBLE PRECISION,
    host_steal_pct        DOUBLE PRECISION,
    host_busy_pct         DOUBLE PRECISION,
    host_others_busy_pct  DOUBLE PRECISION,
    host_wait_share       DOUBLE PRECISION,
    host_load1            DOUBLE PRECISION,
    host_online_cpus      BIGINT,
    host_runnable_max     BIGINT,
    throttle_reasons      TEXT,
    validity              TEXT,
    validity_reason       TEXT,
    validity_unjudged     TEXT,
    PRIMARY KEY (dag_id, run_id, m, repeat)
);
INSERT INTO kernel_results (dag_id, run_id, m, ms_per_call, tok_per_s, us_per_token, note, p10_ms, p90_ms, kernel_ms, experts, bytes_read, gbps, tflops, roofline_ms, pct_roofline, pct_copy_bw, bound, spread_ratio, energy_window, energy_s, energy_calls, energy_samples, energy_j, energy_method, energy_coverage, j_per_call, host_steal_pct, host_busy_pct, host_others_busy_pct, host_wait_share, host_load1, host_online_cpus, host_runnable_max, throttle_reasons, validity, validity_reason, validity_unjudged) SELECT dag_id, run_id, m, ms_per_call, tok_per_s, us_per_token, note, p10_ms, p90_ms, kernel_ms, experts, bytes_read, gbps, tflops, roofline_ms, pct_roofline, pct_copy_bw, bound, spread_ratio, energy_window, energy_s, energy_calls, energy_samples, energy_j, energy_method, energy_coverage, j_per_call, host_steal_pct, host_busy_pct, host_others_busy_pct, host_wait_share, host_load1, host_online_cpus, host_runnable_max, throttle_reasons, validity, validity_reason, validity_unjudged FROM kernel_results_v12;
DROP TABLE kernel_results_v12;

CREATE TABLE bisections (
    dag_id        TEXT NOT NULL,                -- the bisect DAG
    run_id        TEXT NOT NULL,                -- its run
    campaign      TEXT NOT NULL,
    case_key      TEXT NOT NULL,
    metric        TEXT NOT NULL,
    good          TEXT NOT NULL,                -- full commit shas
    bad           TEXT NOT NULL,
    status        TEXT NOT NULL,                -- running | not_reproduced | found | range | failed
    first_bad     TEXT,
    parent        TEXT,
    ratio         DOUBLE PRECISION,             -- first bad / parent (or bad / good when not found)
    ratio_low     DOUBLE PRECISION,
    ratio_high    DOUBLE PRECISION,
    range_good    TEXT,                         -- the narrowest range: last good and first bad known
    range_bad     TEXT,
    suspects      INTEGER,
    probes        INTEGER NOT NULL,             -- probe runs spent (confirm's included)
    reused        INTEGER NOT NULL,             -- commits measured by earlier runs, used without a probe
    rounds        INTEGER NOT NULL,
    summary       TEXT NOT NULL,
    result        TEXT NOT NULL,                -- the whole result (JSON): confirm's evidence, chain, notes
    started_at    TIMESTAMP WITH TIME ZONE NOT NULL,
    updated_at    TIMESTAMP WITH TIME ZONE NOT NULL,
    PRIMARY KEY (dag_id, run_id)
);

CREATE TABLE bisection_probes (
    dag_id        TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    sha           TEXT NOT NULL,
    position      INTEGER NOT NULL,             -- 0 is good, the last is bad
    verdict       TEXT NOT NULL,                -- same_as_good | same_as_bad | unknown
    n             INTEGER NOT NULL,             -- values behind the verdict
    ratio         DOUBLE PRECISION,             -- probe / good, with its 95 % interval
    ratio_low     DOUBLE PRECISION,
    ratio_high    DOUBLE PRECISION,
    ratio_bad     DOUBLE PRECISION,             -- probe / bad
    ratio_bad_low DOUBLE PRECISION,
    ratio_bad_high DOUBLE PRECISION,
    test          TEXT,
    reason        TEXT,
    rounds        TEXT,                         -- JSON list of the rounds that probed it
    probe_dag_id  TEXT,                         -- the campaign runs that measured it (JSON list of run ids)
    probe_runs    TEXT,
    reused_from   TEXT,                         -- the earlier run whose values were reused
    PRIMARY KEY (dag_id, run_id, sha)
);
