"""Fused-MoE grouped GEMM in Triton, with its torch reference.

One MoE layer for M tokens, E experts, top-k routing:

    out[t] = sum_k  w[t, k] * W2[e_k] @ (silu(W1g[e_k] @ x[t]) * (W1u[e_k] @ x[t]))

Token-expert pairs are sorted by expert and padded to BLOCK_M (``align_by_expert``), so each program
of the grouped GEMM works on one expert's weights. Kernel 1 computes the gate and up projections
together and applies SiLU(gate) * up before anything leaves registers; kernel 2 does the down
projection and scales by the routing weight; the k partial outputs of a token are then summed.

Runs with only torch, triton and the standard library (it is deployed to GPU hosts as is).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter (TRITON_INTERPRET=1) mis-computes tl.dot on bf16 tiles; there the kernels
# upcast tiles to fp32 before the dot. On a GPU the dot runs natively in bf16 with fp32 accumulation.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def route(logits: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax router: top-k expert ids per token and their renormalised fp32 weights."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, topk, dim=-1)
    return weights / weights.sum(dim=-1, keepdim=True), ids


def align_by_expert(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort token-expert pairs by expert and pad each expert's run to a multiple of ``block_m``.

    Returns ``sorted_pairs`` (pair index ``t * topk + k``; padding holds ``M * topk``, an invalid
    index) and ``block_experts`` (the expert of each block of ``block_m`` pairs).
    """
    flat = topk_ids.flatten()
    num_pairs = flat.numel()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_m - 1) // block_m * block_m
    starts = torch.cumsum(padded, 0) - padded
    sorted_experts = flat[order]
    rank = torch.arange(num_pairs, device=flat.device) - (torch.cumsum(counts, 0) - counts)[sorted_experts]
    sorted_pairs = torch.full((int(padded.sum()),), num_pairs, dtype=torch.int32, device=flat.device)
    sorted_pairs[starts[sorted_experts] + rank] = order.to(torch.int32)
    block_experts = torch.repeat_interleave(
        torch.arange(num_experts, device=flat.device, dtype=torch.int32), padded // block_m
    )
    return sorted_pairs, block_experts


@triton.jit
def _gate_up_silu_kernel(
    x_ptr, w1_ptr, act_ptr, pairs_ptr, experts_ptr,
    num_pairs, hidden, inter, topk,
    stride_xm, stride_xk, stride_we, stride_wn, stride_wk, stride_am, stride_an,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pairs = tl.load(pairs_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = pairs < num_pairs
    tokens = pairs // topk
    expert = tl.load(experts_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    w_base = w1_ptr + expert * stride_we
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, hidden, BLOCK_K):
        kk = k0 + offs_k
        a = tl.load(
            x_ptr + tokens[:, None] * stride_xm + kk[None, :] * stride_xk,
            mask=valid[:, None] & (kk[None, :] < hidden),
            other=0.0,
        )
        w_mask = (kk[:, None] < hidden) & (offs_n[None, :] < inter)
        w_gate = tl.load(w_base + offs_n[None, :] * stride_wn + kk[:, None] * stride_wk, mask=w_mask, other=0.0)
        w_up = tl.load(
            w_base + (offs_n[None, :] + inter) * stride_wn + kk[:, None] * stride_wk, mask=w_mask, other=0.0
        )
        if UPCAST:
            a = a.to(tl.float32)
            w_gate = w_gate.to(tl.float32)
            w_up = w_up.to(tl.float32)
        gate += tl.dot(a, w_gate)
        up += tl.dot(a, w_up)
    act = gate * tl.sigmoid(gate) * up
    tl.store(
        act_ptr + pairs[:, None] * stride_am + offs_n[None, :] * stride_an,
        act.to(act_ptr.dtype.element_ty),
        mask=valid[:, None] & (offs_n[None, :] < inter),
    )


@triton.jit
def _down_kernel(
    act_ptr, w2_ptr, out_ptr, weights_ptr, pairs_ptr, experts_ptr,
    num_pairs, hidden, inter,
    stride_am, stride_ak, stride_we, stride_wn, stride_wk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pairs = tl.load(pairs_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = pairs < num_pairs
    expert = tl.load(experts_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    w_base = w2_ptr + expert * stride_we
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, inter, BLOCK_K):
        kk = k0 + offs_k
        a = tl.load(
            act_ptr + pairs[:, None] * stride_am + kk[None, :] * stride_ak,
            mask=valid[:, None] & (kk[None, :] < inter),
            other=0.0,
        )
        w = tl.load(
            w_base + offs_n[None, :] * stride_wn + kk[:, None] * stride_wk,
            mask=(kk[:, None] < inter) & (offs_n[None, :] < hidden),
            other=0.0,
        )
        if UPCAST:
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc += tl.dot(a, w)
    scale = tl.load(weights_ptr + pairs, mask=valid, other=0.0)
    acc = acc * scale[:, None]
    tl.store(
        out_ptr + pairs[:, None] * stride_om + offs_n[None, :] * stride_on,
        acc.to(out_ptr.dtype.element_ty),
        mask=valid[:, None] & (offs_n[None, :] < hidden),
    )


def fused_moe_triton(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    block_m: int = 64,
    block_n: int = 64,
    block_k: int = 64,
) -> torch.Tensor:
    """x [M, H], w1 [E, 2I, H] (gate rows then up rows), w2 [E, H, I] → out [M, H] in x.dtype."""
    m, hidden = x.shape
    num_experts, two_inter, _ = w1.shape
    inter = two_inter // 2
    topk = topk_ids.shape[1]
    num_pairs = m * topk
    pairs, experts = align_by_expert(topk_ids, num_experts, block_m)
    act = torch.empty((num_pairs, inter), dtype=x.dtype, device=x.device)
    partial = torch.empty((num_pairs, hidden), dtype=torch.float32, device=x.device)
    weights = topk_weights.to(torch.float32).contiguous()
    grid1 = (experts.numel(), triton.cdiv(inter, block_n))
    _gate_up_silu_kernel[grid1](
        x, w1, act, pairs, experts, num_pairs, hidden, inter, topk,
        x.stride(0), x.stride(1), w1.stride(0), w1.stride(1), w1.stride(2), act.stride(0), act.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, UPCAST=INTERPRET,
    )  # fmt: skip
    grid2 = (experts.numel(), triton.cdiv(hidden, block_n))
    _down_kernel[grid2](
        act, w2, partial, weights, pairs, experts, num_pairs, hidden, inter,
        act.stride(0), act.stride(1), w2.stride(0), w2.stride(1), w2.stride(2),
        partial.stride(0), partial.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, UPCAST=INTERPRET,
    )  # fmt: skip
    return partial.view(m, topk, hidden).sum(dim=1).to(x.dtype)


def fused_moe_torch(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The same layer in plain torch, one expert at a time.

    With ``compute_dtype=torch.float32`` it is the reference the kernel is checked against (the
    intermediate activation is rounded to x.dtype, as the kernel stores it); with the default it is
    the CPU benchmark path, computing in x.dtype.
    """
    dtype = compute_dtype or x.dtype
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for expert in torch.unique(topk_ids).tolist():
        tokens, slots = torch.where(topk_ids == expert)
        hidden = x[tokens].to(dtype) @ w1[expert].to(dtype).T
        gate, up = hidden[:, :inter].float(), hidden[:, inter:].float()
        act = (torch.nn.functional.silu(gate) * up).to(x.dtype).to(dtype)
        y = (act @ w2[expert].to(dtype).T).float()
        out.index_add_(0, tokens, y * topk_weights[tokens, slots, None].float())
    return out.to(x.dtype)


def make_inputs(
    m: int, num_experts: int, hidden: int, inter: int, topk: int, dtype: torch.dtype, device: str, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """Random activations, weights scaled to keep outputs O(1), and routed top-k ids and weights."""
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape: int, scale: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(dtype=dtype, device=device)

    x = randn(m, hidden, scale=1.0)
    w1 = randn(num_experts, 2 * inter, hidden, scale=hidden**-0.5)
    w2 = randn(num_experts, hidden, inter, scale=inter**-0.5)
    logits = torch.randn(m, num_experts, generator=gen).to(device)
    topk_weights, topk_ids = route(logits, topk)
    return x, w1, w2, topk_weights, topk_ids
