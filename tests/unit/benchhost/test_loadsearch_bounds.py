"""The load search's statistics (benchhost.loadsearch): binomial probabilities against exact
rational arithmetic, the order-statistic and Clopper–Pearson bounds against published values and by their
coverage in simulation, the smallest probe per percentile, SLO keys, and a probe's verdict."""

from __future__ import annotations

import json
import math
import random
from fractions import Fraction

import pytest

from benchhost import loadsearch as ls

pytestmark = pytest.mark.unit


def exact_cdfs(n: int, p: Fraction) -> list[Fraction]:
    """``P(Bin(n, p) <= k)`` for every k, in exact rational arithmetic."""
    a, b = p.numerator, p.denominator
    total, out = 0, []
    for i in range(n + 1):
        total += math.comb(n, i) * a**i * (b - a) ** (n - i)
        out.append(Fraction(total, b**n))
    return out


def exact_cdf(k: int, n: int, p: Fraction) -> Fraction:
    return exact_cdfs(n, p)[k]


@pytest.mark.parametrize("p", [Fraction(1, 2), Fraction(9, 10), Fraction(99, 100), Fraction(1, 100)])
@pytest.mark.parametrize("n", [1, 7, 40, 299])
def test_binomial_cdf_is_the_exact_sum(n, p):
    cdfs, exact = ls.binomial_cdfs(n, float(p)), exact_cdfs(n, p)
    assert len(cdfs) == n + 1 and cdfs[-1] == pytest.approx(1.0, abs=1e-12)
    for k in range(0, n + 1):
        assert cdfs[k] == pytest.approx(float(exact[k]), rel=1e-12, abs=1e-300)
        assert ls.binomial_cdf(k, n, float(p)) == pytest.approx(cdfs[k], rel=1e-12)
    assert ls.binomial_cdf(-1, n, float(p)) == 0.0


def test_order_statistic_ranks_of_the_median_match_the_published_table():
    # n = 20: the median lies in [x_(6), x_(15)] (Conover, Practical Nonparametric Statistics, table A3):
    # P(Bin(20, .5) <= 14) = 0.9793 and P(Bin(20, .5) <= 13) = 0.9423, so 15 is the 95 % upper rank.
    assert ls.upper_rank(20, 0.5, 0.95) == 15 and ls.lower_rank(20, 0.5, 0.95) == 6
    assert float(exact_cdf(14, 20, Fraction(1, 2))) == pytest.approx(0.9793, abs=1e-4)
    assert float(exact_cdf(13, 20, Fraction(1, 2))) == pytest.approx(0.9423, abs=1e-4)


@pytest.mark.parametrize(("n", "p"), [(20, 0.5), (60, 0.9), (299, 0.99), (400, 0.99), (1000, 0.999), (50, 0.1)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_ranks_are_the_extreme_ones_that_reach_the_confidence(n, p, confidence):
    """The upper rank is the smallest k with P(Bin <= k-1) >= conf and the lower the largest j with
    P(Bin >= j) >= conf, both by exact rational arithmetic."""
    exact, conf = exact_cdfs(n, Fraction(p).limit_denominator(10_000)), Fraction(confidence)
    up, low = ls.upper_rank(n, p, confidence), ls.lower_rank(n, p, confidence)
    ranks = range(1, n + 1)
    want_up = next((k for k in ranks if exact[k - 1] >= conf), None)
    want_low = next((j for j in reversed(ranks) if 1 - exact[j - 1] >= conf), None)
    assert (up, low) == (want_up, want_low)
    if up is not None and low is not None:
        assert low < up  # confidence > 1/2: the two bounds never cross


def test_clopper_pearson_matches_published_values():
    # k = 5 of 10: the two-sided 95 % interval (0.1871, 0.8129) is two one-sided 97.5 % bounds.
    five = ls.proportion_bounds(5, 10, 0.975)
    assert (five.lower, five.estimate, five.upper) == pytest.approx((0.18709, 0.5, 0.81291), abs=1e-5)
    # None of n failed: the upper bound is 1 - (1 - conf)^(1/n) (the "rule of three" ~ 3/n).
    for n in (10, 59, 299, 1000):
        none = ls.proportion_bounds(0, n, 0.95)
        assert none.lower == 0.0 and none.upper == pytest.approx(1 - 0.05 ** (1 / n), rel=1e-9)
    assert ls.proportion_bounds(0, 299, 0.95).upper < 0.01 < ls.proportion_bounds(0, 298, 0.95).upper
    every = ls.proportion_bounds(10, 10, 0.95)
    assert every.upper == 1.0 and every.lower == pytest.approx(0.05 ** (1 / 10), rel=1e-9)
    assert ls.proportion_bounds(0, 0).upper is None


def test_bounds_widen_with_confidence_and_narrow_with_data():
    rng = random.Random(7)
    values = [rng.lognormvariate(3, 0.5) for _ in range(2000)]
    for p in (0.5, 0.9, 0.99):
        looser, tighter = ls.quantile_bounds(values, p, 0.99), ls.quantile_bounds(values, p, 0.9)
        assert looser.lower <= tighter.lower <= tighter.estimate <= tighter.upper <= looser.upper
        more = ls.quantile_bounds(values * 3, p, 0.95)
        fewer = ls.quantile_bounds(values, p, 0.95)
        assert more.upper - more.lower <= fewer.upper - fewer.lower
    uppers = [ls.proportion_bounds(k, 500, 0.95).upper for k in range(0, 60)]
    assert uppers == sorted(uppers)
    assert [ls.proportion_bounds(0, n).upper for n in (50, 100, 400)] == sorted(
        [ls.proportion_bounds(0, n).upper for n in (50, 100, 400)], reverse=True
    )


def test_quantile_bounds_cover_the_true_percentile_as_often_as_promised():
    """Exponential samples (q_p = -ln(1 - p)): the share of trials whose bound holds is the exact
    binomial coverage, at least the confidence, within sampling error (fixed seed)."""
    rng, trials, n, p = random.Random(2024), 3000, 300, 0.99
    truth = -math.log(1 - p)
    up, low = ls.upper_rank(n, p), ls.lower_rank(n, p)
    exact_up = ls.binomial_cdf(up - 1, n, p)
    exact_low = 1 - ls.binomial_cdf(low - 1, n, p)
    held_up = held_low = 0
    for _ in range(trials):
        bounds = ls.quantile_bounds([rng.expovariate(1.0) for _ in range(n)], p)
        held_up += truth <= bounds.upper
        held_low += bounds.lower <= truth
    for held, exact in ((held_up, exact_up), (held_low, exact_low)):
        assert exact >= 0.95
        sigma = math.sqrt(exact * (1 - exact) / trials)
        assert abs(held / trials - exact) <= 4 * sigma


def test_failed_fraction_bounds_cover_the_true_rate():
    rng, trials, n, rate = random.Random(11), 3000, 400, 0.01
    held_up = held_low = 0
    for _ in range(trials):
        failed = sum(rng.random() < rate for _ in range(n))
        bounds = ls.proportion_bounds(failed, n)
        held_up += rate <= bounds.upper
        held_low += bounds.lower <= rate
    sigma = math.sqrt(0.95 * 0.05 / trials)
    assert held_up / trials >= 0.95 - 4 * sigma and held_low / trials >= 0.95 - 4 * sigma


@pytest.mark.parametrize(
    ("percentile", "confidence", "smallest"),
    [(0.99, 0.95, 299), (0.5, 0.95, 5), (0.9, 0.95, 29), (0.95, 0.95, 59), (0.999, 0.95, 2995), (0.99, 0.99, 459)],
)
def test_min_requests_is_the_smallest_probe_that_can_decide(percentile, confidence, smallest):
    assert ls.min_requests(percentile, confidence) == smallest
    assert ls.upper_rank(smallest, percentile, confidence) and ls.lower_rank(smallest, percentile, confidence)
    below = smallest - 1
    assert not (ls.upper_rank(below, percentile, confidence) and ls.lower_rank(below, percentile, confidence))


def test_min_requests_refuses_what_is_not_a_percentile():
    for percentile, confidence in ((0.0, 0.95), (1.0, 0.95), (0.99, 0.5), (0.99, 1.0)):
        with pytest.raises(ValueError):
            ls.min_requests(percentile, confidence)


def test_slo_keys():
    assert ls.parse_objective("p99_ttft_ms", 2000) == ls.Objective("p99_ttft_ms", 2000.0, 0.99, "ttft")
    assert ls.parse_objective("p99.9_e2e_ms", 5).percentile == pytest.approx(0.999)
    assert ls.parse_objective("p50_itl_ms", 5).metric == "itl"
    assert ls.parse_objective("max_failed_fraction", 0.01) == ls.Objective("max_failed_fraction", 0.01)
    for key, limit in (
        ("p99_foo_ms", 1),
        ("p100_ttft_ms", 1),
        ("p0_ttft_ms", 1),
        ("p99_ttft", 1),
        ("mean_ttft_ms", 1),
        ("p99_ttft_ms", 0),
        ("p99_ttft_ms", math.inf),
        ("p99_ttft_ms", True),
        ("max_failed_fraction", 1.0),
    ):
        with pytest.raises(ValueError, match=key.split("_")[0]):
            ls.parse_objective(key, limit)
    with pytest.raises(ValueError, match="no objective"):
        ls.parse_slo({})


def test_undersized_names_each_objective_and_its_minimum():
    slo = {"p99_ttft_ms": 2000, "p50_tpot_ms": 80, "max_failed_fraction": 0.01}
    assert ls.undersized(slo, 400) == []
    reasons = ls.undersized(slo, 100)
    assert reasons == [
        "p99_ttft_ms: a P99 bound at 95 % confidence needs at least 299 requests per probe, prompts_per_probe is 100",
        "max_failed_fraction: a bound at 0.01 at 95 % confidence needs at least 299 requests per probe, "
        "prompts_per_probe is 100",
    ]
    assert "at least 459" in ls.undersized({"p99_tpot_ms": 80}, 400, 0.99)[0]
    assert "never" in ls.undersized({"max_failed_fraction": 0}, 10_000)[0]


def row(ttft: float, e2e: float, tokens: int = 16, ok: bool = True) -> dict:
    return {"ok": ok, "ttft_ms": ttft if ok else None, "e2e_ms": e2e if ok else None, "output_tokens": tokens}


def test_tpot_per_request_is_the_decode_time_over_the_tokens_after_the_first():
    assert ls.request_value(row(100, 400, 16), "tpot") == 20.0
    assert ls.request_value(row(100, 400, 1), "tpot") is None
    assert ls.request_value(row(100, 400), "ttft") == 100 and ls.request_value(row(100, 400), "e2e") == 400
    assert ls.request_value({"ok": True, "mean_itl_ms": 7.5}, "itl") == 7.5
    assert ls.request_value(row(0, 0, ok=False), "ttft") is None


def test_judge_probe_pass_fail_and_undecided():
    slo = {"p99_tpot_ms": 30, "max_failed_fraction": 0.01}
    fast = [row(50, 50 + 15 * 20) for _ in range(300)]
    verdict = ls.judge_probe(fast, slo)
    assert verdict.verdict == "pass" and verdict.requests == 300 and verdict.failed == 0
    assert [c.verdict for c in verdict.checks] == ["pass", "pass"]
    assert verdict.checks[0].upper == pytest.approx(20.0) and json.dumps(ls.asdict(verdict))
    slow = [row(50, 50 + 15 * 40) for _ in range(300)]
    assert ls.judge_probe(slow, slo).verdict == "fail"
    # 297 at 20 ms and 3 at 40: the P99 upper bound is x_(300) (40 ms), the lower x_(294) (20 ms).
    edge = fast[:297] + slow[:3]
    assert ls.upper_rank(300, 0.99) == 300 and ls.lower_rank(300, 0.99) == 294
    judged = ls.judge_probe(edge, slo)
    assert judged.verdict == "undecided" and (judged.checks[0].lower, judged.checks[0].upper) == (20.0, 40.0)
    assert "p99_tpot_ms 20…40 vs 30: undecided" in judged.text()


def test_failed_requests_count_in_the_failed_fraction_not_in_the_percentiles():
    slo = {"p99_ttft_ms": 100, "max_failed_fraction": 0.01}
    rows = [row(50, 400) for _ in range(290)] + [row(0, 0, ok=False) for _ in range(10)]
    verdict = ls.judge_probe(rows, slo)
    ttft, failed = verdict.checks
    assert ttft.n == 290 and failed.n == 300 and failed.estimate == pytest.approx(10 / 300)
    assert failed.verdict == "fail" and failed.lower > 0.01 and verdict.verdict == "fail"
    assert ls.judge_probe([row(0, 0, ok=False)] * 400, {"p50_ttft_ms": 100}).verdict == "fail"


def test_an_slo_without_a_failed_fraction_still_fails_a_server_that_fails_requests():
    """Percentiles are over completed requests: a server failing 70 % fast would pass on latency alone."""
    slo = {"p50_ttft_ms": 100}
    rows = [row(50, 400) for _ in range(120)] + [row(0, 0, ok=False) for _ in range(280)]
    judged = ls.judge_probe(rows, slo)
    default, ttft = judged.checks
    assert default.key == "max_failed_fraction (default)" and default.limit == ls.DEFAULT_MAX_FAILED == 0.01
    assert default.verdict == "fail" and ttft.verdict == "pass" and judged.verdict == "fail"
    assert "max_failed_fraction (default) 0.66…0.7377 vs 0.01: fail" in judged.text()
    # A small probe with nothing failed passes although 20 requests cannot bound 1 %; one failure in 20 is more
    # than 1 % seen, so the probe is undecided (repeats pool more requests) rather than passed.
    assert ls.judge_probe([row(50, 400)] * 20, slo).verdict == "pass"
    assert ls.judge_probe([row(50, 400)] * 19 + [row(0, 0, ok=False)], slo).verdict == "undecided"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -5.0])
def test_a_request_whose_latency_does_not_read_is_a_failed_request(bad):
    """A NaN from the client is not a success: it would sort anywhere and break the order statistics (a probe
    whose true P99 was 5 s passed a 2 s SLO)."""
    slo = {"p99_e2e_ms": 2000, "max_failed_fraction": 0.05}
    slow = [row(100, 5000) for _ in range(10)]  # the true P99 is 5 s
    rows = [row(100, 900) for _ in range(290)] + slow
    for r in slow:
        r["e2e_ms"] = bad
    judged = ls.judge_probe(rows, slo)
    e2e, failed = judged.checks
    assert judged.failed == 10 and e2e.n == 290 and failed.estimate == pytest.approx(10 / 300)
    assert ls.request_value(slow[0], "e2e") is None and not ls.completed(slow[0])
    assert ls.good_requests(rows, slo) == 290


def test_an_undersized_probe_can_never_pass():
    slo = {"p99_ttft_ms": 100}
    assert ls.judge_probe([row(1, 2)] * 298, slo).verdict == "undecided"
    assert ls.judge_probe([row(1, 2)] * 299, slo).verdict == "pass"
    assert ls.judge_probe([row(500, 600)] * 10, slo).verdict == "fail"  # a fail needs only a few requests


def test_good_requests_meet_every_latency_limit():
    slo = {"p99_ttft_ms": 100, "p50_tpot_ms": 30, "max_failed_fraction": 0.05}
    rows = [row(50, 50 + 15 * 20), row(150, 150 + 15 * 20), row(50, 50 + 15 * 40), row(0, 0, ok=False)]
    assert ls.good_requests(rows, slo) == 1
