"""Triton fused MoE against its torch reference. On a CPU: ``TRITON_INTERPRET=1 pytest kernels/moe``.

Tolerances are explicit: bf16 output of an fp32-accumulated layer differs from the fp32 reference by
bf16 rounding of the activation and of the output (2^-8 relative), so atol=rtol=2e-2 for bf16 and
1e-4 for fp32.
"""

from __future__ import annotations

import os

import pytest
import torch
from fused_moe import align_by_expert, fused_moe_torch, fused_moe_triton, make_inputs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.unit

if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.fail("on a CPU the Triton kernels run only under TRITON_INTERPRET=1", pytrace=False)

TOLERANCE = {torch.bfloat16: 2e-2, torch.float32: 1e-4}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    ("m", "experts", "hidden", "inter", "topk"), [(1, 4, 32, 32, 2), (7, 4, 48, 32, 2), (20, 8, 32, 16, 3)]
)
def test_triton_matches_torch_reference(m, experts, hidden, inter, topk, dtype):
    x, w1, w2, weights, ids = make_inputs(m, experts, hidden, inter, topk, dtype, DEVICE, seed=m)
    expected = fused_moe_torch(x, w1, w2, weights, ids, compute_dtype=torch.float32)
    got = fused_moe_triton(x, w1, w2, weights, ids, block_m=16, block_n=16, block_k=16)
    assert got.dtype == dtype and got.shape == (m, hidden)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got.float(), expected.float(), atol=tol, rtol=tol)


def test_reference_is_not_trivially_zero():
    # Guards the comparison above: a kernel that wrote nothing must not pass against an all-zero reference.
    x, w1, w2, weights, ids = make_inputs(4, 4, 32, 32, 2, torch.float32, DEVICE)
    assert fused_moe_torch(x, w1, w2, weights, ids).abs().mean() > 0.05


def test_align_by_expert_groups_and_pads_pairs():
    ids = torch.tensor([[2, 0], [2, 1], [0, 2]])
    pairs, experts = align_by_expert(ids, num_experts=4, block_m=4)
    pad = ids.numel()
    assert experts.tolist() == [0, 1, 2]
    assert pairs.tolist() == [1, 4, pad, pad, 3, pad, pad, pad, 0, 2, 5, pad]
    for block, expert in enumerate(experts.tolist()):
        real = [p for p in pairs[block * 4 : block * 4 + 4].tolist() if p != pad]
        assert all(ids.flatten()[p] == expert for p in real)
