"""The config search DAG under the stack tier's scheduler, triggerer and Celery worker: a space of two configs of
the tiny server on a campaign with two loopback SSH hosts. Its one round runs one probe run per host, side by side
(each a run of the campaign's own DAG with its config, holding its host's lease), and the answer, the ranking
and the probe runs are in the warehouse."""

from __future__ import annotations

from datetime import datetime

import pytest

from benchflow.searches.engine import run_tag
from benchflow.warehouse import Warehouse, queries

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]  # the search (500 s at most), then its checks


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_rounds_probes_run_side_by_side_one_per_host_and_the_answer_is_stored(stack):
    reply = stack.trigger("bench_config_search", {"campaign": "space_stack", "levels": 1})
    assert reply.status_code == 200, reply.text
    run_id = reply.json()["dag_run_id"]
    states = stack.wait_runs([("bench_config_search", run_id)], timeout=500)
    tasks = stack.task_instances("bench_config_search", run_id)
    assert states[("bench_config_search", run_id)] == "success", {t: ti["state"] for t, ti in tasks.items()}
    assert tasks["round_1"]["state"] == "success" and tasks["round_2_plan"]["state"] == "skipped"

    probes = stack.api("GET", "/dags/bench_space_stack/dagRuns", params={"limit": 100}).json()["dag_runs"]
    probes = [r for r in probes if r["dag_run_id"].startswith(run_tag("cfgsearch", run_id))]
    assert sorted(r["conf"]["host"] for r in probes) == ["gpu_a", "gpu_b"], probes
    assert sorted(c for r in probes for c in r["conf"]["configs"]) == ["b2", "b6"]
    first, second = probes
    assert when(first["start_date"]) < when(second["end_date"]) and when(second["start_date"]) < when(
        first["end_date"]
    ), probes  # one probe per host, at the same time

    warehouse = Warehouse.at(stack.var / "warehouse.duckdb", read_only=True)
    (search,) = queries.config_searches(warehouse, "space_stack").to_dict("records")
    ranking = queries.config_search_configs(warehouse, "bench_config_search", run_id)
    said = (search["summary"], ranking.to_dict("records"))
    assert (search["status"], search["best"], search["rounds"], search["probes"]) == ("done", "b6", 1, 2), said
    assert list(zip(ranking["config"], ranking["verdict"], strict=True)) == [("b6", "best"), ("b2", "worse")]
    best, worse = ranking.to_dict("records")
    assert best["load_per_gpu_low"] > worse["load_per_gpu_high"] and best["pass_load"] >= 3, (best, worse)
