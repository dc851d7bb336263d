"""A config search in the warehouse and the Benchmarks view: the shipped space (serving_space_local, 13 configs of
the tiny server) searched with measures a known capacity gives, stored after every round, its page (the ranking
with each config's interval and verdict, the Pareto chart, the probe runs, the winner's config block), the
listing, and a later search that reuses what this one measured on the same payload and GPU model."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import yaml
from fastapi.testclient import TestClient

from benchflow.kinds.kernel import KIND as KERNEL
from benchflow.searches import engine
from benchflow.searches.config_campaign import DAG_ID
from benchflow.searches.configs import ConfigSearch, Measure
from benchflow.ui import app
from benchflow.warehouse import Warehouse, queries
from tests.integration.benchflow.nightly.test_regressions import kernel_rows, night_run
from tests.unit.benchflow.searches.test_configs import bracket
from tests.view_auth import auth  # noqa: F401

pytestmark = pytest.mark.integration
CAMPAIGN = "serving_space_local"


@pytest.fixture
def warehouse(tmp_path, monkeypatch, auth):  # noqa: F811
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path))
    warehouse = Warehouse.at(tmp_path / "warehouse.duckdb")
    warehouse.migrate()
    run = dataclasses.replace(night_run(CAMPAIGN, 0), payload_commit="c" * 40)  # the campaign's latest valid run
    warehouse.load(run, KERNEL, kernel_rows(1.0, random.Random(1)))
    return warehouse, TestClient(app, headers=auth("viewer", "viewer"))


def searched(warehouse: Warehouse, run_id: str) -> dict:
    """A search of the shipped space whose configs hold their batch limit: every round planned, measured and
    recorded as the DAG does, then finished."""
    search = engine.start("config", {"campaign": CAMPAIGN}, warehouse)
    kind = engine.strategy("config")
    while (search := engine.plan(search, run_id)).probes:
        algo = kind.load(search)
        for probe in search.probes:
            for name in probe.keys:
                capacity = int(name.split("_b")[1])
                passed, failed, probes = bracket(capacity, algo.levels[probe.level].precision, 1, 16)
                gpus = algo.gpus[name]
                figures = {
                    "tokens_per_s_per_gpu": 40.0 * passed / gpus,
                    "tokens_per_s_per_user": 25.0 - passed,
                    "validity": "ok",
                    "payload": "c" * 40,
                    "gpu_model": "NVIDIA H200",
                }
                algo.record(name, Measure(probe.level, passed, failed, probes, probes * 30, probe.run_id, "", figures))
        search.probes, search.state = [], algo.to_json()
        engine.save(search, warehouse, DAG_ID, run_id)
    return engine.finish([search], warehouse, DAG_ID, run_id)[1]


def test_a_search_is_stored_and_its_page_shows_the_ranking_the_front_and_the_winner(warehouse):
    warehouse, http = warehouse
    result = searched(warehouse, "manual__space")
    assert result["status"] == "done" and result["best"] == "g1_b8", result["summary"]
    (row,) = queries.config_searches(warehouse, CAMPAIGN).to_dict("records")
    assert (row["configs"], row["excluded"], row["rounds"]) == (13, 2, 2)
    assert row["prompts"] < row["grid_prompts"]
    ranking = queries.config_search_configs(warehouse, DAG_ID, "manual__space")
    assert ranking["config"].iloc[0] == "g1_b8" and ranking["verdict"].iloc[0] == "best"
    assert set(ranking["verdict"].iloc[1:]) == {"worse"} and (ranking["load_per_gpu_high"].iloc[1:] < 8).all()
    assert ranking["pareto"].any() and ranking["settings"].notna().all()
    block = yaml.safe_load(queries.config_search(warehouse, DAG_ID, "manual__space")["winner_yaml"].iloc[0])
    assert block["configs"][0]["name"] == "g1_b8"

    page = http.get(f"/search/{DAG_ID}/manual__space").text
    assert "Config search of serving_space_local" in page and "best g1_b8" in page
    assert page.index("g1_b8") < page.index("g1_b6") and 'figure class="plot' in page
    assert "Pareto front" in page and "name: g1_b8" in page  # the chart's trace, the winner's block
    assert "excluded: constraint" in page
    assert "manual__space" in http.get("/searches").text
    assert "../search/bench_config_search/manual__space" in http.get(f"/campaign/{CAMPAIGN}").text
    assert http.get(f"/search/{DAG_ID}/nope").status_code == 404
    assert http.get(f"/config-search/{DAG_ID}/manual__space").url.path.endswith(f"/search/{DAG_ID}/manual__space")


def test_a_later_search_reuses_what_an_earlier_one_measured_on_the_same_payload_and_gpus(warehouse):
    warehouse, _ = warehouse
    searched(warehouse, "manual__first")
    again = ConfigSearch.from_json(engine.start("config", {"campaign": CAMPAIGN}, warehouse).state)
    assert len(again.reused) == 13 and again.reused["g1_b8"] == f"{DAG_ID}/manual__first"
    assert again.latest("g1_b8").level == 2  # its finest measure, at the spec's own settings
    assert again.next_round(now=0.0) == []  # nothing left to measure: the answer is the earlier one's
    assert json.loads(json.dumps(again.result()))["best"] == "g1_b8"
    fresh = engine.start("config", {"campaign": CAMPAIGN, "reuse": False}, warehouse)
    assert fresh.state["reused"] == {}
