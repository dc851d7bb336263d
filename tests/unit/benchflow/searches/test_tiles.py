"""The tile race, pure: every tile once, then only the tiles the values cannot tell apart from the best, until
they separate or reach their limit; a tile whose run gave nothing is failed, never ranked; with nothing measured
there is no best. The kernel is a model whose best tile is known (the stand-in kernel's cost, lognormal noise)."""

from __future__ import annotations

import random

import pytest

from benchflow.searches.tiles import DEFAULT_TILES, TILE, TileRace, grid, short
from tests.fixtures.payloads.tiles.bench_tiles import cost, parse_tile

pytestmark = pytest.mark.unit
BEST = "BLOCK_M=32,BLOCK_N=64,BLOCK_K=128,GROUP_M=1,num_warps=4,num_stages=3"


def measure(tile: str, rng: random.Random, n: int = 3, noise: float = 0.03) -> list[float]:
    return [10.0 * cost(parse_tile(tile)) * rng.lognormvariate(0.0, noise) for _ in range(n)]


def race(search: TileRace, rng: random.Random, broken: tuple[str, ...] = ()) -> list[list[str]]:
    asked = []
    while picks := search.next_round(now=0.0):
        asked.append(picks)
        for tile in picks:
            search.record(tile, [] if tile in broken else measure(tile, rng, search.repeats))
    return asked


@pytest.mark.parametrize("seed", range(10))
def test_the_race_finds_the_known_best_tile_and_spends_little_on_the_others(seed):
    tiles = grid([16, 32, 64], [32, 64, 128], [64, 128])
    search = TileRace(tiles=tiles, repeats=3, max_samples=9)
    asked = race(search, random.Random(seed))
    result = search.result()
    assert result["status"] == "done" and result["best"] == BEST, result["summary"]
    assert asked[0] == tiles and all(len(r) < len(tiles) for r in asked[1:])  # later rounds: the contenders only
    ranking = {r["tile"]: r for r in result["ranking"]}
    assert ranking[BEST]["verdict"] == "best" and result["ranking"][0]["tile"] == BEST
    assert all(r["ratio_low"] > 1 for r in result["ranking"] if r["verdict"] == "worse")  # slower beyond noise


def test_tiles_the_values_cannot_tell_apart_are_named_never_ranked_below_the_best():
    twin = BEST.replace("num_warps=4", "num_warps=8")  # the model ignores warps: the same kernel
    search = TileRace(tiles=[BEST, twin], repeats=3, max_samples=6)
    race(search, random.Random(3))
    result = search.result()
    assert result["status"] == "done" and result["best"] in (BEST, twin)
    assert {r["verdict"] for r in result["ranking"]} == {"best", "not distinguishable from best"}
    assert all(r["n"] == 6 for r in result["ranking"])  # measured to the limit before the answer says so


def test_a_failed_tile_is_named_and_with_nothing_measured_there_is_no_best():
    broken = "BLOCK_M=64,BLOCK_N=128,BLOCK_K=128,GROUP_M=1,num_warps=4,num_stages=3"
    search = TileRace(tiles=[BEST, broken], repeats=3, max_samples=6)
    race(search, random.Random(1), broken=(broken,))
    result = search.result()
    assert result["best"] == BEST and result["ranking"][-1]["verdict"] == "failed"
    nothing = TileRace(tiles=[BEST, broken], repeats=3)
    race(nothing, random.Random(1), broken=(BEST, broken))
    assert nothing.status() == "failed" and nothing.result()["best"] is None


def test_the_default_tiles_are_what_the_benchmark_reads_and_name_their_runs_briefly():
    assert all(TILE.match(t) for t in DEFAULT_TILES) and len(set(map(short, DEFAULT_TILES))) == len(DEFAULT_TILES)
    assert short(BEST) == "bm32_bn64_bk128_g1_w4_s3" and not TILE.match("BLOCK_M=32;rm -rf /")
    assert TileRace.from_json(TileRace(tiles=[BEST]).to_json()).tiles == [BEST]
