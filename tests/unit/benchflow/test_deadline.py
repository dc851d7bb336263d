"""A spec's time budget nests inside Airflow's DAG-file import timeout (both SIGALRM timers)."""

from __future__ import annotations

import signal
import time

import pytest

from benchflow.deadline import OverBudget, time_budget

pytestmark = pytest.mark.unit


class OuterTimeout(Exception):
    pass


def spin() -> None:
    while True:
        pass


def outer(seconds: float):
    def fire(signum, frame):
        raise OuterTimeout

    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def test_the_budget_interrupts_work_that_swallows_exceptions():
    def stubborn() -> None:
        while True:
            try:
                spin()
            except Exception:  # what a careless validator might do
                continue

    with pytest.raises(OverBudget, match=r"took more than 0\.05 s"), time_budget(0.05):
        stubborn()


def test_an_outer_timer_keeps_its_deadline_after_the_budget():
    outer(2.0)  # 40 budgets away: a busy machine may pause this process a while, the order stays the same
    try:
        with pytest.raises(OverBudget), time_budget(0.05):
            spin()
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < left < 2.0  # re-armed for what it had left
        with pytest.raises(OuterTimeout):
            spin()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def test_an_outer_timer_due_first_fires_inside_the_budget():
    outer(0.05)
    try:
        with pytest.raises(OuterTimeout), time_budget(30):
            spin()
        assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def test_work_within_its_budget_leaves_no_timer():
    with time_budget(30):
        pass
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_work_that_swallows_even_the_budgets_alarm_is_refused_when_it_ends():
    """The alarm's exception can be lost (a bare ``except BaseException``, or the alarm landing where Python does
    not look for it until the work is done): work that ran past its budget is refused all the same."""

    def careless() -> None:
        end = time.monotonic() + 0.2
        while time.monotonic() < end:
            try:
                spin_briefly()
            except BaseException:
                pass

    with pytest.raises(OverBudget, match=r"took more than 0\.05 s"), time_budget(0.05):
        careless()


def spin_briefly() -> None:
    end = time.monotonic() + 0.01
    while time.monotonic() < end:
        pass
