"""Fused-MoE grouped GEMM in Triton, with its torch reference.

One MoE layer for M tokens, E experts, top-k routing:

    out[t] = sum_k  w[t, k] * W2[e_k] @ (silu(W1g[e_k] @ x[t]) * (W1u[e_k] @ x[t]))

A call is four device steps and no host synchronisation (so the whole call can be captured in a
CUDA graph):

1. ``align_by_expert``: two small Triton kernels sort the token-expert pairs by expert and pad each
   expert's run to a multiple of BLOCK_M into buffers sized for the worst case; the padded count
   stays on the device and unused blocks are marked -1 so the GEMM programs that get them exit.
2. ``_gate_up_silu_kernel``: gate and up projections of one expert's block of pairs, SiLU(gate) * up
   applied in registers, the activation stored in x.dtype.
3. ``_down_kernel``: down projection, scaled by the routing weight, one row per pair.
4. ``_combine_kernel``: the top-k rows of each token summed in fp32 and stored in x.dtype.

Block sizes, warps and stages come per M from a tuned table per GPU (``configs/*.json``, written
by ``tune.py``), else from ``heuristic_config``. Weights may be bf16/fp16/fp32, or FP8 (e4m3) with
one fp32 scale per output channel (``quantize_fp8``), dequantised in registers.

Runs with only torch, triton and the standard library (it is deployed to GPU hosts as is).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter (TRITON_INTERPRET=1) mis-computes tl.dot on bf16 tiles; there the kernels
# upcast tiles to fp32 before the dot. On a GPU the dot runs natively in bf16 with fp32 accumulation.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
CONFIG_DIR = Path(__file__).parent / "configs"
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
FP8 = torch.float8_e4m3fn


def route(logits: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax router: top-k expert ids per token and their renormalised fp32 weights."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, topk, dim=-1)
    return weights / weights.sum(dim=-1, keepdim=True), ids


# ----------------------------------------------------------------------------------------------
# Alignment: pairs sorted by expert, padded per expert, on the device.
# ----------------------------------------------------------------------------------------------


def max_padded_pairs(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Worst-case length of the padded pair list: every touched expert wastes at most block_m - 1 slots."""
    blocks = (num_pairs + min(num_experts, num_pairs) * (block_m - 1)) // block_m
    return blocks * block_m


@triton.jit
def _count_kernel(ids_ptr, counts_ptr, num_pairs, BLOCK: tl.constexpr):
    """Program e counts the pairs routed to expert e (no atomics: deterministic)."""
    expert = tl.program_id(0)
    total = tl.zeros((BLOCK,), dtype=tl.int32)
    for start in range(0, num_pairs, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        ids = tl.load(ids_ptr + offs, mask=offs < num_pairs, other=-1)
        total += (ids == expert).to(tl.int32)
    tl.store(counts_ptr + expert, tl.sum(total, axis=0))


@triton.jit
def _align_kernel(
    ids_ptr,
    counts_ptr,
    pairs_ptr,
    experts_ptr,
    padded_ptr,
    num_pairs,
    num_experts,
    max_blocks,
    BLOCK_M: tl.constexpr,
    BLOCK: tl.constexpr,
    E_POW2: tl.constexpr,
):
    """Program e writes expert e's pair indices (stable order), its padding and its block ids."""
    expert = tl.program_id(0)
    offs_e = tl.arange(0, E_POW2)
    counts = tl.load(counts_ptr + offs_e, mask=offs_e < num_experts, other=0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    start = tl.sum(tl.where(offs_e < expert, padded, 0), axis=0)
    count = tl.sum(tl.where(offs_e == expert, counts, 0), axis=0)
    mine = tl.sum(tl.where(offs_e == expert, padded, 0), axis=0)
    # This expert's pairs, in pair order.
    written = start
    for chunk in range(0, num_pairs, BLOCK):
        offs = chunk + tl.arange(0, BLOCK)
        match = (tl.load(ids_ptr + offs, mask=offs < num_pairs, other=-1) == expert).to(tl.int32)
        rank = tl.cumsum(match, axis=0) - 1
        tl.store(pairs_ptr + written + rank, offs.to(tl.int32), mask=match != 0)
        written += tl.sum(match, axis=0)
    # Padding slots of its last block hold num_pairs (an invalid pair index).
    offs_pad = tl.arange(0, BLOCK_M)
    tl.store(pairs_ptr + start + count + offs_pad, num_pairs, mask=offs_pad < mine - count)
    # The expert id of each of its blocks.
    for b0 in range(0, mine // BLOCK_M, BLOCK):
        offs_b = b0 + tl.arange(0, BLOCK)
        tl.store(experts_ptr + start // BLOCK_M + offs_b, expert, mask=offs_b < mine // BLOCK_M)
    if expert == 0:
        total = tl.sum(padded, axis=0)
        tl.store(padded_ptr, total)
        for b0 in range(total // BLOCK_M, max_blocks, BLOCK):  # unused blocks: their programs exit
            offs_b = b0 + tl.arange(0, BLOCK)
            tl.store(experts_ptr + offs_b, -1, mask=offs_b < max_blocks)


def align_by_expert(
    topk_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sort token-expert pairs by expert and pad each expert's run to a multiple of ``block_m``.

    Returns, all on topk_ids' device and with no host synchronisation:
    ``sorted_pairs`` (int32, worst-case length ``max_padded_pairs``; pair index ``t * topk + k``,
    padding holds ``M * topk``; slots past the padded count are unspecified), ``block_experts``
    (int32, the expert of each block of ``block_m`` pairs, -1 for unused blocks) and ``num_padded``
    (a one-element int32 tensor: the padded count, left on the device).
    """
    flat = topk_ids.flatten()  # a view of the router's int64 ids: no cast kernel
    num_pairs = flat.numel()
    length = max_padded_pairs(num_pairs, num_experts, block_m)
    max_blocks = length // block_m
    device = flat.device
    counts = torch.empty(num_experts, dtype=torch.int32, device=device)
    sorted_pairs = torch.empty(max(length, 1), dtype=torch.int32, device=device)
    block_experts = torch.empty(max(max_blocks, 1), dtype=torch.int32, device=device)
    num_padded = torch.empty(1, dtype=torch.int32, device=device)
    chunk = 256 if num_pairs <= 256 else 1024  # two variants to compile; masks cover the rest
    _count_kernel[(num_experts,)](flat, counts, num_pairs, BLOCK=chunk)
    _align_kernel[(num_experts,)](
        flat,
        counts,
        sorted_pairs,
        block_experts,
        num_padded,
        num_pairs,
        num_experts,
        max_blocks,
        BLOCK_M=block_m,
        BLOCK=chunk,
        E_POW2=triton.next_power_of_2(num_experts),
    )
    return sorted_pairs[:length], block_experts[:max_blocks], num_padded


# ----------------------------------------------------------------------------------------------
# The grouped GEMMs.
# ----------------------------------------------------------------------------------------------


@triton.jit
def _row_offsets(rows, stride):
    """Row offsets in int64: ``pairs * stride`` overflows int32 past ~2^31 elements (M ≈ 37,000 here)."""
    return rows.to(tl.int64) * stride


@triton.jit
def _program_tile(num_pid_m, n, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """L2-friendly order: GROUP_M consecutive row blocks walk the N tiles together, so a weight tile
    read by the first block of an expert is still in L2 for that expert's next blocks."""
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(n, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    group = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group
    pid_n = (pid % in_group) // group
    return pid_m, pid_n


@triton.jit
def _gate_up_silu_kernel(
    x_ptr,
    w1_ptr,
    s1_ptr,
    act_ptr,
    pairs_ptr,
    experts_ptr,
    num_pairs,
    hidden,
    inter,
    topk,
    num_pid_m,
    stride_xm,
    stride_xk,
    stride_we,
    stride_wn,
    stride_wk,
    stride_se,
    stride_am,
    stride_an,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr,
    FP8_W: tl.constexpr,
    PRECISION: tl.constexpr,
):
    pid_m, pid_n = _program_tile(num_pid_m, inter, BLOCK_N, GROUP_M)
    expert = tl.load(experts_ptr + pid_m).to(tl.int64)
    if expert < 0:  # a block past the padded count (the grid is sized for the worst case)
        return
    pairs = tl.load(pairs_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = pairs < num_pairs
    tokens = pairs // topk
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < inter
    offs_k = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + _row_offsets(tokens, stride_xm)[:, None]
    w_gate_ptrs = w1_ptr + expert * stride_we + _row_offsets(offs_n, stride_wn)[None, :] + offs_k[:, None] * stride_wk
    w_up_ptrs = w_gate_ptrs + inter * stride_wn
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, hidden, BLOCK_K):
        kk = k0 + offs_k
        if EVEN_K:
            a = tl.load(x_rows + kk[None, :] * stride_xk, mask=valid[:, None], other=0.0)
            w_gate = tl.load(w_gate_ptrs, mask=mask_n[None, :], other=0.0)
            w_up = tl.load(w_up_ptrs, mask=mask_n[None, :], other=0.0)
        else:
            a = tl.load(x_rows + kk[None, :] * stride_xk, mask=valid[:, None] & (kk[None, :] < hidden), other=0.0)
            w_mask = (kk[:, None] < hidden) & mask_n[None, :]
            w_gate = tl.load(w_gate_ptrs, mask=w_mask, other=0.0)
            w_up = tl.load(w_up_ptrs, mask=w_mask, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            w_gate = w_gate.to(tl.float32)
            w_up = w_up.to(tl.float32)
        elif FP8_W:
            w_gate = w_gate.to(a.dtype)
            w_up = w_up.to(a.dtype)
        gate = tl.dot(a, w_gate, gate, input_precision=PRECISION)
        up = tl.dot(a, w_up, up, input_precision=PRECISION)
        w_gate_ptrs += BLOCK_K * stride_wk
        w_up_ptrs += BLOCK_K * stride_wk
    if FP8_W:  # per-output-channel scales commute with the K sum
        s_base = s1_ptr + expert * stride_se
        gate *= tl.load(s_base + offs_n, mask=mask_n, other=0.0)[None, :]
        up *= tl.load(s_base + inter + offs_n, mask=mask_n, other=0.0)[None, :]
    act = gate * tl.sigmoid(gate) * up
    tl.store(
        act_ptr + _row_offsets(pairs, stride_am)[:, None] + offs_n[None, :] * stride_an,
        act.to(act_ptr.dtype.element_ty),
        mask=valid[:, None] & mask_n[None, :],
    )


@triton.jit
def _down_kernel(
    act_ptr,
    w2_ptr,
    s2_ptr,
    out_ptr,
    weights_ptr,
    pairs_ptr,
    experts_ptr,
    num_pairs,
    hidden,
    inter,
    num_pid_m,
    stride_am,
    stride_ak,
    stride_we,
    stride_wn,
    stride_wk,
    stride_se,
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr,
    FP8_W: tl.constexpr,
    PRECISION: tl.constexpr,
):
    pid_m, pid_n = _program_tile(num_pid_m, hidden, BLOCK_N, GROUP_M)
    expert = tl.load(experts_ptr + pid_m).to(tl.int64)
    if expert < 0:
        return
    pairs = tl.load(pairs_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = pairs < num_pairs
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < hidden
    offs_k = tl.arange(0, BLOCK_K)
    a_rows = act_ptr + _row_offsets(pairs, stride_am)[:, None]
    w_ptrs = w2_ptr + expert * stride_we + _row_offsets(offs_n, stride_wn)[None, :] + offs_k[:, None] * stride_wk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, inter, BLOCK_K):
        kk = k0 + offs_k
        if EVEN_K:
            a = tl.load(a_rows + kk[None, :] * stride_ak, mask=valid[:, None], other=0.0)
            w = tl.load(w_ptrs, mask=mask_n[None, :], other=0.0)
        else:
            a = tl.load(a_rows + kk[None, :] * stride_ak, mask=valid[:, None] & (kk[None, :] < inter), other=0.0)
            w = tl.load(w_ptrs, mask=(kk[:, None] < inter) & mask_n[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        elif FP8_W:
            w = w.to(a.dtype)
        acc = tl.dot(a, w, acc, input_precision=PRECISION)
        w_ptrs += BLOCK_K * stride_wk
    if FP8_W:
        acc *= tl.load(s2_ptr + expert * stride_se + offs_n, mask=mask_n, other=0.0)[None, :]
    scale = tl.load(weights_ptr + pairs, mask=valid, other=0.0)
    acc = acc * scale[:, None]
    tl.store(
        out_ptr + _row_offsets(pairs, stride_om)[:, None] + offs_n[None, :] * stride_on,
        acc.to(out_ptr.dtype.element_ty),
        mask=valid[:, None] & mask_n[None, :],
    )


@triton.jit
def _combine_kernel(partial_ptr, out_ptr, hidden, TOPK: tl.constexpr, BLOCK: tl.constexpr):
    """out[t] = sum_k partial[t * topk + k], summed in fp32, stored in out's dtype."""
    token = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < hidden
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for k in tl.static_range(TOPK):
        acc += tl.load(partial_ptr + (token * TOPK + k) * hidden + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + token * hidden + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


# ----------------------------------------------------------------------------------------------
# Configurations: a tuned table per GPU, else a heuristic.
# ----------------------------------------------------------------------------------------------


def device_name() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def config_file_name(num_experts: int, hidden: int, inter: int, dtype: str, device: str) -> str:
    """configs/E=384,H=7168,I=2048,dtype=bf16,device=NVIDIA_H200.json"""
    safe = re.sub(r"[^A-Za-z0-9.-]+", "_", device).strip("_")
    return f"E={num_experts},H={hidden},I={inter},dtype={dtype},device={safe}.json"


def dtype_label(weight_dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", FP8: "fp8"}[weight_dtype]


@functools.lru_cache(maxsize=32)
def load_config_table(file_name: str) -> dict[int, dict[str, int]]:
    """{M: config} from configs/<file_name>, or {} when there is no such file."""
    path = CONFIG_DIR / file_name
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text())
    return {int(m): {k: int(v) for k, v in cfg.items() if k in CONFIG_KEYS} for m, cfg in raw.items() if m.isdigit()}


@functools.lru_cache(maxsize=1)
def shared_memory_limit() -> int:
    """Opt-in shared memory per block of the current GPU in bytes (227 KB on H100/H200, 163 KB on
    A100, 99 KB on L40S and RTX PRO 6000); 227 KB without a GPU (the interpreter ignores it)."""
    if not torch.cuda.is_available():
        return 227 * 1024
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    limit = getattr(props, "shared_memory_per_block_optin", 0)
    if not limit:
        try:
            device = torch.cuda.current_device()
            limit = triton.runtime.driver.active.utils.get_device_properties(device)["max_shared_mem"]
        except Exception:  # an unknown driver: assume the smallest of the table's GPUs
            limit = 99 * 1024
    return int(limit)


def pipeline_bytes(cfg: dict[str, int], a_bytes: int, w_bytes: int) -> int:
    """Shared memory of one pipeline stage of the gate/up kernel (the larger one: two weight tiles)."""
    return cfg["BLOCK_M"] * cfg["BLOCK_K"] * a_bytes + 2 * cfg["BLOCK_K"] * cfg["BLOCK_N"] * w_bytes


def fit_stages(cfg: dict[str, int], a_bytes: int, w_bytes: int, smem: int | None = None) -> dict[str, int]:
    """``cfg`` with num_stages lowered until the pipeline fits the GPU's shared memory (10% kept for
    the epilogue's layout conversions), never under 2."""
    limit = int(0.9 * (smem or shared_memory_limit()))
    per_stage = pipeline_bytes(cfg, a_bytes, w_bytes)
    stages = max(2, min(cfg["num_stages"], limit // max(per_stage, 1)))
    return {**cfg, "num_stages": stages}


def heuristic_config(
    m: int, num_experts: int, topk: int, weight_dtype: torch.dtype, smem: int | None = None
) -> dict[str, int]:
    """A reasoned default (see docs/kernel-roofline.md): the layer is weight-bandwidth-bound up to
    M ≈ 10,000, so the block is sized to the pairs an expert actually gets (tensor-core MMAs need
    BLOCK_M >= 16) and the K loop is deep and pipelined to keep enough bytes in flight per SM;
    the stages are then cut to the GPU's shared memory."""
    pairs_per_expert = m * topk / min(num_experts, m * topk)
    block_m = min(128, max(16, triton.next_power_of_2(math.ceil(pairs_per_expert))))
    w_bytes = weight_dtype.itemsize
    a_bytes = 4 if weight_dtype == torch.float32 else 2
    if weight_dtype == torch.float32:  # fp32 IEEE dots: smaller tiles, 4-byte elements
        cfg = {"BLOCK_M": min(block_m, 32), "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    elif block_m <= 32:  # decode: few pairs per expert, stream weights with deep K pipelining
        cfg = {"BLOCK_M": block_m, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4, "num_stages": 4}
        if weight_dtype == FP8 and block_m == 16:  # half the bytes per tile: twice the K depth (at 32 rows it spills)
            cfg["BLOCK_K"] = 256
    elif block_m == 64:  # BLOCK_N 64: gate/up holds two accumulators; 64x128 spills before Hopper
        cfg = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4}
        if weight_dtype == FP8:  # the in-register FP8 -> bf16 conversion needs the registers of 8 warps
            cfg.update(BLOCK_K=128, num_warps=8)
    else:
        cfg = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    return fit_stages(cfg, a_bytes, w_bytes, smem)


def get_config(
    m: int, num_experts: int, hidden: int, inter: int, topk: int, weight_dtype: torch.dtype, device: str | None = None
) -> tuple[dict[str, int], str]:
    """The config for M and where it came from: the tuned entry with the nearest M, else the heuristic."""
    name = config_file_name(num_experts, hidden, inter, dtype_label(weight_dtype), device or device_name())
    table = load_config_table(name)
    if table:
        nearest = min(table, key=lambda key: (abs(key - m), key))
        cfg = {**heuristic_config(m, num_experts, topk, weight_dtype), **table[nearest]}
        return cfg, f"tuned:{name}[M={nearest}]"
    return heuristic_config(m, num_experts, topk, weight_dtype), "heuristic"


# ----------------------------------------------------------------------------------------------
# The call.
# ----------------------------------------------------------------------------------------------


def quantize_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[E, N, K] weights → FP8 e4m3 weights and fp32 scales [E, N] (one per output channel)."""
    fp8_max = torch.finfo(FP8).max
    q = torch.empty(w.shape, dtype=FP8, device=w.device)
    scales = torch.empty(w.shape[:2], dtype=torch.float32, device=w.device)
    for e in range(w.shape[0]):  # one expert at a time: no fp32 copy of the whole tensor
        amax = w[e].abs().amax(dim=1).float().clamp(min=1e-12)
        scales[e] = amax / fp8_max
        q[e] = (w[e].float() / scales[e][:, None]).clamp(-fp8_max, fp8_max).to(FP8)
    return q, scales


_STAGE_CAP: dict[tuple[str, tuple[int, ...]], int] = {}


def _launch(kernel: Any, grid: tuple[int, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Launch; if the pipeline does not fit the GPU's shared memory, retry with fewer stages (the cap
    is remembered, so only the first call of a config pays for it)."""
    key = (getattr(kernel, "__name__", str(kernel)), tuple(v for v in kwargs.values() if isinstance(v, int)))
    stages = min(kwargs["num_stages"], _STAGE_CAP.get(key, kwargs["num_stages"]))
    while True:
        try:
            kernel[grid](*args, **{**kwargs, "num_stages": stages})
            return
        except triton.runtime.errors.OutOfResources:
            if stages <= 1:
                raise
            stages -= 1
            _STAGE_CAP[key] = stages


def fused_moe_triton(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    config: dict[str, int] | None = None,
    w1_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """x [M, H], w1 [E, 2I, H] (gate rows then up rows), w2 [E, H, I] → out [M, H] in x.dtype.

    FP8 weights (``quantize_fp8``) take their scales in w1_scale [E, 2I] and w2_scale [E, H].
    ``config`` (keys CONFIG_KEYS) defaults to ``get_config`` for this M and GPU. No host sync.
    """
    m, hidden = x.shape
    num_experts, two_inter, _ = w1.shape
    inter = two_inter // 2
    topk = topk_ids.shape[1]
    num_pairs = m * topk
    fp8 = w1.dtype == FP8
    if fp8 and (w1_scale is None or w2_scale is None):
        raise ValueError("FP8 weights need w1_scale and w2_scale")
    cfg = config or get_config(m, num_experts, hidden, inter, topk, w1.dtype)[0]
    pairs, experts, _ = align_by_expert(topk_ids, num_experts, cfg["BLOCK_M"])
    if experts.numel() == 0:
        return torch.zeros_like(x)
    act = torch.empty((num_pairs, inter), dtype=x.dtype, device=x.device)
    partial = torch.empty((num_pairs, hidden), dtype=x.dtype, device=x.device)
    out = torch.empty((m, hidden), dtype=x.dtype, device=x.device)
    weights = topk_weights.to(torch.float32).contiguous()
    s1 = w1_scale if w1_scale is not None and fp8 else weights  # any tensor: unused when FP8_W is off
    s2 = w2_scale if w2_scale is not None and fp8 else weights
    common = {"UPCAST": INTERPRET, "FP8_W": fp8, "PRECISION": "ieee" if x.dtype == torch.float32 else None}
    _gate_up_silu(x, w1, s1, act, pairs, experts, topk, cfg, common)
    _down(act, w2, s2, partial, weights, pairs, experts, cfg, common)
    _combine(partial, out, topk)
    return out


def _gemm_options(cfg: dict[str, int], k: int, common: dict[str, Any]) -> dict[str, Any]:
    """A GEMM kernel's constexprs and launch options: ``cfg``'s tiles over a K of ``k``, then ``common``."""
    tiles = {"BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"], "BLOCK_K": cfg["BLOCK_K"], "GROUP_M": cfg["GROUP_M"]}
    launch = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    return {**tiles, "EVEN_K": k % cfg["BLOCK_K"] == 0, **common, **launch}


def _gate_up_silu(
    x: torch.Tensor,
    w1: torch.Tensor,
    s1: torch.Tensor,
    act: torch.Tensor,
    pairs: torch.Tensor,
    experts: torch.Tensor,
    topk: int,
    cfg: dict[str, int],
    common: dict[str, Any],
) -> None:
    """act [pairs, I] = silu(x @ gate.T) * (x @ up.T) of each (token, expert) pair, tiles grouped by expert."""
    num_pairs, inter = act.shape
    hidden = x.shape[1]
    num_pid_m = experts.numel()
    fp8 = bool(common["FP8_W"])
    _launch(
        _gate_up_silu_kernel,
        (num_pid_m * triton.cdiv(inter, cfg["BLOCK_N"]),),
        (
            x,
            w1,
            s1,
            act,
            pairs,
            experts,
            num_pairs,
            hidden,
            inter,
            topk,
            num_pid_m,
            x.stride(0),
            x.stride(1),
            w1.stride(0),
            w1.stride(1),
            w1.stride(2),
            s1.stride(0) if fp8 else 0,
            act.stride(0),
            act.stride(1),
        ),
        _gemm_options(cfg, hidden, common),
    )


def _down(
    act: torch.Tensor,
    w2: torch.Tensor,
    s2: torch.Tensor,
    partial: torch.Tensor,
    weights: torch.Tensor,
    pairs: torch.Tensor,
    experts: torch.Tensor,
    cfg: dict[str, int],
    common: dict[str, Any],
) -> None:
    """partial [pairs, H] = routing weight * (act @ w2.T) of each (token, expert) pair."""
    num_pairs, hidden = partial.shape
    inter = act.shape[1]
    num_pid_m = experts.numel()
    fp8 = bool(common["FP8_W"])
    _launch(
        _down_kernel,
        (num_pid_m * triton.cdiv(hidden, cfg["BLOCK_N"]),),
        (
            act,
            w2,
            s2,
            partial,
            weights,
            pairs,
            experts,
            num_pairs,
            hidden,
            inter,
            num_pid_m,
            act.stride(0),
            act.stride(1),
            w2.stride(0),
            w2.stride(1),
            w2.stride(2),
            s2.stride(0) if fp8 else 0,
            partial.stride(0),
            partial.stride(1),
        ),
        _gemm_options(cfg, inter, common),
    )


def _combine(partial: torch.Tensor, out: torch.Tensor, topk: int) -> None:
    """out [M, H] = the sum of each token's ``topk`` partial rows."""
    m, hidden = out.shape
    block = min(1024, triton.next_power_of_2(hidden))
    _combine_kernel[(m, triton.cdiv(hidden, block))](partial, out, hidden, TOPK=topk, BLOCK=block)


def fused_moe_torch(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    compute_dtype: torch.dtype | None = None,
    w1_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """The same layer in plain torch, one expert at a time.

    With ``compute_dtype=torch.float32`` it is the reference the kernel is checked against (the
    intermediate activation is rounded to x.dtype, as the kernel stores it); with the default it is
    the CPU benchmark path, computing in x.dtype. FP8 weights are dequantised per expert.
    """
    dtype = compute_dtype or x.dtype
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)

    def weight(w: torch.Tensor, scale: torch.Tensor | None, expert: int) -> torch.Tensor:
        if w.dtype == FP8:
            assert scale is not None
            return (w[expert].float() * scale[expert][:, None]).to(dtype)
        return w[expert].to(dtype)

    for expert in torch.unique(topk_ids).tolist():
        tokens, slots = torch.where(topk_ids == expert)
        hidden = x[tokens].to(dtype) @ weight(w1, w1_scale, expert).T
        gate, up = hidden[:, :inter].float(), hidden[:, inter:].float()
        act = (torch.nn.functional.silu(gate) * up).to(x.dtype).to(dtype)
        y = (act @ weight(w2, w2_scale, expert).T).float()
        out.index_add_(0, tokens, y * topk_weights[tokens, slots, None].float())
    return out.to(x.dtype)


# ----------------------------------------------------------------------------------------------
# Inputs.
# ----------------------------------------------------------------------------------------------


def make_weights(
    num_experts: int, hidden: int, inter: int, dtype: torch.dtype, device: str, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """w1 [E, 2I, H] and w2 [E, H, I], drawn directly on the device in ``dtype`` (no fp32 copy),
    scaled to keep outputs O(1)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    w1 = torch.empty((num_experts, 2 * inter, hidden), dtype=dtype, device=device)
    w2 = torch.empty((num_experts, hidden, inter), dtype=dtype, device=device)
    w1.normal_(0.0, hidden**-0.5, generator=gen)
    w2.normal_(0.0, inter**-0.5, generator=gen)
    return w1, w2


def make_tokens(
    m: int, num_experts: int, hidden: int, topk: int, dtype: torch.dtype, device: str, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Activations x [M, H] and uniform-random routing (top-k ids and weights) for M tokens."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(m, hidden, generator=gen).to(dtype=dtype, device=device)
    logits = torch.randn(m, num_experts, generator=gen).to(device)
    topk_weights, topk_ids = route(logits, topk)
    return x, topk_weights, topk_ids


def make_inputs(
    m: int, num_experts: int, hidden: int, inter: int, topk: int, dtype: torch.dtype, device: str, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """Small test shapes: x, w1, w2, topk_weights, topk_ids in one call."""
    w1, w2 = make_weights(num_experts, hidden, inter, dtype, device, seed=seed)
    x, topk_weights, topk_ids = make_tokens(m, num_experts, hidden, topk, dtype, device, seed=seed)
    return x, w1, w2, topk_weights, topk_ids


def launch_info(cfg: dict[str, Any]) -> str:
    return " ".join(f"{k}={cfg[k]}" for k in CONFIG_KEYS if k in cfg)
