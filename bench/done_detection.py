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
from pathlib import Path

from benchflow.hosts.local import LocalHost
from benchflow.remote import jobs, layout
from benchtools.loopback_sshd import LoopbackSSHD

PAYLOAD = """
import sys, time

ROOT = Path(__file__).resolve().parents[1]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    random.seed(args.seed)
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="bench-airflow-"))
    import logging

    logging.disable(logging.INFO)

    root = Path(tempfile.mkdtemp(prefix="done-detection-"))
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

    results: dict[str, list[float]] = {"old": [], "ours": []}
    waited: dict[str, list[float]] = {"old": [], "ours": []}
    connections: dict[str, list[int]] = {"old": [], "ours": []}
    try:
        for trial in range(args.trials):
            rundir = f"{ours.workdir}/trial{trial}"
            paths = layout.job_paths(rundir)
            delay = random.uniform(1.0, OLD_POLL_S - 1.0)
            host.check(f"mkdir -p {rundir}", 10, "mkdir")
            before = {"old": theirs.connections_accepted(), "ours": ours.connections_accepted()}
            host.check(jobs.launch_command(paths, f"{sys.executable} {payload} {delay}", cwd=rundir), 30, "launch")
            launched = time.time()
            noticed: dict[str, float] = {}

            def run_old(log: str = paths.log_file, into: dict[str, float] = noticed) -> None:
                into["old"] = old_loop(theirs, known_hosts, log)

            old = threading.Thread(target=run_old)
            old.start()
            noticed["ours"] = trigger_wait("bench_ours", rundir)
            old.join()
            written = float(Path(rundir, "marker_at").read_text())
            for method in ("old", "ours"):
                results[method].append(noticed[method] - written)
                waited[method].append(noticed[method] - launched)
            connections["old"].append(theirs.connections_accepted() - before["old"])
            connections["ours"].append(ours.connections_accepted() - before["ours"])
            print(
                f"trial {trial + 1}/{args.trials}: marker at +{delay:4.1f} s; noticed after "
                f"{results['old'][-1]:5.2f} s (old loop), {results['ours'][-1]:5.2f} s (trigger)",
                flush=True,
            )
    finally:
        ours.stop()
        theirs.stop()

    rows = [
        ("old loop: 30 s polls, 2 fresh SSH connections each", "old"),
        ("deferrable trigger: 1 connection, streamed log", "ours"),
    ]
    # The old loop opens connections per poll, so a longer benchmark costs more; the trigger holds one.
    old_per_poll = sum(connections["old"]) / sum(max(1, round(w / OLD_POLL_S)) for w in waited["old"])
    fifteen_min = {"old": old_per_poll * 900 / OLD_POLL_S, "ours": sum(connections["ours"]) / args.trials}
    header = f"{'method':<52} {'p50 (s)':>8} {'p95 (s)':>8} {'SSH conns/wait':>15} {'... for a 15-min run':>21}"
    print("\n" + header)
    for label, key in rows:
        per_wait = sum(connections[key]) / len(connections[key])
        print(
            f"{label:<52} {percentile(results[key], 0.5):8.2f} {percentile(results[key], 0.95):8.2f} "
            f"{per_wait:15.1f} {fifteen_min[key]:21.0f}"
        )
    print(json.dumps({"trials": args.trials, "latency_s": results, "connections": connections}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
