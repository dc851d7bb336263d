"""The real stack: CeleryExecutor, Redis, PostgreSQL, api-server, scheduler, dag-processor, triggerer
and a Celery worker as processes; campaigns triggered through the REST API on two SSH hosts."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from benchflow.warehouse import Warehouse
from benchtools.stack import USER
from tests.conftest import wait_for
from tests.payload_repo import git
from tests.stack.conftest import SPEC_REPO

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]  # a whole stack's start, then campaign runs


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def said(stack, pattern: str, lines: int = 40) -> str:
    """The scheduler's and triggerer's log lines that match ``pattern`` (the last ``lines`` of each)."""
    out = []
    for component in ("scheduler", "triggerer"):
        log = stack.root / f"{component}.log"
        found = [line for line in log.read_text(errors="replace").splitlines() if re.search(pattern, line)]
        out += [f"{component}: {line[:400]}" for line in found[-lines:]]
    return "\n".join(out)


def decided_night(stack) -> str:
    """The first scheduled night of bench_stack_decide: waits until its decide task asks, answers "accept" with a
    reason through the REST API, and waits for the night to end; its run id."""
    night: list[str] = []

    def scheduled() -> bool:
        found = stack.api("GET", "/dags/bench_stack_decide/dagRuns", params={"limit": 10}).json()["dag_runs"]
        night[:] = sorted(r["dag_run_id"] for r in found if r["run_type"] == "scheduled")[:1]
        return bool(night)

    wait_for(scheduled, 150, "a scheduled run of bench_stack_decide", every=2)
    run = ("bench_stack_decide", night[0])

    def asking() -> bool:
        tis = stack.task_instances(*run)
        state = tis.get("decide", {}).get("state")
        if state in ("failed", "skipped", "upstream_failed") or stack.run_state(*run) in ("failed", "success"):
            pytest.fail(f"decide is {state}: { ({t: ti['state'] for t, ti in tis.items()}) }\n{stack.failures([run])}")
        return state == "awaiting_input"

    wait_for(asking, 300, "the decide task to wait for a person", every=2)
    answer = {"chosen_options": ["accept as the new baseline"], "params_input": {"reason": REASON}}
    reply = stack.api("PATCH", f"/dags/{run[0]}/dagRuns/{run[1]}/taskInstances/decide/-1/hitlDetails", json=answer)
    assert reply.status_code == 200, reply.text
    states = stack.wait_runs([run], timeout=300)
    if set(states.values()) != {"success"}:
        pytest.fail(f"{states}\n{stack.failures([run], chars=6000)}")
    return run[1]


REASON = "the new kernel is slower here, on purpose"


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
    # stack_b's spec was read from a git repository through a git DAG bundle: its run records the spec's commit
    sources = warehouse.query(
        "SELECT dag_id, run_id, spec_bundle, COALESCE(spec_commit, 'none') AS spec_commit FROM runs"
    )
    sources = {r.dag_id: (r.spec_bundle, r.spec_commit) for r in sources.itertuples() if (r.dag_id, r.run_id) in runs}
    head = git(stack.root / SPEC_REPO, "rev-parse", "HEAD")
    assert sources == {
        "bench_stack_a1": ("dags-folder", "none"),
        "bench_stack_a2": ("dags-folder", "none"),
        "bench_stack_b": ("campaign-specs", head),
    }
    # stack_a2 missed its deadline (10 s after it was queued): the triggerer called its notifier once, with what
    # was still running then; the runs without a deadline called nothing
    notified = stack.root / "hooks" / "notified.jsonl"
    try:
        wait_for(notified.exists, 60, "the deadline's notifier")
    except AssertionError:
        pytest.fail(f"the notifier was not called; the scheduler and triggerer said:\n{said(stack, 'eadline|allback')}")
    calls = [json.loads(line) for line in notified.read_text().splitlines()]
    assert [(c["dag_id"], c["run_id"]) for c in calls] == [runs[1]], calls
    (event,) = calls[0]["events"]
    assert event["event"] == "deadline missed" and event["deadline"] == "10s", event
    assert "verdict" in event["still_running"] and "release_host" in event["still_running"], event


def test_a_person_accepts_a_regressed_night_through_the_rest_api_and_its_baseline_starts_again(stack):
    """stack_decide's history: three nights 30 % faster than its payload measures. Unpaused, its first scheduled
    night regresses; the decide task waits for a person (no worker slot), is answered through the REST API with
    "accept as the new baseline" and a reason, and the decision is stored with who took it: the campaign's
    baseline starts again at that night."""
    from benchflow import kinds
    from benchflow.warehouse import RunRecord, queries

    warehouse = Warehouse.at(stack.var / "warehouse.duckdb")
    warehouse.migrate()
    for back in (3, 2, 1):
        when = datetime.now(UTC) - timedelta(days=back)
        run = RunRecord(
            dag_id="bench_stack_decide", run_id=f"scheduled__seeded_{back}", campaign="stack_decide",
            host="gpu_b", spec_hash="s" * 64, status="ok", started_at=when, logical_date=when, run_type="scheduled",
            host_facts={}, git_sha="abc123",
        )  # fmt: skip
        rows = []
        for i in range(4):  # what bench_fault.py prints, 30 % faster
            m, ms = 2**i, 0.5 * (i + 1) / 1.3 * (1 + 0.005 * back)
            rows.append(
                {"m": m, "ms_per_call": ms, "tok_per_s": m / (ms / 1e3), "us_per_token": 1e3 * ms / m, "note": ""}
            )
        warehouse.load(run, kinds.get("kernel"), rows)

    stack.api("PATCH", "/dags/bench_stack_decide", json={"is_paused": False}).raise_for_status()
    try:
        run_id = decided_night(stack)
    finally:  # one night is enough: the scheduler makes one a minute, and its host is this campaign's alone
        stack.api("PATCH", "/dags/bench_stack_decide", json={"is_paused": True}).raise_for_status()
        for later in stack.api("GET", "/dags/bench_stack_decide/dagRuns", params={"limit": 50}).json()["dag_runs"]:
            if later["state"] not in ("success", "failed"):  # the nights after the first, wherever they got to
                stack.api("DELETE", f"/dags/bench_stack_decide/dagRuns/{later['dag_run_id']}")

    warehouse = Warehouse.at(stack.var / "warehouse.duckdb", read_only=True)
    verdict = queries.run_record(warehouse, "bench_stack_decide", run_id)["verdict"].iloc[0]
    (decided,) = queries.decisions(warehouse, "stack_decide").to_dict("records")
    assert verdict == "regressed" and decided["verdict"] == "regressed", (verdict, decided)
    assert (decided["decision"], decided["reason"], decided["timed_out"]) == ("accept", REASON, False), decided
    assert decided["decided_by"] == USER, decided  # the stack's admin, who answered
    assert queries.accepted_since(warehouse, "stack_decide", "none", datetime.now(UTC)) is not None
