-- v17: request rate as a load axis beside concurrency, and the workload as provenance of every serving row.
-- * serving_results and serving_requests: a phase is measured at a concurrency (the client's cap on requests in
--   flight), at a request rate (requests/s sent on an arrival process), or both (a rate under a cap). Either may be
--   NULL (no cap; no rate limit: every request sent at once), so the primary key on (…, concurrency, repeat) gives
--   way to a unique index over both with NULL read as "none". Both tables are rebuilt (no dialect changes a primary
--   key in place); every stored row is kept as it was: a concurrency row keeps its concurrency and its request_rate
--   (NULL: the client's "inf"), so its case key (config=pd,concurrency=8) is the same after as before.
-- * serving_results gains the arrival process (burstiness: 1 = Poisson, < 1 burstier, gamma), the rate the phase
--   achieved (requests/s sent; from the client's start times where it saved them, else completed requests over the
--   duration less the mean end-to-end latency) and whether it reached the requested one; the dataset (random,
--   sharegpt:<file>, shared-prefix) and its sha256; the lengths the workload achieved (mean prompt and output tokens
--   per request) and the prompt tokens the server answered from its prefix cache (client-reported) and their share.
-- * serving_requests gains the request rate and each request's cached prompt tokens.
-- * The phase tables of the telemetry (GPUs, servers, bottlenecks) gain the request rate of their phase.

ALTER TABLE serving_results RENAME TO serving_results_v16;
CREATE TABLE serving_results AS SELECT * FROM serving_results_v16;
DROP TABLE serving_results_v16;
ALTER TABLE serving_results ALTER COLUMN dag_id SET NOT NULL;
ALTER TABLE serving_results ALTER COLUMN run_id SET NOT NULL;
ALTER TABLE serving_results ALTER COLUMN config SET NOT NULL;
ALTER TABLE serving_results ALTER COLUMN repeat SET NOT NULL;
ALTER TABLE serving_results ALTER COLUMN warmup SET NOT NULL;
ALTER TABLE serving_results ALTER COLUMN repeat SET DEFAULT 1;
ALTER TABLE serving_results ALTER COLUMN warmup SET DEFAULT FALSE;
ALTER TABLE serving_results ADD COLUMN burstiness DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN achieved_rate DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN rate_reached BOOLEAN;
ALTER TABLE serving_results ADD COLUMN dataset TEXT;
ALTER TABLE serving_results ADD COLUMN dataset_sha256 TEXT;
ALTER TABLE serving_results ADD COLUMN achieved_input_len DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN achieved_output_len DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN cached_tokens BIGINT;
ALTER TABLE serving_results ADD COLUMN prefix_cache_hit_rate DOUBLE PRECISION;
CREATE UNIQUE INDEX serving_results_key ON serving_results
    (dag_id, run_id, config, (COALESCE(concurrency, -1)), (COALESCE(request_rate, -1)), repeat);

ALTER TABLE serving_requests RENAME TO serving_requests_v16;
CREATE TABLE serving_requests AS SELECT * FROM serving_requests_v16;
DROP TABLE serving_requests_v16;
ALTER TABLE serving_requests ALTER COLUMN dag_id SET NOT NULL;
ALTER TABLE serving_requests ALTER COLUMN run_id SET NOT NULL;
ALTER TABLE serving_requests ALTER COLUMN config SET NOT NULL;
ALTER TABLE serving_requests ALTER COLUMN repeat SET NOT NULL;
ALTER TABLE serving_requests ALTER COLUMN seq SET NOT NULL;
ALTER TABLE serving_requests ALTER COLUMN ok SET NOT NULL;
ALTER TABLE serving_requests ALTER COLUMN repeat SET DEFAULT 1;
ALTER TABLE serving_requests ALTER COLUMN error SET DEFAULT '';
ALTER TABLE serving_requests ADD COLUMN request_rate DOUBLE PRECISION;
ALTER TABLE serving_requests ADD COLUMN cached_tokens BIGINT;
CREATE UNIQUE INDEX serving_requests_key ON serving_requests
    (dag_id, run_id, config, (COALESCE(concurrency, -1)), (COALESCE(request_rate, -1)), repeat, seq);

ALTER TABLE telemetry_phase_gpus ADD COLUMN request_rate DOUBLE PRECISION;
ALTER TABLE phase_servers ADD COLUMN request_rate DOUBLE PRECISION;
ALTER TABLE phase_bottlenecks ADD COLUMN request_rate DOUBLE PRECISION;
