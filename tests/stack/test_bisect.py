"""Bisection end to end: the generated payload repository (8 commits, commit 6 makes the kernel 20 % slower,
3 % noise per value), the bisect DAG under the stack tier's scheduler, triggerer and Celery worker
(tests/stack/conftest.py), every probe a run of the campaign's own DAG over real SSH to one of two loopback hosts.
A regression that was noise (confirm does not reproduce it: the bisection ends after its first round) is the
bisection's own logic, tested without Airflow (tests/unit/test_bisect.py, 20 seeds); here the DAG runs the path
that goes through every step.

The toy payload's model clock (work at a fixed cost, lognormal noise from a fresh seed each run) keeps the
answer independent of how busy this machine is; everything else (deploys from git, leases, the deferred waits,
parse, validate, load, the warehouse) is what a campaign does.
"""

from __future__ import annotations

import json
import math
from datetime import datetime

import pytest

from benchflow.searches.engine import run_tag
from benchflow.warehouse import Warehouse, queries
from benchtools.stack import AirflowStack
from tests.stack.conftest import CASE, COMMITS, METRIC, REPEATS, SLOW_FROM

NIGHTLY = (4, 7)  # commits that nightly runs measured: the bisection reuses them

pytestmark = [pytest.mark.stack, pytest.mark.timeout(1800)]  # two nightly runs (600 s at most), then the bisection


def bisect(stack: AirflowStack, conf: dict, timeout: float = 1100) -> tuple[str, str]:
    reply = stack.trigger("bench_bisect", conf)
    assert reply.status_code == 200, reply.text
    run_id = reply.json()["dag_run_id"]
    states = stack.wait_runs([("bench_bisect", run_id)], timeout=timeout)
    return run_id, states[("bench_bisect", run_id)]


def warehouse_of(stack: AirflowStack) -> Warehouse:
    return Warehouse.at(stack.var / "warehouse.duckdb", read_only=True)


def campaign_runs(stack: AirflowStack, dag_id: str) -> list[dict]:
    reply = stack.api("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100})
    reply.raise_for_status()
    return reply.json()["dag_runs"]


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_bad_conf_is_refused_naming_its_field(stack):
    reply = stack.trigger("bench_bisect", {"campaign": "toy_bisect", "case": CASE, "metric": METRIC, "good": "c1"})
    assert reply.status_code == 400 and "bad" in reply.text  # a required field: Airflow's Param says which
    reply = stack.trigger(
        "bench_bisect",
        {"campaign": "toy_bisect", "case": CASE, "metric": METRIC, "good": "c1", "bad": "main", "repeats": 1},
    )
    assert reply.status_code == 400 and "repeats" in reply.text


def test_bisection_names_the_slow_commit_reusing_two_nightly_results_probing_two_commits_at_once(stack, repos):
    repo = repos["toy_bisect"]
    # "Nightly" results for commits 4 and 7: ordinary runs of the campaign at those commits (the case, 5 times)
    nightly = {}
    for n, host in zip(NIGHTLY, ("gpu_a", "gpu_b"), strict=True):  # one on each host, side by side
        reply = stack.trigger("bench_toy_bisect", {"payload_ref": f"c{n}", "m_list": [64] * REPEATS, "host": host})
        assert reply.status_code == 200, reply.text
        nightly[n] = reply.json()["dag_run_id"]
    states = stack.wait_runs([("bench_toy_bisect", r) for r in nightly.values()], timeout=600)
    assert set(states.values()) == {"success"}, states

    # The campaign's DAG paused (as every campaign DAG starts): the bisection unpauses it as it starts, and says so
    stack.api("PATCH", "/dags/bench_toy_bisect", json={"is_paused": True}).raise_for_status()
    conf = {"campaign": "toy_bisect", "case": CASE, "metric": METRIC, "good": "c1", "bad": "main", "repeats": REPEATS}
    run_id, state = bisect(stack, conf)
    tasks = stack.task_instances("bench_bisect", run_id)
    assert state == "success", {t: ti["state"] for t, ti in tasks.items()}
    note = stack.api("GET", f"/dags/bench_bisect/dagRuns/{run_id}").json()["note"] or ""
    assert "unpaused bench_toy_bisect" in note, note
    assert stack.api("GET", "/dags/bench_toy_bisect").json()["is_paused"] is False

    found = queries.bisection(warehouse_of(stack), "bench_bisect", run_id).iloc[0]
    result = json.loads(found["result"])
    assert found["status"] == "found", result["summary"]
    assert found["first_bad"] == repo.commit(SLOW_FROM) and found["parent"] == repo.commit(SLOW_FROM - 1)
    assert found["ratio_low"] > 1 and 1.1 < found["ratio"] < 1.3
    assert found["rounds"] <= math.ceil(math.log2(COMMITS)) + 2
    # The two nightly commits were reused, never probed; every other measured commit cost one probe run
    assert found["reused"] == 2
    probes = [
        r for r in campaign_runs(stack, "bench_toy_bisect") if r["dag_run_id"].startswith(run_tag("bisect", run_id))
    ]
    probed = {r["conf"]["payload_ref"] for r in probes}
    assert len(probes) == found["probes"] and all(r["state"] == "success" for r in probes)
    chain = queries.bisection_probes(warehouse_of(stack), "bench_bisect", run_id)
    reused = chain[chain["reused_from"].notna()]
    assert set(reused["sha"]) == {repo.commit(n) for n in NIGHTLY}
    assert {json.loads(s)[0] for s in reused["probe_runs"]} == set(nightly.values())
    for row in reused.to_dict("records"):  # probed again only to settle a verdict the nightly's values left open,
        again = json.loads(row["rounds"])  # then with the nightly's values kept beside the probe's
        assert (row["sha"] in probed) == bool(again) and (not again or row["n"] > REPEATS), row
    assert set(chain[chain["sha"] == repo.commit(SLOW_FROM)]["verdict"]) == {"same_as_bad"}
    # Two hosts: the probes of one round ran at the same time, one on each host
    by_round: dict[str, list[dict]] = {}
    for r in probes:
        by_round.setdefault(r["dag_run_id"].split("_")[2], []).append(r)
    pairs = [runs for runs in by_round.values() if len(runs) == 2]
    assert pairs, by_round.keys()
    for first, second in pairs:
        assert {first["conf"]["host"], second["conf"]["host"]} == {"gpu_a", "gpu_b"}
        assert when(first["start_date"]) < when(second["end_date"]) and when(second["start_date"]) < when(
            first["end_date"]
        )
    # Its steps are the search engine's tasks: the confirm round, the narrow rounds (mapped: one probe per commit),
    # finish; the rounds left once the answer was in are skipped
    assert tasks["round_1"]["state"] == "success" and tasks["finish"]["state"] == "success"
    assert tasks["round_2"]["state"] == "success" and tasks[f"round_{found['rounds'] + 1}_plan"]["state"] == "skipped"
