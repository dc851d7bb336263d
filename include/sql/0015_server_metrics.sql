-- v15: what the servers report about themselves, and a bottleneck verdict per phase (docs/telemetry.md).
-- server_samples: the servers' and router's gauges over a run (the metrics sampler's scrapes); phase_servers:
-- per phase and server, gauges' mean and max, counters' increase, the servers' own latency histograms' means;
-- phase_bottlenecks: which part limits each phase, by the rules of benchflow/analysis/bottleneck.yaml, with its
-- evidence. Columns as benchflow/telemetry/columns.py declares them.

CREATE TABLE IF NOT EXISTS server_samples (
    dag_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    t DOUBLE PRECISION,
    config TEXT,
    server TEXT,
    role TEXT,
    running DOUBLE PRECISION,
    queued DOUBLE PRECISION,
    kv_usage DOUBLE PRECISION,
    kv_tokens DOUBLE PRECISION,
    prefix_hit_rate DOUBLE PRECISION,
    spec_accept_length DOUBLE PRECISION,
    gen_throughput DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS server_samples_run ON server_samples (dag_id, run_id);

CREATE TABLE IF NOT EXISTS phase_servers (
    dag_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    kind TEXT,
    config TEXT,
    concurrency BIGINT,
    repeat BIGINT,
    warmup BOOLEAN,
    phase_start DOUBLE PRECISION,
    phase_end DOUBLE PRECISION,
    server TEXT,
    role TEXT,
    scrapes BIGINT,
    mean_running DOUBLE PRECISION,
    max_running DOUBLE PRECISION,
    mean_queued DOUBLE PRECISION,
    max_queued DOUBLE PRECISION,
    mean_kv_usage DOUBLE PRECISION,
    max_kv_usage DOUBLE PRECISION,
    mean_kv_tokens DOUBLE PRECISION,
    max_kv_tokens DOUBLE PRECISION,
    mean_prefix_hit_rate DOUBLE PRECISION,
    max_prefix_hit_rate DOUBLE PRECISION,
    mean_spec_accept_length DOUBLE PRECISION,
    max_spec_accept_length DOUBLE PRECISION,
    mean_gen_throughput DOUBLE PRECISION,
    max_gen_throughput DOUBLE PRECISION,
    preemptions DOUBLE PRECISION,
    prefix_queries DOUBLE PRECISION,
    prefix_hits DOUBLE PRECISION,
    prompt_tokens DOUBLE PRECISION,
    generation_tokens DOUBLE PRECISION,
    requests DOUBLE PRECISION,
    spec_draft_tokens DOUBLE PRECISION,
    spec_accepted_tokens DOUBLE PRECISION,
    mean_ttft_s DOUBLE PRECISION,
    mean_itl_s DOUBLE PRECISION,
    mean_e2e_s DOUBLE PRECISION,
    mean_queue_s DOUBLE PRECISION,
    ttft_s_observed DOUBLE PRECISION,
    itl_s_observed DOUBLE PRECISION,
    e2e_s_observed DOUBLE PRECISION,
    queue_s_observed DOUBLE PRECISION,
    note TEXT
);
CREATE INDEX IF NOT EXISTS phase_servers_run ON phase_servers (dag_id, run_id);

CREATE TABLE IF NOT EXISTS phase_bottlenecks (
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
    verdict TEXT,
    limiter TEXT,
    says TEXT,
    evidence TEXT
);
CREATE INDEX IF NOT EXISTS phase_bottlenecks_run ON phase_bottlenecks (dag_id, run_id);
