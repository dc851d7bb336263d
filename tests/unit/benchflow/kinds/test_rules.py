"""The bottleneck rule engine (benchflow.kinds.rules) with each kind's own rules file, over the signals the kind
gives: a serving phase's (benchflow.kinds.serving.bottleneck) and a kernel row's roofline."""

from __future__ import annotations

import json

import pytest

from benchflow import kinds
from benchflow.kinds.rules import NO_EVIDENCE, judge
from benchflow.kinds.serving import bottleneck as serving

pytestmark = pytest.mark.unit
SERVING = kinds.get("serving").bottleneck_rules()


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


def test_missing_evidence_is_never_guessed_away():
    """No GPU figures, or a PD config one of whose servers gave no metrics (its endpoint dead): not enough evidence,
    naming what is missing, never "under-loaded … more load would be served" from the figures that are there."""
    quiet = {"single": (2.0, 0.0, 0.2, 0)}
    assert judge(_phase(quiet, {"single": 20}), SERVING).verdict == "under-loaded"  # idle GPUs, seen: said
    blind = judge(_phase(quiet, {}), SERVING)
    assert blind.verdict == NO_EVIDENCE and blind.limiter is None and "single.gpu_util_pct" in blind.says
    found = _phase({"prefill": (0.1, 0.0, 0.1, 0), "decode": (2.0, 0.0, 0.2, 0)}, {"prefill": 20, "decode": 20})
    assert judge(found, SERVING).verdict == "under-loaded"
    rows = [
        {"config": "c", "concurrency": 8, "repeat": 1, "server": "d", "role": "decode", "scrapes": 10}
        | {"mean_running": 2.0, "mean_queued": 0.0, "max_kv_usage": 0.2, "preemptions": 0},
        {"config": "c", "concurrency": 8, "repeat": 1, "server": "p", "role": "prefill", "scrapes": 0}
        | {"note": "no answer from http://127.0.0.1:1/metrics (connection refused)"},
    ]
    gpus = [{"config": "c", "concurrency": 8, "repeat": 1, "server": "d", "gpu_index": 0, "mean_util_gpu_pct": 20}]
    dead = judge(serving.signals({"config": "c", "concurrency": 8, "repeat": 1}, rows, gpus), SERVING)
    assert dead.verdict == NO_EVIDENCE and dead.limiter is None
    said = "no metrics from prefill (no answer from http://127.0.0.1:1/metrics (connection refused))"
    assert dead.says == f"not enough evidence: {said}"
