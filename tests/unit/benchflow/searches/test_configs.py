"""Successive halving over a config space: cheap probes of every config, finer ones only where the answer is still
open, each config's load per GPU as the interval its load search's bracket gives, a failed config kept with its
error, the budget respected, reuse for free, and the answer ranked with its Pareto front."""

from __future__ import annotations

import pytest

from benchflow.searches.configs import ConfigSearch, Level, Measure, levels, pareto

pytestmark = pytest.mark.unit

CAPACITY = {"g1_b2": 2, "g1_b4": 4, "g1_b8": 8, "g2_b8": 8, "g2_b16": 16, "g4_b8": 8, "crash": None}
GPUS = {"g1_b2": 1, "g1_b4": 1, "g1_b8": 1, "g2_b8": 2, "g2_b16": 2, "g4_b8": 4, "crash": 1}


def bracket(capacity: int, precision: float, low: int = 1, high: int = 32) -> tuple[int, int | None, int]:
    """What a load search over concurrency answers for a server that holds ``capacity``: doubling, then halving."""
    load, passed, failed, probes = low, None, None, 0
    while failed is None and load <= high:
        probes += 1
        if load <= capacity:
            passed, load = load, min(load * 2, high) if load < high else high + 1
        else:
            failed = load
    while failed is not None and passed is not None and failed / passed > 1 + precision and failed - passed > 1:
        middle, probes = (passed + failed) // 2, probes + 1
        passed, failed = (middle, failed) if middle <= capacity else (passed, middle)
    return passed, failed, probes


def run(search: ConfigSearch, rounds: int = 10) -> list[list[tuple[str, int]]]:
    asked = []
    for _ in range(rounds):
        picks = search.next_round(now=0.0)
        if not picks:
            break
        asked.append(picks)
        for name, level in picks:
            if CAPACITY[name] is None:
                search.record(name, None, "server engine is not running (exit 2)")
                continue
            passed, failed, probes = bracket(CAPACITY[name], search.levels[level].precision)
            figures = {"tokens_per_s_per_gpu": 100.0 * passed / GPUS[name], "tokens_per_s_per_user": 1000.0 / passed}
            search.record(name, Measure(level, passed, failed, probes, probes * 10, f"run_{name}", figures=figures))
    return asked


def new(**changes) -> ConfigSearch:
    return ConfigSearch(gpus=dict(GPUS), levels=[Level(30, 0.5, 1), Level(60, 0.1, 2)], low=1, high=32, **changes)


def test_every_config_is_probed_cheaply_then_only_the_contenders_finely():
    search = new()
    asked = run(search)
    assert asked[0] == [(n, 0) for n in GPUS]  # round 1: every config, the cheapest level
    assert {n for n, _ in asked[1]} == {"g1_b8", "g2_b16"} and all(level == 1 for _, level in asked[1])
    assert search.status() == "done" and len(asked) == 2
    answer = search.result()
    assert answer["best"] in ("g1_b8", "g2_b16")
    verdicts = {r["config"]: r["verdict"] for r in answer["ranking"]}
    assert {verdicts["g1_b8"], verdicts["g2_b16"]} == {"best", "not distinguishable from best"}  # 8 per GPU each
    assert verdicts["g1_b4"] == verdicts["g2_b8"] == verdicts["g4_b8"] == "worse"
    assert verdicts["crash"] == "failed" and "exit 2" in answer["ranking"][-1]["error"]
    assert answer["probes"] == len(GPUS) + 2 < 2 * len(GPUS)
    assert answer["ranking"][0]["low"] == 8 and answer["ranking"][0]["level"] == 1


def test_a_config_that_passed_the_top_of_the_range_holds_at_least_that_an_open_interval():
    search = ConfigSearch(gpus={"a": 1, "b": 1}, levels=[Level(30, 0.5, 1)], low=1, high=16)
    search.next_round(now=0.0)
    search.record("a", Measure(0, 16, None, 5, 150, "r"))
    search.record("b", Measure(0, None, 1, 1, 30, "r"))
    a, b = search.interval("a"), search.interval("b")
    assert a.low == 16 and a.open_above and a.text() == "≥ 16"  # no more was asked: it may hold far more
    assert not b.held and b.text() == "< 1"  # even the lowest load failed
    assert search.verdict("a") == "best" and search.verdict("b") == "worse" and search.status() == "done"
    assert "best a: ≥ 16 load per GPU" in search.result()["summary"]


def test_a_config_censored_at_the_top_is_never_ranked_worse_than_one_it_may_beat():
    """Two GPUs at the range's top (5) hold at least 2.5 per GPU; one GPU measured at 3: the first may hold far
    more, so it is never called worse, whichever is listed first; above the other's interval it is the best."""
    for order in (("wide", "narrow"), ("narrow", "wide")):
        gpus = {"wide": 2, "narrow": 1}
        search = ConfigSearch(gpus={n: gpus[n] for n in order}, levels=[Level(30, 0.5, 1)], low=1, high=5)
        search.next_round(now=0.0)
        search.record("wide", Measure(0, 5, None, 4, 120, "r1"))
        search.record("narrow", Measure(0, 3, 4, 4, 120, "r2"))
        result = search.result()
        verdicts = {r["config"]: r["verdict"] for r in result["ranking"]}
        assert verdicts == {"narrow": "best", "wide": "not distinguishable from best"}, result["summary"]
        assert "wide (≥ 2.5)" in result["summary"] and result["status"] == "done"
        rows = {r["config"]: r for r in result["ranking"]}
        assert rows["wide"]["open_above"] and rows["wide"]["high"] is None and rows["wide"]["load"] == "≥ 2.5"
    search = ConfigSearch(gpus={"narrow": 1, "wide": 2}, levels=[Level(30, 0.5, 1)], low=1, high=16)
    search.next_round(now=0.0)
    search.record("wide", Measure(0, 16, None, 4, 120, "r1"))
    search.record("narrow", Measure(0, 3, 4, 4, 120, "r2"))
    assert search.leader() == "wide" and search.verdict("narrow") == "worse"


def test_when_no_config_holds_the_slo_within_the_range_no_best_is_named():
    search = new()
    for _ in range(3):
        for name, level in search.next_round(now=0.0):
            search.record(name, Measure(level, None, 1, 1, 30, f"run_{name}_{level}"))
    result = search.result()
    assert search.status() == "none" and result["status"] == "none" and result["best"] is None
    assert result["summary"].startswith("no config holds the SLO within the range"), result["summary"]
    assert {r["verdict"] for r in result["ranking"]} == {"held none of the range"}
    # a cheap probe's failure is confirmed at the spec's own settings before the answer says none held
    assert all(r["level"] == len(search.levels) - 1 for r in result["ranking"]), result["ranking"]


def test_a_probe_taken_back_costs_nothing_and_is_planned_again():
    search = new()
    first = search.next_round(now=0.0)
    search.retract("g1_b8")
    assert "g1_b8" not in search.outstanding and search.probes == len(first) - 1
    for name, level in list(first):
        if name != "g1_b8":
            search.record(name, Measure(level, 2, 3, 1, 30, "r"))
    assert ("g1_b8", 0) in search.next_round(now=0.0)


def test_the_budget_stops_the_search_with_what_it_knows():
    search = new(max_probes=len(GPUS) + 1)
    run(search)
    assert search.status() == "budget" and "budget spent (probes" in search.stopped
    assert search.result()["best"] is not None and search.probes == len(GPUS) + 1


def test_a_reused_measure_costs_no_probe_and_the_state_survives_json():
    search = new()
    search.seed("g1_b8", Measure(1, 8, 9, 0, 0, "earlier"), "bench_config_search/r0")
    picks = search.next_round(now=0.0)
    assert ("g1_b8", 0) not in picks and len(picks) == len(GPUS) - 1
    again = ConfigSearch.from_json(search.to_json())
    assert again.reused == {"g1_b8": "bench_config_search/r0"} and again.outstanding == search.outstanding
    with pytest.raises(ValueError, match="not probed in this round"):
        again.record("g1_b8", None)


def test_levels_go_from_cheap_to_the_specs_settings_never_below_what_the_slo_needs():
    assert levels(400, 0.1, 3, 59, count=3) == [Level(100, 0.4, 1), Level(200, 0.2, 1), Level(400, 0.1, 3)]
    assert levels(60, 0.1, 1, 59, count=3) == [Level(59, 0.4, 1), Level(59, 0.2, 1), Level(60, 0.1, 1)]


def test_the_pareto_front_keeps_what_nothing_beats_on_both_axes():
    rows = [
        {"config": "fast", "tokens_per_s_per_gpu": 100, "tokens_per_s_per_user": 50},
        {"config": "dense", "tokens_per_s_per_gpu": 300, "tokens_per_s_per_user": 20},
        {"config": "dominated", "tokens_per_s_per_gpu": 90, "tokens_per_s_per_user": 19},
        {"config": "unmeasured", "tokens_per_s_per_gpu": None, "tokens_per_s_per_user": None},
    ]
    assert pareto(rows) == ["fast", "dense"]
