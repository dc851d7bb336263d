-- Analyst views, recreated at every connection (after the migrations). Dialect-neutral: DuckDB and PostgreSQL.
-- Only runs that completed and passed validation (status 'ok') reach them.

CREATE OR REPLACE VIEW valid_runs AS
SELECT r.*, CAST(COALESCE(r.logical_date, r.started_at) AS DATE) AS night
FROM runs r
WHERE r.status = 'ok';

CREATE OR REPLACE VIEW latest_valid_runs AS
SELECT * FROM (
    SELECT v.*, ROW_NUMBER() OVER (PARTITION BY v.campaign ORDER BY COALESCE(v.logical_date, v.started_at) DESC) AS recency
    FROM valid_runs v
) ranked
WHERE recency = 1;

CREATE OR REPLACE VIEW serving_wide AS
SELECT v.campaign, v.dag_id, v.run_id, v.night, v.host, v.gpu_model, v.run_type, s.config, s.concurrency,
       s.num_prompts, s.completed, s.failed, s.input_len, s.output_len,
       s.request_throughput, s.output_throughput, s.total_throughput,
       s.mean_ttft_ms, s.median_ttft_ms, s.p99_ttft_ms, s.mean_tpot_ms, s.p99_tpot_ms,
       s.mean_itl_ms, s.p99_itl_ms, s.mean_e2e_ms, s.p99_e2e_ms
FROM serving_results s
JOIN valid_runs v ON v.dag_id = s.dag_id AND v.run_id = s.run_id;

CREATE OR REPLACE VIEW kernel_sweep_wide AS
SELECT v.campaign, v.dag_id, v.run_id, v.night, v.host, v.gpu_model, v.run_type, k.m, k.ms_per_call,
       k.tok_per_s, k.us_per_token, k.note
FROM kernel_results k
JOIN valid_runs v ON v.dag_id = k.dag_id AND v.run_id = k.run_id;

-- One row per run, case and metric: the history regressions are judged against.
CREATE OR REPLACE VIEW metric_history AS
SELECT campaign, dag_id, run_id, night, host, gpu_model, run_type, 'm=' || CAST(m AS TEXT) AS case_key,
       'us_per_token' AS metric, us_per_token AS value FROM kernel_sweep_wide
UNION ALL
SELECT campaign, dag_id, run_id, night, host, gpu_model, run_type, 'm=' || CAST(m AS TEXT),
       'tok_per_s', tok_per_s FROM kernel_sweep_wide
UNION ALL
SELECT campaign, dag_id, run_id, night, host, gpu_model, run_type,
       'config=' || config || ',concurrency=' || CAST(concurrency AS TEXT), 'output_throughput', output_throughput
FROM serving_wide
UNION ALL
SELECT campaign, dag_id, run_id, night, host, gpu_model, run_type,
       'config=' || config || ',concurrency=' || CAST(concurrency AS TEXT), 'mean_ttft_ms', mean_ttft_ms
FROM serving_wide
UNION ALL
SELECT campaign, dag_id, run_id, night, host, gpu_model, run_type,
       'config=' || config || ',concurrency=' || CAST(concurrency AS TEXT), 'mean_tpot_ms', mean_tpot_ms
FROM serving_wide;
