"""Triton fused MoE against its torch reference. On a CPU: ``TRITON_INTERPRET=1 pytest kernels/moe``.

Tolerances are explicit: bf16 output of an fp32-accumulated layer differs from the fp32 reference by
bf16 rounding of the activation, of the top-k partial rows and of the output (2^-8 relative each),
so atol=rtol=3e-2 for bf16; fp32 dots run with input_precision="ieee" (no TF32 on a GPU), so 1e-4.
FP8 weights are checked against the reference run on the same dequantised weights.
"""

from __future__ import annotations

import json
import math
import os

import bench_moe
import fused_moe
import pytest
import roofline
import torch
import triton
import triton.language as tl
from fused_moe import (
    align_by_expert,
    fused_moe_torch,
    fused_moe_triton,
    get_config,
    heuristic_config,
    make_inputs,
    max_padded_pairs,
    quantize_fp8,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.unit

if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.fail("on a CPU the Triton kernels run only under TRITON_INTERPRET=1", pytrace=False)

TOLERANCE = {torch.bfloat16: 3e-2, torch.float32: 1e-4}
SMALL = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2, "num_warps": 4, "num_stages": 2}


def check(m, experts, hidden, inter, topk, dtype, config, seed=None):
    x, w1, w2, weights, ids = make_inputs(
        m, experts, hidden, inter, topk, dtype, DEVICE, seed=m if seed is None else seed
    )
    expected = fused_moe_torch(x, w1, w2, weights, ids, compute_dtype=torch.float32)
    got = fused_moe_triton(x, w1, w2, weights, ids, config=config)
    assert got.dtype == dtype and got.shape == (m, hidden)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got.float(), expected.float(), atol=tol, rtol=tol)
    return ids


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    ("m", "experts", "hidden", "inter", "topk", "case"),
    [
        (1, 8, 32, 32, 2, "6 of 8 experts get no token"),
        (7, 4, 48, 24, 2, "partial K tile (48 = 3 x 16) and partial N tile (24 = 16 + 8)"),
        (36, 2, 40, 16, 2, "one expert spans several blocks of 16 pairs; K = 40 ends mid-tile"),
        (20, 8, 32, 16, 3, "topk 3"),
    ],
)
def test_triton_matches_torch_reference(m, experts, hidden, inter, topk, case, dtype):
    ids = check(m, experts, hidden, inter, topk, dtype, SMALL)
    if "several blocks" in case:
        assert torch.bincount(ids.flatten().cpu()).max() > 2 * SMALL["BLOCK_M"]
    if "no token" in case:
        assert torch.unique(ids).numel() < experts


def bench_configs() -> list[dict[str, int]]:
    """The distinct heuristic configs the bench uses over its default sweep at the production shape."""
    seen: dict[str, dict[str, int]] = {}
    for m in [2**i for i in range(12)] + [4096, 8192]:
        cfg = heuristic_config(m, 384, 8, torch.bfloat16)
        seen[json.dumps(cfg, sort_keys=True)] = cfg
    return list(seen.values())


@pytest.mark.parametrize("config", bench_configs(), ids=lambda c: f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']}")
def test_block_sizes_the_bench_uses(config):
    # Enough pairs for two blocks on one expert, hidden and inter not multiples of the tiles.
    check(config["BLOCK_M"] + 3, 2, 160, 72, 2, torch.bfloat16, config, seed=1)


def test_fp32_config_the_bench_uses():
    check(5, 4, 48, 40, 2, torch.float32, heuristic_config(5, 4, 2, torch.float32))


def test_fp8_weights_match_dequantised_reference():
    x, w1, w2, weights, ids = make_inputs(9, 4, 64, 32, 2, torch.bfloat16, DEVICE, seed=3)
    q1, s1 = quantize_fp8(w1)
    q2, s2 = quantize_fp8(w2)
    assert q1.dtype == torch.float8_e4m3fn and s1.shape == (4, 64) and s2.shape == (4, 64)
    expected = fused_moe_torch(x, q1, q2, weights, ids, compute_dtype=torch.float32, w1_scale=s1, w2_scale=s2)
    got = fused_moe_triton(x, q1, q2, weights, ids, config=SMALL, w1_scale=s1, w2_scale=s2)
    torch.testing.assert_close(got.float(), expected.float(), atol=3e-2, rtol=3e-2)
    # and FP8 stays close to the bf16 layer it quantises (e4m3: 3 mantissa bits)
    exact = fused_moe_torch(x, w1, w2, weights, ids, compute_dtype=torch.float32)
    assert (got.float() - exact.float()).abs().mean() < 0.05 * exact.float().abs().mean()


def test_reference_is_not_trivially_zero():
    # Guards the comparison above: a kernel that wrote nothing must not pass against an all-zero reference.
    x, w1, w2, weights, ids = make_inputs(4, 4, 32, 32, 2, torch.float32, DEVICE)
    assert fused_moe_torch(x, w1, w2, weights, ids).abs().mean() > 0.05


def test_align_by_expert_groups_and_pads_pairs_on_the_device():
    ids = torch.tensor([[2, 0], [2, 1], [0, 2]], device=DEVICE)
    pairs, experts, num_padded = align_by_expert(ids, num_experts=4, block_m=4)
    pad = ids.numel()
    # No host synchronisation: the padded count stays a device tensor; buffers are worst-case sized.
    assert isinstance(num_padded, torch.Tensor) and num_padded.device == ids.device and num_padded.numel() == 1
    assert pairs.numel() == max_padded_pairs(6, 4, 4) == 16 and experts.numel() == 4
    assert pairs.dtype == experts.dtype == torch.int32
    assert int(num_padded) == 12
    assert experts.tolist() == [0, 1, 2, -1]  # -1: an unused block, its GEMM programs exit at once
    assert pairs[:12].tolist() == [1, 4, pad, pad, 3, pad, pad, pad, 0, 2, 5, pad]


@pytest.mark.parametrize(("m", "experts", "topk", "block_m"), [(1, 16, 4, 16), (37, 5, 2, 16), (300, 6, 3, 32)])
def test_align_matches_a_python_reference(m, experts, topk, block_m):
    gen = torch.Generator().manual_seed(m)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:topk] for _ in range(m)]).to(DEVICE)
    pairs, block_experts, num_padded = align_by_expert(ids, experts, block_m)
    flat = ids.flatten().tolist()
    want_pairs: list[int] = []
    want_blocks: list[int] = []
    for e in range(experts):
        mine = [p for p, x in enumerate(flat) if x == e]
        padded = -(-len(mine) // block_m) * block_m
        want_pairs += mine + [len(flat)] * (padded - len(mine))
        want_blocks += [e] * (padded // block_m)
    assert int(num_padded) == len(want_pairs) <= pairs.numel()
    assert pairs[: len(want_pairs)].tolist() == want_pairs
    assert block_experts.tolist() == want_blocks + [-1] * (block_experts.numel() - len(want_blocks))


# No host synchronisation in a call, and its capture in a CUDA graph, need a GPU: gpu_check.py checks both first
# thing on one (torch.cuda.set_sync_debug_mode("error") around a call, then a captured replay against the reference).


@triton.jit
def _offsets_probe(rows_ptr, out_ptr, stride, N: tl.constexpr):
    rows = tl.load(rows_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), fused_moe._row_offsets(rows, stride))


def test_row_offsets_are_int64_past_two_to_the_31():
    # pairs * stride past M = 37,450 tokens (x 8 experts, rows of 7168): beyond int32's 2^31 - 1.
    rows = torch.tensor([0, 1, 299_600, 2**31 - 1], dtype=torch.int32, device=DEVICE)
    out = torch.zeros(4, dtype=torch.int64, device=DEVICE)
    _offsets_probe[(1,)](rows, out, 7168, N=4)
    assert out.tolist() == [r * 7168 for r in rows.tolist()]
    assert out[2].item() > 2**31


class _Recorder:
    """Stands in for a Triton kernel: records launch arguments, launches nothing."""

    def __init__(self) -> None:
        self.kwargs: dict = {}

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.kwargs = kwargs

        return launch


@pytest.mark.parametrize(("dtype", "precision"), [(torch.float32, "ieee"), (torch.bfloat16, None)])
def test_fp32_dots_request_ieee_precision(monkeypatch, dtype, precision):
    recorders = {name: _Recorder() for name in ("_gate_up_silu_kernel", "_down_kernel", "_combine_kernel")}
    for name, recorder in recorders.items():
        monkeypatch.setattr(fused_moe, name, recorder)
    x, w1, w2, weights, ids = make_inputs(3, 4, 32, 16, 2, dtype, DEVICE)
    fused_moe_triton(x, w1, w2, weights, ids, config=SMALL)
    for name in ("_gate_up_silu_kernel", "_down_kernel"):
        assert recorders[name].kwargs["PRECISION"] == precision


def test_config_table_nearest_m_and_heuristic_fallback(tmp_path, monkeypatch):
    name = fused_moe.config_file_name(8, 64, 32, "bf16", "Test GPU")
    assert name == "E=8,H=64,I=32,dtype=bf16,device=Test_GPU.json"
    (tmp_path / name).write_text(json.dumps({"1": {**SMALL, "BLOCK_M": 16}, "64": {**SMALL, "BLOCK_M": 32}}))
    monkeypatch.setattr(fused_moe, "CONFIG_DIR", tmp_path)
    fused_moe.load_config_table.cache_clear()
    try:
        assert get_config(2, 8, 64, 32, 2, torch.bfloat16, "Test GPU")[0]["BLOCK_M"] == 16
        cfg, source = get_config(100, 8, 64, 32, 2, torch.bfloat16, "Test GPU")
        assert cfg["BLOCK_M"] == 32 and source.startswith("tuned:")
        cfg, source = get_config(100, 8, 64, 32, 2, torch.bfloat16, "Other GPU")
        assert source == "heuristic" and cfg == heuristic_config(100, 8, 2, torch.bfloat16)
    finally:
        fused_moe.load_config_table.cache_clear()


def test_shipped_config_tables_are_valid():
    for path in fused_moe.CONFIG_DIR.glob("*.json"):
        table = fused_moe.load_config_table(path.name)
        assert table, path
        for cfg in table.values():
            assert set(fused_moe.CONFIG_KEYS) <= set(cfg), path
            assert cfg["BLOCK_M"] >= 16 and all(cfg[k] & (cfg[k] - 1) == 0 for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))


def test_heuristic_sizes_the_block_to_the_pairs_per_expert():
    assert heuristic_config(1, 384, 8, torch.bfloat16)["BLOCK_M"] == 16  # one pair per expert
    assert heuristic_config(2048, 384, 8, torch.bfloat16)["BLOCK_M"] == 64  # ~43 pairs per expert
    assert heuristic_config(8192, 384, 8, torch.bfloat16)["BLOCK_M"] == 128


def test_roofline_at_the_production_shape_on_h200():
    h200 = roofline.find_gpu("NVIDIA H200")
    assert h200 is not None and h200.hbm_gbps == 4800 and h200.bf16_tflops == 989
    row = roofline.roofline_row(1, 0.21, 8, 7168, 2048, 8, "bf16", h200.hbm_gbps, h200.bf16_tflops, 4000)
    assert row.roofline_ms == pytest.approx(0.1468, abs=1e-4) and row.bound == "memory"
    assert row.pct_roofline == pytest.approx(69.9, abs=0.1)
    full = roofline.roofline_row(256, 7.0, 384, 7168, 2048, 8, "bf16", 4800, 989, 4000)
    assert full.roofline_ms == pytest.approx(7.05, abs=0.01) and full.bound == "memory"
    assert roofline.moe_flops(1, 8, 7168, 2048) == 2 * 8 * 3 * 2048 * 7168
    # FP8 halves the weight bytes (plus its scales)
    fp8 = roofline.moe_bytes(1, 8, 7168, 2048, "fp8")
    assert fp8 == pytest.approx(roofline.moe_bytes(1, 8, 7168, 2048, "bf16") / 2, rel=0.01)
    # compute-bound past ~9,900 tokens on an H200
    big = roofline.roofline_row(16384, 1.0, 384, 7168, 2048, 8, "bf16", 4800, 989, 4000)
    assert big.bound == "compute"


@pytest.mark.parametrize(
    ("device_name", "entry"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("Tesla T4", None),
    ],
)
def test_gpu_table_matches_device_names(device_name, entry):
    gpu = roofline.find_gpu(device_name)
    assert (gpu.name if gpu else None) == entry


def test_bench_output_format(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    argv = ["--m-list", "1,3,16", "--experts", "4", "--hidden", "32", "--inter", "16", "--topk", "2"]
    argv += ["--warmup", "1", "--iters", "2", "--out", str(out), "--marker", "ALL_DONE", "--copy-gbps", "10"]
    assert bench_moe.main([*argv, "--impl", "torch"]) == 0
    assert bench_moe.main([*argv, "--impl", "triton"]) == 0  # under the interpreter on a CPU
    lines = capsys.readouterr().out.splitlines()
    assert lines.count(bench_moe.COLUMNS) == 2 and lines[-1] == "ALL_DONE"
    columns = bench_moe.COLUMNS.split()
    assert columns[:4] == ["M", "ms/call", "tok/s", "us/token"] and columns[-1] == "note"
    start = lines.index(bench_moe.COLUMNS)
    assert all(": " in line for line in lines[:start])  # header facts only
    table = [line.split() for line in lines[start + 1 : start + 4]]
    for cells in table:
        m, ms, tok, us = int(cells[0]), float(cells[1]), float(cells[2]), float(cells[3])
        assert tok == pytest.approx(m / (ms / 1e3), rel=0.02) and us == pytest.approx(1e3 * ms / m, rel=0.02)
        assert len(cells) >= len(columns) - 1 and cells[len(columns) - 2] in ("memory", "compute")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["m"] for r in rows] == [r["M"] for r in rows] == [1, 3, 16, 1, 3, 16]
    keys = [
        "m",
        "ms_per_call",
        "tok_per_s",
        "us_per_token",
        "p10_ms",
        "p90_ms",
        "kernel_ms",
        "experts",
        "bytes_read",
        "gbps",
        "tflops",
        "roofline_ms",
        "pct_roofline",
        "pct_copy_bw",
        "bound",
        "note",
    ]
    for row in rows:
        assert set(keys) <= set(row)
        assert row["p10_ms"] <= row["ms_per_call"] <= row["p90_ms"]  # the median inside its timed spread
        assert row["roofline_ms"] > 0 and row["pct_roofline"] == pytest.approx(
            100 * row["roofline_ms"] / row["ms_per_call"]
        )
        assert row["bytes_read"] == roofline.moe_bytes(row["m"], row["experts"], 32, 16, "bf16")
        assert row["kernel_ms"] is None or math.isfinite(row["kernel_ms"])
    assert rows[3]["config"]["BLOCK_M"] == 16 and "cfg=16x" in rows[3]["note"]


def test_gpu_check_glue_runs_on_the_cpu(tmp_path, capsys):
    """gpu_check.py's whole flow at a tiny shape (--smoke-cpu), on a CPU host as in CI."""
    import gpu_check

    argv = ["--smoke-cpu", "--m-list", "2", "--check-m", "3", "--iters", "1", "--no-fp8", "--out", str(tmp_path / "r")]
    assert gpu_check.main(argv) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and out.count("PASS") == 3 and bench_moe.COLUMNS in out
