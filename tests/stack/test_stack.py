"""The real stack: CeleryExecutor, Redis, PostgreSQL, api-server, scheduler, dag-processor, triggerer
and a Celery worker as processes; campaigns triggered through the REST API on two SSH hosts."""

from __future__ import annotations

from datetime import datetime

import pytest

from benchflow.warehouse import Warehouse

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]  # a whole stack's start, then campaign runs


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def lease_interval(stack, dag_id: str, run_id: str) -> tuple[datetime, datetime]:
    """From the moment a run took its host's lease to the moment it gave it back."""
    tis = stack.task_instances(dag_id, run_id)
    return _at(tis["acquire_host"]["end_date"]), _at(tis["release_host"]["end_date"])


def test_invalid_conf_is_refused_before_a_run_exists(stack):
    before = stack.api("GET", "/dags/bench_stack_a1/dagRuns").json()["total_entries"]
    for conf in ({"rows": -1}, {"rows": "many"}, {"mode": "x; rm -rf /"}):
        reply = stack.trigger("bench_stack_a1", conf)
        assert reply.status_code == 400, reply.text
        assert next(iter(conf)) in reply.text  # the error names the param
    assert stack.api("GET", "/dags/bench_stack_a1/dagRuns").json()["total_entries"] == before


def test_campaigns_on_one_host_queue_while_another_host_runs_alongside(stack):
    """stack_a1 and stack_a2 share host gpu_a; stack_b runs on gpu_b. stack_a1 gets a conf (6 rows)."""
    runs = []
    for dag_id, conf in (("bench_stack_a1", {"rows": 6}), ("bench_stack_a2", None), ("bench_stack_b", None)):
        reply = stack.trigger(dag_id, conf)
        assert reply.status_code == 200, reply.text
        runs.append((dag_id, reply.json()["dag_run_id"]))
    states = stack.wait_runs(runs, timeout=900)
    if set(states.values()) != {"success"}:  # pytest.fail prints the logs whole: an assert's message is cut short
        pytest.fail(f"{states}\n{stack.failures(runs, chars=6000)}")

    a1, a2, b = (lease_interval(stack, *run) for run in runs)
    first, second = sorted([a1, a2])
    assert first[1] <= second[0], f"two campaigns held gpu_a at once: {a1} {a2}"
    assert b[0] < second[1] and first[0] < b[1], f"gpu_b's campaign did not run alongside gpu_a's: {a1} {a2} {b}"
    for dag_id, run_id in runs:  # every host task ran in its host's pool
        pools = {ti["task_id"]: ti["pool"] for ti in stack.task_instances(dag_id, run_id).values()}
        host = "gpu_b" if dag_id == "bench_stack_b" else "gpu_a"
        assert pools["launch_benchmark"] == pools["acquire_host"] == f"bench_host_{host}"
        assert pools["parse"] == "default_pool"

    warehouse = Warehouse.at(stack.var / "warehouse.duckdb")
    loaded = warehouse.query("SELECT dag_id, run_id, status, rows_loaded FROM runs ORDER BY dag_id")
    loaded = loaded[loaded["run_id"].isin([run_id for _, run_id in runs])]  # the stack is the tier's: other runs too
    assert [tuple(r) for r in loaded.itertuples(index=False)] == [
        (dag_id, run_id, "ok", 6 if dag_id == "bench_stack_a1" else 4) for dag_id, run_id in sorted(runs)
    ]
    rows = warehouse.query("SELECT count(*) AS n FROM kernel_results WHERE run_id = ?", [runs[0][1]])
    assert rows["n"].iloc[0] == 6
