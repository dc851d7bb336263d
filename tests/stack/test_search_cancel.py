"""A search cancelled mid-round, under the stack tier's scheduler, triggerer, api-server and Celery worker: a bisection
of the generated git payload and a config search of two tiny servers, both on the pool of two loopback SSH hosts.
Each is marked failed (the UI's "mark failed", through the REST API) once its first probe run is under way. Each
ends ``cancelled`` in the warehouse with what it knew, its probe runs end too (none left queued or running), and
no probe run holds a host's lease once they have ended (read from the lease file on each host)."""

from __future__ import annotations

import functools
import time

import pytest

from benchflow.remote.layout import lease_owner
from benchflow.remote.lease import LEASE_FILE
from benchflow.searches.engine import run_tag
from benchflow.warehouse import Warehouse, queries
from benchtools.loopback_sshd import LoopbackSSHD
from benchtools.stack import AirflowStack
from tests.stack.conftest import CASE, METRIC, REPEATS

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]
SEARCHES = {
    "bench_bisect": (
        "bisect",
        "bench_toy_bisect",
        {"campaign": "toy_bisect", "case": CASE, "metric": METRIC, "good": "c1", "bad": "main", "repeats": REPEATS},
    ),
    "bench_config_search": ("cfgsearch", "bench_space_stack", {"campaign": "space_stack", "levels": 1}),
}
LIVE = ("queued", "running")


def probe_runs(stack: AirflowStack, campaign_dag: str, tag: str) -> list[dict]:
    reply = stack.api("GET", f"/dags/{campaign_dag}/dagRuns", params={"limit": 100})
    reply.raise_for_status()
    return [r for r in reply.json()["dag_runs"] if r["dag_run_id"].startswith(tag)]


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(2)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def test_a_search_cancelled_mid_round_ends_cancelled_its_probe_runs_ended_and_leases_released(stack, ssh_hosts):
    runs = {}
    for dag_id, (prefix, campaign_dag, conf) in SEARCHES.items():
        reply = stack.trigger(dag_id, conf)
        assert reply.status_code == 200, reply.text
        run_id = reply.json()["dag_run_id"]
        runs[dag_id] = (run_id, campaign_dag, run_tag(prefix, run_id))
    for dag_id, (run_id, campaign_dag, tag) in runs.items():  # a probe run made: the search is mid-round
        made = functools.partial(probe_runs, stack, campaign_dag, tag)
        wait_until(made, 300, f"a probe run of {dag_id}/{run_id}")
        reply = stack.api("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}", json={"state": "failed"})
        assert reply.status_code == 200, reply.text
    states = stack.wait_runs([(dag_id, run_id) for dag_id, (run_id, _, _) in runs.items()], timeout=300)
    assert set(states.values()) == {"failed"}, states

    warehouse = Warehouse.at(stack.var / "warehouse.duckdb", read_only=True)
    for dag_id, (run_id, campaign_dag, tag) in runs.items():
        tasks = stack.task_instances(dag_id, run_id)
        assert tasks["finish"]["state"] == "failed", {t: ti["state"] for t, ti in tasks.items()}  # it ran, and said so
        reader = queries.bisection if dag_id == "bench_bisect" else queries.config_search
        row = reader(warehouse, dag_id, run_id).iloc[0]
        assert row["status"] == "cancelled" and "what it knew" in row["summary"], row["summary"]
        # its probe runs end too (each once its teardowns ran): none left to run on, every lease taken given back
        wait_until(functools.partial(ended, stack, campaign_dag, tag), 300, f"the probe runs of {dag_id} ended")
        owners = {lease_owner(campaign_dag, p["dag_run_id"]) for p in probe_runs(stack, campaign_dag, tag)}
        held = {name: holder(host) for name, host in ssh_hosts.items()}
        assert not owners & set(held.values()), f"a probe run of {dag_id} still holds a host's lease: {held}"


def ended(stack: AirflowStack, campaign_dag: str, tag: str) -> bool:
    probes = probe_runs(stack, campaign_dag, tag)
    assert probes, f"no probe run of {tag}"
    return all(p["state"] not in LIVE for p in probes)


def holder(host: LoopbackSSHD) -> str | None:
    """Who holds the host's lease now, read from the lease file in its workdir (None: nobody)."""
    path = host.workdir / LEASE_FILE
    text = path.read_text().split() if path.exists() else []
    return text[0] if text else None
