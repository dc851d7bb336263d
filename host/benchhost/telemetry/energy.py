"""Telemetry cut per phase: per GPU, the samples inside a phase, their statistics, and the energy drawn.

Energy over ``[t0, t1]`` comes from NVML's energy counter when every sample in use has it (the counter's
difference, linearly interpolated at both ends: Zeus measures a window the same way, end counter minus start
counter), else from the trapezoid integral of the sampled power (nvidia-smi has no energy field; power on
Ampere and newer is a 1 s average, so the integral smooths sub-second changes). ``method`` says which was
used; ``coverage`` is the share of ``[t0, t1]`` that lies between the first and the last sample (energy is
never extrapolated beyond them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from benchhost.telemetry import reasons as clock_reasons
from benchhost.telemetry.files import Sample


@dataclass(frozen=True)
class Energy:
    joules: float | None
    method: str  # "counter", "power_integral" or "none"
    coverage: float  # 0..1


@dataclass(frozen=True)
class GpuPhase:
    """One GPU over one phase (means over the samples inside it)."""

    index: int
    uuid: str
    server: str | None  # the server holding this GPU in the phase's config (None: not known or none)
    samples: int
    mean_power_w: float | None
    max_power_w: float | None
    energy_j: float | None
    energy_method: str
    coverage: float
    mean_sm_mhz: float | None
    mean_util_gpu_pct: float | None
    peak_mem_used_mib: float | None
    peak_temp_c: float | None
    reasons: tuple[str, ...]  # every clock-event reason seen
    throttle_reasons: tuple[str, ...]  # those that are throttling (not idle, not a clock setting)
    judged: bool = True  # False: no sample in or next to the phase, so none of the above says anything


def _at(points: Sequence[tuple[float, float]], t: float) -> float:
    """Linear interpolation of time-sorted ``(t, value)`` points at ``t`` (inside their span)."""
    for (ta, va), (tb, vb) in pairwise(points):
        if ta <= t <= tb:
            return va if tb == ta else va + (vb - va) * (t - ta) / (tb - ta)
    return points[0][1] if t <= points[0][0] else points[-1][1]


def _span(points: Sequence[tuple[float, float]], t0: float, t1: float) -> tuple[float, float, float]:
    lo, hi = max(t0, points[0][0]), min(t1, points[-1][0])
    coverage = 1.0 if t1 <= t0 else max(0.0, hi - lo) / (t1 - t0)
    return lo, hi, coverage


def max_gap(samples: Sequence[Sample]) -> float:
    """The longest pause between two samples that still reads as one series: five median periods, two seconds at
    least (a sampler starved by a busy CPU for a moment still counts); a sampler that stopped, or a clock that
    jumped, leaves a longer one."""
    gaps = sorted(b.t - a.t for a, b in pairwise(samples) if b.t > a.t)
    return max(2.0, 5 * gaps[len(gaps) // 2]) if gaps else 2.0


def _gapped(points: Sequence[tuple[float, float]], lo: float, hi: float, gap: float) -> bool:
    """Whether two consecutive points around ``[lo, hi]`` lie further apart than ``gap``: a value there would be
    interpolated across time nobody sampled."""
    return any(tb - ta > gap for (ta, _), (tb, _) in pairwise(points) if tb >= lo and ta <= hi)


def counter_energy(samples: Sequence[Sample], t0: float, t1: float) -> Energy | None:
    """From the energy counter; None when a sample lacks it or the counter went backwards (a driver reload)."""
    points = [(s.t, s.energy_j) for s in samples if s.energy_j is not None]
    if len(points) < 2 or len(points) < len(samples):
        return None
    if any(b[1] < a[1] for a, b in pairwise(points)):
        return None
    lo, hi, coverage = _span(points, t0, t1)
    if _gapped(points, lo, hi, max_gap(samples)) or (hi <= lo and t1 > t0):  # a gap, or no sample spans it
        return Energy(None, "none", 0.0)
    joules = _at(points, hi) - _at(points, lo) if hi > lo else 0.0
    return Energy(joules, "counter", coverage)


def power_energy(samples: Sequence[Sample], t0: float, t1: float) -> Energy:
    """The trapezoid integral of the sampled power over the part of ``[t0, t1]`` the samples span."""
    points = [(s.t, s.power_w) for s in samples if s.power_w is not None]
    if len(points) < 2:
        return Energy(None, "none", 0.0)
    lo, hi, coverage = _span(points, t0, t1)
    if _gapped(points, lo, hi, max_gap(samples)):
        return Energy(None, "none", 0.0)
    if hi <= lo:
        return Energy(0.0 if t1 <= t0 else None, "power_integral", coverage)
    inner = [(lo, _at(points, lo)), *((t, p) for t, p in points if lo < t < hi), (hi, _at(points, hi))]
    joules = sum((tb - ta) * (pa + pb) / 2 for (ta, pa), (tb, pb) in pairwise(inner))
    return Energy(joules, "power_integral", coverage)


def energy(samples: Sequence[Sample], t0: float, t1: float) -> Energy:
    """Joules one GPU drew over ``[t0, t1]`` (``samples``: that GPU's, in time order)."""
    return counter_energy(samples, t0, t1) or power_energy(samples, t0, t1)


def cut(samples: Sequence[Sample], start: float, end: float) -> list[Sample]:
    """The samples taken inside ``[start, end]``; for a phase shorter than the sampling period (none inside),
    the two around it when they are within one :func:`max_gap` of it; else none (the sampler had stopped, or
    the host's clock is off): a phase is never judged from samples taken elsewhere in time."""
    inside = [s for s in samples if start <= s.t <= end]
    if inside:
        return inside
    gap = max_gap(samples)
    before = [s for s in samples if start - gap <= s.t < start][-1:]
    after = [s for s in samples if end < s.t <= end + gap][:1]
    return before + after if before and after else []


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _max(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def gpu_phase(
    samples: Sequence[Sample],
    start: float,
    end: float,
    server: str | None = None,
    benign: Sequence[str] = clock_reasons.BENIGN,
) -> GpuPhase:
    """Statistics of one GPU (``samples``: its own, in time order) over ``[start, end]``."""
    used = cut(samples, start, end)
    drawn = energy(samples, start, end)
    seen = clock_reasons.seen(s.clock_reasons for s in used)
    return GpuPhase(
        index=samples[0].index if samples else -1,
        uuid=samples[0].uuid if samples else "",
        server=server,
        samples=sum(1 for s in samples if start <= s.t <= end),
        mean_power_w=_mean([s.power_w for s in used]),
        max_power_w=_max([s.power_w for s in used]),
        energy_j=drawn.joules,
        energy_method=drawn.method,
        coverage=drawn.coverage,
        mean_sm_mhz=_mean([s.sm_mhz for s in used]),
        mean_util_gpu_pct=_mean([s.util_gpu_pct for s in used]),
        peak_mem_used_mib=_max([s.mem_used_mib for s in used]),
        peak_temp_c=_max([s.temp_c for s in used]),
        reasons=tuple(seen),
        throttle_reasons=tuple(clock_reasons.throttling(seen, benign)),
        judged=bool(used),
    )


def phase_gpus(
    samples_by_gpu: Mapping[int, Sequence[Sample]],
    start: float,
    end: float,
    gpu_servers: Mapping[int, str] | None = None,
    benign: Sequence[str] = clock_reasons.BENIGN,
) -> list[GpuPhase]:
    """Every sampled GPU over one phase, each tied to its server by ``gpu_servers`` (GPU index → server)."""
    servers = gpu_servers or {}
    return [
        gpu_phase(samples, start, end, servers.get(index), benign)
        for index, samples in sorted(samples_by_gpu.items())
        if samples
    ]
