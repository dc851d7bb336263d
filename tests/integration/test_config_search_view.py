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

from benchflow import config_search_steps as steps
from benchflow.analysis.config_search import ConfigSearch, Measure
from benchflow.kinds.kernel import KIND as KERNEL
from benchflow.ui import app
from benchflow.warehouse import Warehouse, queries
from tests.integration.test_analytics import kernel_rows, night_run
from tests.unit.test_config_search import bracket
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
    state = steps.start({"campaign": CAMPAIGN}, warehouse)
    while (planned := steps.plan(state, run_id))["probes"]:
        search = ConfigSearch.from_json(planned["state"])
        for probe in planned["probes"]:
            for name in probe["conf"]["configs"]:
                level = search.meta["levels_asked"][name]
                capacity = int(name.split("_b")[1])
                passed, failed, probes = bracket(capacity, search.levels[level].precision, 1, 16)
                gpus = search.gpus[name]
                figures = {
                    "tokens_per_s_per_gpu": 40.0 * passed / gpus,
                    "tokens_per_s_per_user": 25.0 - passed,
                    "validity": "ok",
                    "payload": "c" * 40,
                    "gpu_model": "NVIDIA H200",
                }
                search.record(
                    name, Measure(level, passed, failed, probes, probes * 30, probe["trigger_run_id"], "", figures)
                )
        state = search.to_json()
        steps.save(search, warehouse, steps.DAG_ID, run_id)
    return steps.finish(state, warehouse, steps.DAG_ID, run_id)


def test_a_search_is_stored_and_its_page_shows_the_ranking_the_front_and_the_winner(warehouse):
    warehouse, http = warehouse
    result = searched(warehouse, "manual__space")
    assert result["status"] == "done" and result["best"] == "g1_b8", result["summary"]
    (row,) = queries.config_searches(warehouse, CAMPAIGN).to_dict("records")
    assert (row["configs"], row["excluded"], row["rounds"]) == (13, 2, 2)
    assert row["prompts"] < row["grid_prompts"]
    ranking = queries.config_search_configs(warehouse, steps.DAG_ID, "manual__space")
    assert ranking["config"].iloc[0] == "g1_b8" and ranking["verdict"].iloc[0] == "best"
    assert set(ranking["verdict"].iloc[1:]) == {"worse"} and (ranking["load_per_gpu_high"].iloc[1:] < 8).all()
    assert ranking["pareto"].any() and ranking["settings"].notna().all()
    block = yaml.safe_load(queries.config_search(warehouse, steps.DAG_ID, "manual__space")["winner_yaml"].iloc[0])
    assert block["configs"][0]["name"] == "g1_b8"

    page = http.get(f"/config-search/{steps.DAG_ID}/manual__space").text
    assert "Config search of serving_space_local" in page and "best g1_b8" in page
    assert page.index("g1_b8") < page.index("g1_b6") and 'figure class="plot' in page
    assert "Pareto front" in page and "name: g1_b8" in page  # the chart's trace, the winner's block
    assert "excluded: constraint" in page
    assert "manual__space" in http.get("/config-searches").text
    assert "../config-search/bench_config_search/manual__space" in http.get(f"/campaign/{CAMPAIGN}").text
    assert http.get(f"/config-search/{steps.DAG_ID}/nope").status_code == 404


def test_a_later_search_reuses_what_an_earlier_one_measured_on_the_same_payload_and_gpus(warehouse):
    warehouse, _ = warehouse
    searched(warehouse, "manual__first")
    state = steps.start({"campaign": CAMPAIGN}, warehouse)
    assert len(state["reused"]) == 13 and state["reused"]["g1_b8"] == f"{steps.DAG_ID}/manual__first"
    again = ConfigSearch.from_json(state)
    assert again.latest("g1_b8").level == 2  # its finest measure, at the spec's own settings
    assert again.next_round(now=0.0) == []  # nothing left to measure: the answer is the earlier one's
    assert json.loads(json.dumps(again.result()))["best"] == "g1_b8"
    fresh = steps.start({"campaign": CAMPAIGN, "reuse": False}, warehouse)
    assert fresh["reused"] == {}
