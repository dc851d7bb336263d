"""Results judge their own validity: ``ok``, ``noisy``, ``throttled`` or ``contended``, from rules whose limits
are data (:class:`Limits`, defaults below; a spec can carry its own).

* noisy: a kernel row whose timed calls spread more than ``spread_max`` (p90 / p10; pyperf's own
  warning fires when the minimum or maximum is 50 % off the mean); a serving case (config × concurrency,
  warm-up left out) whose ``serving_metric`` varies across its repeats by a coefficient of variation
  (sample stdev / mean) above ``repeat_cv_max``, 10 % as pyperf warns ("the standard deviation is N % of the
  mean"); every repeat of that case is noisy. One repeat: the spread is not judged.
* throttled: a clock-event reason other than ``benign_reasons`` (GPU idle, applications clocks setting) seen on
  a GPU of the phase (a serving config's own GPUs; a kernel's, else every sampled GPU).
* contended: over the phase, the benchmark's threads waited for a CPU more than ``max_wait_share`` of their
  runnable time; or CPU steal above ``max_steal_pct``; or others kept the CPUs busier than
  ``max_others_busy_pct`` (off by default: others' load that leaves the benchmark a CPU does not slow it, and
  the wait share sees the load that does); without schedstat, more runnable tasks than
  ``max_runnable_per_cpu`` × online CPUs at both ends of the phase.

Precedence when several apply (``precedence``): throttled > contended > noisy. A throttled GPU makes every
figure of the phase wrong for a known hardware reason; contention is the usual cause of noise, so a noisy and
contended row is reported as contended (the cause), and noise with no known cause comes last. The reason text
lists every finding, the winning one first. Rules that could not be applied (no telemetry on a CPU host, no
phase record) are listed in ``unjudged``: such a row can still be ``ok``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchhost.telemetry.energy import GpuPhase
from benchhost.telemetry.hostload import HostLoad
from benchhost.telemetry.reasons import BENIGN

VALIDITIES = ("ok", "noisy", "throttled", "contended")


@dataclass(frozen=True)
class Limits:
    """The limits of the validity rules (see the module docstring)."""

    spread_max: float = 1.5  # p90 / p10 of a kernel row's timed calls
    repeat_cv_max: float = 0.10  # stdev / mean of serving_metric across a case's repeats
    serving_metric: str = "output_throughput"
    max_wait_share: float = 0.10  # the benchmark's run-queue wait / (run + wait) over the phase
    max_steal_pct: float = 5.0  # CPU steal over the phase, % of all CPU time
    max_others_busy_pct: float | None = None  # others' busy share of all CPU time, %; None: not a rule
    max_runnable_per_cpu: float | None = 1.0  # runnable others per online CPU, at both ends; without schedstat
    benign_reasons: tuple[str, ...] = BENIGN
    precedence: tuple[str, ...] = ("throttled", "contended", "noisy")


@dataclass(frozen=True)
class Verdict:
    validity: str  # one of VALIDITIES
    reason: str  # "" when ok; else every finding, the winning one first
    findings: Mapping[str, str]  # category → why
    unjudged: tuple[str, ...] = ()  # rules that had nothing to judge

    @property
    def ok(self) -> bool:
        return self.validity == "ok"


def contention(load: HostLoad | None, limits: Limits) -> str | None:
    """Why the host was contended during the phase, or None."""
    if load is None:
        return None
    why = []
    if load.wait_share is not None and load.wait_share > limits.max_wait_share:
        why.append(
            f"the benchmark's threads waited for a CPU {load.wait_share:.0%} of their runnable time "
            f"(limit {limits.max_wait_share:.0%})"
        )
    if load.steal_pct is not None and load.steal_pct > limits.max_steal_pct:
        why.append(f"CPU steal {load.steal_pct:.1f} % (limit {limits.max_steal_pct:g} %)")
    cap = limits.max_others_busy_pct
    if cap is not None and load.others_busy_pct is not None and load.others_busy_pct > cap:
        why.append(f"others kept the CPUs {load.others_busy_pct:.0f} % busy (limit {cap:g} %)")
    per_cpu = limits.max_runnable_per_cpu
    if load.wait_share is None and per_cpu is not None and load.runnable and load.online_cpus:
        if min(load.runnable) > per_cpu * load.online_cpus:
            a, b = load.runnable
            why.append(f"{a} and {b} other tasks runnable at the phase's ends on {load.online_cpus} CPUs")
    return "; ".join(why) or None


def throttling(gpus: Sequence[GpuPhase]) -> str | None:
    """Which GPUs of the phase had their clocks held down, and why (names from the reasons bitmask)."""
    hits = [
        f"GPU {g.index}{f' ({g.server})' if g.server else ''}: {', '.join(g.throttle_reasons)}"
        for g in gpus
        if g.throttle_reasons
    ]
    return "; ".join(hits) or None


def kernel_noise(row: Mapping[str, Any], limits: Limits) -> str | None:
    """The spread of a kernel row's timed calls, when above the limit."""
    p10, p90 = row.get("p10_ms"), row.get("p90_ms")
    if not isinstance(p10, int | float) or not isinstance(p90, int | float) or not p10 > 0:
        return None
    ratio = p90 / p10
    if ratio > limits.spread_max:
        return f"timed calls spread p90/p10 = {ratio:.2f} ({p10:.4g}–{p90:.4g} ms; limit {limits.spread_max:g})"
    return None


def serving_noise(rows: Sequence[Mapping[str, Any]], limits: Limits) -> list[str | None]:
    """Per row, the spread of its case's repeats when above the limit (warm-up rows are not judged)."""
    groups: dict[tuple[Any, ...], list[float]] = {}
    for row in rows:
        value = row.get(limits.serving_metric)
        if not row.get("warmup") and isinstance(value, int | float) and math.isfinite(value):
            groups.setdefault(_case(row), []).append(float(value))
    found: dict[tuple[Any, ...], str] = {}
    for case, values in groups.items():
        mean = statistics.fmean(values)
        if len(values) >= 2 and mean > 0:
            cv = statistics.stdev(values) / mean
            if cv > limits.repeat_cv_max:
                found[case] = (
                    f"{limits.serving_metric} varies {cv:.0%} across {len(values)} repeats "
                    f"(coefficient of variation; limit {limits.repeat_cv_max:.0%})"
                )
    return [None if row.get("warmup") else found.get(_case(row)) for row in rows]


def _case(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """A serving case: config × concurrency × request rate (either may be None: no cap, no rate limit)."""
    rate = None if row.get("request_rate") is None else float(row["request_rate"])
    return row.get("config"), row.get("concurrency"), rate if rate is not None and math.isfinite(rate) else None


def verdict(findings: Mapping[str, str | None], limits: Limits, unjudged: Sequence[str] = ()) -> Verdict:
    """The winning category by precedence; the reason names every finding."""
    found = {k: v for k, v in findings.items() if v}
    order = [k for k in limits.precedence if k in found] + [k for k in found if k not in limits.precedence]
    if not order:
        return Verdict("ok", "", {}, tuple(unjudged))
    return Verdict(order[0], "; ".join(f"{k}: {found[k]}" for k in order), found, tuple(unjudged))
