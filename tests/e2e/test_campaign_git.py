"""A campaign whose payload comes from git, run once with ``dag.test()`` over real SSH: the ref it is given is
shipped and its commit recorded with every row (the bisect DAG's probes are such runs: tests/stack/test_bisect.py)."""

from __future__ import annotations

import pytest

from benchflow.warehouse import Warehouse, queries
from tests.e2e.conftest import campaign_dags, run_dag
from tests.payload_repo import make_payload_repo
from tests.stack.conftest import CASE, METRIC, toy_spec

pytestmark = pytest.mark.e2e


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
