"""Bisection end to end: the generated payload repository (16 commits, commit 11 makes the kernel 20 % slower,
3 % noise per value), the bisect DAG under a real scheduler, triggerer and Celery worker (tests/airflow_stack.py),
every probe a run of the campaign's own DAG over real SSH to one of two loopback hosts.

The toy payload's model clock (work at a fixed cost, lognormal noise from a fresh seed each run) keeps the
answer independent of how busy this machine is; everything else (deploys from git, leases, the deferred waits,
parse, validate, load, the warehouse) is what a campaign does.
"""

from __future__ import annotations

import json
import math
import textwrap
from datetime import datetime
from pathlib import Path

import pytest

from benchflow.warehouse import Warehouse, queries
from benchtools.loopback_sshd import LoopbackSSHD
from benchtools.stack import AirflowStack, campaign_folder
from tests.conftest import VAR
from tests.e2e.conftest import campaign_dags, run_dag
from tests.payload_repo import PayloadRepo, make_payload_repo

pytestmark = pytest.mark.e2e

REPEATS = 5
CASE, METRIC = "m=64", "us_per_token"


def toy_spec(repo: Path, hosts: list[str]) -> str:
    return textwrap.dedent(
        f"""\
        description: the toy kernel of a generated git repository
        kind: kernel
        host: {hosts[0]}
        hosts: {json.dumps(hosts)}
        payload: {{repo: {repo}, ref: main, path: kernels/toy}}
        schedule: null
        telemetry: {{enabled: false}}
        benchmark:
          script: bench_toy.py
          args: {{m_list: [1, 64], iters: 1, clock: model, noise: 0.03}}
        timeouts:
          benchmark: 120
          poke_interval: 1
          host_poke_interval: 2
        """
    )


# -- one campaign run from git, with dag.test() -------------------------------------------------------


def test_a_git_payload_run_ships_the_ref_it_is_given_and_records_the_commit(tmp_path, airflow_db, sshd, var_dir):
    repo = make_payload_repo(tmp_path / "toy.git")
    spec = toy_spec(repo.path, ["gpu_loopback"])
    with campaign_dags(tmp_path / "campaigns", {"toy_git": spec}) as bag:
        dag = bag.get_dag("bench_toy_git")
        assert dag.params["payload_ref"] == "main" and "host" not in dag.params
        run_id, state, tasks = run_dag(bag, "toy_git", {"payload_ref": "c11", "m_list": [64, 64, 64]})
    assert state == "success", tasks
    warehouse = Warehouse.from_airflow(read_only=True)
    record = queries.run_record(warehouse, "bench_toy_git", run_id).iloc[0]
    assert record["payload_commit"] == repo.commit(11) and record["payload_ref"] == "c11"
    rows = warehouse.query("SELECT m, repeat, note FROM kernel_results WHERE run_id = ? ORDER BY repeat", [run_id])
    assert rows.to_dict("records") == [{"m": 64, "repeat": r, "note": "commit=11"} for r in (1, 2, 3)]
    samples = queries.probe_samples(warehouse, "bench_toy_git", run_id, CASE, METRIC)
    assert len(samples) == 3 and set(samples["payload_commit"]) == {repo.commit(11)}


# -- the bisect DAG under the scheduler ----------------------------------------------------------------


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, PayloadRepo]:
    root = tmp_path_factory.mktemp("bisect-repos")
    return {
        "toy_bisect": make_payload_repo(root / "slow.git"),
        "toy_noise": make_payload_repo(root / "same.git", slowdown=1.0),
    }


@pytest.fixture(scope="module")
def stack(repos):
    root = VAR / "bisect-stack"
    hosts = {name: LoopbackSSHD(root / f"sshd-{name}").start() for name in ("gpu_a", "gpu_b")}
    specs = {
        "toy_bisect": toy_spec(repos["toy_bisect"].path, ["gpu_a", "gpu_b"]),
        "toy_noise": toy_spec(repos["toy_noise"].path, ["gpu_a", "gpu_b"]),
    }
    campaigns, kernels = campaign_folder(root, specs, {})
    kernels.mkdir(parents=True, exist_ok=True)
    airflow = AirflowStack(root, campaigns, kernels, {name: h.connection() for name, h in hosts.items()})
    try:
        airflow.start()
        airflow.wait_for_dags(["bench_bisect", "bench_toy_bisect", "bench_toy_noise"])
        yield airflow
    finally:
        airflow.stop()
        for host in hosts.values():
            host.stop()


def bisect(stack: AirflowStack, conf: dict, timeout: float = 1500) -> tuple[str, str]:
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


def test_bisection_names_commit_11_reusing_two_nightly_results_probing_two_commits_at_once(stack, repos):
    repo = repos["toy_bisect"]
    # "Nightly" results for commits 8 and 13: ordinary runs of the campaign at those commits (the case, 5 times)
    nightly = {}
    for n in (8, 13):
        reply = stack.trigger("bench_toy_bisect", {"payload_ref": f"c{n}", "m_list": [64] * REPEATS})
        assert reply.status_code == 200, reply.text
        nightly[n] = reply.json()["dag_run_id"]
    states = stack.wait_runs([("bench_toy_bisect", r) for r in nightly.values()], timeout=600)
    assert set(states.values()) == {"success"}, states

    conf = {"campaign": "toy_bisect", "case": CASE, "metric": METRIC, "good": "c1", "bad": "main", "repeats": REPEATS}
    run_id, state = bisect(stack, conf)
    tasks = stack.task_instances("bench_bisect", run_id)
    assert state == "success", {t: ti["state"] for t, ti in tasks.items()}

    found = queries.bisection(warehouse_of(stack), "bench_bisect", run_id).iloc[0]
    result = json.loads(found["result"])
    assert found["status"] == "found", result["summary"]
    assert found["first_bad"] == repo.commit(11) and found["parent"] == repo.commit(10)
    assert found["ratio_low"] > 1 and 1.1 < found["ratio"] < 1.3
    assert found["rounds"] <= math.ceil(math.log2(16)) + 2
    # The two nightly commits were reused, never probed; every other measured commit cost one probe run
    assert found["reused"] == 2
    probes = [r for r in campaign_runs(stack, "bench_toy_bisect") if r["dag_run_id"].startswith("bisect_")]
    probed = {r["conf"]["payload_ref"] for r in probes}
    assert repo.commit(8) not in probed and repo.commit(13) not in probed
    assert len(probes) == found["probes"] and all(r["state"] == "success" for r in probes)
    chain = queries.bisection_probes(warehouse_of(stack), "bench_bisect", run_id)
    reused = chain[chain["reused_from"].notna()]
    assert set(reused["sha"]) == {repo.commit(8), repo.commit(13)}
    assert {json.loads(s)[0] for s in reused["probe_runs"]} == set(nightly.values())
    assert set(chain[chain["sha"] == repo.commit(11)]["verdict"]) == {"same_as_bad"}
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
    # Its steps are tasks: confirm, the narrow rounds (mapped: one probe per commit), decide
    assert tasks["confirm"]["state"] == "success" and tasks["decide"]["state"] == "success"
    assert tasks["narrow_1"]["state"] == "success" and tasks[f"narrow_{found['rounds']}_plan"]["state"] == "skipped"


def test_a_regression_that_was_noise_ends_not_reproduced_after_confirm(stack, repos):
    conf = {"campaign": "toy_noise", "case": CASE, "metric": METRIC, "good": "c1", "bad": "main", "repeats": REPEATS}
    run_id, state = bisect(stack, conf)
    tasks = stack.task_instances("bench_bisect", run_id)
    assert state == "success", {t: ti["state"] for t, ti in tasks.items()}
    found = queries.bisection(warehouse_of(stack), "bench_bisect", run_id).iloc[0]
    result = json.loads(found["result"])
    assert found["status"] == "not_reproduced" and found["rounds"] == 1 and found["probes"] == 2
    assert result["summary"].startswith("not reproduced") and result["confirmation"]["ratio"]["n_a"] == REPEATS
    assert tasks["confirm"]["state"] == "success" and tasks["narrow_1_plan"]["state"] == "skipped"
    probes = [r for r in campaign_runs(stack, "bench_toy_noise") if r["dag_run_id"].startswith("bisect_")]
    assert {r["conf"]["payload_ref"] for r in probes} == {repos["toy_noise"].commit(1), repos["toy_noise"].commit(16)}
