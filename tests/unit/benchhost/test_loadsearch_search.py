"""The load search's state machine (benchhost.loadsearch) against simulated servers whose SLO
boundary is known: it converges within the precision and within the probe count a binary search implies,
spends its repeats near the boundary when the server is noisy, and stops ``budget`` or ``range`` with the
bracket it has."""

from __future__ import annotations

import json
import math
import random

import pytest

from benchhost import loadsearch as ls

pytestmark = pytest.mark.unit

TOKENS = 16
Z99 = 2.3263478740408408  # the standard normal's 99th percentile


class BatchServer:
    """The tiny server's capacity model: TPOT = step · ceil(load / batch), the same for every request."""

    def __init__(self, batch: int, step_ms: float = 20.0):
        self.batch, self.step_ms = batch, step_ms

    def tpot(self, load: float) -> float:
        return self.step_ms * math.ceil(load / self.batch)

    def __call__(self, load: float, repeat: int, n: int = 300) -> ls.ProbeData:
        tpot = self.tpot(load)
        e2e = 10 + tpot * (TOKENS - 1)
        rows = [{"ok": True, "ttft_ms": 10.0, "e2e_ms": e2e, "output_tokens": TOKENS} for _ in range(n)]
        duration = n * e2e / 1e3 / load
        return ls.ProbeData(rows, duration, duration + 2.0)


class NoisyServer:
    """TPOT = scale · load · lognormal(0, sigma) per request: its P99 reaches ``limit`` at load ``boundary``."""

    def __init__(self, boundary: float, limit: float, sigma: float, seed: int, n: int = 300):
        self.scale = limit / (boundary * math.exp(sigma * Z99))
        self.sigma, self.n, self.random = sigma, n, random.Random(seed)

    def p99(self, load: float) -> float:
        return self.scale * load * math.exp(self.sigma * Z99)

    def __call__(self, load: float, repeat: int) -> ls.ProbeData:
        rows = []
        for _ in range(self.n):
            tpot = self.scale * load * self.random.lognormvariate(0.0, self.sigma)
            rows.append({"ok": True, "ttft_ms": 10.0, "e2e_ms": 10 + tpot * (TOKENS - 1), "output_tokens": TOKENS})
        return ls.ProbeData(rows, duration_s=self.n / load, seconds=self.n / load + 2.0)


TPOT_SLO = {"p99_tpot_ms": 30.0, "max_failed_fraction": 0.01}


UNLIMITED = ls.Budget()


def search(server, low=1, high=512, precision=0.1, repeats=3, budget=UNLIMITED, over="concurrency", slo=TPOT_SLO):
    state = ls.Search(over, low, high, precision, repeats, budget)
    return ls.run_search(state, server, slo)


def test_the_tiny_servers_boundary_is_found_by_growth_then_bisection():
    """B = 8, T = 20 ms: TPOT 20 ms up to 8, 40 ms from 9; the 30 ms limit lies between 8 and 9."""
    result = search(BatchServer(8))
    assert [s.load for s in result.trail] == [1, 2, 4, 8, 16, 12, 10, 9]
    assert [s.verdict for s in result.trail] == ["pass"] * 4 + ["fail"] * 4
    assert (result.reason, result.pass_load, result.fail_load, result.fail_verdict) == ("converged", 8, 9, "fail")
    assert result.probes == result.loads == 8 <= ls.load_bound(1, 512, 0.1, integer=True)
    answer = result.trail[3]
    assert result.goodput_rps == pytest.approx(answer.pooled / answer.duration_s)
    assert json.loads(json.dumps(result.to_dict()))["trail"][3]["checks"][0]["upper"] == pytest.approx(20.0)


@pytest.mark.parametrize("batch", [1, 2, 3, 5, 7, 8, 13, 21, 34, 55, 100, 181, 300, 511])
@pytest.mark.parametrize("precision", [0.05, 0.1, 0.25])
def test_concurrency_converges_within_the_precision_and_the_binary_search_bound(batch, precision):
    result = search(BatchServer(batch), precision=precision)
    assert result.reason == "converged"
    assert result.pass_load <= batch < result.fail_load  # the truth is inside the bracket
    width = result.fail_load - result.pass_load
    assert width <= precision * result.pass_load or width == 1
    assert result.probes == result.loads <= ls.load_bound(1, 512, precision, integer=True)


@pytest.mark.parametrize("boundary", [0.7, 1.0, 3.0, 5.5, 17.3, 40.0, 63.0])
def test_request_rate_converges_on_a_continuous_boundary(boundary):
    """TPOT proportional to the rate, no noise: P99 = 30 ms exactly at ``boundary`` req/s."""
    server = NoisyServer(boundary, 30.0, sigma=0.0, seed=0)
    result = search(server, low=0.5, high=64.0, over="request_rate")
    assert result.reason == "converged" and result.fail_verdict == "fail"
    assert server.p99(result.pass_load) <= 30.0 < server.p99(result.fail_load)
    assert (result.fail_load - result.pass_load) / result.pass_load <= 0.1
    assert result.probes == result.loads <= ls.load_bound(0.5, 64.0, 0.1, integer=False)
    assert all(isinstance(s.load, float) for s in result.trail)


def test_load_bound_is_growth_plus_bisection():
    # [1, 512]: 1, 2, ..., 512 is 10 loads; 1/0.1 halves 4 times, whole numbers one more.
    assert ls.load_bound(1, 512, 0.1, integer=True) == 10 + 4 + 1
    assert ls.load_bound(0.5, 64, 0.1, integer=False) == 8 + 4
    assert ls.load_bound(1, 32, 0.25, integer=False) == 6 + 2


@pytest.mark.parametrize("seed", range(12))
def test_with_noise_the_search_repeats_near_the_boundary_and_still_converges(seed):
    """Lognormal TPOT (sigma 0.3), 300 requests per probe: far from the boundary one probe decides; near it
    the bounds straddle the limit and repeats are pooled. The answer's true P99 is within the limit."""
    boundary = 20.0
    server = NoisyServer(boundary, 30.0, sigma=0.3, seed=seed)
    result = search(server, low=1, high=256, precision=0.1, repeats=3)
    assert result.reason == "converged"
    assert server.p99(result.pass_load) <= 30.0
    assert (result.fail_load - result.pass_load) / result.pass_load <= 0.1 or result.fail_load - result.pass_load == 1
    assert result.pass_load >= boundary * 0.8  # it does not stop far below the boundary either
    assert result.loads <= ls.load_bound(1, 256, 0.1, integer=True)
    assert result.probes <= 3 * result.loads
    repeated = {s.load for s in result.trail if s.repeat > 1}
    assert all(abs(load / boundary - 1) <= 0.25 for load in repeated)
    for step in result.trail:
        if step.repeat > 1:
            assert step.pooled == 300 * step.repeat  # the repeats' requests are pooled


def test_noise_costs_repeats_that_a_quiet_server_does_not():
    def probes(sigma: float) -> tuple[int, int]:
        totals = [search(NoisyServer(20.0, 30.0, sigma, seed), high=256) for seed in range(12)]
        return sum(r.probes for r in totals), sum(r.loads for r in totals)

    quiet_probes, quiet_loads = probes(0.0)
    noisy_probes, noisy_loads = probes(0.3)
    assert quiet_probes == quiet_loads
    assert noisy_probes > noisy_loads


def scripted(verdicts: dict[float, str], default: str = "pass") -> ls.Search:
    """Run a Search directly with a verdict per load, as a sequence of (load, repeat) probes."""
    state = ls.Search("concurrency", 1, 64, 0.1, 3, ls.Budget())
    while (probe := state.next_probe()) is not None:
        state.record(probe.load, verdicts.get(probe.load, "fail" if probe.load > 6 else default))
    return state


def test_a_load_still_undecided_after_its_repeats_bounds_the_bracket_as_undecided():
    state = scripted({6: "undecided"})
    assert state.reason == "converged"
    assert (state.pass_load, state.fail_load, state.fail_verdict) == (5, 6, "undecided")
    # 1 2 4 8 | 6 6 6 (undecided: treated as a fail) | 5
    assert state.probes == 8


def test_an_undecided_probe_decided_by_its_repeat_counts_once_as_a_load():
    seen = []
    state = ls.Search("concurrency", 1, 64, 0.1, 3, ls.Budget())
    answers = {(4, 1): "undecided", (4, 2): "pass"}
    while (probe := state.next_probe()) is not None:
        seen.append((probe.load, probe.repeat))
        state.record(probe.load, answers.get((probe.load, probe.repeat), "pass" if probe.load <= 4 else "fail"))
    assert seen == [(1, 1), (2, 1), (4, 1), (4, 2), (8, 1), (6, 1), (5, 1)]
    assert (state.reason, state.pass_load, state.fail_load) == ("converged", 4, 5)


def test_a_small_probe_budget_stops_with_the_bracket_so_far():
    result = search(BatchServer(8), budget=ls.Budget(probes=3))
    assert result.reason == "budget" and result.probes == 3
    assert (result.pass_load, result.fail_load) == (4, None)  # a bracket open above, never a single number
    result = search(BatchServer(8), budget=ls.Budget(probes=6))
    assert (result.reason, result.pass_load, result.fail_load) == ("budget", 8, 12)


def test_a_seconds_budget_counts_each_probes_seconds():
    # Each probe of BatchServer(8) costs its duration + 2 s: 1 → 92 s, 2 → 47 s, 4 → 24.5 s ...
    result = search(BatchServer(8), budget=ls.Budget(seconds=100.0))
    assert result.reason == "budget" and [s.load for s in result.trail] == [1, 2]
    assert result.seconds == pytest.approx(sum(s.seconds for s in result.trail))
    assert result.seconds >= 100.0


def test_a_range_whose_top_passes_stops_range():
    result = search(BatchServer(1000), high=100)
    assert [s.load for s in result.trail] == [1, 2, 4, 8, 16, 32, 64, 100]
    assert (result.reason, result.pass_load, result.fail_load) == ("range", 100, None)


def test_a_range_whose_bottom_fails_stops_range():
    result = search(BatchServer(8), low=16, high=64)
    assert (result.reason, result.pass_load, result.fail_load, result.probes) == ("range", None, 16, 1)
    assert result.goodput_rps is None


def test_a_probe_without_data_is_undecided_and_repeated():
    calls = []

    def broken(load: float, repeat: int) -> ls.ProbeData:
        calls.append((load, repeat))
        if load == 2:
            return ls.ProbeData([], 0.0, 1.0, error="the client failed: no data")
        return BatchServer(8)(load, repeat)

    result = ls.run_search(ls.Search("concurrency", 1, 64, 0.1, 2), broken, TPOT_SLO)
    assert calls[:3] == [(1, 1), (2, 1), (2, 2)]
    assert (result.reason, result.pass_load, result.fail_load, result.fail_verdict) == ("converged", 1, 2, "undecided")
    assert result.trail[1].error and result.trail[1].goodput_rps is None


def test_the_state_machine_refuses_what_it_did_not_ask_for():
    state = ls.Search("concurrency", 1, 64)
    with pytest.raises(ValueError, match="no probe at 2"):
        state.record(2, "pass")
    for bad in (
        dict(over="tokens", low=1, high=8),
        dict(over="concurrency", low=8, high=8),
        dict(over="concurrency", low=0, high=8),
        dict(over="concurrency", low=1.5, high=8),
        dict(over="request_rate", low=1, high=8, precision=1.0),
        dict(over="request_rate", low=1, high=8, repeats=0),
    ):
        with pytest.raises(ValueError):
            ls.Search(**bad)


def test_the_plan_reads_the_specs_section_and_refuses_an_undersized_probe():
    section = {
        "over": "concurrency",
        "range": [1, 256],
        "slo": {"p99_ttft_ms": 2000, "p99_tpot_ms": 80, "max_failed_fraction": 0.01},
        "precision": 0.1,
        "prompts_per_probe": 400,
        "repeats": 3,
        "budget": {"probes": 30, "seconds": 3600},
    }
    plan = ls.Plan.from_dict(section)
    assert plan.search().budget == ls.Budget(30, 3600) and plan.to_dict() == {**section, "confidence": 0.95}
    with pytest.raises(ValueError, match=r"p99_ttft_ms: a P99 bound .* needs at least 299 requests"):
        ls.Plan.from_dict({**section, "prompts_per_probe": 100})
    with pytest.raises(ValueError, match="0 < low < high"):
        ls.Plan.from_dict({**section, "range": [64, 8]})


def test_a_rate_bracket_narrower_than_the_clients_digits_stops_converged():
    """Rates go to the client with 6 significant digits: a precision finer than that still ends."""
    server = NoisyServer(3.14159265, 30.0, sigma=0.0, seed=0)
    result = search(server, low=1.0, high=8.0, precision=1e-9, over="request_rate")
    assert result.reason == "converged" and result.probes < 40
    assert float(f"{result.pass_load:.6g}") == result.pass_load and result.pass_load <= 3.14159265 < result.fail_load


def test_judging_needs_a_confidence_above_one_half():
    with pytest.raises(ValueError, match="confidence"):
        ls.judge_probe([], {"p50_ttft_ms": 1}, 0.5)
