"""A time budget for one piece of work in the main thread (one spec's check and DAG build), that nests inside
an outer one: Airflow's DAG-file import timeout is a SIGALRM timer too, and it keeps its own deadline."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class OverBudget(BaseException):
    """The work ran past its budget (raised inside it, from the alarm). Not an ``Exception``, so that no
    ``except Exception`` in the work swallows it."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        super().__init__(f"took more than {seconds:g} s")


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Raise :class:`OverBudget` inside the block once ``seconds`` have passed. In the main thread an interval
    timer interrupts the work (between Python instructions); an outer timer that is due first still fires as
    it would have, and is re-armed for what it had left afterwards. Work that ends past its budget before the
    alarm could interrupt it is refused after it, as it is elsewhere (no signals)."""
    start = time.monotonic()
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        if time.monotonic() - start > seconds:
            raise OverBudget(seconds)
        return
    outer_handler = signal.getsignal(signal.SIGALRM)
    outer_left, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    mine = not outer_left or seconds < outer_left
    outer_fired = False

    def on_alarm(signum: int, frame: Any) -> None:
        nonlocal outer_fired
        if mine:
            raise OverBudget(seconds)
        outer_fired = True
        if callable(outer_handler):
            outer_handler(signum, frame)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds if mine else outer_left)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_left and not outer_fired:
            left = outer_left - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), outer_interval)
    # The alarm interrupts Python between instructions: work that ended inside one long call (a C parser, a
    # process descheduled on a busy host) can finish before its handler ever ran. Over is over, all the same.
    if mine and time.monotonic() - start > seconds:
        raise OverBudget(seconds)


def outer_seconds_left() -> float | None:
    """What an interval timer already running in the main thread (Airflow's DAG-file import timeout) has left, or
    None when there is none (or no signals here)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "getitimer"):
        return None
    return signal.getitimer(signal.ITIMER_REAL)[0] or None
