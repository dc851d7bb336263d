"""The steady-state window of a serving phase and the output tokens in it (ML.ENERGY's definition).

ML.ENERGY (``ml-energy/benchmark`` ``RequestTracker``): with B the phase's concurrency and N its requests, the
steady state starts when B requests have received their first token and ends when N − B − 1 requests have
finished ("the −1 ends the measurement slightly early so as not to include the ramp-down"). Here the events
come from the per-request times the sweep driver saves (``start_s``, ``first_token_s``, ``end_s``, epoch s),
over the requests that succeeded. A phase with N ≤ 2B (no request finishes between the ramp-up and the
ramp-down) has no steady state.

Tokens in ``[t0, t1)``: a request's ``output_tokens`` are taken as evenly spaced from its first token to its
last (``end_s``), the first at ``first_token_s``; the count is exact when the inter-token gaps are equal and
off by at most one token per request at each window edge otherwise. ML.ENERGY counts the streamed usage
increments between the same two events instead; the saved rows do not keep every token's time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Window:
    start: float | None  # epoch s; None: no steady state
    end: float | None
    why: str  # how it was found, or why there is none

    @property
    def seconds(self) -> float:
        return (self.end - self.start) if self.start is not None and self.end is not None else 0.0


def _timed(requests: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    keys = ("start_s", "first_token_s", "end_s")
    return [r for r in requests if r.get("ok") and all(isinstance(r.get(k), int | float) for k in keys)]


def steady_window(requests: Sequence[Mapping[str, Any]], concurrency: int) -> Window:
    """From the B-th first token to the (N − B − 1)-th finished request (B = concurrency, N = requests)."""
    timed = _timed(requests)
    n, b = len(timed), concurrency
    if n < len(requests):
        why = f"{len(requests) - n} of {len(requests)} requests failed or have no times; "
    else:
        why = ""
    if b < 1 or n < b or n - b - 1 < 1:
        return Window(None, None, why + f"no steady state: {n} requests at concurrency {b} (needs N - B - 1 >= 1)")
    start = sorted(r["first_token_s"] for r in timed)[b - 1]
    end = sorted(r["end_s"] for r in timed)[n - b - 2]
    if end <= start:
        return Window(None, None, why + f"no steady state: the ramp-down began before the ramp-up ended (N={n}, B={b})")
    return Window(start, end, why + f"from the {b}th first token to the {n - b - 1}th finished request (N={n})")


def tokens_in(request: Mapping[str, Any], t0: float, t1: float) -> int:
    """Output tokens of one request produced in ``[t0, t1)`` (evenly spaced from first token to end)."""
    n = int(request.get("output_tokens") or 0)
    first, last = request.get("first_token_s"), request.get("end_s")
    if n < 1 or not isinstance(first, int | float) or not isinstance(last, int | float):
        return 0
    if n == 1 or last <= first:
        return n if t0 <= first < t1 else 0
    gap = (last - first) / (n - 1)
    low = max(0, math.ceil((t0 - first) / gap - 1e-9))
    high = min(n - 1, math.ceil((t1 - first) / gap - 1e-9) - 1)
    return max(0, high - low + 1)


def tokens_between(requests: Sequence[Mapping[str, Any]], t0: float, t1: float) -> int:
    """Output tokens of the successful requests produced in ``[t0, t1)``."""
    return sum(tokens_in(r, t0, t1) for r in requests if r.get("ok"))


def phase_span(requests: Sequence[Mapping[str, Any]]) -> tuple[float, float] | None:
    """From the first request's start to the last one's end: the whole phase as the client saw it."""
    timed = _timed(requests)
    if not timed:
        return None
    return min(r["start_s"] for r in timed), max(r["end_s"] for r in timed)
