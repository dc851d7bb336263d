"""Sweep the token count M through one fused-MoE layer and print the tuning table.

    python bench_moe.py --m-list 1,2,4,8 --out results.jsonl

Prints header lines, then ``M ms/call tok/s(MoE) us/token note`` rows (flushed one by one, and
one JSONL object per M appended to --out as it completes), then the done marker. With CUDA it runs
the Triton kernel at the production shape; on a CPU the torch path at a small shape. Every shape
argument can be given explicitly.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from fused_moe import fused_moe_torch, fused_moe_triton, make_inputs

PRODUCTION = {"experts": 384, "hidden": 7168, "inter": 2048, "topk": 8}
CPU_SMALL = {"experts": 8, "hidden": 256, "inter": 128, "topk": 2}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def fmt(value: float, decimals: int) -> str:
    """At least ``decimals`` decimals and four significant digits, so rounding stays under 0.05%."""
    if not math.isfinite(value) or value == 0:
        return f"{value:.{decimals}f}"
    return f"{value:.{max(decimals, 3 - math.floor(math.log10(abs(value))))}f}"


def parse_m_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"--m-list needs positive integers, got {text!r}")
    return values


def time_call(fn, device: str, warmup: int, iters: int) -> float:
    """Median milliseconds per call after warm-up."""
    if device == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=warmup * 10, rep=iters * 10, return_mode="median"))
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m-list", type=parse_m_list, default=[2**i for i in range(12)])
    parser.add_argument("--experts", type=int)
    parser.add_argument("--hidden", type=int)
    parser.add_argument("--inter", type=int)
    parser.add_argument("--topk", type=int)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--impl", choices=["auto", "triton", "torch"], default="auto")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("results.jsonl"))
    parser.add_argument("--marker", default="ALL_DONE")
    args = parser.parse_args(argv)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    defaults = PRODUCTION if device == "cuda" else CPU_SMALL
    shape = {k: getattr(args, k) or v for k, v in defaults.items()}
    impl = args.impl if args.impl != "auto" else ("triton" if device == "cuda" else "torch")
    dtype = DTYPES[args.dtype]
    run = fused_moe_triton if impl == "triton" else fused_moe_torch

    gpu = torch.cuda.get_device_name() if device == "cuda" else f"none (CPU: {platform.machine()}, torch path)"
    e, h, i, k = shape["experts"], shape["hidden"], shape["inter"], shape["topk"]
    weight_mb = e * 3 * i * h * torch.finfo(dtype).bits / 8 / 2**20
    print(f"GPU: {gpu}", flush=True)
    print(f"MoE: E={e} hidden={h} inter={i} topk={k} dtype={args.dtype} impl={impl}")
    print(f"w1 ({e}, {2 * i}, {h}) w2 ({e}, {h}, {i}) (~{weight_mb:.1f} MB)")
    print("M ms/call tok/s(MoE) us/token note", flush=True)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:
        for m in args.m_list:
            x, w1, w2, weights, ids = make_inputs(m, e, h, i, k, dtype, device, seed=args.seed)
            ms = time_call(lambda: run(x, w1, w2, weights, ids), device, args.warmup, args.iters)  # noqa: B023
            tok_s, us_tok = m / (ms / 1e3), 1e3 * ms / m
            note = "" if m * k >= e else "sparse"  # fewer pairs than experts: most experts idle
            print(f"{m} {fmt(ms, 3)} {fmt(tok_s, 0)} {fmt(us_tok, 2)} {note}".rstrip(), flush=True)
            row = {"M": m, "ms_per_call": ms, "tok_per_s": tok_s, "us_per_token": us_tok, "note": note}
            out.write(json.dumps(row) + "\n")
            out.flush()
    print(args.marker, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
