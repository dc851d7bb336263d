"""Serving-log parse speed and memory: a sweep log of --mb megabytes (default 50) built from real result
blocks, with the noise a real log holds between them (server INFO lines, tqdm redraws joined by carriage
returns, a fork's odd lines inside a block, a block cut short), parsed as ``bench parse`` would.

    .venv/bin/python bench/parse_throughput.py [--mb 50] [--prefix '[bench] 2026-11-29 02:00:01 INFO ']

Prints, side by side from the same run, the parser's MB/s and that of a plain line-by-line regex scan of the
same text (each line matched once against a ``label: number`` pattern: the floor any line reader pays), each the
best of ``--repeat`` timings; then rows, problems and warnings kept, and the peak memory the parse itself
allocates (tracemalloc, the text excluded) with its ratio to the file's size: the parser streams lines, so the
peak stays a small fraction of the log however long it is.
"""

from __future__ import annotations

import argparse
import re
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from benchflow import kinds
from benchflow.parsing import lines

ROOT = Path(__file__).resolve().parents[1]

SCAN_RE = re.compile(r"^\s*[A-Za-z][^:]*:\s+[-+]?\d")  # a label: number line, the shape every result line has

REAL = ROOT / "tests" / "fixtures" / "real"
BLOCKS = [
    (REAL / "vllm_block-failed-peak_vllm-ascend-perf-benchmark-a.txt").read_text(),
    (REAL / "sglang_block-accept-p90-e2e_sgl-cookbook-deepseek-v3_2.txt").read_text(),
]
NOISE = [
    "INFO 07-02 09:38:25 [engine.py:310] Avg prompt throughput: 2051.3 tokens/s, Running: 8 reqs, Waiting: 0 reqs",
    'INFO:     127.0.0.1:53412 - "POST /v1/completions HTTP/1.1" 200 OK',
    "\r"
    + "\r".join(f" {p:2d}%|{'█' * (p // 10):<10}| {p}/100 [00:0{p % 10}<00:10,  9.5it/s]" for p in range(0, 101, 5)),
    "WARNING 07-02 09:38:25 [scheduler.py:1120] Sequence group 17 is preempted by PreemptionMode.RECOMPUTE",
]


def build(megabytes: float, prefix: str) -> str:
    """Phases of the sweep driver, each with noise and a block; every 50th block has a fork's odd line, every
    97th is cut short (the next phase starts before its closing rule)."""
    target = int(megabytes * 1_000_000)
    parts: list[str] = []
    size = phase = 0
    while size < target:
        block = BLOCKS[phase % len(BLOCKS)]
        if phase % 50 == 7:
            block = block.replace(
                "Total input tokens:", "instance_0  http://10.0.0.1:30001  Requests: 5 (50.0%)\nTotal input tokens:", 1
            )
        if phase % 97 == 11:
            block = block[: block.index("Mean TTFT")]
        lines = [f"===== cfg{phase % 3} concurrency={phase + 1} (n={4 * (phase + 1)}) ====="]
        lines += [NOISE[i % len(NOISE)] for i in range(200)]
        lines += [prefix + line for line in block.splitlines()]
        chunk = "\n".join(lines) + "\n"
        parts.append(chunk)
        size += len(chunk.encode())
        phase += 1
    parts.append("ALL_DONE\n")
    return "".join(parts)


def scan(text: str) -> int:
    """The plain baseline: every line, one regex match; the count of ``label: number`` lines."""
    match = SCAN_RE.match
    return sum(1 for _, line in lines(text) if match(line))


def best_seconds(work: Callable[[], object], repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        timings.append(time.perf_counter() - start)
    return min(timings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--prefix", default="")
    parser.add_argument("--repeat", type=int, default=3, help="timings of each; the best is shown (default 3)")
    args = parser.parse_args()
    text = build(args.mb, args.prefix)
    megabytes = len(text.encode()) / 1e6
    parse_s = best_seconds(lambda: kinds.parse_text(text), args.repeat)
    scan_s = best_seconds(lambda: scan(text), args.repeat)
    tracemalloc.start()  # a further parse, traced (tracemalloc slows it down: not timed)
    parsed = kinds.parse_text(text)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"log: {megabytes:.1f} MB, {text.count(chr(10))} lines; format {parsed.format}")
    print(
        f"parse: {parse_s:.2f} s, {megabytes / parse_s:.1f} MB/s   |   plain line-by-line regex scan: {scan_s:.2f} s, "
        f"{megabytes / scan_s:.1f} MB/s   (the parser at {scan_s / parse_s:.2f} x the scan's speed)"
    )
    print(
        f"rows: {len(parsed.rows)}; problems kept: {len(parsed.problems)} (+{parsed.problems_left_out} counted); "
        f"warnings kept: {len(parsed.warnings)}; dropped: {parsed.dropped}; complete: {parsed.complete}"
    )
    print(
        f"peak memory of the parse: {peak / 1e6:.1f} MB ({peak / len(text.encode()):.2f} x the log's size; "
        f"rows alone: {len(parsed.rows)} dicts)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
