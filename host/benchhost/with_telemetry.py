"""Run one command with the GPU sampler beside it, then print the telemetry per phase: one command on a GPU host.

    cd kernels/moe
    PYTHONPATH=../../host python -m benchhost.with_telemetry --dir "$OUT/telemetry" -- python gpu_check.py

Starts ``python -m benchhost.sampler --out DIR`` (NVML, else nvidia-smi, else it says there is no GPU), waits for
its first samples, runs the command unchanged (its output and exit status are the command's; ``$BENCH_ENERGY_S``
is set to ``--energy-s`` unless already set, so bench_moe.py adds a loop of each M's timed call that long, for energy
per call over many samples), stops the sampler with SIGTERM, and prints per phase and per GPU: mean/max power,
energy and how it was measured, SM clock, utilisation, peak memory and temperature, throttle reasons; per kernel
row its energy per call and validity. The phases come from ``--phases`` (default: ``$OUT/phases.jsonl``, beside
where gpu_check.py writes its rows, else ``./phases.jsonl``), the rows from ``--results`` (default:
gpu_check.jsonl beside the phases); only what the command appended counts. Standard library only (the host core).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchhost.telemetry import files, summary


def start_sampler(out: Path, period_ms: int) -> subprocess.Popen[bytes]:
    """The sampler, once its first samples are on disk (or it said there is no GPU)."""
    ready = out / "ready.json"
    ready.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "benchhost.sampler", "--out", str(out), "--period-ms", str(period_ms)]
    sampler = subprocess.Popen([*command, "--marker-file", str(ready)])
    deadline = time.monotonic() + 60
    while not ready.exists() and sampler.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return sampler


def stop_sampler(sampler: subprocess.Popen[bytes]) -> None:
    if sampler.poll() is None:
        sampler.send_signal(signal.SIGTERM)
        try:
            sampler.wait(30)
        except subprocess.TimeoutExpired:
            sampler.kill()
            sampler.wait()


def fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def tail(path: Path, offset: int) -> str:
    """What was appended to ``path`` after ``offset`` bytes (the file may hold earlier runs)."""
    if not path.exists():
        return ""
    with path.open("rb") as file:
        file.seek(offset)
        return file.read().decode(errors="replace")


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def phase_lines(out: Path, phases_text: str, rows_text: str) -> str:
    """The per-phase, per-GPU lines and each kernel row's energy and validity."""
    info = files.read_info((out / "telemetry.json").read_text()) if (out / "telemetry.json").exists() else {}
    samples = files.read_samples((out / "samples.csv").read_text()) if (out / "samples.csv").exists() else []
    phases = files.read_phases(phases_text)
    lines = [f"telemetry: source {info.get('source')}, {len(samples)} samples, {len(phases)} phases"]
    if info.get("reason"):
        lines.append(f"  {info['reason']}")
    for row in summary.phase_gpu_rows(samples, phases):
        load = f"c={row['concurrency']}" if row.get("request_rate") is None else f"q={row['request_rate']:g}"
        what = f"m={row['m']} {row['dtype']}" if row["kind"] == "kernel" else f"{row['config']} {load}"
        lines.append(
            f"  {what:>14} GPU {row['gpu_index']}: {fmt(row['mean_power_w'])} W mean, {fmt(row['max_power_w'])} max, "
            f"{fmt(row['energy_j'])} J ({row['energy_method']}), SM {fmt(row['mean_sm_mhz'], '.0f')} MHz, "
            f"util {fmt(row['mean_util_gpu_pct'], '.0f')} %, mem {fmt(row['peak_mem_used_mib'], '.0f')} MiB, "
            f"{fmt(row['peak_temp_c'], '.0f')} C, reasons [{row['reasons']}]{' THROTTLED' if row['throttled'] else ''}"
        )
    rows = [json.loads(line) for line in rows_text.splitlines() if line.strip().startswith("{")]
    for row, extra in zip(rows, summary.kernel_rows(rows, phases, samples), strict=True):
        lines.append(
            f"  m={row.get('m')} {row.get('dtype')}: {fmt(extra['j_per_call'], '.4g')} J/call over "
            f"{extra['energy_calls']} calls ({extra['energy_window']}, {extra['energy_samples']} samples), "
            f"validity {extra['validity']} {extra['validity_reason']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Sampler, command, summary; the exit status is the command's."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True, help="the sampler's output directory")
    parser.add_argument("--period-ms", type=int, default=200)
    parser.add_argument("--energy-s", type=float, default=1.0, help="BENCH_ENERGY_S for bench_moe.py")
    parser.add_argument("--phases", type=Path, default=Path(os.environ.get("OUT", ".")) / "phases.jsonl")
    parser.add_argument("--results", type=Path, help="the kernel rows (default: gpu_check.jsonl beside --phases)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (… -- python gpu_check.py)")
    results = args.results or args.phases.with_name("gpu_check.jsonl")
    offsets = size(args.phases), size(results)
    sampler = start_sampler(args.dir, args.period_ms)
    env = {**os.environ, "BENCH_ENERGY_S": os.environ.get("BENCH_ENERGY_S") or str(args.energy_s)}
    try:
        code = subprocess.run(command, env=env).returncode
    finally:
        stop_sampler(sampler)
    print(phase_lines(args.dir, tail(args.phases, offsets[0]), tail(results, offsets[1])), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
