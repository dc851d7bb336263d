"""The servers' own metrics read into canonical columns and cut per phase (benchhost.telemetry.servers), and the
bottleneck rules over a phase's signals (benchflow.kinds.rules, the serving and kernel signals and rules)."""

from __future__ import annotations

import json

import pytest

from benchflow import kinds
from benchflow.kinds.rules import NO_EVIDENCE, judge
from benchflow.kinds.serving import bottleneck as serving
from benchflow.spec import ServingConfig
from benchhost.telemetry import servers
from benchhost.telemetry.files import Phase

pytestmark = pytest.mark.unit
SERVING = kinds.get("serving").bottleneck_rules()

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


def _phase(roles: dict, gpus: dict, load: dict | None = None) -> dict:
    """Signals of a PD phase from per-role figures (running, queued, kv, preemptions) and per-role GPU util."""
    rows = [
        {"config": "c", "concurrency": 8, "repeat": 1, "server": role, "role": role, "scrapes": 10}
        | {"mean_running": r, "mean_queued": q, "max_queued": q, "max_kv_usage": kv, "preemptions": p}
        for role, (r, q, kv, p) in roles.items()
    ]
    gpu_rows = [
        {"config": "c", "concurrency": 8, "repeat": 1, "server": role, "gpu_index": i, "mean_util_gpu_pct": u}
        for i, (role, u) in enumerate(gpus.items())
    ]
    return serving.signals(load or {"config": "c", "concurrency": 8, "repeat": 1}, rows, gpu_rows)


def test_decode_holding_the_requests_with_busy_gpus_is_decode_bound_with_its_evidence():
    found = _phase({"prefill": (0.2, 0.0, 0.1, 0), "decode": (3.0, 21.0, 0.42, 0)}, {"prefill": 11, "decode": 97})
    verdict = judge(found, SERVING, serving.figures(found))
    assert (verdict.verdict, verdict.limiter) == ("decode-bound", "decode")
    assert "decode holds 99%" in verdict.says
    assert "decode: GPUs 1 at 97 %, 3.0 running, 21.0 queued, KV 42%" in verdict.says
    assert "prefill: GPUs 0 at 11 %" in verdict.says
    assert verdict.evidence["decode.queued"] == 21.0


def test_prefill_holding_the_requests_is_prefill_bound():
    found = _phase({"prefill": (1.0, 6.0, 0.1, 0), "decode": (0.5, 0.0, 0.2, 0)}, {"prefill": 95, "decode": 40})
    assert judge(found, SERVING).verdict == "prefill-bound"


def test_a_full_kv_cache_that_preempts_is_kv_bound():
    found = _phase({"single": (4.0, 0.0, 0.99, 310)}, {"single": 90})
    verdict = judge(found, SERVING)
    assert verdict.verdict == "kv-bound"
    assert verdict.says == "KV-cache bound at single: usage 99%, 310 preemptions"


def test_a_busy_client_is_named_before_the_servers():
    record = {"config": "c", "concurrency": 8, "repeat": 1}
    record |= {"load_start": {"online_cpus": 4}, "load_end": {"online_cpus": 4}}
    found = _phase({"single": (4.0, 5.0, 0.5, 0)}, {"single": 90}) | {"client_core_pct": 99.0}
    assert judge(found, SERVING).verdict == "client-bound"


def test_missing_metrics_or_signals_that_disagree_are_not_enough_evidence():
    rows = [{"config": "c", "concurrency": 8, "repeat": 1, "server": "decode", "role": "decode", "scrapes": 0}]
    rows[0]["note"] = "no metrics endpoint (HTTP 404 from http://127.0.0.1:1/metrics)"
    missing = judge(serving.signals({"config": "c", "concurrency": 8, "repeat": 1}, rows, []), SERVING)
    assert missing.verdict == NO_EVIDENCE and "HTTP 404" in missing.says
    idle = _phase({"prefill": (0.1, 0.0, 0.1, 0), "decode": (3.0, 9.0, 0.3, 0)}, {"prefill": 96, "decode": 5})
    disagree = judge(idle, SERVING)
    assert disagree.verdict == NO_EVIDENCE and "signals disagree" in disagree.says


def test_thresholds_are_data_and_a_spec_may_change_known_ones_only():
    found = _phase({"prefill": (1.0, 0.0, 0.1, 0), "decode": (2.0, 0.0, 0.2, 0)}, {"prefill": 90, "decode": 90})
    assert judge(found, SERVING).verdict != "decode-bound"  # 67 % of the requests: under the 70 % share
    assert judge(found, kinds.get("serving").bottleneck_rules({"share": 0.6})).verdict == "decode-bound"
    with pytest.raises(ValueError, match="unknown bottleneck thresholds \\['shares'\\]"):
        kinds.get("serving").bottleneck_rules({"shares": 0.6})
    with pytest.raises(ValueError, match="unknown bottleneck thresholds \\['roofline_pct'\\]"):
        kinds.get("serving").bottleneck_rules({"roofline_pct": 60})  # a kernel's: each kind has its own rules
    assert kinds.get("kernel").bottleneck_rules({"roofline_pct": 60}).thresholds["roofline_pct"] == 60


def test_a_kernel_row_is_placed_on_its_roofline():
    from types import SimpleNamespace

    from benchflow.kinds.kernel import bottlenecks

    rows = [{"m": 1, "pct_roofline": 85.0, "bound": "memory", "ms_per_call": 0.1, "roofline_ms": 0.085}]
    rows += [{"m": 2048, "pct_roofline": 12.0, "bound": "compute"}, {"m": 4}]
    got = bottlenecks(rows, SimpleNamespace(run_args={"dtype": "bf16"}), [], [], kinds.get("kernel").bottleneck_rules())
    assert [(r["m"], r["verdict"]) for r in got] == [(1, "memory-bound"), (2048, "below-roofline")]
    assert json.loads(got[0]["evidence"])["pct_roofline"] == 85.0


def test_server_roles_and_metrics_urls_come_from_the_spec():
    config = ServingConfig.model_validate(
        {
            "name": "pd",
            "servers": [
                {"name": "p", "command": "x --disaggregation-mode prefill", "port": 30000},
                {"name": "decode", "command": "x", "port": 30001, "metrics_port": 31001},
                {"name": "e", "command": "x", "port": 30002, "role": "decode", "metrics": False},
            ],
            "router": {"name": "r", "command": "router --prometheus-port 29100", "port": 8000},
        }
    )
    assert config.roles() == {"r": "router", "p": "prefill", "decode": "decode", "e": "decode"}
    assert config.metrics_urls() == {
        "p": "http://127.0.0.1:30000/metrics",
        "decode": "http://127.0.0.1:31001/metrics",
        "r": "http://127.0.0.1:29100/metrics",
    }


def test_a_run_says_one_verdict_per_config_at_its_highest_load_and_whether_two_sides_share_it():
    from benchflow.analysis.bottleneck import headlines, same_limiter

    def row(config, concurrency, verdict):
        return {"kind": "serving", "config": config, "concurrency": concurrency} | {
            "verdict": verdict,
            "says": f"{verdict}: figures",
        }

    pd = [row("pd", 1, "under-loaded"), row("pd", 8, "decode-bound"), row("pd", 8, "decode-bound")]
    pd.append(row("pd", 8, NO_EVIDENCE))
    single = [row("single", 8, "decode-bound")]
    assert headlines(pd + single) == [
        "bottleneck pd at concurrency 8 (2 of 3 repeats): decode-bound: figures",
        "bottleneck single at concurrency 8 (1 of 1 repeats): decode-bound: figures",
    ]
    assert same_limiter(pd, single) == "decode-bound"  # pd's most common verdict at its highest load
    assert same_limiter(pd, [row("single", 8, "kv-bound")]) is None
    assert same_limiter([row("a", 8, NO_EVIDENCE)], [row("b", 8, NO_EVIDENCE)]) is None
    kernel = [{"kind": "kernel", "m": m, "verdict": "memory-bound"} for m in (1, 2)]
    assert headlines(kernel) == ["bottleneck: memory-bound at m=1, 2"]
