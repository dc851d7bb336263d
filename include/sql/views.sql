-- The analyst views every kind builds on (bench migrate creates them; each result kind adds its wide view and
-- its trend metrics to metric_history, see benchflow.warehouse.schema). Dialect-neutral: DuckDB and PostgreSQL.
-- Only runs that completed and passed validation (status 'ok') reach them.

CREATE VIEW valid_runs AS
SELECT r.*, CAST(COALESCE(r.logical_date, r.started_at) AS DATE) AS night
FROM runs r
WHERE r.status = 'ok';

CREATE VIEW latest_valid_runs AS
SELECT * FROM (
    SELECT v.*, ROW_NUMBER() OVER (PARTITION BY v.campaign ORDER BY COALESCE(v.logical_date, v.started_at) DESC) AS recency
    FROM valid_runs v
) ranked
WHERE recency = 1;
