"""The bisection's rules and its state machine, on simulated measurements: 16 commits, commit 11 is 20 %
slower, 3 % lognormal noise per value, every seed a different draw."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest

from benchflow.searches.bisection import Bisection, Budget, classify, confirm, split_points

pytestmark = pytest.mark.unit

COMMITS = 16
SLOW_FROM = 11
SHAS = [f"{n:040x}" for n in range(1, COMMITS + 1)]  # SHAS[n - 1] is commit n
SEEDS = range(50)


def number(sha: str) -> int:
    return int(sha, 16)


def measurer(seed: int, slowdown: float = 1.2, noise: float = 0.03, repeats: int = 5):
    """us/token of a commit: 100, times ``slowdown`` from commit 11 on, times lognormal noise."""
    rng = random.Random(seed)

    def measure(sha: str) -> list[float]:
        level = 100.0 * (slowdown if number(sha) >= SLOW_FROM else 1.0)
        return [level * rng.lognormvariate(0.0, noise) for _ in range(repeats)]

    return measure


def drive(bisection: Bisection, measure, through_json: bool = True) -> Bisection:
    """What the DAG does: a round of probes, each recorded, the state through XCom's JSON between rounds."""
    while True:
        if through_json:
            bisection = Bisection.from_json(json.loads(json.dumps(bisection.to_json())))
        picks = bisection.next_round(now=0.0)
        if not picks:
            return bisection
        for sha in picks:
            bisection.record(sha, measure(sha))


def new(parallel: int = 1, **kwargs) -> Bisection:
    return Bisection(good=SHAS[0], commits=SHAS[1:], better="lower", repeats=5, parallel=parallel, **kwargs)


def rounds_over_seeds(parallel: int) -> list[int]:
    rounds, covered = [], 0
    for seed in SEEDS:
        result = drive(new(parallel), measurer(seed)).result()
        assert result["status"] == "found", (seed, result["status"], result["notes"])
        assert number(result["first_bad"]) == SLOW_FROM and number(result["parent"]) == SLOW_FROM - 1, seed
        vs_parent = result["vs_parent"]
        assert vs_parent["low"] > 1 and 1.12 < vs_parent["ratio"] < 1.28, seed
        assert result["summary"].startswith(f"{result['first_bad'][:12]} is the first bad commit: 1.")
        covered += vs_parent["low"] <= 1.2 <= vs_parent["high"]
        rounds.append(result["rounds"])
    assert covered >= 0.9 * len(SEEDS)  # a 95 % interval: it holds the true 1.2 about 19 times in 20
    return rounds


def test_names_commit_11_within_the_round_bound_and_sooner_with_two_hosts():
    bound = math.ceil(math.log2(COMMITS)) + 2
    one, two = rounds_over_seeds(1), rounds_over_seeds(2)
    assert max(one) <= bound and max(two) <= bound
    # confirm + ceil(log2 15) = 5 rounds on one host, confirm + ceil(log3 15) = 4 on two
    assert statistics.median(one) == 5 and statistics.median(two) == 4
    assert sum(two) < sum(one) and max(two) < max(one)


def test_two_hosts_probe_two_commits_a_round():
    bisection = drive(new(2), measurer(0))
    assert [len(r) for r in bisection.rounds][:3] == [2, 2, 2]  # confirm's two ends, then two cuts a round


def test_noise_only_ends_not_reproduced_after_confirm():
    for seed in range(20):
        bisection = drive(new(), measurer(seed, slowdown=1.0))
        result = bisection.result()
        assert result["status"] == "not_reproduced", seed
        assert result["rounds"] == 1 and result["probes"] == 2 and bisection.rounds == [[SHAS[0], SHAS[-1]]]
        evidence = result["confirmation"]
        assert evidence["reproduced"] is False and evidence["reason"].startswith("not reproduced")
        assert result["summary"] == evidence["reason"]
        assert evidence["ratio"]["low"] <= 1.05 and evidence["ratio"]["n_a"] == 5
        assert "first_bad" not in result and "range" not in result


def test_reused_measurements_count_as_probes():
    for seed in range(20):
        plain = drive(new(), measurer(seed)).result()
        measure = measurer(seed + 1000)
        reusing = new()
        reusing.seed(SHAS[7], measure(SHAS[7]), "nightly scheduled__2026-11-28")  # commit 8: good
        reusing.seed(SHAS[12], measure(SHAS[12]), "nightly scheduled__2026-11-29")  # commit 13: bad
        result = drive(reusing, measurer(seed)).result()
        assert result["status"] == "found" and number(result["first_bad"]) == SLOW_FROM
        assert result["reused"] == 2 and result["probes"] < plain["probes"], seed
        reused = {c["sha"]: c["reused_from"] for c in result["chain"] if c["reused_from"]}
        assert reused == {SHAS[7]: "nightly scheduled__2026-11-28", SHAS[12]: "nightly scheduled__2026-11-29"}
        probed = [sha for r in drive(reusing, measurer(seed)).rounds for sha in r]
        assert SHAS[7] not in probed and SHAS[12] not in probed


def test_the_ends_are_never_reused_the_confirm_step_measures_them():
    """Whether the regression reproduces is measured by the bisection itself, both ends at one time: an earlier
    run's values (another hour, another conf) may not answer it without a probe."""
    bisection = new()
    for end in (SHAS[0], SHAS[-1]):
        with pytest.raises(ValueError, match="an end of the bisection"):
            bisection.seed(end, measurer(3)(end), "nightly a")
    assert bisection.next_round(now=0.0) == [SHAS[0], SHAS[-1]]


def test_budget_of_probes_returns_the_narrowest_range():
    result = drive(new(budget=Budget(probes=4)), measurer(1)).result()
    assert result["status"] == "range" and result["probes"] == 4
    assert result["stopped"] == "budget spent (probes: 4 used)"
    suspects = [number(s) for s in result["range"]["suspects"]]
    assert SLOW_FROM in suspects and len(suspects) < COMMITS - 1
    assert result["summary"] == f"the first bad commit is one of {len(suspects)}, after {result['range']['good'][:12]}"
    assert suspects == list(range(number(result["range"]["good"]) + 1, number(result["range"]["bad"]) + 1))


def test_budget_of_rounds_and_of_seconds():
    by_rounds = drive(new(budget=Budget(rounds=3)), measurer(2)).result()
    assert by_rounds["status"] == "range" and by_rounds["rounds"] == 3 and "rounds: 3" in by_rounds["stopped"]
    timed = new(budget=Budget(seconds=100.0))
    measure = measurer(2)
    for now in (1000.0, 1050.0):
        for sha in timed.next_round(now=now):
            timed.record(sha, measure(sha))
    assert timed.next_round(now=1100.0) == [] and timed.result()["status"] == "range"
    assert timed.stopped == "budget spent (seconds: 100 s passed)"


def test_budget_too_small_for_confirm_fails():
    bisection = new(budget=Budget(probes=1))
    assert bisection.next_round(now=0.0) == []
    assert bisection.result()["status"] == "failed" and "confirm" in str(bisection.stopped)


def test_a_failed_probe_is_skipped_and_can_leave_a_range():
    bisection, measure = new(), measurer(4)
    for sha in bisection.next_round(now=0.0):
        bisection.record(sha, measure(sha))
    while picks := bisection.next_round(now=0.0):
        for sha in picks:
            bisection.record(sha, [] if number(sha) == SLOW_FROM else measure(sha))
    result = bisection.result()
    assert result["status"] == "range"
    assert [number(s) for s in result["range"]["suspects"]] == [SLOW_FROM, SLOW_FROM + 1]
    assert any("skipped: the probe gave no valid values" in note for note in result["notes"])


def test_a_failed_end_fails_the_bisection():
    bisection = new()
    good, bad = bisection.next_round(now=0.0)
    bisection.record(good, [])
    bisection.record(bad, [120.0, 121.0])
    assert bisection.next_round(now=0.0) == [] and bisection.result()["status"] == "failed"
    assert (
        bisection.result()["summary"] == f"failed: could not measure good ({good[:12]}): the probe gave no valid values"
    )


def test_unknown_gets_more_repeats_up_to_the_limit_then_is_skipped():
    """A commit exactly halfway (10 % of a 20 % regression) is unknown at every count of repeats."""
    bisection = Bisection(good="a" * 40, commits=["b" * 40, "c" * 40], better="lower", repeats=3, max_samples=9)
    values = {"a" * 40: [100.0, 101.0, 99.0], "b" * 40: [109.5, 110.5, 110.0], "c" * 40: [120.0, 121.0, 119.0]}
    rounds = []
    while picks := bisection.next_round(now=0.0):
        rounds.append(picks)
        for sha in picks:
            bisection.record(sha, values[sha])
    assert rounds[1:] == [["b" * 40]] * 3  # 3, 6, 9 values: still halfway, then skipped
    result = bisection.result()
    assert result["status"] == "range" and result["range"]["suspects"] == ["b" * 40, "c" * 40]
    assert result["chain"][1]["verdict"] == "unknown" and result["chain"][1]["n"] == 9


def test_state_machine_discipline():
    bisection = new()
    first = bisection.next_round(now=0.0)
    with pytest.raises(RuntimeError, match="outstanding"):
        bisection.next_round(now=0.0)
    with pytest.raises(ValueError, match="not probed in this round"):
        bisection.record(SHAS[5], [1.0, 2.0])
    with pytest.raises(ValueError, match="being probed"):
        bisection.seed(first[0], [1.0, 2.0], "nightly")
    with pytest.raises(ValueError, match="not a commit of this bisection"):
        bisection.seed("f" * 40, [1.0, 2.0], "nightly")
    with pytest.raises(ValueError, match="repeats >= 2"):
        Bisection(good=SHAS[0], commits=SHAS[1:], better="lower", repeats=1)
    with pytest.raises(ValueError, match="distinct commits after good"):
        Bisection(good=SHAS[0], commits=SHAS, better="lower")


def test_json_state_is_small_and_round_trips_mid_bisection():
    bisection, measure = new(2), measurer(5)
    for _ in range(2):
        for sha in bisection.next_round(now=0.0):
            bisection.record(sha, measure(sha))
    state = json.dumps(bisection.to_json())
    assert len(state) < 4000
    back = Bisection.from_json(json.loads(state))
    assert back.to_json() == bisection.to_json() and back.result() == bisection.result()
    with pytest.raises(ValueError, match="version"):
        Bisection.from_json({**json.loads(state), "version": 99})


def test_a_probe_taken_back_costs_nothing_and_is_probed_again():
    bisection = new(2)
    ends = bisection.next_round(now=0.0)
    bisection.retract(ends[0])
    assert bisection.outstanding == ends[1:] and bisection.probes == 1 and bisection.rounds == [ends[1:]]
    bisection.record(ends[1], measurer(5)(ends[1]))
    assert bisection.next_round(now=0.0) == [ends[0]]  # its host was down: the confirm step measures it again


def test_higher_is_better_metric_bisects_the_same():
    slower = measurer(6)

    def tok_per_s(sha: str) -> list[float]:
        return [1e6 / v for v in slower(sha)]

    bisection = Bisection(good=SHAS[0], commits=SHAS[1:], better="higher", repeats=5)
    result = drive(bisection, tok_per_s).result()
    assert result["status"] == "found" and number(result["first_bad"]) == SLOW_FROM
    assert result["vs_parent"]["high"] < 1


def test_round_bound_without_unknowns():
    """Every position of the first bad commit, for N commits and k hosts: 1 + ceil(log_{k+1} N) rounds."""
    for k in (1, 2, 3):
        for n in [*range(1, 10), 15, 16, 33]:
            needed = next(t for t in range(n + 1) if (k + 1) ** t >= n)
            shas = [f"{i:040x}" for i in range(n + 1)]
            for first in range(1, n + 1):

                def exact(sha: str, first: int = first) -> list[float]:
                    level = 120.0 if int(sha, 16) >= first else 100.0
                    return [level * 0.999, level, level * 1.001]

                bisection = Bisection(good=shas[0], commits=shas[1:], better="lower", repeats=3, parallel=k)
                result = drive(bisection, exact, through_json=False).result()
                assert result["status"] == "found" and int(result["first_bad"], 16) == first
                assert result["rounds"] <= 1 + needed and result["probes"] <= 2 + k * needed, (k, n, first)


def test_classify_rule():
    good, bad = [100.0, 101.0, 99.0, 100.5], [120.0, 121.0, 119.0, 120.5]
    assert classify([100.2, 99.5, 100.8], good, bad, "lower").verdict == "same_as_good"
    assert classify([119.0, 120.4, 121.2], good, bad, "lower").verdict == "same_as_bad"
    assert classify([135.0, 136.0, 134.0], good, bad, "lower").verdict == "same_as_bad"  # worse still: bad's side
    assert classify([97.0, 98.0, 96.5], good, bad, "lower").verdict == "same_as_good"  # better than good
    halfway = classify([109.0, 110.5, 110.0], good, bad, "lower")
    assert halfway.verdict == "unknown" and "midpoint" in halfway.reason
    noisy = classify([80.0, 140.0], good, bad, "lower")
    assert noisy.verdict == "unknown" and noisy.vs_good is not None and noisy.vs_good.low < 1 < noisy.vs_good.high
    assert classify([100.0], good, bad, "lower").verdict == "unknown"
    same = classify([119.5, 120.5, 120.0], good, bad, "lower")
    assert same.vs_good is not None and same.vs_bad is not None
    assert same.vs_good.low > 1.15 and same.vs_bad.low < 1 < same.vs_bad.high and same.test.startswith("Welch")
    inverse = [[1e4 / v for v in side] for side in (good, bad, [119.0, 120.4, 121.2])]
    assert classify(inverse[2], inverse[0], inverse[1], "higher").verdict == "same_as_bad"


def test_confirm_rule():
    good = [100.0, 101.0, 99.0, 100.5]
    assert confirm(good, [120.0, 121.0, 119.0, 120.5], "lower").reproduced
    small = confirm(good, [103.0, 103.5, 102.5, 103.2], "lower")
    assert not small.reproduced and "under 5 %" in small.reason and small.ratio is not None
    assert small.ratio.low > 1  # beyond noise, but under min_change
    better = confirm(good, [80.0, 81.0, 79.0, 80.5], "lower")
    assert not better.reproduced and "better" in better.reason
    assert not confirm(good, [100.0], "lower").reproduced


def test_split_points_cut_the_range_evenly():
    assert split_points(range(1, 16), 0, 16, 1) == [8]
    assert split_points(range(1, 16), 0, 16, 3) == [4, 8, 12]
    assert split_points([3, 9], 0, 16, 1) == [9]  # nearest to 8
    assert split_points([2, 3], 0, 16, 4) == [2, 3]
    assert split_points(range(5, 9), 4, 9, 2) == [5, 7]
