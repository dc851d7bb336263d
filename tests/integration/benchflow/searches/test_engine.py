"""The search engine's answer rules at the edges, with the real pieces: a bisection of a generated git payload over a
pool of two SSH hosts (a real sshd on loopback, and a connection to a port where nothing listens), the DuckDB
warehouse. A host that is down gets no probe and is named in the answer, a probe whose host went down is measured
again on the other, and a search whose probe runs ended, or whose run was cancelled, says so with what it knew."""

from __future__ import annotations

import json
import textwrap

import pytest

from benchflow.kinds.kernel import KIND as KERNEL
from benchflow.records import RunRecord
from benchflow.searches import engine
from benchflow.warehouse import Warehouse, queries
from benchtools.net import free_port
from tests.integration.benchflow.nightly.test_regressions import H200, TONIGHT
from tests.payload_repo import make_payload_repo

pytestmark = pytest.mark.integration

CONF = {"campaign": "toy_pool", "case": "m=64", "metric": "us_per_token", "good": "c1", "bad": "main"}
DAG_ID, RUN_ID = "bench_bisect", "manual__pool"


@pytest.fixture
def pool(tmp_path, monkeypatch, sshd):
    """A git-payload campaign on two hosts: ``gpu_up`` answers, ``gpu_down`` is a port where nothing listens."""
    repo = make_payload_repo(tmp_path / "toy.git")
    folder = tmp_path / "campaigns"
    folder.mkdir()
    (folder / "toy_pool.yaml").write_text(
        textwrap.dedent(
            f"""\
            description: the toy kernel of a generated git repository on a pool of two hosts
            kind: kernel
            host: gpu_up
            hosts: [gpu_up, gpu_down]
            payload: {{repo: {repo.path}, ref: main, path: kernels/toy}}
            schedule: null
            benchmark:
              script: bench_toy.py
              args: {{m_list: [1, 64], iters: 1, clock: model}}
            """
        )
    )
    monkeypatch.setenv("BENCH_CAMPAIGNS_DIR", str(folder))
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_CONN_GPU_UP", json.dumps(sshd.connection()))
    monkeypatch.setenv("AIRFLOW_CONN_GPU_DOWN", json.dumps({**sshd.connection(), "port": free_port()}))
    warehouse = Warehouse.at(tmp_path / "warehouse.duckdb")
    warehouse.migrate()
    return warehouse


def load_probe(warehouse: Warehouse, run_id: str, sha: str, values: list[float]) -> None:
    """What a probe run of the campaign loads: its record and the case's rows, each value a repeat."""
    run = RunRecord(
        dag_id="bench_toy_pool", run_id=run_id, campaign="toy_pool", host="gpu_up", spec_hash="0" * 64, status="ok",
        started_at=TONIGHT, logical_date=TONIGHT, run_type="manual", host_facts=H200,
        conf={"payload_ref": sha, "m_list": [64] * len(values)}, payload_commit=sha, payload_ref=sha,
    )  # fmt: skip
    rows = [
        {"m": 64, "repeat": i + 1, "ms_per_call": v * 64e-3, "tok_per_s": 1e6 / v, "us_per_token": v, "note": ""}
        for i, v in enumerate(values)
    ]
    warehouse.load(run, KERNEL, rows)


def test_a_host_that_is_down_gets_no_probe_and_is_named_in_the_answer(pool):
    search = engine.start("bisect", CONF, pool)
    search = engine.plan(search, RUN_ID)
    assert [p.host for p in search.probes] == ["gpu_up", "gpu_up"], search.probes  # good and bad, both on the live one
    assert all(p.conf["host"] == "gpu_up" for p in search.probes)
    assert list(search.down) == ["gpu_down"] and search.down["gpu_down"], search.down  # with why: its own error
    result = engine.save(search, pool, DAG_ID, RUN_ID)
    assert "host gpu_down was down" in result["summary"] and result["hosts_down"] == search.down
    (row,) = queries.bisections(pool, "toy_pool").to_dict("records")
    assert "host gpu_down was down" in row["summary"]


def test_a_probe_whose_host_went_down_is_measured_again_on_another(pool):
    search = engine.start("bisect", CONF, pool)
    search = engine.plan(search, RUN_ID, check=lambda host: "")  # both answered when the round was planned
    assert sorted(p.host for p in search.probes) == ["gpu_down", "gpu_up"]
    assert len({p.run_id for p in search.probes}) == 2 and all(p.run_id.endswith(p.host) for p in search.probes)
    lost, kept = (next(p for p in search.probes if p.host == host) for host in ("gpu_down", "gpu_up"))
    load_probe(pool, kept.run_id, kept.keys[0], [100.0, 101.0, 99.0, 100.5, 100.2])
    engine.record(search, pool, DAG_ID, RUN_ID)  # gpu_down's run loaded nothing, and gpu_down no longer answers
    algo = engine.strategy("bisect").load(search)
    assert "gpu_down" in search.down and not algo.failed and not algo.outstanding  # taken back, not skipped
    assert len(algo.samples[kept.keys[0]]) == 5 and lost.keys[0] not in algo.samples and algo.probes == 1
    again = engine.plan(search, RUN_ID)
    assert lost.keys[0] in {k for p in again.probes for k in p.keys}
    assert {p.host for p in again.probes} == {"gpu_up"}


def test_a_search_whose_probe_runs_ended_or_that_was_cancelled_says_so_with_what_it_knew(pool):
    started = engine.start("bisect", CONF, pool)
    planned = engine.plan(engine.Search.from_json(started.to_json()), RUN_ID, check=lambda host: "")
    # bench down ended the round's probe runs: no round task recorded them
    _, result = engine.finish([started, planned], pool, DAG_ID, RUN_ID)
    assert result["status"] == "failed" and result["summary"].startswith(engine.ENDED_PROBES), result["summary"]
    assert all(p.run_id in result["summary"] for p in planned.probes)
    (row,) = queries.bisections(pool, "toy_pool").to_dict("records")
    assert row["status"] == "failed" and engine.ENDED_PROBES in row["summary"]
    # a person marked the search's run failed: the listener told start, and finish ends it cancelled
    ended, result = engine.finish([started, planned], pool, DAG_ID, RUN_ID, cancelled="marked failed")
    assert result["status"] == "cancelled" and result["summary"].startswith("cancelled: marked failed; what it knew:")
    (row,) = queries.bisections(pool, "toy_pool").to_dict("records")
    assert row["status"] == "cancelled" and ended.ended.startswith("cancelled")


def test_a_search_whose_last_plan_left_nothing_says_why_it_stopped(pool):
    """Its budget spent after a recorded round, with no later plan to say so (a plan's state lost, a DAG without
    one): finish asks the strategy, and the answer is the narrowest range with the budget named, never 'running'."""
    search = engine.start("bisect", {**CONF, "max_probes": 2}, pool)
    search = engine.plan(search, RUN_ID, check=lambda host: "")
    for probe, level in zip(search.probes, (100.0, 130.0), strict=True):  # good, then bad: 30 % slower
        load_probe(pool, probe.run_id, probe.keys[0], [level * (1 + 0.01 * i) for i in range(5)])
    engine.record(search, pool, DAG_ID, RUN_ID, check=lambda host: "")
    _, result = engine.finish([search], pool, DAG_ID, RUN_ID)
    assert result["status"] == "range" and "budget spent (probes: 2 used)" in result["stopped"], result["summary"]
    (row,) = queries.bisections(pool, "toy_pool").to_dict("records")
    assert row["status"] == "range"
