"""The roofline of one MoE layer call, and the peaks of the GPUs it runs on.

Pure Python (no torch): the bench, gpu_check.py and the tests share it. The formulas are stated in
docs/kernel-roofline.md:

    bytes = experts_touched * 3 * inter * hidden * w_bytes      (w1 gate+up and w2 of each expert read once)
          + experts_touched * 3 * inter * 4   (FP8 only: the fp32 per-channel scales)
          + 2 * M * hidden * x_bytes                             (x in, out written)
    flops = 2 * M * topk * 3 * inter * hidden                    (gate+up: 2*I*H MACs, down: I*H MACs per pair)
    roofline_ms = max(bytes / peak_bandwidth, flops / peak_flops)

The intermediate activation and the top-k partial rows (about M * topk * (2*inter + 2*hidden) * x_bytes)
are not counted: an ideal kernel keeps them on chip.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuPeak:
    name: str
    pattern: str  # regex matched (case-insensitive) against torch.cuda.get_device_name()
    hbm_gbps: float  # memory bandwidth, GB/s (10^9 bytes/s)
    bf16_tflops: float  # dense tensor-core BF16/FP16 with fp32 accumulation, no sparsity
    fp32_tflops: float  # FP32 without tensor cores (IEEE fp32 dots)
    source: str


# Datasheet figures, dense (the sparsity figures halved). Order matters: the first match wins.
GPUS: tuple[GpuPeak, ...] = (
    GpuPeak("H200 NVL", r"H200 NVL", 4800, 835, 60, "NVIDIA H200 datasheet (NVL column)"),
    GpuPeak("H200", r"H200", 4800, 989, 67, "NVIDIA H200 datasheet (SXM column)"),
    GpuPeak("H100 NVL", r"H100 NVL", 3900, 835, 60, "NVIDIA H100 datasheet (NVL column)"),
    GpuPeak("H100 PCIe", r"H100 PCIe", 2000, 756, 51, "NVIDIA H100 datasheet (PCIe column)"),
    GpuPeak("H100", r"H100", 3350, 989, 67, "NVIDIA H100 datasheet (SXM column)"),
    GpuPeak("B200", r"B200", 8000, 2250, 75, "NVIDIA HGX B200 datasheet, per GPU (36 PF sparse BF16 / 8 / 2)"),
    GpuPeak(
        "RTX PRO 6000 Blackwell",
        r"RTX PRO 6000",
        1597,
        504,
        126,
        "NVIDIA RTX PRO 6000 Blackwell datasheet (1597 GB/s GDDR7; BF16 = 4000 sparse FP4 TOPS / 8, approximate)",
    ),
    GpuPeak("L40S", r"L40S", 864, 362, 91.6, "NVIDIA L40S datasheet"),
    GpuPeak("A100 40GB", r"A100.*(40GB|PCIE-40)", 1555, 312, 19.5, "NVIDIA A100 datasheet (40GB)"),
    GpuPeak("A100 80GB PCIe", r"A100.*80GB PCIe", 1935, 312, 19.5, "NVIDIA A100 datasheet (80GB PCIe)"),
    GpuPeak("A100", r"A100", 2039, 312, 19.5, "NVIDIA A100 datasheet (80GB SXM)"),
)

BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}


def find_gpu(device_name: str) -> GpuPeak | None:
    """The table entry whose pattern matches the device name, or None."""
    for gpu in GPUS:
        if re.search(gpu.pattern, device_name, flags=re.IGNORECASE):
            return gpu
    return None


def expected_experts(m: int, num_experts: int, topk: int) -> float:
    """Distinct experts touched by M tokens under uniform random top-k routing (expectation)."""
    return num_experts * (1.0 - (1.0 - topk / num_experts) ** m)


def moe_bytes(m: int, experts: int, hidden: int, inter: int, dtype: str) -> float:
    """Compulsory bytes moved by one call (see the module docstring)."""
    w_bytes = BYTES[dtype]
    x_bytes = 2 if dtype == "fp8" else BYTES[dtype]  # FP8 is weight-only: activations stay bf16
    weights = experts * 3 * inter * hidden * w_bytes
    scales = experts * (2 * inter + hidden) * 4 if dtype == "fp8" else 0
    return float(weights + scales + 2 * m * hidden * x_bytes)


def moe_flops(m: int, topk: int, hidden: int, inter: int) -> float:
    """Useful flops of one call (padding rows not counted)."""
    return 2.0 * m * topk * 3 * inter * hidden


@dataclass(frozen=True)
class RoofRow:
    experts: int
    bytes_read: float
    flops: float
    gbps: float
    tflops: float
    roofline_ms: float
    pct_roofline: float
    pct_copy_bw: float
    bound: str


def roofline_row(
    m: int,
    ms: float,
    experts: int,
    hidden: int,
    inter: int,
    topk: int,
    dtype: str,
    peak_gbps: float,
    peak_tflops: float,
    copy_gbps: float,
) -> RoofRow:
    """Achieved rates at ``ms`` per call against the roofline (peaks in GB/s and TFLOP/s; nan = unknown)."""
    nbytes = moe_bytes(m, experts, hidden, inter, dtype)
    flops = moe_flops(m, topk, hidden, inter)
    seconds = ms / 1e3
    mem_ms = nbytes / (peak_gbps * 1e9) * 1e3 if peak_gbps > 0 else math.nan
    compute_ms = flops / (peak_tflops * 1e12) * 1e3 if peak_tflops > 0 else math.nan
    if math.isnan(compute_ms) or mem_ms >= compute_ms:
        roof, bound = mem_ms, "memory"
    else:
        roof, bound = compute_ms, "compute"
    gbps = nbytes / seconds / 1e9 if seconds > 0 else math.nan
    return RoofRow(
        experts=experts,
        bytes_read=nbytes,
        flops=flops,
        gbps=gbps,
        tflops=flops / seconds / 1e12 if seconds > 0 else math.nan,
        roofline_ms=roof,
        pct_roofline=100.0 * roof / ms if ms > 0 else math.nan,
        pct_copy_bw=100.0 * gbps / copy_gbps if copy_gbps > 0 else math.nan,
        bound=bound,
    )
