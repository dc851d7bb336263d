-- The analyst views every kind builds on (bench migrate creates them; each result kind adds its wide view and
-- its trend metrics to metric_history, see benchflow.warehouse.schema). Dialect-neutral: DuckDB and PostgreSQL.
-- Only runs that completed and passed validation (status 'ok') reach them.

CREATE VIEW valid_runs AS
SELECT r.*, CAST(COALESCE(r.logical_date, r.started_at) AS DATE) AS night
FROM runs r
WHERE r.status = 'ok';

-- The latest run of each campaign that finished and has rows judged ok: one whose every row was noisy, throttled or
-- contended measured nothing a user should read as the campaign's latest figures.
CREATE VIEW latest_valid_runs AS
SELECT * FROM (
    SELECT v.*, ROW_NUMBER() OVER (PARTITION BY v.campaign ORDER BY COALESCE(v.logical_date, v.started_at) DESC) AS recency
    FROM valid_runs v
    WHERE COALESCE(v.rows_ok, v.rows_loaded) > 0
) ranked
WHERE recency = 1;

-- A load search's answer per run and config (serving_search) with what the GPUs drew there: over the steady state
-- of the answer's repeats that were measured ok (serving_results at the load searched = pass_load), the config's mean power
-- (all its servers' GPUs) and joules per output token; NULL where the run had no telemetry or no load passed.
-- validity: 'ok' only when every probe of the config was (a contended probe may have decided the answer).
CREATE VIEW serving_search_answers AS
SELECT s.dag_id, s.run_id, s.config, s.over, s.reason, s.pass_load, s.fail_load, s.fail_verdict, s.goodput_rps,
       s.probes, s.loads, s.seconds,
       COALESCE((SELECT MIN(p.validity) FROM serving_results p
                 WHERE p.dag_id = s.dag_id AND p.run_id = s.run_id AND p.config = s.config
                   AND NOT COALESCE(p.warmup, FALSE) AND p.validity <> 'ok'), 'ok') AS validity,
       COUNT(r.run_id) AS answer_rows,
       SUM(r.steady_energy_j) / NULLIF(SUM(r.steady_s), 0) AS power_w_at_answer,
       SUM(r.steady_energy_j) / NULLIF(SUM(r.steady_tokens), 0) AS j_per_token_at_answer
FROM serving_search s
LEFT JOIN serving_results r
  ON r.dag_id = s.dag_id AND r.run_id = s.run_id AND r.config = s.config
 AND (CASE WHEN s.over = 'request_rate' THEN r.request_rate ELSE r.concurrency END) = s.pass_load
 AND NOT r.warmup AND COALESCE(r.validity, 'ok') = 'ok'
GROUP BY s.dag_id, s.run_id, s.config, s.over, s.reason, s.pass_load, s.fail_load, s.fail_verdict, s.goodput_rps,
         s.probes, s.loads, s.seconds;
