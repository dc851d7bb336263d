-- v7: the case a generic-parser value belongs to (batch size, M, a config), from the pattern's key;
-- NULL for a pattern without a key. The primary key stays (dag_id, run_id, seq).

ALTER TABLE generic_results ADD COLUMN case_key TEXT;
