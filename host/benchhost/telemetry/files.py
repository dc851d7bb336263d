"""Reading what the host side wrote: ``samples.csv`` and ``telemetry.json`` (the sampler), ``phases.jsonl``
(the benchmark). Text in, typed records out; a last line cut off mid-write (a sampler or benchmark killed by
the teardown) is dropped, as is any line that does not read."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SAMPLE_COLUMNS = (
    "t",
    "index",
    "uuid",
    "power_w",
    "energy_j",
    "sm_mhz",
    "mem_mhz",
    "temp_c",
    "util_gpu_pct",
    "util_mem_pct",
    "mem_used_mib",
    "clock_reasons",
)


# What a GPU can report, per column (inclusive): a value outside is a misread (a driver's sentinel, a garbled
# line), kept as an empty cell; never a negative power that integrates to negative joules, nor a 1e300.
PLAUSIBLE: dict[str, tuple[float, float]] = {
    "power_w": (0.0, 10_000.0),
    "energy_j": (0.0, 1e15),
    "sm_mhz": (0.0, 100_000.0),
    "mem_mhz": (0.0, 100_000.0),
    "temp_c": (-60.0, 250.0),
    "util_gpu_pct": (0.0, 100.0),
    "util_mem_pct": (0.0, 100.0),
    "mem_used_mib": (0.0, 1e9),
    "clock_reasons": (0.0, 2.0**64 - 1),
}


def plausible(column: str, value: float | None) -> float | None:
    """``value`` when finite and inside the column's :data:`PLAUSIBLE` range, else None (an empty cell)."""
    if value is None or not math.isfinite(value):
        return None
    low, high = PLAUSIBLE.get(column, (-math.inf, math.inf))
    return value if low <= value <= high else None


@dataclass(frozen=True)
class Sample:
    """One GPU at one time. None is a value the GPU did not give (never read as 0)."""

    t: float  # epoch seconds
    index: int
    uuid: str
    power_w: float | None
    energy_j: float | None  # the cumulative counter (NVML only); differences are energy
    sm_mhz: float | None
    mem_mhz: float | None
    temp_c: float | None
    util_gpu_pct: float | None
    util_mem_pct: float | None
    mem_used_mib: float | None
    clock_reasons: int | None


@dataclass(frozen=True)
class Phase:
    """One phase of a benchmark: a kernel sweep's M, or a serving sweep's concurrency × repeat."""

    kind: str  # which benchmark wrote it (the host scripts say which)
    start: float  # epoch seconds
    end: float
    record: Mapping[str, Any]  # the whole phases.jsonl line

    def key(self, columns: Sequence[str]) -> tuple[Any, ...]:
        """What joins the phase to its result row: its values of ``columns`` (a kernel sweep's (dtype, m), a
        serving sweep's (config, concurrency, repeat))."""
        return tuple(self.record.get(c) for c in columns)


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def read_samples(text: str) -> list[Sample]:
    """``samples.csv`` → samples sorted by time (then GPU)."""
    samples = []
    for row in csv.DictReader(io.StringIO(text)):
        if None in row.values():  # a line cut off mid-write
            continue
        t, index = _number(row.get("t")), _number(row.get("index"))
        reasons = plausible("clock_reasons", _number(row.get("clock_reasons")))
        if t is None or index is None or not 0 <= index < 1024:
            continue
        v = {c: plausible(c, _number(row.get(c))) for c in SAMPLE_COLUMNS[3:11]}
        sample = Sample(
            t=t,
            index=int(index),
            uuid=row.get("uuid") or "",
            power_w=v["power_w"],
            energy_j=v["energy_j"],
            sm_mhz=v["sm_mhz"],
            mem_mhz=v["mem_mhz"],
            temp_c=v["temp_c"],
            util_gpu_pct=v["util_gpu_pct"],
            util_mem_pct=v["util_mem_pct"],
            mem_used_mib=v["mem_used_mib"],
            clock_reasons=None if reasons is None else int(reasons),
        )
        samples.append(sample)
    return sorted(samples, key=lambda s: (s.t, s.index))


def read_info(text: str) -> dict[str, Any]:
    """``telemetry.json``: source (nvml | nvidia-smi | none), reason, fields, period_ms, gpus, driver, ..."""
    info = json.loads(text) if text.strip() else {}
    return info if isinstance(info, dict) else {}


def read_phases(text: str) -> list[Phase]:
    """``phases.jsonl`` → phases in file order (the order of the result rows)."""
    phases = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("start"), int | float) and "end" in record:
            phases.append(Phase(str(record.get("kind", "")), float(record["start"]), float(record["end"]), record))
    return phases


def by_gpu(samples: Iterable[Sample]) -> dict[int, list[Sample]]:
    """Samples per GPU index, each list in time order."""
    out: dict[int, list[Sample]] = {}
    for sample in sorted(samples, key=lambda s: s.t):
        out.setdefault(sample.index, []).append(sample)
    return out


def match_rows(
    columns: Sequence[str], rows: Sequence[Mapping[str, Any]], phases: Sequence[Phase]
) -> list[Phase | None]:
    """The phase of each result row (None when it has none), joined on ``columns``; a key seen several times (a
    file appended to by several runs, gpu_check's sweeps) pairs the n-th row with the n-th phase of that key."""
    queues: dict[tuple[Any, ...], list[Phase]] = {}
    for phase in phases:
        queues.setdefault(phase.key(columns), []).append(phase)
    out: list[Phase | None] = []
    for row in rows:
        queue = queues.get(tuple(row.get(c) for c in columns), [])
        out.append(queue.pop(0) if queue else None)
    return out
