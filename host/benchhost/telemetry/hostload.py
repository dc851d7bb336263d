"""The host's load over a phase, from the two snapshots the benchmark took at its boundaries
(``load_start``/``load_end`` of a phases.jsonl line; benchhost.phaselog writes them).

* ``steal_pct``: Δsteal / Δtotal of /proc/stat's cpu line (total = user … steal; guest is inside user);
* ``busy_pct``: the CPUs' busy share, Δ(total − idle − iowait) / Δtotal;
* ``own_cpu_pct`` and ``others_busy_pct``: the benchmark's own CPU time (its processes, see phaselog) as a share
  of all CPUs' time over the phase, and the busy share left to everyone else (busy − own, at least 0);
* ``wait_share``: of the time the benchmark's threads were runnable, the share they spent waiting for a CPU
  (schedstat run-queue wait / (run + wait)): the contention the benchmark itself felt;
* ``runnable``: /proc/loadavg's runnable count at both ends, the reading process excluded (it is running);
* ``load1``: /proc/loadavg's 1-minute average, the larger of the two (it lags: context, not a rule).

Jiffies are 10 ms at the usual USER_HZ = 100, so percentages over a phase shorter than about a second are
coarse; the wait share is in nanoseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class HostLoad:
    seconds: float
    online_cpus: int | None
    runnable: tuple[int, int] | None  # others runnable at the start and at the end
    load1: float | None
    steal_pct: float | None
    busy_pct: float | None
    own_cpu_pct: float | None
    others_busy_pct: float | None
    wait_share: float | None


def _delta(a: Mapping[str, Any], b: Mapping[str, Any], key: str) -> float | None:
    if isinstance(a.get(key), int | float) and isinstance(b.get(key), int | float):
        return float(b[key]) - float(a[key])
    return None


def _cpu(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[float | None, float | None, float | None]:
    """(Δtotal jiffies, steal %, busy %) between two cpu-line snapshots."""
    ca, cb = a.get("cpu") or {}, b.get("cpu") or {}
    if not all(f in ca and f in cb for f in CPU_FIELDS):
        return None, None, None
    d = {f: cb[f] - ca[f] for f in CPU_FIELDS}
    total = sum(d.values())
    if total <= 0:
        return None, None, None
    return total, 100.0 * d["steal"] / total, 100.0 * (total - d["idle"] - d["iowait"]) / total


def _wait_share(a: Mapping[str, Any], b: Mapping[str, Any]) -> float | None:
    sa, sb = a.get("own_sched"), b.get("own_sched")
    if not isinstance(sa, Mapping) or not isinstance(sb, Mapping):
        return None
    run, wait = _delta(sa, sb, "run_s"), _delta(sa, sb, "wait_s")
    if run is None or wait is None or run + wait <= 0:
        return None
    return max(0.0, wait) / (max(0.0, run) + max(0.0, wait))


def host_load(record: Mapping[str, Any]) -> HostLoad | None:
    """The load over one phase; None when the phase has no boundary snapshots."""
    a, b = record.get("load_start"), record.get("load_end")
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return None
    total, steal, busy = _cpu(a, b)
    own_s, hz = _delta(a, b, "own_cpu_s"), b.get("clk_tck") or 100
    own = 100.0 * own_s * hz / total if total and own_s is not None else None
    others = max(0.0, busy - own) if busy is not None and own is not None else None
    runnable = None
    if isinstance(a.get("runnable"), int) and isinstance(b.get("runnable"), int):
        runnable = (max(0, a["runnable"] - 1), max(0, b["runnable"] - 1))
    loads = [x["load1"] for x in (a, b) if isinstance(x.get("load1"), int | float)]
    return HostLoad(
        seconds=float(b.get("t", 0.0)) - float(a.get("t", 0.0)),
        online_cpus=b.get("online_cpus"),
        runnable=runnable,
        load1=max(loads) if loads else None,
        steal_pct=steal,
        busy_pct=busy,
        own_cpu_pct=own,
        others_busy_pct=others,
        wait_share=_wait_share(a, b),
    )
