"""The columns the telemetry adds, as data (name → type, with units), for the warehouse tables and the result
kinds' columns: the side tables every kind has (the samples, each phase's GPUs) and the columns every kind's rows
gain (host load, validity); each kind declares the columns of its own (``kinds/<kind>/``). What the functions of
``benchhost.telemetry.summary`` return, key for key (a test holds them to it). Types are the result kinds'
(``int``, ``float``, ``text``, ``bool``); times are epoch seconds (float)."""

from __future__ import annotations

from typing import Literal

ColumnType = Literal["int", "float", "text", "bool"]

# telemetry_samples: samples.csv as it is, one row per GPU per sampling period (after dag_id, run_id)
SAMPLES: dict[str, ColumnType] = {
    "t": "float",  # epoch s
    "index": "int",
    "uuid": "text",
    "power_w": "float",  # W
    "energy_j": "float",  # J, the NVML counter (cumulative); null from nvidia-smi
    "sm_mhz": "float",  # MHz
    "mem_mhz": "float",  # MHz
    "temp_c": "float",  # °C
    "util_gpu_pct": "float",  # %
    "util_mem_pct": "float",  # %
    "mem_used_mib": "float",  # MiB
    "clock_reasons": "int",  # bitmask
}

# telemetry_phase_gpus: summary.phase_gpu_rows, one row per phase and GPU (after dag_id, run_id)
PHASE_GPUS: dict[str, ColumnType] = {
    "kind": "text",  # the result kind of the phase
    "config": "text",  # serving key
    "concurrency": "int",
    "request_rate": "float",  # req/s (v17); null: no rate limit
    "repeat": "int",
    "warmup": "bool",
    "dtype": "text",  # kernel key
    "m": "int",
    "phase_start": "float",  # epoch s ("start"/"end" are SQL keywords)
    "phase_end": "float",
    "gpu_index": "int",
    "uuid": "text",
    "server": "text",  # the server of the phase's config holding the GPU; null: none
    "samples": "int",  # samples inside the phase
    "mean_power_w": "float",  # W
    "max_power_w": "float",  # W
    "energy_j": "float",  # J over the phase
    "energy_method": "text",  # counter | power_integral | none
    "coverage": "float",  # 0..1, share of the phase inside the samples' span
    "mean_sm_mhz": "float",  # MHz
    "mean_util_gpu_pct": "float",  # %
    "peak_mem_used_mib": "float",  # MiB
    "peak_temp_c": "float",  # °C
    "reasons": "text",  # every clock-event reason seen, comma-separated names
    "throttle_reasons": "text",  # those that throttle
    "throttled": "bool",
}

# server_samples: the servers' gauges over the run (benchhost.telemetry.servers.timeline_rows), one row per
# server and scrape (after dag_id, run_id)
SERVER_SAMPLES: dict[str, ColumnType] = {
    "t": "float",  # epoch s
    "config": "text",
    "server": "text",
    "role": "text",  # prefill | decode | single | router
    "running": "float",  # requests
    "queued": "float",  # requests
    "kv_usage": "float",  # 0..1
    "kv_tokens": "float",  # tokens
    "prefix_hit_rate": "float",  # 0..1
    "spec_accept_length": "float",  # tokens
    "gen_throughput": "float",  # tokens/s, as the server reports it
}

# phase_servers: benchhost.telemetry.servers.phase_server_rows, one row per phase and server (after dag_id, run_id)
PHASE_SERVERS: dict[str, ColumnType] = {
    "kind": "text",
    "config": "text",
    "concurrency": "int",
    "request_rate": "float",  # req/s (v17); null: no rate limit
    "repeat": "int",
    "warmup": "bool",
    "phase_start": "float",
    "phase_end": "float",
    "server": "text",
    "role": "text",
    "scrapes": "int",  # endpoint reads inside the phase
    **{
        f"{how}_{c}": "float"
        for c in SERVER_SAMPLES
        if c not in ("t", "config", "server", "role")
        for how in ("mean", "max")
    },
    "preemptions": "float",  # increase of the counters over the phase
    "prefix_queries": "float",
    "prefix_hits": "float",
    "prompt_tokens": "float",
    "generation_tokens": "float",
    "requests": "float",
    "spec_draft_tokens": "float",
    "spec_accepted_tokens": "float",
    **{f"mean_{c}": "float" for c in ("ttft_s", "itl_s", "e2e_s", "queue_s")},  # the server's own histograms
    **{f"{c}_observed": "float" for c in ("ttft_s", "itl_s", "e2e_s", "queue_s")},
    "note": "text",  # why there are no figures (the endpoint's error), else ""
}

# phase_bottlenecks: one verdict per phase (its kind's rules: benchflow.kinds.rules), with its evidence (after
# dag_id, run_id)
PHASE_BOTTLENECKS: dict[str, ColumnType] = {
    "kind": "text",
    "config": "text",
    "concurrency": "int",
    "request_rate": "float",  # req/s (v17); null: no rate limit
    "repeat": "int",
    "warmup": "bool",
    "dtype": "text",
    "m": "int",
    "phase_start": "float",
    "phase_end": "float",
    "verdict": "text",  # decode-bound | prefill-bound | kv-bound | client-bound | ... | not enough evidence
    "limiter": "text",  # the role or part named; null without a verdict
    "says": "text",  # the verdict's line with its figures
    "evidence": "text",  # JSON: every signal with its value
}

# the columns every result row gains (kernel and serving)
HOST_LOAD: dict[str, ColumnType] = {
    "host_steal_pct": "float",  # % of CPU time over the phase
    "host_busy_pct": "float",  # %
    "host_others_busy_pct": "float",  # % (busy - the benchmark's own)
    "host_wait_share": "float",  # 0..1, the benchmark's run-queue wait / (run + wait)
    "host_load1": "float",
    "host_online_cpus": "int",
    "host_runnable_max": "int",  # runnable tasks at a phase boundary, the reader excluded
}
VALIDITY: dict[str, ColumnType] = {
    "throttle_reasons": "text",  # throttling reasons seen on the phase's GPUs
    "validity": "text",  # ok | noisy | throttled | contended
    "validity_reason": "text",  # every finding, the winning one first; "" when ok
    "validity_unjudged": "text",  # rules that had nothing to judge
}

# The unit of each column above that has one (what the tables' headings and the charts' axes say).
UNITS: dict[str, str] = {
    "t": "s",
    "power_w": "W",
    "energy_j": "J",
    "sm_mhz": "MHz",
    "mem_mhz": "MHz",
    "temp_c": "°C",
    "util_gpu_pct": "%",
    "util_mem_pct": "%",
    "mem_used_mib": "MiB",
    "phase_start": "s",
    "phase_end": "s",
    "mean_power_w": "W",
    "max_power_w": "W",
    "mean_sm_mhz": "MHz",
    "mean_util_gpu_pct": "%",
    "peak_mem_used_mib": "MiB",
    "peak_temp_c": "°C",
    "host_steal_pct": "%",
    "host_busy_pct": "%",
    "host_others_busy_pct": "%",
    "steady_start": "s",
    "steady_end": "s",
    "steady_s": "s",
    "steady_tokens": "tokens",
    "steady_energy_j": "J",
    "j_per_token": "J/token",
    "phase_energy_j": "J",
    "phase_tokens": "tokens",
    "j_per_token_phase": "J/token",
    "energy_s": "s",
    "energy_calls": "calls",
    "j_per_call": "J/call",
    "start_s": "s",
    "first_token_s": "s",
    "end_s": "s",
    "kv_usage": "fraction",
    "mean_kv_usage": "fraction",
    "max_kv_usage": "fraction",
    "gen_throughput": "tok/s",
    **{f"mean_{c}": "s" for c in ("ttft_s", "itl_s", "e2e_s", "queue_s")},
}
