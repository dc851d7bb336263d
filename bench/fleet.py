"""A fleet of GPU hosts on one Airflow stack: does the wait scale, and what does it cost?

N loopback SSH hosts (each its own sshd, port, host key and workdir), one campaign per host whose
payload takes about 60 s, all triggered at once through the REST API of the real stack
(CeleryExecutor, Redis, PostgreSQL; benchtools.stack). N = 1, 4, 16, each twice: with the
deferrable wait (the triggerer holds it) and with the same sensor in poke mode (a worker slot holds
it). Both modes run on the same stack, the same hosts and the same worker (``--slots`` Celery slots).

    .venv/bin/python bench/fleet.py [--sizes 1 4 16] [--payload-s 60] [--slots 8]

Reported per batch: wall time from the triggers to the last run's end; the worker slots busy while
any campaign was in its wait (mean and peak, sampled every second from the metadata database); the
worker slot-seconds that wait tasks themselves held (a deferrable wait holds a slot only for its
start and its resume); the most waits deferred at once; and the CPU seconds of the triggerer (its
idle loop included: the poke rows show that baseline) and of the Celery worker.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchtools.loopback_sshd import LoopbackSSHD
from benchtools.stack import AirflowStack, campaign_folder

ROOT = Path(__file__).resolve().parents[1]

SPEC = """\
description: fleet benchmark, {mode} wait, host {host}
kind: kernel
host: {host}
payload: fault
schedule: null
tags: [fleet]
benchmark:
  script: bench_fault.py
  args: {{mode: ok, rows: 6, delay: {delay}}}
  parser: kernel_sweep
  deferrable: {deferrable}
timeouts:
  benchmark: 900
  poke_interval: 5
  host_poke_interval: 5
"""
MODES = {"deferrable": True, "poke": False}


class Sampler(threading.Thread):
    """Every second: task instances running on the worker, and how many of them are waits."""

    def __init__(self, stack: AirflowStack, run_ids: list[str]):
        super().__init__(daemon=True)
        self.stack = stack
        self.run_ids = run_ids
        self.samples: list[tuple[int, int, int]] = []  # (running, running waits, deferred waits)
        self.halt = threading.Event()

    def run(self) -> None:
        import psycopg2

        con = psycopg2.connect(self.stack.db_uri)
        con.autocommit = True
        query = (
            "SELECT count(*) FILTER (WHERE state = 'running'), "
            "count(*) FILTER (WHERE state = 'running' AND task_id = 'wait_done'), "
            "count(*) FILTER (WHERE state = 'deferred' AND task_id = 'wait_done') "
            "FROM task_instance WHERE dag_id LIKE 'bench_fleet_%%' AND run_id = ANY(%s)"
        )
        while not self.halt.wait(1.0):
            with con.cursor() as cur:
                cur.execute(query, (self.run_ids,))
                self.samples.append(tuple(int(v) for v in cur.fetchone()))  # type: ignore[arg-type, union-attr]
        con.close()


def batch(stack: AirflowStack, mode: str, n: int) -> dict[str, object]:
    dags = [f"bench_fleet_{mode}_{i}" for i in range(n)]
    cpu_before = {c: stack.cpu_seconds(c) for c in ("triggerer", "celery worker")}
    started = time.monotonic()
    runs = []
    for dag_id in dags:
        reply = stack.trigger(dag_id)
        reply.raise_for_status()
        runs.append((dag_id, reply.json()["dag_run_id"]))
    sampler = Sampler(stack, [run_id for _, run_id in runs])
    sampler.start()
    states = stack.wait_runs(runs, timeout=3600)
    wall = time.monotonic() - started
    sampler.halt.set()
    sampler.join()
    cpu = {c: stack.cpu_seconds(c) - cpu_before[c] for c in cpu_before}
    waiting = [s for s in sampler.samples if s[1] + s[2] > 0]  # while at least one campaign was in its wait
    return {
        "mode": mode,
        "n": n,
        "wall_s": wall,
        "ok": sum(state == "success" for state in states.values()),
        "slots_mean": statistics.fmean(s[0] for s in waiting) if waiting else 0.0,
        "slots_peak": max((s[0] for s in waiting), default=0),
        "wait_slots_peak": max((s[1] for s in waiting), default=0),
        "wait_slot_s": sum(s[1] for s in sampler.samples),  # one sample a second
        "deferred_peak": max((s[2] for s in waiting), default=0),
        "triggerer_cpu_s": cpu["triggerer"],
        "worker_cpu_s": cpu["celery worker"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--payload-s", type=float, default=60.0, help="how long each campaign's payload runs")
    parser.add_argument("--slots", type=int, default=8, help="Celery worker slots")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    size = max(args.sizes)
    hosts = [LoopbackSSHD(root / f"sshd-{i}").start() for i in range(size)]
    specs = {
        f"fleet_{mode}_{i}": SPEC.format(
            mode=mode, host=f"fleet_host_{i}", delay=args.payload_s / 6, deferrable=str(deferrable).lower()
        )
        for mode, deferrable in MODES.items()
        for i in range(size)
    }
    campaigns, kernels = campaign_folder(root, specs, {"fault": ROOT / "tests" / "fixtures" / "payloads" / "fault"})
    connections = {f"fleet_host_{i}": host.connection() for i, host in enumerate(hosts)}
    stack = AirflowStack(root, campaigns, kernels, connections, worker_concurrency=args.slots)
    results = []
    try:
        print(f"starting the stack in {root} ({size} hosts, {args.slots} worker slots) ...", flush=True)
        stack.start()
        stack.wait_for_dags([f"bench_{name}" for name in specs], timeout=600)
        for n in args.sizes:
            for mode in MODES:
                print(f"N={n} {mode} ...", flush=True)
                results.append(batch(stack, mode, n))
                print("   ", results[-1], flush=True)
    finally:
        stack.stop()
        for host in hosts:
            host.stop()

    print(f"\n{args.payload_s:.0f} s payload per campaign, one campaign per host, {args.slots} Celery worker slots")
    print(
        f"{'wait':<11}{'N':>4}{'runs ok':>9}{'wall (s)':>10}{'slots busy mean':>17}{'peak':>6}"
        f"{'slot-s on waits':>17}{'deferred peak':>15}{'triggerer CPU s':>17}{'worker CPU s':>14}"
    )
    for r in results:
        print(
            f"{r['mode']:<11}{r['n']:>4}{r['ok']:>9}{r['wall_s']:>10.0f}{r['slots_mean']:>17.1f}"
            f"{r['slots_peak']:>6}{r['wait_slot_s']:>17}{r['deferred_peak']:>15}"
            f"{r['triggerer_cpu_s']:>17.1f}{r['worker_cpu_s']:>14.1f}"
        )
    return 0 if all(r["ok"] == r["n"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
