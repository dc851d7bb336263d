-- v18: change points of each case's nightly series (benchflow.analysis.changepoints, E-divisive means by Apache
-- Otava), as the regression check of a run found them over the valid scheduled nights up to that run: the night
-- and run the new level starts at, the payload commits of the last night before and the first at it (a
-- bisection's good and bad), the segments' means, their ratio (after / before) with its 95 % interval (Welch's t
-- on the logs of the nights) and the split's p-value. A run's verdict is 'suspected drift' when one in the worse
-- direction is among its recent nights and its own check found nothing; runs.verdict_detail says since when.

CREATE TABLE IF NOT EXISTS change_points (
    dag_id        TEXT NOT NULL,
    run_id        TEXT NOT NULL,          -- the run whose check found it
    case_key      TEXT NOT NULL,
    metric        TEXT NOT NULL,
    night         TEXT NOT NULL,          -- the first night at the new level
    at_run_id     TEXT NOT NULL,          -- its run
    good_commit   TEXT,
    bad_commit    TEXT,
    before_mean   DOUBLE PRECISION,
    after_mean    DOUBLE PRECISION,
    ratio         DOUBLE PRECISION,
    ratio_low     DOUBLE PRECISION,
    ratio_high    DOUBLE PRECISION,
    p_value       DOUBLE PRECISION,
    worse         BOOLEAN NOT NULL,
    PRIMARY KEY (dag_id, run_id, case_key, metric, night)
);
