-- v19: bisections a night's check started by itself (a campaign with regressions.bisect and a payload from git):
-- one row per finding or change point that asked for one, with the commit range it named (good: the last commit
-- measured at the old level, bad: the first at the new one) and the bench_bisect run it links to. Each commit
-- range gets one bisection, whichever night saw it first: 'started' is false on the rows of later nights (and on
-- a night's ranges past regressions.bisect.per_night, whose bisect_run_id is then empty).

CREATE TABLE IF NOT EXISTS auto_bisections (
    dag_id          TEXT NOT NULL,
    run_id          TEXT NOT NULL,        -- the night whose check found it
    case_key        TEXT NOT NULL,
    metric          TEXT NOT NULL,
    reason          TEXT NOT NULL,        -- 'regression' or 'change point at <night>'
    relative_change DOUBLE PRECISION,     -- in the metric's worse direction, e.g. 0.2 = 20 % worse
    good_commit     TEXT NOT NULL,
    bad_commit      TEXT NOT NULL,
    bisect_dag_id   TEXT NOT NULL,
    bisect_run_id   TEXT NOT NULL,        -- '' when the night's budget left this range out
    started         BOOLEAN NOT NULL,     -- this night triggered it (false: an earlier night did, or none)
    recorded_at     TIMESTAMP NOT NULL,
    PRIMARY KEY (dag_id, run_id, case_key, metric, reason)
);
