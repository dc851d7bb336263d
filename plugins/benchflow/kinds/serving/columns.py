"""The serving row's columns, in the order of the ``serving_results`` table: the lowest module of the serving kind,
read by both :mod:`benchflow.kinds.serving.labels` (which column a label fills) and
:mod:`benchflow.kinds.serving.common` (the row itself)."""

from __future__ import annotations

METRICS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "median", "std", "p90", "p95", "p99", "max")
COLUMNS = (
    "config",
    "concurrency",
    "repeat",
    "warmup",
    "num_prompts",
    "input_len",
    "output_len",
    "completed",
    "failed",
    "duration_s",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "peak_output_throughput",
    "peak_concurrent_requests",
    *(f"{stat}_{metric}_ms" for metric in METRICS for stat in STATS),
    "request_rate",
    "goodput",
    "accept_length",  # v6 (include/sql/0006_serving_columns.sql)
)
