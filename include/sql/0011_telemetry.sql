-- GPU telemetry per phase, energy per unit of work, and results that judge their own validity (docs/telemetry.md).
-- Every result row gains its phase's host load, energy and validity (ok | noisy | throttled | contended: only ok
-- rows reach the statistics, the baselines and the comparisons); the raw samples and the per-phase, per-GPU
-- figures of a run have tables of their own. Columns as benchflow/telemetry/columns.py declares them.

ALTER TABLE kernel_results ADD COLUMN spread_ratio DOUBLE PRECISION;
ALTER TABLE kernel_results ADD COLUMN energy_window TEXT;
ALTER TABLE kernel_results ADD COLUMN energy_s DOUBLE PRECISION;
ALTER TABLE kernel_results ADD COLUMN energy_calls BIGINT;
ALTER TABLE kernel_results ADD COLUMN energy_samples BIGINT;
ALTER TABLE kernel_results ADD COLUMN energy_j DOUBLE PRECISION;
ALTER TABLE kernel_results ADD COLUMN energy_method TEXT;
ALTER TABLE kernel_results ADD COLUMN energy_coverage DOUBLE PRECISION;
ALTER TABLE kernel_results ADD COLUMN j_per_call DOUBLE PRECISION;
ALTER TABLE kernel_results ADD COLUMN host_steal_pct DOUBLE PRECISION;
ALTER TABLE kernel_results ADD COLUMN host_busy_pct DOUBLE PRECISION;
ALTER TABLE kernel_results ADD COLUMN host_others_busy_pct DOUBLE PRECISION;
ALTER TABLE kernel_results ADD COLUMN host_wait_share DOUBLE PRECISION;
ALTER TABLE kernel_results ADD COLUMN host_load1 DOUBLE PRECISION;
ALTER TABLE kernel_results ADD COLUMN host_online_cpus BIGINT;
ALTER TABLE kernel_results ADD COLUMN host_runnable_max BIGINT;
ALTER TABLE kernel_results ADD COLUMN throttle_reasons TEXT;
ALTER TABLE kernel_results ADD COLUMN validity TEXT;
ALTER TABLE kernel_results ADD COLUMN validity_reason TEXT;
ALTER TABLE kernel_results ADD COLUMN validity_unjudged TEXT;

ALTER TABLE serving_results ADD COLUMN steady_start DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN steady_end DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN steady_s DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN steady_why TEXT;
ALTER TABLE serving_results ADD COLUMN energy_gpus TEXT;
ALTER TABLE serving_results ADD COLUMN steady_tokens BIGINT;
ALTER TABLE serving_results ADD COLUMN steady_energy_j DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN energy_method TEXT;
ALTER TABLE serving_results ADD COLUMN j_per_token DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN phase_energy_j DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN phase_tokens BIGINT;
ALTER TABLE serving_results ADD COLUMN j_per_token_phase DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN host_steal_pct DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN host_busy_pct DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN host_others_busy_pct DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN host_wait_share DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN host_load1 DOUBLE PRECISION;
ALTER TABLE serving_results ADD COLUMN host_online_cpus BIGINT;
ALTER TABLE serving_results ADD COLUMN host_runnable_max BIGINT;
ALTER TABLE serving_results ADD COLUMN throttle_reasons TEXT;
ALTER TABLE serving_results ADD COLUMN validity TEXT;
ALTER TABLE serving_results ADD COLUMN validity_reason TEXT;
ALTER TABLE serving_results ADD COLUMN validity_unjudged TEXT;

ALTER TABLE serving_requests ADD COLUMN start_s DOUBLE PRECISION;
ALTER TABLE serving_requests ADD COLUMN first_token_s DOUBLE PRECISION;
ALTER TABLE serving_requests ADD COLUMN end_s DOUBLE PRECISION;

CREATE TABLE IF NOT EXISTS telemetry_samples (
    dag_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    t DOUBLE PRECISION,
    index BIGINT,
    uuid TEXT,
    power_w DOUBLE PRECISION,
    energy_j DOUBLE PRECISION,
    sm_mhz DOUBLE PRECISION,
    mem_mhz DOUBLE PRECISION,
    temp_c DOUBLE PRECISION,
    util_gpu_pct DOUBLE PRECISION,
    util_mem_pct DOUBLE PRECISION,
    mem_used_mib DOUBLE PRECISION,
    clock_reasons BIGINT
);
CREATE INDEX IF NOT EXISTS telemetry_samples_run ON telemetry_samples (dag_id, run_id);

CREATE TABLE IF NOT EXISTS telemetry_phase_gpus (
    dag_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    kind TEXT,
    config TEXT,
    concurrency BIGINT,
    repeat BIGINT,
    warmup BOOLEAN,
    dtype TEXT,
    m BIGINT,
    phase_start DOUBLE PRECISION,
    phase_end DOUBLE PRECISION,
    gpu_index BIGINT,
    uuid TEXT,
    server TEXT,
    samples BIGINT,
    mean_power_w DOUBLE PRECISION,
    max_power_w DOUBLE PRECISION,
    energy_j DOUBLE PRECISION,
    energy_method TEXT,
    coverage DOUBLE PRECISION,
    mean_sm_mhz DOUBLE PRECISION,
    mean_util_gpu_pct DOUBLE PRECISION,
    peak_mem_used_mib DOUBLE PRECISION,
    peak_temp_c DOUBLE PRECISION,
    reasons TEXT,
    throttle_reasons TEXT,
    throttled BOOLEAN
);
CREATE INDEX IF NOT EXISTS telemetry_phase_gpus_run ON telemetry_phase_gpus (dag_id, run_id);
