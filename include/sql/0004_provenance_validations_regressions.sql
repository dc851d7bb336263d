-- v4: provenance on runs, every validation's outcome, and regression findings.

ALTER TABLE runs ADD COLUMN logical_date TIMESTAMP WITH TIME ZONE;
ALTER TABLE runs ADD COLUMN run_type TEXT;            -- scheduled | manual | asset_triggered | backfill
ALTER TABLE runs ADD COLUMN conf TEXT;                -- the trigger's conf (JSON)
ALTER TABLE runs ADD COLUMN gpu_model TEXT;           -- from nvidia-smi on the host; 'none' on CPU hosts
ALTER TABLE runs ADD COLUMN gpu_count INTEGER;
ALTER TABLE runs ADD COLUMN gpu_driver TEXT;
ALTER TABLE runs ADD COLUMN cuda TEXT;
ALTER TABLE runs ADD COLUMN git_sha TEXT;             -- this project's commit that ran the campaign
ALTER TABLE runs ADD COLUMN versions TEXT;            -- JSON: python, torch, tool versions seen on the host
ALTER TABLE runs ADD COLUMN regressions INTEGER DEFAULT 0;  -- confirmed regressions found against the baseline

CREATE TABLE IF NOT EXISTS validations (
    dag_id        TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    suite         TEXT NOT NULL,
    success       BOOLEAN NOT NULL,
    evaluated     INTEGER NOT NULL,
    failed        INTEGER NOT NULL,
    rows_checked  INTEGER NOT NULL,
    failures      TEXT NOT NULL,                      -- JSON list of readable failed expectations
    validated_at  TIMESTAMP WITH TIME ZONE NOT NULL,
    PRIMARY KEY (dag_id, run_id, suite)
);

CREATE TABLE IF NOT EXISTS regressions (
    dag_id          TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    case_key        TEXT NOT NULL,                    -- e.g. 'm=256' or 'config=pd,concurrency=16'
    metric          TEXT NOT NULL,
    value           DOUBLE PRECISION NOT NULL,
    baseline_mean   DOUBLE PRECISION NOT NULL,
    baseline_std    DOUBLE PRECISION NOT NULL,
    baseline_runs   INTEGER NOT NULL,
    relative_change DOUBLE PRECISION NOT NULL,        -- signed: (value - baseline) / baseline
    z_score         DOUBLE PRECISION NOT NULL,
    direction       TEXT NOT NULL,                    -- 'higher_is_better' | 'lower_is_better'
    detected_at     TIMESTAMP WITH TIME ZONE NOT NULL,
    PRIMARY KEY (dag_id, run_id, case_key, metric)
);
