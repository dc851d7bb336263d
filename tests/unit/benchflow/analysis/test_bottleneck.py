"""A run's verdicts said in a line per config (or per verdict, for a kind without configs), and whether two sides
share a limiter (benchflow.analysis.bottleneck, by each row's kind)."""

from __future__ import annotations

import pytest

from benchflow.analysis.bottleneck import headlines, same_limiter
from benchflow.kinds.rules import NO_EVIDENCE

pytestmark = pytest.mark.unit


def test_a_run_says_one_verdict_per_config_at_its_highest_load_and_whether_two_sides_share_it():
    def row(config, concurrency, verdict):
        return {"kind": "serving", "config": config, "concurrency": concurrency} | {
            "verdict": verdict,
            "says": f"{verdict}: figures",
        }

    pd = [row("pd", 1, "under-loaded"), row("pd", 8, "decode-bound"), row("pd", 8, "decode-bound")]
    pd.append(row("pd", 8, NO_EVIDENCE))
    single = [row("single", 8, "decode-bound")]
    assert headlines(pd + single) == [
        "bottleneck pd at concurrency 8 (2 of 3 repeats): decode-bound: figures",
        "bottleneck single at concurrency 8 (1 of 1 repeats): decode-bound: figures",
    ]
    assert same_limiter(pd, single) == "decode-bound"  # pd's most common verdict at its highest load
    assert same_limiter(pd, [row("single", 8, "kv-bound")]) is None
    assert same_limiter([row("a", 8, NO_EVIDENCE)], [row("b", 8, NO_EVIDENCE)]) is None
    kernel = [{"kind": "kernel", "m": m, "verdict": "memory-bound"} for m in (1, 2)]
    assert headlines(kernel) == ["bottleneck: memory-bound at m=1, 2"]
