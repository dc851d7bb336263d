"""Phases carry their time: one JSON line per benchmark phase in ``phases.jsonl``, with the host's load at both
boundaries, so GPU telemetry can be cut per phase and a result can say whether the host was busy while it ran.

Standard library only; imported by ``kernels/moe/bench_moe.py`` and ``kernels/serving/sweep.py`` from this
directory (repository layout) or from ``telemetry/`` inside their payload (deployed layout, the ``telemetry``
payload required by theirs); without it they run as before and say that they wrote no phases.

A load snapshot (:func:`host_load`) is::

    {"t": 1764612345.123,            # epoch seconds (time.time())
     "load1": 0.52,                  # /proc/loadavg field 1: run-queue average over 1 minute
     "runnable": 3, "threads": 412,  # /proc/loadavg field 4: runnable / existing scheduling entities, now
                                     #   (the reading process itself is one of the runnable)
     "cpu": {"user": .., "nice": .., "system": .., "idle": .., "iowait": .., "irq": .., "softirq": ..,
             "steal": ..},           # /proc/stat "cpu" line, jiffies summed over all CPUs (guest is inside user)
     "clk_tck": 100, "online_cpus": 2,
     "own_cpu_s": 12.3,              # CPU seconds of the benchmark's own processes so far (see below)
     "own_sched": {"run_s": 11.9, "wait_s": 0.2}}  # their threads' time on a CPU / waiting runnable for one

``own_cpu_s`` is what lets "CPU busy by others" be told apart from the benchmark's own work: the process and
its waited-for children (``os.times()``), or, given ``own_root``, every process whose working directory lies
under that directory (a serving run: the sweep, its client and the servers all run inside the run directory),
each with its waited-for children. ``own_sched`` sums /proc/<pid>/task/*/schedstat over the threads of those
processes: ``wait_s`` grows while a thread is runnable but no CPU is free for it, which is contention exactly as
the benchmark felt it (others' load that leaves it a CPU does not count). Reading fails soft: a field that
cannot be read is left out, never 0.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def read_loadavg(text: str) -> dict[str, Any]:
    """``0.52 0.40 0.31 3/412 9876`` → load1, runnable, threads."""
    parts = text.split()
    runnable, _, threads = parts[3].partition("/")
    return {"load1": float(parts[0]), "runnable": int(runnable), "threads": int(threads)}


def read_stat_cpu(text: str) -> dict[str, int]:
    """The aggregate ``cpu`` line of /proc/stat: the first eight counters (guest and guest_nice are already
    counted in user and nice, proc_stat(5))."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            return dict(zip(CPU_FIELDS, (int(v) for v in fields[1:9]), strict=False))
    return {}


def _proc_cpu_ticks(pid: str) -> int:
    """utime + stime + cutime + cstime of one process, in clock ticks (proc_pid_stat(5) fields 14-17)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    rest = text[text.rindex(")") + 2 :].split()
    return sum(int(v) for v in rest[11:15])


def tree_pids(root: Path) -> list[str]:
    """Every process whose working directory is ``root`` or below it."""
    root = root.resolve()
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cwd = Path(os.readlink(f"/proc/{entry.name}/cwd"))
            except OSError:
                continue  # gone, or not ours to read
            if cwd == root or root in cwd.parents:
                pids.append(entry.name)
    return pids


def tree_cpu_s(pids: list[str], clk_tck: int) -> float:
    """CPU seconds of these processes, each with its waited-for children."""
    ticks = 0
    for pid in pids:
        try:
            ticks += _proc_cpu_ticks(pid)
        except (OSError, ValueError):
            continue
    return ticks / clk_tck


def sched_s(pids: list[str]) -> dict[str, float] | None:
    """Seconds the threads of these processes ran on a CPU and waited runnable for one (/proc/<pid>/task/<tid>/
    schedstat: run ns, run-queue wait ns; sched-stats.rst); None on a kernel without it. Threads that ended
    since are not in it: the waits of a process that exits inside a phase are not counted."""
    run = wait = 0
    found = False
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                fields = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
            except OSError:
                continue
            run, wait, found = run + int(fields[0]), wait + int(fields[1]), True
    return {"run_s": run / 1e9, "wait_s": wait / 1e9} if found else None


def host_load(own_root: Path | None = None) -> dict[str, Any]:
    """A snapshot of the host's load now (see the module docstring); works on any Linux host, GPU or not."""
    snap: dict[str, Any] = {"t": time.time()}
    clk_tck = os.sysconf("SC_CLK_TCK")
    try:
        snap.update(read_loadavg(Path("/proc/loadavg").read_text()))
    except (OSError, ValueError, IndexError):
        pass
    try:
        snap["cpu"] = read_stat_cpu(Path("/proc/stat").read_text())
    except OSError:
        pass
    snap["clk_tck"] = clk_tck
    snap["online_cpus"] = os.sysconf("SC_NPROCESSORS_ONLN")
    pids = [str(os.getpid())] if own_root is None else tree_pids(own_root)
    if own_root is None:
        times = os.times()
        snap["own_cpu_s"] = times.user + times.system + times.children_user + times.children_system
    else:
        snap["own_cpu_s"] = tree_cpu_s(pids, clk_tck)
    sched = sched_s(pids)
    if sched is not None:
        snap["own_sched"] = sched
    return snap


class PhaseLog:
    """Appends one JSON line per phase to ``path`` (``phases.jsonl``), flushed at once so that a benchmark
    killed mid-sweep still leaves the phases it finished."""

    def __init__(self, path: Path, own_root: Path | None = None) -> None:
        self.path = path
        self.own_root = own_root

    def write(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(json.dumps(record) + "\n")

    @contextmanager
    def phase(self, **fields: Any) -> Iterator[dict[str, Any]]:
        """Times the block: ``start``/``end`` (epoch s) and ``load_start``/``load_end``; the block may add
        fields to the record it is given (an ``end`` of its own too: when its work ended before its
        bookkeeping). The record is written even when the block raises."""
        record: dict[str, Any] = {**fields, "load_start": host_load(self.own_root)}
        record["start"] = time.time()
        try:
            yield record
        finally:
            record.setdefault("end", time.time())
            record["load_end"] = host_load(self.own_root)
            self.write(record)
