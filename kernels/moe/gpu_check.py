"""One prepared GPU check of the fused-MoE payload: correctness at the production shape, then the
roofline table of the sweep. Meant to run in one shot (under 5 minutes on an H200, compilation included):

    cd kernels/moe && python gpu_check.py 2>&1 | tee gpu_check.log

Steps (each prints its elapsed time; later, optional steps are skipped past --budget-s):

1. environment: GPU, versions, shared memory, peaks from roofline.GPUS, measured copy bandwidth;
2. no host sync: one decode call under ``torch.cuda.set_sync_debug_mode("error")`` and its CUDA-graph capture;
3. correctness, bf16, production shape (E=384 H=7168 I=2048 topk=8) at --check-m against the torch
   reference in fp32 (TF32 off); fp32 with IEEE dots at E=8 (1e-4); FP8 weights against the reference on
   the dequantised weights;
4. the bf16 sweep (M = 1 ... 2048), the bench's table: whole-call time (CUDA-graph replay), profiler
   kernel time, experts, bytes, GB/s, TFLOP/s, roofline, % of roofline and of copy bandwidth, bound;
5. a short probe of other block configs at a few M (bf16), printed as a candidate tuned table;
6. FP8 weights: correctness and the same sweep (if the GPU converts FP8: sm_89 and newer);
7. the goals (H200, bf16: >= 70 % of roofline at M = 1, >= 80 % from M = 256) as MET / MISSED.

Exit status: 0 when every correctness check passed (goals missed do not fail it), 1 on a
correctness failure, 2 on a crash of a step. torch, triton and the standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import triton
from bench_moe import PRODUCTION, Sweep, build_parser, capture_graph, parse_m_list, run_sweep
from fused_moe import (
    fused_moe_torch,
    fused_moe_triton,
    get_config,
    launch_info,
    make_tokens,
    make_weights,
    shared_memory_limit,
)

START = time.monotonic()
TOL = {"bf16": 3e-2, "fp8": 3e-2, "fp32": 1e-4}


def say(text: str = "") -> None:
    print(text, flush=True)


def step(title: str) -> None:
    say()
    say(f"== {title}  [t={time.monotonic() - START:.1f}s]")


def compare(got: torch.Tensor, want: torch.Tensor, tol: float) -> tuple[bool, str]:
    diff = (got.float() - want.float()).abs()
    rel = float(diff.norm() / want.float().norm().clamp(min=1e-30))
    bad = int((diff > tol + tol * want.float().abs()).sum())
    ok = bad == 0 and math.isfinite(rel) and float(want.float().abs().mean()) > 1e-3
    return ok, f"max_abs_err={float(diff.max()):.3e} rel_l2_err={rel:.3e} outside_tol={bad}/{diff.numel()}"


def check_case(
    label: str, m: int, w: tuple[Any, ...], x_dtype: torch.dtype, tol: float, seed: int, topk: int, device: str
) -> bool:
    w1, w2, s1, s2 = w
    e, h = w1.shape[0], w1.shape[2]
    topk = min(topk, e)
    x, weights, ids = make_tokens(m, e, h, topk, x_dtype, device, seed=seed)
    cfg, source = get_config(m, e, h, w2.shape[2], topk, w1.dtype)
    got = fused_moe_triton(x, w1, w2, weights, ids, config=cfg, w1_scale=s1, w2_scale=s2)
    want = fused_moe_torch(x, w1, w2, weights, ids, compute_dtype=torch.float32, w1_scale=s1, w2_scale=s2)
    ok, detail = compare(got, want, tol)
    say(f"{'PASS' if ok else 'FAIL'} {label} M={m}: {detail} cfg[{launch_info(cfg)}] ({source})")
    return ok


def sweep_args(
    dtype: str, m_list: list[int], out: Path, iters: int, shape: dict[str, int], copy_gbps: float | None = None
) -> argparse.Namespace:
    argv = ["--dtype", dtype, "--m-list", ",".join(map(str, m_list)), "--out", str(out), "--iters", str(iters)]
    argv += ["--copy-gbps", str(copy_gbps)] if copy_gbps else []
    argv += ["--impl", "triton", *(f"--{key}={value}" for key, value in shape.items())]
    return build_parser().parse_args(argv)


def decode_sync_and_graph(w1: torch.Tensor, w2: torch.Tensor, shape: dict[str, int]) -> list[str]:
    """Step 2: one M = 1 call must not synchronise with the host and must capture in a CUDA graph."""
    failures = []
    x, weights, ids = make_tokens(1, shape["experts"], shape["hidden"], shape["topk"], w1.dtype, "cuda")
    fused_moe_triton(x, w1, w2, weights, ids)  # compile first: compilation may sync
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fused_moe_triton(x, w1, w2, weights, ids)
        say("PASS no host sync in a decode call (set_sync_debug_mode=error)")
    except RuntimeError as exc:
        failures.append("host sync")
        say(f"FAIL a decode call synchronises with the host: {exc}")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    replay = capture_graph(lambda: fused_moe_triton(x, w1, w2, weights, ids))
    say("PASS captured in a CUDA graph" if replay else "FAIL could not capture the call in a CUDA graph")
    if replay is None:
        failures.append("cuda graph")
    return failures


SMOKE = {"experts": 8, "hidden": 96, "inter": 48, "topk": 2}  # --smoke-cpu: the glue, under the interpreter


@dataclass
class Outcome:
    """What the check found so far: correctness failures, the steps that crashed, each sweep's rows."""

    failures: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m-list", type=parse_m_list, default=[2**i for i in range(12)])
    parser.add_argument("--check-m", type=parse_m_list, default=[1, 3, 64, 512, 2048])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=240.0, help="skip optional steps past this many seconds")
    parser.add_argument("--probe-m", type=parse_m_list, default=[1, 256, 2048])
    parser.add_argument("--probe-s", type=float, default=45.0, help="seconds for the config probe")
    parser.add_argument("--no-fp8", action="store_true")
    parser.add_argument("--smoke-cpu", action="store_true", help="tiny shape on the CPU (TRITON_INTERPRET=1)")
    default_out = Path(os.environ.get("OUT", ".")) / "gpu_check.jsonl"
    parser.add_argument("--out", type=Path, default=default_out, help="JSONL of the sweep rows")
    return parser.parse_args(argv)


def shape_label(shape: dict[str, int]) -> str:
    return f"E={shape['experts']} H={shape['hidden']} I={shape['inter']} topk={shape['topk']}"


def environment(args: argparse.Namespace, device: str, shape: dict[str, int]) -> tuple[Sweep, int]:
    """Step 1: the GPU and versions, then the bf16 weights with the peaks and the measured copy bandwidth; the
    bf16 sweep and the GPU's compute capability (0 on the CPU)."""
    step("1. environment")
    sm = 0
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        sm = props.major * 10 + props.minor
        say(
            f"GPU: {torch.cuda.get_device_name()} (sm_{sm}, {props.multi_processor_count} SMs, "
            f"{props.total_memory / 2**30:.0f} GiB, smem/block {shared_memory_limit() // 1024} KiB)"
        )
    say(f"torch {torch.__version__}, triton {triton.__version__}, CUDA {torch.version.cuda}, python {sys.version[:6]}")
    t0 = time.monotonic()
    bf16 = Sweep(sweep_args("bf16", args.m_list, args.out, args.iters, shape), device=device)
    say(f"bf16 weights made on the {device} in {time.monotonic() - t0:.1f}s; {bf16.peak_source}")
    say(f"peaks {bf16.peak_gbps:.0f} GB/s {bf16.peak_tflops:.0f} TFLOP/s; measured copy {bf16.copy_gbps:.0f} GB/s")
    return bf16, sm


def no_host_sync(outcome: Outcome, bf16: Sweep, device: str, shape: dict[str, int]) -> None:
    """Step 2 (on a GPU): see :func:`decode_sync_and_graph`."""
    step("2. no host synchronisation, CUDA graph capture (M = 1)")
    if device != "cuda":
        say("skipped: no GPU (--smoke-cpu)")
        return
    try:
        outcome.failures += decode_sync_and_graph(bf16.w1, bf16.w2, shape)
    except Exception:
        outcome.crashes.append("step 2")
        traceback.print_exc()


def correctness(outcome: Outcome, args: argparse.Namespace, bf16: Sweep, device: str, shape: dict[str, int]) -> None:
    """Step 3: bf16 at the shape at each --check-m, then fp32 with IEEE dots at 8 experts, against the
    reference."""
    step("3. correctness against the torch reference (fp32 compute, TF32 off)")
    h, i, k = shape["hidden"], shape["inter"], shape["topk"]
    try:
        for m in args.check_m:
            w: tuple[Any, ...] = (bf16.w1, bf16.w2, None, None)
            if not check_case(f"bf16 {shape_label(shape)}", m, w, torch.bfloat16, TOL["bf16"], 100 + m, k, device):
                outcome.failures.append(f"bf16 M={m}")
        w1, w2 = make_weights(8, h, i, torch.float32, device)
        for m in (1, 33):  # 8 experts, topk 8: every expert gets all M pairs, 33 spans several blocks
            if not check_case(
                f"fp32 (IEEE dots) E=8 H={h} I={i} topk=8",
                m,
                (w1, w2, None, None),
                torch.float32,
                TOL["fp32"],
                200 + m,
                8,
                device,
            ):
                outcome.failures.append(f"fp32 M={m}")
        del w1, w2
    except Exception:
        outcome.crashes.append("step 3")
        traceback.print_exc()


def bf16_sweep(outcome: Outcome, args: argparse.Namespace, bf16: Sweep) -> None:
    """Step 4: the bench's sweep of bf16 weights over --m-list, its rows appended to --out."""
    step("4. bf16 sweep against the roofline")
    try:
        with args.out.open("a") as out:
            outcome.rows["bf16"] = run_sweep(bf16, args.m_list, out, marker="ALL_DONE")
    except Exception:
        outcome.crashes.append("step 4")
        traceback.print_exc()


def probe_configs(outcome: Outcome, args: argparse.Namespace, bf16: Sweep, device: str, shape: dict[str, int]) -> None:
    """Step 5 (on a GPU, within --budget-s): other block configs at each --probe-m, the best as a candidate
    table."""
    step("5. probe of block configs (bf16), within --probe-s")
    if device != "cuda":
        say("skipped: no GPU (--smoke-cpu)")
        return
    if time.monotonic() - START > args.budget_s:
        say("skipped: past --budget-s")
        return
    try:
        from tune import tune_m

        found: dict[str, Any] = {}
        share = args.probe_s / max(len(args.probe_m), 1)
        for m in args.probe_m:
            w = (bf16.w1, bf16.w2, None, None)
            best, best_ms, heur_ms, timed = tune_m(
                m, shape, w, torch.bfloat16, "small", 3, 10, time.monotonic() + share
            )
            found[str(m)] = best
            say(f"M={m}: heuristic {heur_ms:.4f} ms, best of {timed}: {best_ms:.4f} ms {launch_info(best)}")
        say("candidate table (configs/...dtype=bf16...json): " + json.dumps(found))
    except Exception:
        outcome.crashes.append("step 5")
        traceback.print_exc()


def fp8_weights(
    outcome: Outcome, args: argparse.Namespace, device: str, shape: dict[str, int], sm: int, copy_gbps: float
) -> None:
    """Step 6 (unless --no-fp8, a GPU without FP8 conversion or past --budget-s): FP8 weights' correctness at two
    M, then their sweep."""
    step("6. FP8 weights (e4m3, per-channel scales): correctness and sweep")
    if args.no_fp8:
        say("skipped: --no-fp8")
        return
    if device == "cuda" and sm < 89:
        say(f"skipped: sm_{sm} has no FP8 conversion in Triton")
        return
    if time.monotonic() - START > args.budget_s:
        say("skipped: past --budget-s")
        return
    try:
        fp8 = Sweep(sweep_args("fp8", args.m_list, args.out, args.iters, shape, copy_gbps), device=device)
        for m in (1, 64):
            w = (fp8.w1, fp8.w2, fp8.s1, fp8.s2)
            if not check_case(
                f"fp8 {shape_label(shape)}", m, w, torch.bfloat16, TOL["fp8"], 300 + m, shape["topk"], device
            ):
                outcome.failures.append(f"fp8 M={m}")
        with args.out.open("a") as out:
            outcome.rows["fp8"] = run_sweep(fp8, args.m_list, out, marker="ALL_DONE")
    except Exception:
        outcome.crashes.append("step 6")
        traceback.print_exc()


def goals(rows: dict[str, list[dict[str, Any]]]) -> None:
    """Step 7: each sweep's rows at M = 1 and from M = 256 against the roofline goals, MET or MISSED."""
    step("7. goals (bf16, H200: >= 70 % of the roofline at M = 1, >= 80 % from M = 256)")
    for dtype, table in rows.items():
        for row in table:
            goal = 70.0 if row["m"] == 1 else 80.0 if row["m"] >= 256 else None
            if goal is not None:
                verdict = "MET" if row["pct_roofline"] >= goal else "MISSED"
                say(
                    f"{dtype} M={row['m']}: {row['ms_per_call']:.4f} ms = {row['pct_roofline']:.1f} % of the "
                    f"{row['roofline_ms']:.4f} ms roofline (goal {goal:.0f} %): {verdict}"
                )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.smoke_cpu:
        device, shape = "cpu", SMOKE
    elif torch.cuda.is_available():
        device, shape = "cuda", PRODUCTION
    else:
        say("gpu_check.py needs a CUDA GPU (none found); on a CPU run the tests under TRITON_INTERPRET=1")
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be IEEE fp32
    torch.backends.cudnn.allow_tf32 = False
    args.out.parent.mkdir(parents=True, exist_ok=True)
    outcome = Outcome()
    bf16, sm = environment(args, device, shape)
    no_host_sync(outcome, bf16, device, shape)
    correctness(outcome, args, bf16, device, shape)
    bf16_sweep(outcome, args, bf16)
    probe_configs(outcome, args, bf16, device, shape)
    copy_gbps = bf16.copy_gbps
    del bf16  # frees the bf16 weights before the FP8 set is made
    if device == "cuda":
        torch.cuda.empty_cache()
    fp8_weights(outcome, args, device, shape, sm, copy_gbps)
    goals(outcome.rows)
    say()
    say(f"correctness failures: {outcome.failures or 'none'}; crashed steps: {outcome.crashes or 'none'}")
    say(f"rows appended to {args.out}; total {time.monotonic() - START:.1f}s")
    if outcome.failures:
        return 1
    return 2 if outcome.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
