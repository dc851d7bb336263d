-- v12: a run's verdict in one of three states, so that a run never judged never reads "no regression".
-- verdict: 'regressed' (findings against the baseline), 'fine' (judged, nothing found) or 'not judged'
-- (no baseline: a manual run, a history shorter than min_runs, no valid rows); null: the check never ran.
ALTER TABLE runs ADD COLUMN verdict TEXT;
ALTER TABLE runs ADD COLUMN verdict_detail TEXT;      -- why not judged ("manual run", "2 of 5 nights"), or what was left out
ALTER TABLE runs ADD COLUMN baseline_runs INTEGER;    -- baseline nights the run was judged against
