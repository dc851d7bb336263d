"""The servers' own metrics read into canonical columns and cut per phase (benchhost.telemetry.servers)."""

from __future__ import annotations

import pytest

from benchhost.telemetry import servers
from benchhost.telemetry.files import Phase

pytestmark = pytest.mark.unit

NAMES = {
    "sglang:num_running_reqs": servers.Name("sglang", "running", "gauge", "sum"),
    "sglang:num_queue_reqs": servers.Name("sglang", "queued", "gauge", "sum"),
    "sglang:token_usage": servers.Name("sglang", "kv_usage", "gauge", "max"),
    "sglang:prompt_tokens_total": servers.Name("sglang", "prompt_tokens", "counter", "sum"),
    "sglang:time_to_first_token_seconds": servers.Name("sglang", "ttft_s", "histogram", "sum"),
    "sglang:func_latency_seconds": servers.Name("sglang", "ignored", "histogram", "sum"),
}
EXPOSITION = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",tp_rank="0"} 3.0
sglang:num_running_reqs{model_name="m",tp_rank="1"} 2.0
sglang:num_queue_reqs{model_name="m"} 7
sglang:token_usage{model_name="m",dp="0"} 0.25
sglang:token_usage{model_name="m",dp="1"} 0.75
sglang:prompt_tokens_total{model_name="m"} 1.2e3
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 4.0
sglang:time_to_first_token_seconds_sum{model_name="m"} 1.5
sglang:time_to_first_token_seconds_count{model_name="m"} 6.0
sglang:func_latency_seconds_sum{name="x"} 9
sglang:num_queue_reqs{model_name="other"} NaN
garbage line without a value
vllm:unknown_metric 5
"""


def test_an_exposition_reads_into_canonical_columns_by_the_tables_rules():
    got = servers.read_exposition(EXPOSITION, NAMES)
    assert got == {"running": 5.0, "queued": 7.0, "kv_usage": 0.75, "prompt_tokens": 1200.0} | {
        "ttft_s_sum": 1.5,
        "ttft_s_count": 6.0,
    }


def _samples(points):
    text = "t,endpoint,column,value\n" + "".join(f"{t},{e},{c},{v}\n" for t, e, c, v in points) + "17,0,runn"
    return servers.read_samples(text)


def test_a_phase_gets_gauge_means_counter_increases_and_histogram_means():
    points = []
    for t, running, prompt, ttft_sum, ttft_n in ((9, 0, 100, 0.0, 0), (11, 2, 150, 1.0, 2), (13, 4, 300, 4.0, 5)):
        points += [(t, 0, "up", 1), (t, 0, "running", running), (t, 0, "prompt_tokens", prompt)]
        points += [(t, 0, "ttft_s_sum", ttft_sum), (t, 0, "ttft_s_count", ttft_n)]
    phase = Phase("serving", 10.0, 14.0, {"config": "pd", "concurrency": 4, "repeat": 1})
    endpoints = [servers.Endpoint("pd", "decode", "decode", 0), servers.Endpoint("pd", "prefill", "prefill", 1)]
    rows = servers.phase_server_rows(_samples(points), [phase], endpoints, {1: "no metrics endpoint (HTTP 404)"})
    decode, prefill = rows
    assert (decode["scrapes"], decode["mean_running"], decode["max_running"]) == (2, 3.0, 4.0)
    assert decode["prompt_tokens"] == 200.0  # from the reading before the phase to the last inside
    assert decode["mean_ttft_s"] == pytest.approx(4.0 / 5)
    assert (prefill["scrapes"], prefill["note"]) == (0, "no metrics endpoint (HTTP 404)")


def test_a_counter_that_went_down_has_no_increase():
    points = [(9, 0, "requests", 50), (11, 0, "requests", 3), (12, 0, "requests", 5)]
    assert servers.server_phase(servers._series(_samples(points), 0), 10, 13)["requests"] is None
