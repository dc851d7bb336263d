"""The environments of an Edge worker and of a stack that runs the Edge executor (bench up, the stack tier)."""

from __future__ import annotations

import pytest

from benchtools import stack, up

pytestmark = pytest.mark.unit


def paths(tmp_path) -> up.Paths:
    home = tmp_path / "home"
    return up.Paths(home, tmp_path / "logs", home / "stack.json", home / "p.json", home / "jwt", tmp_path / "af")


def test_bench_up_runs_the_edge_executor_beside_its_own_only_when_asked_for_a_queue(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCH_EDGE_QUEUE", raising=False)
    plain = up.environment(paths(tmp_path), "sqlite:///x.db", 8123)
    assert plain["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor" and "AIRFLOW__EDGE__API_URL" not in plain
    monkeypatch.setenv("BENCH_EDGE_QUEUE", "gpu_edge")
    edge = up.environment(paths(tmp_path), "sqlite:///x.db", 8123)
    assert edge["AIRFLOW__CORE__EXECUTOR"] == f"LocalExecutor,{stack.EDGE_EXECUTOR}"
    assert edge["AIRFLOW__EDGE__API_ENABLED"] == "True"
    assert edge["AIRFLOW__EDGE__API_URL"] == "http://127.0.0.1:8123/edge_worker/v1/rpcapi"
    assert edge["AIRFLOW__API_AUTH__JWT_SECRET"] == plain["AIRFLOW__API_AUTH__JWT_SECRET"]  # the worker signs with it
    monkeypatch.setenv("BENCH_EDGE_QUEUE", "gpu edge; rm -rf /")
    with pytest.raises(RuntimeError, match="BENCH_EDGE_QUEUE"):
        up.environment(paths(tmp_path), "sqlite:///x.db", 8123)


def test_an_edge_worker_has_no_database_a_disk_of_its_own_and_the_shared_artifact_store(tmp_path):
    central = {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://db/airflow",
        "AIRFLOW__API_AUTH__JWT_SECRET": "s",
        "BENCH_VAR_DIR": str(tmp_path / "var"),
    }
    worker = stack.edge_worker_env(central, tmp_path / "host")
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in worker and worker["AIRFLOW__API_AUTH__JWT_SECRET"] == "s"
    assert worker["BENCH_VAR_DIR"] == str(tmp_path / "host")
    assert worker["BENCH_ARTIFACTS_URL"] == f"file://{tmp_path / 'var' / 'artifacts'}"  # the central store
    s3 = stack.edge_worker_env(central | {"BENCH_ARTIFACTS_URL": "s3://bench-artifacts"}, tmp_path / "host")
    assert s3["BENCH_ARTIFACTS_URL"] == "s3://bench-artifacts"
