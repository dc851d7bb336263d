"""Which commit ranges a night bisects by itself: at most ``per_night`` new ones, and a range bisected on an earlier
night never takes a slot from a newer one."""

from __future__ import annotations

import pytest

from benchflow.nightly.auto_bisect import bisect_run_id, choose

pytestmark = pytest.mark.unit

OLD, NEW = ("a" * 40, "b" * 40), ("c" * 40, "d" * 40)  # the old regression (20 %), the new one (5 %), largest first


def test_a_smaller_later_regression_is_bisected_while_the_old_one_stays_in_the_window():
    runs = {r: bisect_run_id("toy", *r) for r in (OLD, NEW)}
    assert choose(runs, set(), 1) == {OLD: runs[OLD]}  # the first night: the largest range
    later = choose(runs, {runs[OLD]}, 1)  # a later night: the old range is still found, and was bisected
    assert later == {OLD: runs[OLD], NEW: runs[NEW]}  # both linked; only the new one is new
    assert set(later.values()) - {runs[OLD]} == {runs[NEW]}
    assert choose(runs, set(runs.values()), 1) == runs  # both bisected: nothing new, every suspect still linked
    assert choose(runs, set(), 2) == runs and choose(runs, set(), 0) == {}
