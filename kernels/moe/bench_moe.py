"""Sweep the token count M through one fused-MoE layer and print the table, every row against the roofline.

    python bench_moe.py --m-list 1,2,4,8 --out results.jsonl

Prints ``Key: value`` header lines (GPU, peaks, versions, shape, what is timed), then the column line

    M ms/call tok/s us/token p10_ms p90_ms kernel_ms experts bytes_MB GB/s TFLOP/s roof_ms pct_roof pct_copy bound note

and one row per M (flushed one by one, one JSONL object per M appended to --out as it completes),
then the done marker. The note (free text, possibly empty) is always last. With CUDA it runs the
Triton kernel at the production shape; on a CPU the torch path at a small shape. Every shape
argument can be given explicitly; peaks come from roofline.GPUS by device name unless overridden.

Each M is a phase: ``phases.jsonl`` beside --out gets one line per M (its start and end, the timed calls'
window and count, the host's load at both ends; benchhost/phaselog.py), so GPU telemetry can be cut
per M and energy per call computed over the timed calls (or, with ``--energy-s``, over a loop of the same
call run after the timing, only for its energy).

Weights are made once, on the device, in the benchmark's dtype (FP8: quantised once from bf16, one
expert at a time); only the tokens and the routing are made per M.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any, TextIO

import torch
import triton
from fused_moe import (
    config_file_name,
    dtype_label,
    fused_moe_torch,
    fused_moe_triton,
    get_config,
    load_config_table,
    make_tokens,
    make_weights,
    quantize_fp8,
)
from roofline import BYTES, find_gpu, roofline_row

PRODUCTION = {"experts": 384, "hidden": 7168, "inter": 2048, "topk": 8}
CPU_SMALL = {"experts": 8, "hidden": 256, "inter": 128, "topk": 2}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": torch.bfloat16}
COLUMNS = (
    "M ms/call tok/s us/token p10_ms p90_ms kernel_ms experts bytes_MB GB/s TFLOP/s roof_ms pct_roof pct_copy "
    "bound note"
)


def fmt(value: float, decimals: int) -> str:
    """At least ``decimals`` decimals and four significant digits, so rounding stays under 0.05%."""
    if not math.isfinite(value) or value == 0:
        return f"{value:.{decimals}f}"
    return f"{value:.{max(decimals, 3 - math.floor(math.log10(abs(value))))}f}"


def parse_tile(text: str) -> dict[str, int]:
    """``BLOCK_M=32,BLOCK_N=64,...`` (the tile search's ``tile`` argument) as a config override; "" is none."""
    keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
    out: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key not in keys or not value.isdigit():
            raise argparse.ArgumentTypeError(f"--tile: {part!r} is not KEY=<int> with KEY one of {', '.join(keys)}")
        out[key] = int(value)
    return out


def parse_m_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"--m-list needs positive integers, got {text!r}")
    return values


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


def spread(samples: list[float]) -> tuple[float, float]:
    """p10 and p90 of the timed calls (the spread behind a median), inclusive quantiles."""
    if len(samples) < 2:
        return samples[0], samples[0]
    deciles = statistics.quantiles(samples, n=10, method="inclusive")
    return deciles[0], deciles[-1]


LAST_SAMPLES: list[float] = []  # the timed calls behind the last median, for spread()
LAST_WINDOW: dict[str, float] = {}  # when those calls ran (epoch s) and how many, for the phase record


def time_cpu(fn: Callable[[], Any], warmup: int, iters: int) -> float:
    """Median wall milliseconds per call after ``warmup`` calls, over ``iters`` calls."""
    for _ in range(warmup):
        fn()
    samples = []
    LAST_WINDOW["timed_start"] = time.time()
    for _ in range(max(iters, 1)):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    LAST_WINDOW.update(timed_end=time.time(), timed_calls=len(samples), warmup_calls=warmup)
    LAST_SAMPLES[:] = samples
    return statistics.median(samples)


def time_cuda(fn: Callable[[], Any], warmup: int, iters: int) -> float:
    """Median milliseconds per call between CUDA events around each call (``warmup`` and ``iters``
    are numbers of calls). Weights of the touched experts are far larger than L2 from M = 1 on
    (704 MB against 50-60 MB), so no cache flush is needed between calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    LAST_WINDOW["timed_start"] = time.time()
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    LAST_WINDOW.update(timed_end=time.time(), timed_calls=len(events), warmup_calls=warmup)
    LAST_SAMPLES[:] = [start.elapsed_time(end) for start, end in events]
    return statistics.median(LAST_SAMPLES)


def capture_graph(fn: Callable[[], Any]) -> Callable[[], Any] | None:
    """The call captured in a CUDA graph (compiled first, on a side stream), or None if it cannot be."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        return graph.replay
    except Exception:  # e.g. a host sync in the torch path: fall back to eager timing
        torch.cuda.synchronize()
        return None


def kernel_time_ms(fn: Callable[[], Any], iters: int) -> float:
    """Device time of all kernels (and memsets/copies) of one eager call, from torch.profiler; nan if unavailable."""
    try:
        from torch.profiler import ProfilerActivity, profile

        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
        from torch.autograd import DeviceType

        # Device-side events (kernels, memsets, copies) of the trace; key_averages as a fallback.
        total_us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
        if total_us <= 0:
            for item in prof.key_averages():
                total_us += float(getattr(item, "self_device_time_total", getattr(item, "self_cuda_time_total", 0.0)))
        return total_us / 1e3 / iters if total_us > 0 else math.nan
    except Exception:  # the profiler is optional: the row keeps its wall time
        return math.nan


def measure_copy_gbps(device: str) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second), median of 5."""
    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        nbytes = int(min(2**30, free // 8)) // 16 * 16
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        ms = time_cuda(lambda: dst.copy_(src), warmup=3, iters=5)
    else:
        nbytes = 64 * 2**20
        src = torch.ones(nbytes, dtype=torch.uint8)
        dst = torch.empty_like(src)
        ms = time_cpu(lambda: dst.copy_(src), warmup=1, iters=5)
    return 2 * nbytes / (ms / 1e3) / 1e9


# ----------------------------------------------------------------------------------------------
# The sweep
# ----------------------------------------------------------------------------------------------


def build_parser(doc: str | None = __doc__) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m-list", type=parse_m_list, default=[2**i for i in range(12)])
    parser.add_argument("--experts", type=int)
    parser.add_argument("--hidden", type=int)
    parser.add_argument("--inter", type=int)
    parser.add_argument("--topk", type=int)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="fp8: FP8 e4m3 weights, bf16 tokens")
    parser.add_argument("--impl", choices=["auto", "triton", "torch"], default="auto")
    parser.add_argument("--warmup", type=int, default=3, help="calls before timing")
    parser.add_argument("--iters", type=int, default=10, help="timed calls (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("results.jsonl"))
    parser.add_argument("--marker", default="ALL_DONE")
    parser.add_argument("--gpu-name", help="look the peaks up under this name instead of the device's")
    parser.add_argument("--peak-gbps", type=float, help="memory bandwidth peak, GB/s (overrides the table)")
    parser.add_argument("--peak-tflops", type=float, help="compute peak, TFLOP/s (overrides the table)")
    parser.add_argument("--copy-gbps", type=float, help="measured copy bandwidth, GB/s (skips the measurement)")
    parser.add_argument("--no-graph", action="store_true", help="time eager calls, not a CUDA graph replay")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiler's kernel time")
    parser.add_argument(
        "--tile", type=parse_tile, default={}, help="BLOCK_M=..,BLOCK_N=..,..: the Triton tile to time (a tile search)"
    )
    parser.add_argument(
        "--energy-s",
        type=float,
        default=float(os.environ.get("BENCH_ENERGY_S") or 0),
        help="after timing, run the timed call back to back for about this many seconds, for its energy per call "
        "(default $BENCH_ENERGY_S or 0: energy over the timed calls only)",
    )
    return parser


class Sweep:
    """Weights made once; ``row(m)`` times one M and returns the row (also printed and appended)."""

    def __init__(self, args: argparse.Namespace, device: str | None = None) -> None:
        self.args = args
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        defaults = PRODUCTION if self.device == "cuda" else CPU_SMALL
        self.shape = {k: getattr(args, k) or v for k, v in defaults.items()}
        self.impl = args.impl if args.impl != "auto" else ("triton" if self.device == "cuda" else "torch")
        self.dtype = DTYPES[args.dtype]
        e, h, i = self.shape["experts"], self.shape["hidden"], self.shape["inter"]
        self.w1, self.w2 = make_weights(e, h, i, self.dtype, self.device, seed=args.seed)
        self.s1: torch.Tensor | None = None
        self.s2: torch.Tensor | None = None
        if args.dtype == "fp8":
            self.w1, self.s1 = quantize_fp8(self.w1)
            self.w2, self.s2 = quantize_fp8(self.w2)
            if self.device == "cuda":
                torch.cuda.empty_cache()
        self.device_name = torch.cuda.get_device_name() if self.device == "cuda" else "cpu"
        gpu = find_gpu(args.gpu_name or self.device_name) if (self.device == "cuda" or args.gpu_name) else None
        self.copy_gbps = args.copy_gbps or measure_copy_gbps(self.device)
        compute = "fp32" if args.dtype == "fp32" else "bf16"
        if gpu is not None:
            peak_gbps = gpu.hbm_gbps
            peak_tflops = gpu.fp32_tflops if compute == "fp32" else gpu.bf16_tflops
            self.peak_source = f"table: {gpu.name} ({gpu.source})"
        else:  # unknown device (or a CPU): the measured copy bandwidth stands in for the memory peak
            peak_gbps, peak_tflops = self.copy_gbps, math.nan
            self.peak_source = "no table entry: memory peak = measured copy bandwidth, compute peak unknown"
        self.peak_gbps = args.peak_gbps or peak_gbps
        self.peak_tflops = args.peak_tflops or peak_tflops
        if args.peak_gbps or args.peak_tflops:
            self.peak_source += "; overridden by flags"
        self.compute = compute
        self.last_window: dict[str, float] = {}  # the timed calls of the last row (and its energy loop)

    def header(self) -> list[str]:
        e, h, i, k = (self.shape[key] for key in ("experts", "hidden", "inter", "topk"))
        weight_mb = e * 3 * i * h * BYTES[self.args.dtype] / 1e6
        gpu = self.device_name if self.device == "cuda" else f"none (CPU: {platform.machine()}, {self.impl} path)"
        cuda = torch.version.cuda or "none"
        timed = (
            "one whole layer call (align + gate/up + down + combine, allocations included) per sample, "
            + ("as a CUDA graph replay when it captures, else eager" if not self.args.no_graph else "eager")
            + f", CUDA events around each call, median of {self.args.iters} after {self.args.warmup} warm-up calls"
            if self.device == "cuda"
            else f"one whole layer call, perf_counter, median of {self.args.iters} after {self.args.warmup} warm-up"
        )
        return [
            f"GPU: {gpu}",
            f"Versions: torch={torch.__version__} triton={triton.__version__} cuda={cuda}"
            f" python={platform.python_version()}",
            f"MoE: E={e} hidden={h} inter={i} topk={k} dtype={self.args.dtype} impl={self.impl}",
            f"Weights: w1 ({e}, {2 * i}, {h}) w2 ({e}, {h}, {i}) {weight_mb:.1f} MB, made once on {self.device}",
            f"Peaks: {self.peak_gbps:.0f} GB/s, {self.peak_tflops:.1f} TFLOP/s {self.compute} ({self.peak_source})",
            f"Copy bandwidth: {self.copy_gbps:.0f} GB/s (measured, device to device, read + write)",
            f"Timed: {timed}",
            "Kernel time: kernel_ms = device time of all kernels of one eager call (torch.profiler), nan if none",
            "Config: per M in the note, cfg=BLOCK_MxBLOCK_NxBLOCK_K/gGROUP_M/wWARPS/sSTAGES and its source; "
            + self.config_table(),
            "Roofline: bytes = experts*3*inter*hidden*w_bytes (+fp8 scales) + 2*M*hidden*x_bytes; "
            "flops = 6*M*topk*inter*hidden; roof_ms = max(bytes/peak_GBps, flops/peak_TFLOPs)",
        ]

    def config_table(self) -> str:
        if self.impl != "triton":
            return "none (torch path)"
        e, h, i = self.shape["experts"], self.shape["hidden"], self.shape["inter"]
        name = config_file_name(e, h, i, dtype_label(self.w1.dtype), self.device_name)
        found = "tuned table found" if load_config_table(name) else "no tuned table: heuristic_config"
        return f"configs/{name} ({found})"

    def energy_loop(self, fn: Callable[[], Any], ms: float) -> dict[str, float]:
        """The timed call back to back for about --energy-s seconds, so that its energy per call comes from a
        window many telemetry samples long; the count is fixed up front from the median, the window ends at
        the last call's completion."""
        calls = max(1, math.ceil(self.args.energy_s * 1e3 / max(ms, 1e-3)))
        sync: Callable[[], Any] = torch.cuda.synchronize if self.device == "cuda" else (lambda: None)
        sync()
        start = time.time()
        for _ in range(calls):
            fn()
        sync()
        return {"energy_start": start, "energy_end": time.time(), "energy_calls": calls}

    def time_call(self, call: Callable[[], Any]) -> tuple[float, float, float, float, float, str]:
        """Median, p10 and p90 ms of the timed calls, the eager median, the profiler's kernel time and what was
        timed; keeps the timed window (and the energy loop's, with --energy-s) in ``last_window``."""
        timed_as, eager_ms, kernel_ms = "eager", math.nan, math.nan
        if self.device == "cuda":
            eager_ms = time_cuda(call, self.args.warmup, self.args.iters)  # also compiles
            # the torch path synchronises (torch.unique, torch.where): only the Triton call is captured
            replay = None if self.args.no_graph or self.impl != "triton" else capture_graph(call)
            ms = eager_ms if replay is None else time_cuda(replay, self.args.warmup, self.args.iters)
            p10, p90 = spread(LAST_SAMPLES)
            timed_as, timed_fn = ("eager", call) if replay is None else ("cuda_graph", replay)
            if not self.args.no_profile:
                kernel_ms = kernel_time_ms(call, max(3, min(self.args.iters, 10)))
        else:
            ms = time_cpu(call, self.args.warmup, self.args.iters)
            p10, p90 = spread(LAST_SAMPLES)
            eager_ms, timed_fn = ms, call
        self.last_window = dict(LAST_WINDOW)
        if self.args.energy_s > 0:
            self.last_window.update(self.energy_loop(timed_fn, ms))
        return ms, p10, p90, eager_ms, kernel_ms, timed_as

    def row(self, m: int) -> dict[str, Any]:
        e, h, i, k = (self.shape[key] for key in ("experts", "hidden", "inter", "topk"))
        x, weights, ids = make_tokens(m, e, h, k, self.dtype, self.device, seed=self.args.seed + m)
        config, source = get_config(m, e, h, i, k, self.w1.dtype, self.device_name)
        if self.args.tile:  # the tile search's candidate, over what the table or the heuristic would take
            config, source = {**config, **self.args.tile}, "tile"
        w1, w2, s1, s2 = self.w1, self.w2, self.s1, self.s2
        if self.impl == "triton":

            def call() -> torch.Tensor:
                return fused_moe_triton(x, w1, w2, weights, ids, config=config, w1_scale=s1, w2_scale=s2)
        else:

            def call() -> torch.Tensor:
                return fused_moe_torch(x, w1, w2, weights, ids, w1_scale=s1, w2_scale=s2)

        experts = int(torch.unique(ids).numel())
        ms, p10, p90, eager_ms, kernel_ms, timed_as = self.time_call(call)
        roof = roofline_row(m, ms, experts, h, i, k, self.args.dtype, self.peak_gbps, self.peak_tflops, self.copy_gbps)
        notes = [] if m * k >= e else ["sparse"]  # fewer pairs than experts: most experts idle
        if self.impl == "triton":
            c = config
            cfg = f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']}/g{c['GROUP_M']}/w{c['num_warps']}/s{c['num_stages']}"
            notes += [f"cfg={cfg}", source.split("[")[0].split(":")[0]]
        notes += [] if timed_as == "cuda_graph" or self.device != "cuda" else ["eager"]
        return {
            "M": m,  # the key of the original format, kept for existing readers
            "m": m,
            "ms_per_call": ms,
            "tok_per_s": m / (ms / 1e3),
            "us_per_token": 1e3 * ms / m,
            "p10_ms": p10,
            "p90_ms": p90,
            "kernel_ms": kernel_ms,
            "experts": experts,
            "bytes_read": roof.bytes_read,
            "gbps": roof.gbps,
            "tflops": roof.tflops,
            "roofline_ms": roof.roofline_ms,
            "pct_roofline": roof.pct_roofline,
            "pct_copy_bw": roof.pct_copy_bw,
            "bound": roof.bound,
            "note": " ".join(notes),
            "flops": roof.flops,
            "eager_ms": eager_ms,
            "timed": timed_as,
            "dtype": self.args.dtype,
            "config": config if self.impl == "triton" else None,
            "config_source": source if self.impl == "triton" else None,
        }


def format_row(row: dict[str, Any]) -> str:
    cells = [
        str(row["m"]),
        fmt(row["ms_per_call"], 3),
        fmt(row["tok_per_s"], 0),
        fmt(row["us_per_token"], 2),
        fmt(row["p10_ms"], 3),
        fmt(row["p90_ms"], 3),
        fmt(row["kernel_ms"], 3),
        str(row["experts"]),
        fmt(row["bytes_read"] / 1e6, 1),
        fmt(row["gbps"], 1),
        fmt(row["tflops"], 2),
        fmt(row["roofline_ms"], 3),
        f"{row['pct_roofline']:.1f}",
        f"{row['pct_copy_bw']:.1f}",
        row["bound"],
        row["note"],
    ]
    return " ".join(cells).rstrip()


def json_row(row: dict[str, Any]) -> str:
    """JSON with nan/inf written as null (strict JSON)."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    return json.dumps({k: clean(v) for k, v in row.items()})


def phase_log(path: Path | None) -> Any:
    """A ``benchhost.phaselog.PhaseLog`` writing ``path`` (the host core is deployed inside every payload; from
    the repository, ``PYTHONPATH=host``); None (said once) when it is missing or there is no file to write beside."""
    if path is None:
        return None
    try:
        from benchhost.phaselog import PhaseLog
    except ImportError:
        print("Phases: not recorded (no benchhost beside the payload)", flush=True)
        return None
    return PhaseLog(path)


def phases_beside(out: TextIO | None) -> Path | None:
    """``phases.jsonl`` in the directory of the --out file (None for a stream such as stdout)."""
    name = getattr(out, "name", None)
    return Path(name).with_name("phases.jsonl") if isinstance(name, str) and not name.startswith("<") else None


def run_sweep(
    sweep: Sweep, m_list: list[int], out: TextIO | None, marker: str | None, phases: Path | None = None
) -> list[dict[str, Any]]:
    """Print the header and one row per M; each M is a phase of ``phases`` (default: beside ``out``)."""
    log = phase_log(phases or phases_beside(out))  # before the header: a note from it is a header line
    for line in sweep.header():
        print(line, flush=True)
    print(COLUMNS, flush=True)
    rows = []
    for m in m_list:
        what = {"kind": "kernel", "m": m, "dtype": sweep.args.dtype, "impl": sweep.impl, "device": sweep.device}
        with log.phase(**what) if log is not None else nullcontext({}) as record:
            row = sweep.row(m)
            record.update(sweep.last_window)
        rows.append(row)
        print(format_row(row), flush=True)
        if out is not None:
            out.write(json_row(row) + "\n")
            out.flush()
    if marker:
        print(marker, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sweep = Sweep(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:
        run_sweep(sweep, args.m_list, out, args.marker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
