"""Tune the fused-MoE block configuration per M on this GPU and write the table the kernel reads.

    python tune.py                       # production shape, bf16, M = 1 ... 4096, full search
    python tune.py --dtype fp8 --m-list 1,16,256 --space small --budget-s 300

For each M it times every candidate config (a CUDA-graph replay of the whole call, median of
--iters, the same routing for all candidates) and keeps the fastest; candidates that do not fit the
GPU (shared memory, registers) are skipped. It writes
``configs/E=<E>,H=<H>,I=<I>,dtype=<dtype>,device=<GPU>.json``: ``{"<M>": {BLOCK_M, BLOCK_N,
BLOCK_K, GROUP_M, num_warps, num_stages}, ..., "_meta": {...}}``. ``fused_moe.get_config`` uses the
entry with the nearest M and falls back to ``heuristic_config`` when the file is missing.
Needs a GPU; torch, triton and the standard library only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch
import triton
from bench_moe import DTYPES, PRODUCTION, capture_graph, parse_m_list, time_cuda
from fused_moe import (
    CONFIG_DIR,
    config_file_name,
    fused_moe_triton,
    heuristic_config,
    make_tokens,
    make_weights,
    pipeline_bytes,
    quantize_fp8,
    shared_memory_limit,
)

Weights = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]  # w1, w2, FP8 scales


def candidates(m: int, num_experts: int, topk: int, weight_dtype: torch.dtype, space: str) -> list[dict[str, int]]:
    """Configs worth timing at M: BLOCK_M no larger than twice the pairs an expert gets, pipelines
    that fit shared memory; the heuristic's choice always first."""
    pairs_per_expert = m * topk / min(num_experts, m * topk)
    max_bm = max(16, 2 * triton.next_power_of_2(math.ceil(pairs_per_expert)))
    w_bytes, a_bytes = weight_dtype.itemsize, 4 if weight_dtype == torch.float32 else 2
    if space == "small":
        grid: dict[str, list[int]] = {
            "BLOCK_M": [16, 32, 64, 128],
            "BLOCK_N": [32, 64, 128],
            "BLOCK_K": [64, 128, 256],
            "GROUP_M": [1 if pairs_per_expert <= 32 else 8],
            "num_warps": [4],
            "num_stages": [3, 4],
        }
    else:
        grid = {
            "BLOCK_M": [16, 32, 64, 128],
            "BLOCK_N": [32, 64, 128, 256],
            "BLOCK_K": [64, 128, 256],
            "GROUP_M": [1, 8, 16],
            "num_warps": [4, 8],
            "num_stages": [2, 3, 4, 5],
        }
    limit = int(0.9 * shared_memory_limit())
    first = heuristic_config(m, num_experts, topk, weight_dtype)
    found = [first]
    for values in itertools.product(*grid.values()):
        cfg = dict(zip(grid, values, strict=True))
        if cfg["BLOCK_M"] > max_bm or cfg == first:
            continue
        if cfg["num_stages"] * pipeline_bytes(cfg, a_bytes, w_bytes) > limit:
            continue
        if cfg["BLOCK_M"] * cfg["BLOCK_N"] >= 128 * 128 and cfg["num_warps"] < 8 and space != "small":
            continue  # large tiles spill with 4 warps
        found.append(cfg)
    rest = found[1:]
    random.Random(m).shuffle(rest)  # a budget cut then samples the space instead of one corner of it
    return [first, *rest]


def time_config(
    cfg: dict[str, int],
    x: torch.Tensor,
    w: Weights,
    weights: torch.Tensor,
    ids: torch.Tensor,
    warmup: int,
    iters: int,
) -> float:
    """Milliseconds per call of a graph replay with ``cfg``; inf if it fails to compile or launch."""
    w1, w2, s1, s2 = w

    def call() -> torch.Tensor:
        return fused_moe_triton(x, w1, w2, weights, ids, config=cfg, w1_scale=s1, w2_scale=s2)

    try:
        call()
        torch.cuda.synchronize()
    except Exception as exc:  # out of resources, a compiler error: not a candidate on this GPU
        print(f"  skip {cfg}: {type(exc).__name__}", flush=True)
        return math.inf
    replay = capture_graph(call) or call
    return time_cuda(replay, warmup, iters)


def tune_m(
    m: int,
    shape: dict[str, int],
    w: Weights,
    x_dtype: torch.dtype,
    space: str,
    warmup: int,
    iters: int,
    deadline: float,
    seed: int = 0,
) -> tuple[dict[str, int], float, float, int]:
    """(best config, its ms, the heuristic's ms, candidates timed) at M, stopping at ``deadline``."""
    e, h, k = shape["experts"], shape["hidden"], shape["topk"]
    x, weights, ids = make_tokens(m, e, h, k, x_dtype, "cuda", seed=seed + m)
    cands = candidates(m, e, k, w[0].dtype, space)
    heuristic_ms = best_ms = time_config(cands[0], x, w, weights, ids, warmup, iters)
    best, timed = cands[0], 1
    for cfg in cands[1:]:
        if time.monotonic() > deadline:
            break
        ms = time_config(cfg, x, w, weights, ids, warmup, iters)
        timed += 1
        if ms < best_ms:
            best, best_ms = cfg, ms
    return best, best_ms, heuristic_ms, timed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m-list", type=parse_m_list, default=[2**i for i in range(13)])
    parser.add_argument("--experts", type=int, default=PRODUCTION["experts"])
    parser.add_argument("--hidden", type=int, default=PRODUCTION["hidden"])
    parser.add_argument("--inter", type=int, default=PRODUCTION["inter"])
    parser.add_argument("--topk", type=int, default=PRODUCTION["topk"])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--space", choices=["small", "full"], default="full")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=3600.0, help="stop searching an M past its share")
    parser.add_argument("--out-dir", type=Path, default=CONFIG_DIR)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("tune.py needs a CUDA GPU", file=sys.stderr)
        return 2
    shape = {k: getattr(args, k) for k in ("experts", "hidden", "inter", "topk")}
    x_dtype = DTYPES[args.dtype]
    w1, w2 = make_weights(shape["experts"], shape["hidden"], shape["inter"], x_dtype, "cuda", seed=args.seed)
    s1 = s2 = None
    if args.dtype == "fp8":
        w1, s1 = quantize_fp8(w1)
        w2, s2 = quantize_fp8(w2)
        torch.cuda.empty_cache()
    device = torch.cuda.get_device_name()
    print(f"GPU: {device}  torch {torch.__version__}  triton {triton.__version__}", flush=True)
    start = time.monotonic()
    table: dict[str, Any] = {}
    for index, m in enumerate(args.m_list):
        share = (args.budget_s - (time.monotonic() - start)) / (len(args.m_list) - index)
        best, best_ms, heur_ms, timed = tune_m(
            m,
            shape,
            (w1, w2, s1, s2),
            x_dtype,
            args.space,
            args.warmup,
            args.iters,
            time.monotonic() + share,
            seed=args.seed,
        )
        table[str(m)] = best
        print(f"M={m}: best {best_ms:.4f} ms {best} (heuristic {heur_ms:.4f} ms, {timed} timed)", flush=True)
    table["_meta"] = {
        "device": device,
        "dtype": args.dtype,
        "shape": shape,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "space": args.space,
        "written_by": "tune.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = args.out_dir / config_file_name(shape["experts"], shape["hidden"], shape["inter"], args.dtype, device)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
