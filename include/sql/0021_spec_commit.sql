-- v21: where a run's spec came from. A campaign read through a git DAG bundle (Airflow's GitDagBundle, the
-- spec repository's own DAG file, include/spec-repo/) records the bundle and the spec repository's commit the run
-- was parsed from, beside runs.payload_commit: a number traces to the exact spec that produced it. NULL for a
-- spec read from a folder (the dags-folder bundle: runs.spec_hash is the spec's fingerprint there).

ALTER TABLE runs ADD COLUMN spec_bundle TEXT;
ALTER TABLE runs ADD COLUMN spec_commit TEXT;
