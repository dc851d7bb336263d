-- v20: what a person decided after a night that regressed or drifted (a campaign with regressions.decide: the
-- DAG's human-in-the-loop task 'decide'): accept the new level as the baseline, bisect, or ignore, with the
-- reason, who answered and when (timed_out: nobody did, the spec's default was taken). An accepted night starts
-- the baseline again: later nights are judged against the nights from it on (and change points looked for there).

CREATE TABLE IF NOT EXISTS decisions (
    dag_id      TEXT NOT NULL,
    run_id      TEXT NOT NULL,            -- the night decided on
    campaign    TEXT NOT NULL,
    gpu_model   TEXT NOT NULL,
    night_at    TIMESTAMP NOT NULL,       -- that night's logical date (or start): the accepted baseline's first
    verdict     TEXT,                     -- the night's verdict, as the person saw it
    decision    TEXT NOT NULL,            -- 'accept', 'bisect' or 'ignore'
    reason      TEXT,
    decided_by  TEXT,
    decided_at  TIMESTAMP,
    timed_out   BOOLEAN NOT NULL,
    recorded_at TIMESTAMP NOT NULL,
    PRIMARY KEY (dag_id, run_id)
);
