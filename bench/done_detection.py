"""How fast is a finished benchmark noticed, and how many SSH connections does a wait cost?

Side by side, on the same jobs: the hand-made loop this project replaces (every 30 s, two fresh
SSH connections: `grep -c ALL_DONE` and `tail -1`) and the deferrable trigger (one connection,
the log streamed with `tail -F`, a status check every 5 s). Each method talks to its own sshd on
loopback (same host key and workdir), so each server's log counts that method's connections.

    .venv/bin/python bench/done_detection.py [--trials 6]

Each trial launches a job that writes ALL_DONE at a random instant within a 30 s window (recording
the instant), and both methods wait for it. Latency = noticed - written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchflow.hosts.local import LocalHost
from benchflow.remote import jobs, layout
from benchtools.loopback_sshd import LoopbackSSHD

PAYLOAD = """
import sys, time

print("M ms/call tok/s us/token", flush=True)
time.sleep(float(sys.argv[1]))
open("marker_at", "w").write(repr(time.time()))
print("ALL_DONE", flush=True)
"""
OLD_POLL_S = 30.0


def old_loop(server: LoopbackSSHD, known_hosts: Path, log: str, cap_s: float = 120) -> float:
    """The replaced loop, with a pinned host key: poll every 30 s with two fresh connections."""
    ssh = [
        "ssh",
        "-p",
        str(server.port),
        "-i",
        str(server.client_key),
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "root@127.0.0.1",
    ]
    start = time.time()
    while time.time() - start < cap_s:
        time.sleep(OLD_POLL_S)
        done = subprocess.run([*ssh, f"grep -c ALL_DONE {log} || true"], capture_output=True, text=True)
        subprocess.run([*ssh, f"tail -1 {log}"], capture_output=True, text=True)
        if done.stdout.strip() not in ("", "0"):
            return time.time()
    raise TimeoutError("old loop never saw the marker")


def trigger_wait(conn_id: str, rundir: str) -> float:
    from benchflow.triggers import DoneMarkerTrigger

    trigger = DoneMarkerTrigger(conn_id, rundir, "ALL_DONE", timeout_s=300, check_interval=5)

    async def first_event() -> dict:
        async for event in trigger.run():
            return event.payload
        raise RuntimeError("no event")

    event = asyncio.run(first_event())
    assert event["status"] == "done", event
    return time.time()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


@dataclass
class Rig:
    """The two loopback sshds (``ours`` serves the trigger's connection, ``theirs`` the old loop's), the old
    loop's pinned host key, the local host that launches the jobs and the job's payload."""

    ours: LoopbackSSHD
    theirs: LoopbackSSHD
    known_hosts: Path
    host: LocalHost
    payload: Path


@dataclass
class Tally:
    """Per method (``old``, ``ours``), each trial's latency (noticed - written), wait (noticed - launched) and
    SSH connections."""

    results: dict[str, list[float]] = field(default_factory=lambda: {"old": [], "ours": []})
    waited: dict[str, list[float]] = field(default_factory=lambda: {"old": [], "ours": []})
    connections: dict[str, list[int]] = field(default_factory=lambda: {"old": [], "ours": []})


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args()


def start_rig(root: Path) -> Rig:
    """Both sshds on one workdir, the trigger's connection in the environment, the payload written."""
    ours = LoopbackSSHD(root / "ours").start()
    theirs = LoopbackSSHD(root / "theirs").start()
    theirs.workdir = ours.workdir
    name, value = ours.connection_env("bench_ours")
    os.environ[name] = value
    known_hosts = root / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{theirs.port} {theirs.public_host_key}\n")
    host = LocalHost(workdir=ours.workdir)
    payload = ours.workdir / "payload.py"
    payload.write_text(PAYLOAD)
    return Rig(ours, theirs, known_hosts, host, payload)


def wait_both(rig: Rig, log: str, rundir: str) -> dict[str, float]:
    """When each method noticed the marker: the old loop waits in a thread while the trigger waits here."""
    noticed: dict[str, float] = {}

    def run_old() -> None:
        noticed["old"] = old_loop(rig.theirs, rig.known_hosts, log)

    old = threading.Thread(target=run_old)
    old.start()
    noticed["ours"] = trigger_wait("bench_ours", rundir)
    old.join()
    return noticed


def run_trial(rig: Rig, trial: int, trials: int, tally: Tally) -> None:
    """One job that writes ALL_DONE at a random instant, both methods waiting for it; its numbers into
    ``tally``."""
    rundir = f"{rig.ours.workdir}/trial{trial}"
    paths = layout.job_paths(rundir)
    delay = random.uniform(1.0, OLD_POLL_S - 1.0)
    rig.host.check(f"mkdir -p {rundir}", 10, "mkdir")
    before = {"old": rig.theirs.connections_accepted(), "ours": rig.ours.connections_accepted()}
    rig.host.check(jobs.launch_command(paths, f"{sys.executable} {rig.payload} {delay}", cwd=rundir), 30, "launch")
    launched = time.time()
    noticed = wait_both(rig, paths.log_file, rundir)
    written = float(Path(rundir, "marker_at").read_text())
    for method in ("old", "ours"):
        tally.results[method].append(noticed[method] - written)
        tally.waited[method].append(noticed[method] - launched)
    tally.connections["old"].append(rig.theirs.connections_accepted() - before["old"])
    tally.connections["ours"].append(rig.ours.connections_accepted() - before["ours"])
    print(
        f"trial {trial + 1}/{trials}: marker at +{delay:4.1f} s; noticed after "
        f"{tally.results['old'][-1]:5.2f} s (old loop), {tally.results['ours'][-1]:5.2f} s (trigger)",
        flush=True,
    )


def report(tally: Tally, trials: int) -> None:
    """The table (latency percentiles, connections per wait and for a 15-minute run), then the raw numbers."""
    results, connections = tally.results, tally.connections
    rows = [
        ("old loop: 30 s polls, 2 fresh SSH connections each", "old"),
        ("deferrable trigger: 1 connection, streamed log", "ours"),
    ]
    # The old loop opens connections per poll, so a longer benchmark costs more; the trigger holds one.
    old_per_poll = sum(connections["old"]) / sum(max(1, round(w / OLD_POLL_S)) for w in tally.waited["old"])
    fifteen_min = {"old": old_per_poll * 900 / OLD_POLL_S, "ours": sum(connections["ours"]) / trials}
    header = f"{'method':<52} {'p50 (s)':>8} {'p95 (s)':>8} {'SSH conns/wait':>15} {'... for a 15-min run':>21}"
    print("\n" + header)
    for label, key in rows:
        per_wait = sum(connections[key]) / len(connections[key])
        print(
            f"{label:<52} {percentile(results[key], 0.5):8.2f} {percentile(results[key], 0.95):8.2f} "
            f"{per_wait:15.1f} {fifteen_min[key]:21.0f}"
        )
    print(json.dumps({"trials": trials, "latency_s": results, "connections": connections}))


def main() -> int:
    args = parse_args()
    random.seed(args.seed)
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="bench-airflow-"))
    import logging

    logging.disable(logging.INFO)

    rig = start_rig(Path(tempfile.mkdtemp(prefix="done-detection-")))
    tally = Tally()
    try:
        for trial in range(args.trials):
            run_trial(rig, trial, args.trials, tally)
    finally:
        rig.ours.stop()
        rig.theirs.stop()
    report(tally, args.trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
