"""Compile the MoE kernels for NVIDIA targets without a GPU (Triton's bundled ptxas), and report
shared memory, registers and spills of the configs the bench would use at the production shape.

    python compile_check.py                 # sm_80 sm_89 sm_90 sm_100 sm_120
    python compile_check.py --arch 90

This is what can be checked about the GPU code on a machine with no GPU: that every kernel lowers
to SASS for each architecture with the heuristic configs, that the pipelines fit shared memory, and
whether registers spill (STACK > 0). It says nothing about speed. Exit status 1 if a kernel fails to
compile or does not fit. Not a test (about 10 s per architecture on two cores).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from typing import Any

import fused_moe as fm
import torch
import triton
from triton.backends.compiler import GPUTarget

# Opt-in shared memory per block of each architecture the peak table covers.
SMEM = {80: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024, 120: 99 * 1024}
WEIGHT_TYPES = {
    "bf16": (torch.bfloat16, "bf16", "bf16"),
    "fp8": (fm.FP8, "fp8e4nv", "bf16"),
    "fp32": (torch.float32, "fp32", "fp32"),
}


def compile_kernel(kernel: Any, types: dict[str, str], consts: dict[str, Any], arch: int, cfg: dict[str, int]) -> Any:
    """triton.compile with the signature a launch from fused_moe_triton would specialise to."""
    signature = {n: "constexpr" if n in consts else types[n].split(":")[0] for n in kernel.arg_names}
    attrs = {
        (kernel.arg_names.index(n),): [["tt.divisibility", 16]]
        for n, t in types.items()
        if t.endswith(":16") and n not in consts
    }
    src = triton.compiler.ASTSource(fn=kernel, constexprs=consts, signature=signature, attrs=attrs)
    target = GPUTarget("cuda", arch, 32)
    options = triton.compiler.make_backend(target).parse_options(
        {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    )
    return triton.compile(src, target=target, options=options.__dict__)


def resource_usage(compiled: Any) -> str:
    """REG and STACK of the cubin, from the cuobjdump bundled with Triton."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    fields = [w for line in out.splitlines() if "REG" in line for w in line.split() if w.startswith(("REG", "STACK"))]
    return " ".join(fields)


def gemm_types(w: str, x: str) -> tuple[dict[str, str], dict[str, str]]:
    gate_up = {
        "x_ptr": f"*{x}:16",
        "w1_ptr": f"*{w}:16",
        "s1_ptr": "*fp32:16",
        "act_ptr": f"*{x}:16",
        "pairs_ptr": "*i32:16",
        "experts_ptr": "*i32:16",
        "num_pairs": "i32:16",
        "hidden": "i32:16",
        "inter": "i32:16",
        "topk": "i32",
        "num_pid_m": "i32",
        "stride_xm": "i32:16",
        "stride_we": "i32:16",
        "stride_wn": "i32:16",
        "stride_se": "i32:16",
        "stride_am": "i32:16",
    }
    down = {
        "act_ptr": f"*{x}:16",
        "w2_ptr": f"*{w}:16",
        "s2_ptr": "*fp32:16",
        "out_ptr": f"*{x}:16",
        "weights_ptr": "*fp32:16",
        "pairs_ptr": "*i32:16",
        "experts_ptr": "*i32:16",
        "num_pairs": "i32:16",
        "hidden": "i32:16",
        "inter": "i32:16",
        "num_pid_m": "i32",
        "stride_am": "i32:16",
        "stride_we": "i32:16",
        "stride_wn": "i32:16",
        "stride_se": "i32:16",
        "stride_om": "i32:16",
    }
    return gate_up, down


def check_arch(arch: int, m_list: list[int]) -> int:
    """Compile every kernel for ``arch``, print what each uses; the number of kernels that failed or do not fit."""
    failures = 0
    for label, (dtype, w, x) in WEIGHT_TYPES.items():
        if label == "fp8" and arch < 89:
            continue
        failures += check_gemms(arch, label, dtype, w, x, m_list)
    for kernel, types, consts in helper_kernels():
        failures += check_helper(kernel, types, consts, arch)
    return failures


def check_gemms(arch: int, label: str, dtype: Any, w: str, x: str, m_list: list[int]) -> int:
    """Both GEMM kernels with weights ``label`` at each distinct config the heuristic picks for ``m_list``."""
    failures = 0
    smem = SMEM[arch]
    seen = set()
    for m in m_list:
        cfg = fm.heuristic_config(m, 384, 8, dtype, smem=smem)
        key = tuple(sorted(cfg.items()))
        if key in seen:
            continue
        seen.add(key)
        gate_up, down = gemm_types(w, x)
        consts = gemm_consts(cfg, label)
        for kernel, types, unit in (
            (fm._gate_up_silu_kernel, gate_up, {"stride_xk": 1, "stride_wk": 1, "stride_an": 1}),
            (fm._down_kernel, down, {"stride_ak": 1, "stride_wk": 1, "stride_on": 1}),
        ):
            name = f"sm_{arch} {label} M={m} {kernel.__name__} [{fm.launch_info(cfg)}]"
            failures += check_gemm(kernel, types, {**consts, **unit}, arch, cfg, name)
    return failures


def gemm_consts(cfg: dict[str, int], label: str) -> dict[str, Any]:
    """The constexprs a launch of a GEMM kernel with ``cfg`` and weights ``label`` specialises to."""
    return {
        "BLOCK_M": cfg["BLOCK_M"],
        "BLOCK_N": cfg["BLOCK_N"],
        "BLOCK_K": cfg["BLOCK_K"],
        "GROUP_M": cfg["GROUP_M"],
        "EVEN_K": True,
        "UPCAST": False,
        "FP8_W": label == "fp8",
        "PRECISION": "ieee" if label == "fp32" else None,
    }


def check_gemm(
    kernel: Any, types: dict[str, str], consts: dict[str, Any], arch: int, cfg: dict[str, int], name: str
) -> int:
    """Compile one GEMM kernel, print its shared memory against the architecture's and its registers; 1 if it
    fails to compile or does not fit, else 0."""
    smem = SMEM[arch]
    try:
        compiled = compile_kernel(kernel, types, consts, arch, cfg)
    except Exception as exc:  # a lowering or ptxas error
        print(f"FAIL {name}: {type(exc).__name__}: {str(exc)[:500]}", flush=True)
        return 1
    shared = compiled.metadata.shared
    fits = shared <= smem
    usage = resource_usage(compiled)
    print(
        f"{'ok  ' if fits else 'FAIL'} {name}: shared {shared // 1024} KiB of {smem // 1024}, {usage}",
        flush=True,
    )
    return int(not fits)


def helper_kernels() -> tuple[tuple[Any, dict[str, str], dict[str, Any]], ...]:
    """The routing and combine kernels with their signatures and constexprs."""
    return (
        (fm._count_kernel, {"ids_ptr": "*i64:16", "counts_ptr": "*i32:16", "num_pairs": "i32"}, {"BLOCK": 1024}),
        (
            fm._align_kernel,
            {
                "ids_ptr": "*i64:16",
                "counts_ptr": "*i32:16",
                "pairs_ptr": "*i32:16",
                "experts_ptr": "*i32:16",
                "padded_ptr": "*i32:16",
                "num_pairs": "i32",
                "num_experts": "i32",
                "max_blocks": "i32",
            },
            {"BLOCK_M": 16, "BLOCK": 1024, "E_POW2": 512},
        ),
        (
            fm._combine_kernel,
            {"partial_ptr": "*bf16:16", "out_ptr": "*bf16:16", "hidden": "i32:16"},
            {"TOPK": 8, "BLOCK": 1024},
        ),
    )


def check_helper(kernel: Any, types: dict[str, str], consts: dict[str, Any], arch: int) -> int:
    """Compile one helper kernel and print its registers; 1 if it fails to compile, else 0."""
    try:
        compiled = compile_kernel(kernel, types, consts, arch, {"num_warps": 4, "num_stages": 2})
        print(f"ok   sm_{arch} {kernel.__name__} {consts}: {resource_usage(compiled)}", flush=True)
    except Exception as exc:
        print(f"FAIL sm_{arch} {kernel.__name__}: {type(exc).__name__}: {str(exc)[:500]}", flush=True)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", type=int, action="append", choices=sorted(SMEM))
    parser.add_argument("--m-list", default="1,1024,2048,8192")
    args = parser.parse_args(argv)
    m_list = [int(v) for v in args.m_list.split(",")]
    failures = sum(check_arch(arch, m_list) for arch in args.arch or sorted(SMEM))
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
