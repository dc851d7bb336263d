-- v16: config searches (the config search DAG, bench_config_search): which config of a campaign's config space
-- holds the most load per GPU within the SLO.
-- * config_searches: one search run: its status, the best config, the summary and the whole answer (JSON).
-- * config_search_configs: every config of the space, ranked: its verdict, the load per GPU as an interval, the
--   figures at its pass load (for the Pareto front and the cost per token), and the probe runs that measured it;
--   what a later search reuses (same config hash, payload and GPU model, same probe settings, valid rows).

CREATE TABLE config_searches (
    dag_id        TEXT NOT NULL,                -- the config search DAG
    run_id        TEXT NOT NULL,                -- its run
    campaign      TEXT NOT NULL,
    campaign_dag_id TEXT NOT NULL,
    status        TEXT NOT NULL,                -- running | done | budget | failed
    best          TEXT,                         -- the best config (NULL: none measured)
    configs       INTEGER NOT NULL,             -- configs of the space (kept by its constraints)
    excluded      INTEGER NOT NULL,             -- combinations its constraints excluded
    rounds        INTEGER NOT NULL,
    probes        INTEGER NOT NULL,             -- probe runs of single configs (reused ones not counted)
    search_probes INTEGER NOT NULL,             -- load-search probes those runs made
    prompts       INTEGER NOT NULL,             -- prompts they sent
    grid_probes   INTEGER,                      -- the most the full grid at the spec's settings would make
    grid_prompts  INTEGER,
    reused        INTEGER NOT NULL,
    summary       TEXT NOT NULL,
    winner_yaml   TEXT,                         -- the best config as a config block for a nightly spec
    result        TEXT NOT NULL,                -- the whole answer (JSON): ranking, Pareto front, levels, notes
    started_at    TIMESTAMP WITH TIME ZONE NOT NULL,
    updated_at    TIMESTAMP WITH TIME ZONE NOT NULL,
    PRIMARY KEY (dag_id, run_id)
);

CREATE TABLE config_search_configs (
    dag_id        TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    config        TEXT NOT NULL,
    rank          INTEGER NOT NULL,             -- 1 is the best
    verdict       TEXT NOT NULL,                -- best | not distinguishable from best | worse | failed | not measured
    config_hash   TEXT NOT NULL,                -- sha256 of the config and the benchmark section
    dimensions    TEXT NOT NULL,                -- JSON: the space's values that made it
    gpus          INTEGER NOT NULL,
    load_per_gpu_low  DOUBLE PRECISION,         -- the most load it holds within the SLO, per GPU: an interval
    load_per_gpu_high DOUBLE PRECISION,
    pass_load     DOUBLE PRECISION,             -- its finest measure's bracket
    fail_load     DOUBLE PRECISION,
    level         INTEGER,                      -- of that measure (0: the cheapest probe settings)
    settings      TEXT,                         -- JSON: prompts_per_probe, precision, repeats of that measure
    probes        INTEGER NOT NULL,             -- load-search probes spent on it
    prompts       INTEGER NOT NULL,
    tokens_per_s_per_gpu  DOUBLE PRECISION,     -- output tokens/s per GPU at its pass load
    tokens_per_s_per_user DOUBLE PRECISION,     -- per-user speed there: 1000 / mean TPOT (ms)
    j_per_token   DOUBLE PRECISION,
    cost_per_mtok DOUBLE PRECISION,             -- GPU-hours and energy at the spec's prices, per million tokens
    pareto        BOOLEAN NOT NULL,             -- on the front of throughput per GPU against per-user speed
    bottleneck    TEXT,                         -- the bottleneck verdict at its pass load
    validity      TEXT,                         -- ok when every row of that measure was
    error         TEXT,                         -- why a failed config has no answer
    probe_dag_id  TEXT NOT NULL,
    probe_runs    TEXT NOT NULL,                -- JSON list of the campaign runs that measured it
    payload       TEXT,                         -- the payload commit (or folder hash) and GPU model of its measure
    gpu_model     TEXT,
    reused_from   TEXT,                         -- the earlier search whose measure was reused
    PRIMARY KEY (dag_id, run_id, config)
);
