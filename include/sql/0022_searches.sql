-- v22: every search over campaign runs in one pair of tables, whatever its strategy (a bisection, a config search,
-- a tile search): the search engine writes them at every step, beside a strategy's own tables (bisections,
-- config_searches), so one query lists every search and its keys.
-- * searches: one search run: its strategy, status (running | done | found | range | not_reproduced | none |
--   budget | failed | cancelled), the best key (NULL: none), the summary, the hosts found down, the whole answer.
-- * search_keys: every key the search measured (a commit, a config, a tile), ranked: its verdict, the figure the
--   strategy ranks by with its interval (open where censored: NULL), the values behind it and its probe runs.

CREATE TABLE searches (
    dag_id          TEXT NOT NULL,              -- the search DAG (bench_bisect, bench_config_search, bench_tile_search)
    run_id          TEXT NOT NULL,              -- its run
    strategy        TEXT NOT NULL,              -- bisect | config | tiles
    campaign        TEXT NOT NULL,
    campaign_dag_id TEXT NOT NULL,
    status          TEXT NOT NULL,
    best            TEXT,                       -- the answer's key: the first bad commit, the best config or tile
    summary         TEXT NOT NULL,
    rounds          INTEGER NOT NULL,
    probes          INTEGER NOT NULL,           -- probe runs made (reused measures not counted)
    hosts_down      TEXT,                       -- JSON: each host of the pool found down, with why
    result          TEXT NOT NULL,              -- the whole answer (JSON)
    started_at      TIMESTAMP WITH TIME ZONE NOT NULL,
    updated_at      TIMESTAMP WITH TIME ZONE NOT NULL,
    PRIMARY KEY (dag_id, run_id)
);

CREATE TABLE search_keys (
    dag_id       TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    key          TEXT NOT NULL,                 -- a commit sha, a config name, a tile
    rank         INTEGER NOT NULL,              -- 1 is the answer's (a bisection: oldest commit first)
    verdict      TEXT NOT NULL,
    n            INTEGER,                       -- values or load-search probes behind the figure
    value        DOUBLE PRECISION,              -- the figure the strategy ranks by (mean, load per GPU)
    low          DOUBLE PRECISION,              -- its interval; NULL where censored (open)
    high         DOUBLE PRECISION,
    probe_dag_id TEXT NOT NULL,
    probe_runs   TEXT NOT NULL,                 -- JSON: the campaign runs that measured it
    detail       TEXT,                          -- JSON: the strategy's own columns of it
    PRIMARY KEY (dag_id, run_id, key)
);
