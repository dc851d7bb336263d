"""Change points of a nightly series (E-divisive means, Apache Otava's implementation, on this project's numpy and
scipy): generated 30-night histories with 1 % noise. A 3 % step at night 20 is found at night 20 (±1) with the
commits around it and an interval that excludes no change; a drift of 0.5 % a night is suspected nights before the
per-night check fires; pure noise has no change point."""

from __future__ import annotations

import random

import pytest

from benchflow.nightly.changepoints import Night, change_points, left_out, suspected_drift
from benchflow.nightly.regressions import judge
from benchflow.spec import RegressionLimits

pytestmark = pytest.mark.unit

SEEDS = range(4)


def series(level, seed: int) -> list[Night]:
    rng = random.Random(seed)
    return [Night(f"n{i:02d}", f"r{i}", 100 * level(i) * (1 + 0.01 * rng.gauss(0, 1)), f"c{i:02d}") for i in range(30)]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_three_percent_step_is_found_at_its_night_with_its_commits(seed):
    nights = series(lambda i: 0.97 if i >= 20 else 1.0, seed)
    (point,) = change_points(nights, "higher")
    assert point.index in (19, 20, 21) and point.worse
    assert (point.good_commit, point.bad_commit) == (f"c{point.index - 1:02d}", f"c{point.index:02d}")
    assert point.ratio == pytest.approx(0.97, abs=0.01) and point.ratio_high < 1 < 1.0 / point.ratio_low
    assert point.p_value <= 0.001 and point.night == f"n{point.index:02d}"
    said = point.text()
    assert said.startswith(f"{point.ratio - 1:+.1%} from night n{point.index:02d} (95 % CI ") and said.endswith(
        f"commits c{point.index - 1:02d}..c{point.index:02d}"
    ), said


@pytest.mark.parametrize("seed", SEEDS)
def test_a_slow_drift_is_suspected_before_the_per_night_check_fires(seed):
    values = [n.value for n in series(lambda i: 1 - 0.005 * i, seed)]
    limits = RegressionLimits()

    def suspected(k: int) -> bool:
        nights = [Night(str(i), str(i), v) for i, v in enumerate(values[:k])]
        return suspected_drift(change_points(nights, "higher"), k, limits.lookback) is not None

    def fires(k: int) -> bool:
        baseline = values[max(0, k - 1 - limits.lookback) : k - 1]
        return judge(values[k - 1], baseline, "output_throughput", limits) is not None

    first_suspected = next(k for k in range(8, 31) if suspected(k))
    first_fired = next((k for k in range(limits.min_runs + 1, 31) if fires(k)), 31)
    assert first_suspected < first_fired, (first_suspected, first_fired)


@pytest.mark.parametrize("seed", SEEDS)
def test_pure_noise_has_no_change_point_in_thirty_nights(seed):
    assert change_points(series(lambda i: 1.0, seed), "higher") == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1.0])
@pytest.mark.parametrize("at", [3, 12, 25])
def test_a_night_that_is_no_measurement_never_hides_a_step_and_is_left_out_by_name(bad, at):
    """A 50 % step at night 20 is found whatever single night holds a NaN, an infinity, a 0 or a negative value; the
    point's night and commits are those of the series as given, and the bad night is the one left out."""
    nights = series(lambda i: 0.5 if i >= 20 else 1.0, 0)
    nights[at] = Night(nights[at].night, nights[at].run_id, bad, nights[at].commit)
    (point,) = change_points(nights, "higher")
    assert point.index in (19, 20, 21) and point.worse and point.night == f"n{point.index:02d}"
    before = point.index - 1 if point.index - 1 != at else point.index - 2  # the last night measured before it
    assert point.good_commit == f"c{before:02d}" and point.ratio == pytest.approx(0.5, abs=0.02)
    assert left_out(nights) == [nights[at]]
