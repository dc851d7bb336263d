"""The pure half of GPU telemetry: reading the files, cutting per phase, energy both ways, reason bits, the
steady-state window and joules per token, host load, the validity rules; and the host scripts' pure helpers."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from benchflow.remote import sampler as host
from benchhost import sampler
from benchhost.telemetry import energy, files, hostload, reasons, summary, validity, window
from benchhost.telemetry.files import Sample
from tests.conftest import FIXTURES, PROJECT_ROOT
from tests.gpu_standin import scenario_module

pytestmark = pytest.mark.unit


def load_script(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a script's dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


sweep = load_script(PROJECT_ROOT / "kernels" / "serving" / "sweep.py", "serving_sweep_under_test")
scenario = scenario_module()


def truth_samples(cfg: dict, index: int, t0: float, t1: float, period: float, counter: bool = True) -> list[Sample]:
    """What a sampler reading the stand-in every ``period`` s would have written."""
    out, t = [], t0
    while t <= t1 + 1e-9:
        s = scenario.state(cfg, index, t)
        out.append(
            Sample(
                t=t,
                index=index,
                uuid=scenario.uuid(index),
                power_w=s["power_w"],
                energy_j=scenario.energy_j(cfg, index, t) if counter else None,
                sm_mhz=s["sm_mhz"],
                mem_mhz=s["mem_mhz"],
                temp_c=s["temp_c"],
                util_gpu_pct=s["util_gpu_pct"],
                util_mem_pct=s["util_mem_pct"],
                mem_used_mib=s["mem_used_mib"],
                clock_reasons=s["reasons"],
            )
        )
        t += period
    return out


CFG = scenario.load(Path("/nonexistent"))  # defaults: two busy GPUs
CFG.update(start=1000.0)
CFG["gpus"][1]["throttle"] = [{"from_s": 4.0, "to_s": 6.0, "reasons": 0x8, "sm_mhz": 1100, "power_w": 300.0}]
IDLE = {**CFG, "gpus": [{**CFG["gpus"][0], "busy": False}]}


# ----------------------------------------------------------------------------------------------
# reasons, files
# ----------------------------------------------------------------------------------------------


def test_reason_bits_decode_to_nvidia_smi_names_and_unknown_bits_are_kept():
    assert reasons.decode(0) == []
    assert reasons.decode(0x9) == ["gpu_idle", "hw_slowdown"]
    assert reasons.decode(0x1FF)[-1] == "display_clock_setting" and len(reasons.decode(0x1FF)) == 9
    assert reasons.decode(0x201) == ["gpu_idle", "bit_0x200"]
    assert reasons.seen([0x1, None, 0x4, 0x1]) == ["gpu_idle", "sw_power_cap"]
    assert reasons.throttling(["gpu_idle", "applications_clocks_setting", "sw_power_cap"]) == ["sw_power_cap"]


def test_samples_read_with_empty_cells_as_none_and_a_cut_off_last_line_dropped():
    header = ",".join(files.SAMPLE_COLUMNS)
    text = (
        f"{header}\n"
        "100.2,1,GPU-b,300.5,,1980,3201,60,90,50,1000,8\n"
        "100.0,0,GPU-a,72.000,987.5,345,3201,31,0,0,0,1\n"
        "100.4,0,GPU-a,[N/A],988.0,345"  # killed mid-write
    )
    samples = files.read_samples(text)
    assert [(s.t, s.index) for s in samples] == [(100.0, 0), (100.2, 1)]
    assert samples[1].energy_j is None and samples[1].clock_reasons == 8 and samples[0].energy_j == 987.5
    assert files.by_gpu(samples)[1][0].power_w == 300.5


def test_phases_read_in_order_and_matched_to_rows_by_key_even_when_repeated():
    lines = [
        {"kind": "kernel", "m": 1, "dtype": "bf16", "start": 1.0, "end": 2.0},
        {"kind": "kernel", "m": 1, "dtype": "fp8", "start": 3.0, "end": 4.0},
        {"kind": "serving", "config": "pd", "concurrency": 4, "repeat": 2, "start": 5.0, "end": 6.0},
        {"kind": "kernel", "m": 1, "dtype": "bf16", "start": 7.0, "end": 8.0},
    ]
    text = "\n".join(json.dumps(x) for x in lines) + '\n{"kind": "kernel", "m": 2, "st'
    phases = files.read_phases(text)
    assert [p.start for p in phases] == [1.0, 3.0, 5.0, 7.0]
    rows = [{"m": 1, "dtype": "bf16"}, {"m": 1, "dtype": "fp8"}, {"m": 1, "dtype": "bf16"}, {"m": 9, "dtype": "bf16"}]
    matched = files.match_rows(summary.KERNEL_PHASE, rows, phases)
    assert [p.start if p else None for p in matched] == [1.0, 3.0, 7.0, None]
    serving = files.match_rows(summary.SERVING_PHASE, [{"config": "pd", "concurrency": 4, "repeat": 2}], phases)
    assert serving[0] is not None and serving[0].start == 5.0


# ----------------------------------------------------------------------------------------------
# cutting and energy
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("counter", [True, False])
def test_energy_matches_the_integral_of_the_power_within_1_percent_both_ways(counter):
    samples = truth_samples(CFG, 0, 1000.0, 1030.0, 0.2, counter=counter)
    for t0, t1 in [(1001.05, 1013.7), (1002.0, 1002.13), (1000.0, 1030.0)]:
        drawn = energy.energy(samples, t0, t1)
        truth = scenario.truth_energy_j(CFG, 0, t0, t1)
        assert drawn.method == ("counter" if counter else "power_integral")
        assert drawn.coverage == pytest.approx(1.0)
        assert drawn.joules == pytest.approx(truth, rel=0.01)


def test_energy_across_a_throttle_step_the_counter_is_exact_at_samples_and_the_integral_close():
    samples = truth_samples(CFG, 1, 1000.0, 1010.0, 0.2)
    t0, t1 = 1003.0, 1008.0  # samples at both ends, throttled 1004-1006 (450 W → 300 W)
    truth = scenario.truth_energy_j(CFG, 1, t0, t1)
    assert energy.counter_energy(samples, t0, t1).joules == pytest.approx(truth, rel=1e-9)
    assert energy.power_energy(samples, t0, t1).joules == pytest.approx(truth, rel=0.01)


def test_energy_is_not_extrapolated_beyond_the_samples_and_a_reset_counter_falls_back_to_power():
    samples = truth_samples(CFG, 0, 1000.0, 1010.0, 0.2)
    drawn = energy.energy(samples, 1005.0, 1015.0)
    assert drawn.coverage == pytest.approx(0.5)
    assert drawn.joules == pytest.approx(scenario.truth_energy_j(CFG, 0, 1005.0, 1010.0), rel=1e-6)
    reset = [*samples[:10], *(Sample(**{**vars(s), "energy_j": s.energy_j - 5e5}) for s in samples[10:])]
    assert energy.energy(reset, 1001.0, 1009.0).method == "power_integral"
    gap = [*samples[:5], Sample(**{**vars(samples[5]), "energy_j": None}), *samples[6:]]
    assert energy.energy(gap, 1001.0, 1009.0).method == "power_integral"
    assert energy.energy(samples[:1], 1000.0, 1001.0) == energy.Energy(None, "none", 0.0)


def test_a_phase_shorter_than_the_period_uses_the_samples_around_it():
    samples = truth_samples(CFG, 0, 1000.0, 1002.0, 0.2)
    assert [s.t for s in energy.cut(samples, 1001.01, 1001.05)] == pytest.approx([1001.0, 1001.2])
    assert len(energy.cut(samples, 1000.5, 1001.5)) == 5
    stats = energy.gpu_phase(samples, 1001.01, 1001.05)
    assert stats.samples == 0 and stats.mean_power_w is not None
    assert stats.energy_j == pytest.approx(scenario.truth_energy_j(CFG, 0, 1001.01, 1001.05), rel=0.01)


def test_per_gpu_phase_statistics_tell_the_idle_gpu_and_the_throttled_one_apart():
    cfg = {**CFG, "gpus": [{**CFG["gpus"][0], "busy": False}, CFG["gpus"][1]]}
    per_gpu = {i: truth_samples(cfg, i, 1000.0, 1010.0, 0.2) for i in (0, 1)}
    quiet, throttled = (
        energy.phase_gpus(per_gpu, a, b, {0: "prefill", 1: "decode"}) for a, b in [(1000, 1003), (1003, 1008)]
    )
    idle, busy = quiet
    assert (idle.server, idle.mean_util_gpu_pct, idle.reasons, idle.throttle_reasons) == (
        "prefill",
        0,
        ("gpu_idle",),
        (),
    )
    assert idle.mean_power_w == pytest.approx(72.0) and idle.peak_mem_used_mib == 0
    assert busy.mean_util_gpu_pct == 96 and busy.throttle_reasons == () and busy.mean_sm_mhz == 1980
    hot = throttled[1]
    assert hot.server == "decode" and hot.throttle_reasons == ("hw_slowdown",) and hot.mean_sm_mhz < 1980
    assert hot.max_power_w > hot.mean_power_w and hot.peak_temp_c == 63
    assert validity.throttling(throttled) == "GPU 1 (decode): hw_slowdown"
    assert validity.throttling(quiet) is None


# ----------------------------------------------------------------------------------------------
# steady-state window and joules per token
# ----------------------------------------------------------------------------------------------


def requests(starts: list[float], ttft: float, e2e: float, tokens: int) -> list[dict]:
    return [
        {"ok": True, "start_s": s, "first_token_s": s + ttft, "end_s": s + e2e, "output_tokens": tokens} for s in starts
    ]


def test_steady_window_runs_from_the_bth_first_token_to_the_n_minus_b_minus_1th_finish():
    reqs = requests([0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0], ttft=0.1 * 1, e2e=1.0, tokens=10)
    for k, r in enumerate(reqs):
        r["first_token_s"] += 0.01 * k  # distinct first tokens
    found = window.steady_window(reqs, concurrency=2)
    assert found.start == pytest.approx(0.11)  # the 2nd first token
    assert found.end == pytest.approx(3.0)  # the 5th (8 - 2 - 1) finished request
    assert "2th first token to the 5th finished" in found.why
    assert window.steady_window(reqs[:3], concurrency=2).start is None  # N - B - 1 = 0
    failed = [*reqs, {"ok": False, "start_s": 4.0, "first_token_s": None, "end_s": None, "output_tokens": 0}]
    assert "1 of 9 requests failed" in window.steady_window(failed, concurrency=2).why


def test_tokens_are_counted_evenly_spaced_from_first_token_to_end_and_add_up_over_windows():
    r = {"ok": True, "first_token_s": 10.0, "end_s": 14.0, "output_tokens": 5}  # tokens at 10, 11, 12, 13, 14
    assert window.tokens_in(r, 11.0, 13.0) == 2
    assert window.tokens_in(r, 0.0, 100.0) == 5
    assert window.tokens_in(r, 10.5, 10.9) == 0
    assert window.tokens_in({**r, "output_tokens": 1, "end_s": 10.0}, 9.0, 10.5) == 1
    reqs = requests([0.0, 0.3, 0.7, 1.1], ttft=0.05, e2e=0.9, tokens=17)
    cuts = [0.0, 0.37, 0.81, 1.5, 2.5]
    parts = [window.tokens_between(reqs, a, b) for a, b in pairwise(cuts)]
    assert sum(parts) == 4 * 17 == window.tokens_between(reqs, -1.0, 10.0)


def test_joules_per_token_over_the_steady_state_within_1_percent_of_the_truth():
    cfg = {**CFG, "gpus": [CFG["gpus"][0], CFG["gpus"][0], {**CFG["gpus"][0], "busy": False}]}
    per_gpu = {i: truth_samples(cfg, i, 1000.0, 1040.0, 0.2) for i in range(3)}
    samples = [s for group in per_gpu.values() for s in group]
    starts = [1001.0 + 0.8 * (k // 4) for k in range(32)]  # 4 at a time, 32 requests
    reqs = [{**r, "config": "pd", "concurrency": 4, "repeat": 1} for r in requests(starts, 0.1, 0.8, 64)]
    row = {"config": "pd", "concurrency": 4, "repeat": 1}
    phase = files.Phase("serving", 1000.5, 1030.0, row)
    (cols,) = summary.serving_rows([row], reqs, [phase], samples, {"pd": {0: "prefill", 1: "decode"}})
    steady = window.steady_window(reqs, 4)
    truth = sum(scenario.truth_energy_j(cfg, i, steady.start, steady.end) for i in (0, 1))
    tokens = window.tokens_between(reqs, steady.start, steady.end)
    assert cols["energy_gpus"] == "0,1" and cols["energy_method"] == "counter"
    assert cols["steady_tokens"] == tokens > 0
    assert cols["j_per_token"] == pytest.approx(truth / tokens, rel=0.01)
    span_truth = sum(scenario.truth_energy_j(cfg, i, 1001.0, starts[-1] + 0.8) for i in (0, 1))
    assert cols["j_per_token_phase"] == pytest.approx(span_truth / (32 * 64), rel=0.01)
    (everything,) = summary.serving_rows([row], reqs, [phase], samples)  # no GPUs named: all of them
    assert everything["energy_gpus"] == "0,1,2" and everything["steady_energy_j"] > cols["steady_energy_j"]


# ----------------------------------------------------------------------------------------------
# host load and validity
# ----------------------------------------------------------------------------------------------


def snapshot(t: float, jiffies: dict, own_cpu: float, run: float, wait: float, runnable: int = 2) -> dict:
    cpu = dict.fromkeys(hostload.CPU_FIELDS, 0) | jiffies
    return {
        "t": t,
        "load1": 0.5,
        "runnable": runnable,
        "threads": 200,
        "cpu": cpu,
        "clk_tck": 100,
        "online_cpus": 2,
        "own_cpu_s": own_cpu,
        "own_sched": {"run_s": run, "wait_s": wait},
    }


def test_host_load_over_a_phase_from_its_two_snapshots():
    a = snapshot(10.0, {"user": 1000, "idle": 1000, "steal": 10}, own_cpu=5.0, run=4.0, wait=0.5)
    b = snapshot(12.0, {"user": 1300, "idle": 1088, "steal": 22}, own_cpu=6.0, run=5.0, wait=1.5, runnable=4)
    load = hostload.host_load({"load_start": a, "load_end": b})
    assert load is not None and load.seconds == 2.0 and load.online_cpus == 2
    assert load.steal_pct == pytest.approx(3.0)  # 12 of 400 jiffies
    assert load.busy_pct == pytest.approx(78.0)  # (400 - 88) / 400
    assert load.own_cpu_pct == pytest.approx(25.0)  # 1 s of the 4 CPU-seconds
    assert load.others_busy_pct == pytest.approx(53.0)
    assert load.wait_share == pytest.approx(0.5)  # waited 1 s of the 2 s it was runnable
    assert load.runnable == (1, 3)  # the reader itself left out
    assert hostload.host_load({"start": 1.0}) is None


def test_contention_rules_wait_share_steal_others_and_the_runnable_fallback():
    limits = validity.Limits()
    base = hostload.HostLoad(2.0, 2, (1, 1), 0.5, 1.0, 60.0, 50.0, 10.0, 0.02)
    assert validity.contention(base, limits) is None
    waited = validity.contention(hostload.HostLoad(**{**vars(base), "wait_share": 0.42}), limits)
    assert waited == "the benchmark's threads waited for a CPU 42% of their runnable time (limit 10%)"
    assert "CPU steal 7.5 %" in validity.contention(hostload.HostLoad(**{**vars(base), "steal_pct": 7.5}), limits)
    busy = hostload.HostLoad(**{**vars(base), "others_busy_pct": 90.0})
    assert validity.contention(busy, limits) is None  # others' load is not a rule by default
    assert "others kept the CPUs 90 % busy" in validity.contention(busy, validity.Limits(max_others_busy_pct=50))
    crowded = hostload.HostLoad(**{**vars(base), "runnable": (5, 3), "wait_share": None})
    assert "5 and 3 other tasks runnable" in validity.contention(crowded, limits)
    assert validity.contention(hostload.HostLoad(**{**vars(crowded), "runnable": (5, 1)}), limits) is None
    assert validity.contention(hostload.HostLoad(**{**vars(base), "runnable": (5, 3)}), limits) is None


def test_noise_rules_kernel_spread_and_serving_repeats():
    limits = validity.Limits()
    assert validity.kernel_noise({"p10_ms": 1.0, "p90_ms": 1.4}, limits) is None
    assert "p90/p10 = 550.00" in validity.kernel_noise({"p10_ms": 1.0, "p90_ms": 550.0}, limits)
    assert validity.kernel_noise({"p10_ms": 0.0, "p90_ms": 1.0}, limits) is None
    rows = [
        {"config": "pd", "concurrency": 8, "repeat": 0, "warmup": True, "output_throughput": 10.0},
        *(
            {"config": "pd", "concurrency": 8, "repeat": r, "output_throughput": v}
            for r, v in [(1, 100), (2, 100), (3, 130)]
        ),
        *({"config": "pd", "concurrency": 1, "repeat": r, "output_throughput": v} for r, v in [(1, 50), (2, 51)]),
        {"config": "single", "concurrency": 8, "repeat": 1, "output_throughput": 10.0},
    ]
    found = validity.serving_noise(rows, limits)
    cv = statistics.stdev([100, 100, 130]) / statistics.fmean([100, 100, 130])
    assert found[0] is None  # warm-up: not judged
    assert (
        found[1]
        == found[2]
        == found[3]
        == f"output_throughput varies {cv:.0%} across 3 repeats (coefficient of variation; limit 10%)"
    )
    assert found[4] is None and found[5] is None and found[6] is None  # steady; one repeat: not judged


def test_precedence_throttled_then_contended_then_noisy_and_every_finding_in_the_reason():
    limits = validity.Limits()
    v = validity.verdict({"noisy": "spread", "contended": "waited", "throttled": "GPU 1: hw_slowdown"}, limits)
    assert v.validity == "throttled"
    assert v.reason == "throttled: GPU 1: hw_slowdown; contended: waited; noisy: spread"
    assert validity.verdict({"noisy": "spread", "contended": "waited"}, limits).validity == "contended"
    assert validity.verdict({"noisy": "spread", "contended": None}, limits).validity == "noisy"
    ok = validity.verdict({"noisy": None}, limits, ["throttled: no GPU telemetry"])
    assert ok.ok and ok.reason == "" and ok.unjudged == ("throttled: no GPU telemetry",)
    other_order = validity.Limits(precedence=("noisy", "contended", "throttled"))
    assert validity.verdict({"noisy": "x", "throttled": "y"}, other_order).validity == "noisy"


def test_kernel_rows_on_a_cpu_host_judge_noise_and_contention_but_never_throttling():
    quiet = snapshot(1.0, {"user": 100, "idle": 100}, 1.0, 1.0, 0.0)
    quiet_end = snapshot(2.0, {"user": 200, "idle": 200}, 2.0, 2.0, 0.01)
    busy_end = snapshot(2.0, {"user": 300, "idle": 100}, 1.5, 1.5, 0.6)
    phases = [
        files.Phase("kernel", 1.0, 2.0, {"m": m, "dtype": "bf16", "load_start": quiet, "load_end": end})
        for m, end in [(1, quiet_end), (2, busy_end), (4, quiet_end)]
    ]
    rows = [
        {"m": 1, "dtype": "bf16", "p10_ms": 1.0, "p90_ms": 1.2},
        {"m": 2, "dtype": "bf16", "p10_ms": 1.0, "p90_ms": 9.0},
        {"m": 4, "dtype": "bf16", "p10_ms": 1.0, "p90_ms": 2.0},
        {"m": 8, "dtype": "bf16", "p10_ms": 1.0, "p90_ms": 1.1},  # no phase record
    ]
    out = summary.kernel_rows(rows, phases, samples=[])
    assert [r["validity"] for r in out] == ["ok", "contended", "noisy", "ok"]
    assert out[1]["validity_reason"].startswith("contended: the benchmark's threads waited for a CPU 55%")
    assert "noisy: timed calls spread p90/p10 = 9.00" in out[1]["validity_reason"]
    assert out[0]["validity_unjudged"] == "throttled: no GPU telemetry"
    assert out[3]["validity_unjudged"] == "throttled: no GPU telemetry; contended: no phase record"
    assert out[0]["j_per_call"] is None and out[0]["spread_ratio"] == pytest.approx(1.2)
    assert out[1]["host_wait_share"] == pytest.approx(0.6 / 1.1)


def test_kernel_energy_per_call_over_the_energy_loop_else_the_timed_calls():
    cfg = {**CFG, "gpus": [CFG["gpus"][0]]}
    samples = truth_samples(cfg, 0, 1000.0, 1010.0, 0.2)
    timed = {"m": 8, "dtype": "bf16", "timed_start": 1001.05, "timed_end": 1001.06, "timed_calls": 10}
    looped = {**timed, "m": 16, "energy_start": 1002.1, "energy_end": 1004.1, "energy_calls": 2000}
    phases = [files.Phase("kernel", 1000.5, 1005.0, r) for r in (timed, looped)]
    rows = [{"m": 8, "dtype": "bf16"}, {"m": 16, "dtype": "bf16"}]
    short, long = summary.kernel_rows(rows, phases, samples)
    assert (short["energy_window"], short["energy_calls"], short["energy_samples"]) == ("timed", 10, 0)
    assert short["j_per_call"] == pytest.approx(scenario.truth_energy_j(cfg, 0, 1001.05, 1001.06) / 10, rel=0.01)
    assert (long["energy_window"], long["energy_calls"], long["energy_samples"]) == ("energy_loop", 2000, 10)
    assert long["j_per_call"] == pytest.approx(scenario.truth_energy_j(cfg, 0, 1002.1, 1004.1) / 2000, rel=1e-3)
    assert long["validity"] == "ok" and long["validity_unjudged"] == "contended: no host-load snapshots"


@pytest.mark.parametrize("where", ["an hour away", "a dead sampler"])
def test_a_phase_without_samples_in_or_next_to_it_is_unjudged_never_judged_from_elsewhere(where):
    """Samples from a host clock an hour off, or a sampler that died before the phase: the phase's throttling and
    energy would come from samples taken at another time. They are unjudged and empty instead, and say so."""
    cfg = {**CFG, "gpus": [CFG["gpus"][1]]}  # throttled 1004–1006
    samples = truth_samples(cfg, 0, 1000.0, 1008.0, 0.2)
    # the benchmark's clock an hour ahead of the sampler's; or the sampler's last sample 12 s before the phase
    phase_at = 1005.0 + 3600.0 if where == "an hour away" else 1020.0
    timed = {"m": 8, "dtype": "bf16", "timed_start": phase_at, "timed_end": phase_at + 0.01, "timed_calls": 10}
    rows = summary.kernel_rows(
        [{"m": 8, "dtype": "bf16"}], [files.Phase("kernel", phase_at, phase_at + 0.5, timed)], samples
    )
    (row,) = rows
    assert row["validity"] == "ok" and row["throttle_reasons"] == "" and row["j_per_call"] is None
    assert "throttled: no GPU sample in or next to the phase" in row["validity_unjudged"]
    # The same phase inside the samples' time is judged from them: throttled.
    inside = {**timed, "timed_start": 1005.0, "timed_end": 1005.01}
    (judged,) = summary.kernel_rows(
        [{"m": 8, "dtype": "bf16"}], [files.Phase("kernel", 1005.0, 1005.5, inside)], samples
    )
    assert judged["validity"] == "throttled" and judged["j_per_call"] is not None
    assert "throttled" not in judged["validity_unjudged"]


def test_a_phase_shorter_than_the_period_is_not_interpolated_across_a_gap():
    """Two samples around a short phase, ten minutes apart: no energy is made up between them."""
    cfg = {**CFG, "gpus": [CFG["gpus"][0]]}
    samples = truth_samples(cfg, 0, 1000.0, 1002.0, 0.2) + truth_samples(cfg, 0, 1600.0, 1602.0, 0.2)
    assert energy.cut(samples, 1300.0, 1300.1) == []
    assert energy.energy(samples, 1300.0, 1300.1).joules is None
    assert len(energy.cut(samples, 1001.05, 1001.06)) == 2  # the two around it, one period apart


def test_phase_gpu_rows_tie_each_gpu_to_its_server_per_config():
    cfg = {**CFG, "gpus": [{**CFG["gpus"][0], "busy": False}, CFG["gpus"][1], CFG["gpus"][0], CFG["gpus"][0]]}
    samples = [s for i in range(4) for s in truth_samples(cfg, i, 1000.0, 1010.0, 0.2)]
    phases = [
        files.Phase("serving", 1003.0, 1008.0, {"config": "pd", "concurrency": 8, "repeat": 1}),
        files.Phase("serving", 1008.0, 1009.0, {"config": "single", "concurrency": 8, "repeat": 1}),
    ]
    by_config = {"pd": summary.gpu_servers({"prefill": "0-1", "decode": "2,3"}), "single": {0: "engine"}}
    rows = summary.phase_gpu_rows(samples, phases, by_config)
    assert [(r["config"], r["gpu_index"], r["server"]) for r in rows[:4]] == [
        ("pd", 0, "prefill"),
        ("pd", 1, "prefill"),
        ("pd", 2, "decode"),
        ("pd", 3, "decode"),
    ]
    assert [r["throttled"] for r in rows[:4]] == [False, True, False, False]
    assert rows[0]["reasons"] == "gpu_idle" and rows[1]["throttle_reasons"] == "hw_slowdown"
    assert [r["server"] for r in rows[4:]] == ["engine", None, None, None]


def test_gpu_strings_of_the_spec_parse():
    assert summary.parse_gpus("0-3") == [0, 1, 2, 3]
    assert summary.parse_gpus("4,6-7") == [4, 6, 7]
    assert summary.parse_gpus(None) == []
    assert summary.gpu_servers({"prefill": "0,1", "decode": "2-3", "router": None}) == {
        0: "prefill",
        1: "prefill",
        2: "decode",
        3: "decode",
    }


# ----------------------------------------------------------------------------------------------
# host scripts' pure helpers
# ----------------------------------------------------------------------------------------------


def test_sampler_picks_fields_from_the_help_output_new_and_old_drivers():
    new = '"timestamp"\n"clocks_event_reasons.active" or "clocks_throttle_reasons.active"\n"power.draw"\n'
    new += '"power.draw.instant"\n"index"\n"clocks.current.sm" or "clocks.sm"\n'
    old = '"timestamp"\n"clocks_throttle_reasons.active"\n"power.draw"\n"index"\n"clocks.sm"\nA "quoted" word\n'
    assert sampler.smi_fields(new)["clock_reasons"] == "clocks_event_reasons.active"
    assert sampler.smi_fields(new)["power_w"] == "power.draw.instant"
    assert sampler.smi_fields(new)["sm_mhz"] == "clocks.sm"
    assert sampler.smi_fields(old)["clock_reasons"] == "clocks_throttle_reasons.active"
    assert sampler.smi_fields(old)["power_w"] == "power.draw"
    assert "uuid" not in sampler.smi_fields(old)


def test_sampler_reads_nvidia_smi_cells_missing_values_are_none_and_bitmasks_hex():
    columns = ["t", "index", "uuid", "power_w", "clock_reasons", "mem_used_mib"]
    row = sampler.smi_row("2024/01/16 14:44:16.977, 1, GPU-x, 30.37, 0x0000000000000008, [N/A]", columns)
    assert row["index"] == 1 and row["power_w"] == 30.37 and row["clock_reasons"] == 8 and row["mem_used_mib"] is None
    assert row["t"] % 1 == pytest.approx(0.977, abs=1e-6)
    assert sampler.smi_row("Unable to determine the device handle for GPU 1: Unknown Error", columns) is None
    assert sampler.smi_number("[Not Supported]") is None and sampler.smi_number("nan") is None


def test_fifo_slots_reconstruct_the_clients_own_start_times():
    """vLLM saves start_times; SGLang does not: the slot reconstruction from durations alone agrees."""
    record = json.loads((FIXTURES / "clients" / "vllm_bench_serve_c8.json").read_text())
    starts = sweep.fifo_starts(list(record["latencies"]), record["max_concurrency"])
    first = min(record["start_times"])
    for derived, actual in zip(starts, record["start_times"], strict=True):
        assert derived == pytest.approx(actual - first, abs=0.02)


def test_request_times_from_vllm_start_times_and_derived_for_sglang():
    vllm = json.loads((FIXTURES / "clients" / "vllm_bench_serve_c8.json").read_text())
    rows = sweep.request_rows(vllm, "single", 8)
    assert sweep.add_times(rows, 8, vllm, {"exited": 0.0}) == "client"
    gaps = [r["start_s"] - s for r, s in zip(rows, vllm["start_times"], strict=True)]
    assert max(gaps) - min(gaps) < 1e-6 and all(r["start_s"] < r["first_token_s"] < r["end_s"] for r in rows)
    sglang = json.loads((FIXTURES / "clients" / "sglang_bench_serving_c8.jsonl").read_text().splitlines()[0])
    rows = sweep.request_rows(sglang, "single", 8)
    assert sweep.add_times(rows, 8, sglang, {"bench_start": 500.0, "exited": 510.0}) == "fifo+start_line"
    assert [r["start_s"] for r in rows[:8]] == [500.0] * 8 and min(r["start_s"] for r in rows[8:]) > 500.0
    assert max(r["end_s"] for r in rows) == pytest.approx(500.0 + sglang["duration"], abs=0.05)
    assert sweep.add_times(rows, 8, sglang, {"exited": 510.0}) == "fifo+exit"
    assert min(r["start_s"] for r in rows) == pytest.approx(510.0 - sglang["duration"])


def test_a_request_whose_client_times_do_not_read_is_a_failed_request():
    """A NaN TTFT or gap from a client is not a success with a value that sorts anywhere: the request fails,
    saying why, and counts in the failed fraction of a search (benchhost.loadsearch.completed)."""
    summary = {
        "ttfts": [0.05, float("nan"), 0.05, 0.0],
        "itls": [[0.01, 0.01], [0.01], [0.01, float("inf")], []],
        "errors": ["", "", "", ""],
        "output_lens": [3, 2, 3, 0],
    }
    rows = sweep.request_rows(summary, "single", 4)
    assert [r["ok"] for r in rows] == [True, False, False, False]
    assert rows[1]["error"].endswith("not a finite number >= 0: nan") and rows[2]["error"].endswith(": inf")
    assert rows[3]["error"] == ""  # no first token: failed, with nothing to say about times
    assert rows[0]["e2e_ms"] == pytest.approx(70.0) and rows[1]["ttft_ms"] is None


def test_request_times_of_the_local_load_generator_put_the_first_completion_at_its_line():
    rows = [{"ok": True, "ttft_ms": 10.0, "e2e_ms": e} for e in (100.0, 300.0, 200.0, 50.0)]
    rows.append({"ok": False, "ttft_ms": None, "e2e_ms": None})
    assert sweep.add_times(rows, 2, {}, {"first_end": 1000.1, "exited": 1001.0}) == "fifo+first_end"
    assert [r["start_s"] for r in rows] == pytest.approx([1000.0, 1000.0, 1000.1, 1000.3, 1000.3])
    assert min(r["end_s"] for r in rows if r["ok"]) == pytest.approx(1000.1)
    assert rows[-1]["first_token_s"] is None and rows[-1]["end_s"] is None


def test_sampler_command_quotes_every_word_and_refuses_bad_values():
    command = host.sampler_command("/opt/py env/python", "/run/x/tel; rm -rf /", 200)
    assert command == (
        "'/opt/py env/python' -m benchhost.sampler --out '/run/x/tel; rm -rf /' --period-ms 200 "
        f"--max-bytes {host.DEFAULT_MAX_BYTES}"
    )
    assert command.endswith("--max-bytes 268435456")
    assert "--marker-file /r/ready" in host.sampler_command("py", "/r", marker_file="/r/ready")
    for bad in ({"period_ms": 5}, {"period_ms": "200"}, {"period_ms": True}, {"max_bytes": 10}):
        with pytest.raises(ValueError):
            host.sampler_command("py", "/r", **bad)
    with pytest.raises(ValueError, match="one line"):
        host.sampler_command("py", "/r\nreboot")
    assert "test -e /r/ready && exit 0" in host.wait_ready_command("/r/ready", 2)
    found = host.sampler_command("py", "/r", payload="/run/x y/payload")
    prefix = "PYTHONPATH='/run/x y/payload'${PYTHONPATH:+:\"$PYTHONPATH\"}; export PYTHONPATH; exec py -m"
    assert found.startswith(prefix)
    assert "$(seq 10)" in host.wait_ready_command("/r", 1)


def test_the_column_maps_are_what_the_functions_return():
    from benchflow.kinds import kernel as kernel_kind
    from benchflow.kinds import serving as serving_kind
    from benchflow.telemetry import columns

    cfg = {**CFG, "gpus": [CFG["gpus"][0]]}
    samples = truth_samples(cfg, 0, 1000.0, 1010.0, 0.2)
    kernel = files.Phase(
        "kernel",
        1001.0,
        1002.0,
        {"m": 1, "dtype": "bf16", "timed_start": 1001.1, "timed_end": 1001.2, "timed_calls": 3},
    )
    serving = files.Phase("serving", 1001.0, 1009.0, {"config": "c", "concurrency": 2, "repeat": 1})
    reqs = [
        {**r, "config": "c", "concurrency": 2, "repeat": 1}
        for r in requests([1002.0 + k for k in range(6)], 0.1, 0.9, 8)
    ]
    (k,) = summary.kernel_rows([{"m": 1, "dtype": "bf16", "p10_ms": 1.0, "p90_ms": 1.1}], [kernel], samples)
    (s,) = summary.serving_rows([{"config": "c", "concurrency": 2, "repeat": 1}], reqs, [serving], samples)
    assert list(k) == list(kernel_kind.TELEMETRY) and list(s) == list(serving_kind.TELEMETRY)
    assert list(summary.phase_gpu_rows(samples, [kernel])[0]) == list(columns.PHASE_GPUS)
    assert list(columns.SAMPLES) == list(files.SAMPLE_COLUMNS)
    assert set(serving_kind.REQUEST_TIMES) <= set(json.loads(json.dumps(reqs[0])))
