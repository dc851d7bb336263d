"""The clean-up of a run ended before its teardowns ran (``bench run``'s Ctrl-C, ``bench down``, ``bench up``'s
restart: :func:`benchflow.remote.cleanup.undo_started`) acts on the host the run itself used. A campaign with a pool
of hosts names the run's host only in the run (its ``host`` param), never in the DAG: with ``gpu_a`` (first in the
pool, unreachable here) and ``gpu_b`` (a real sshd on loopback), a run on ``gpu_b`` gets its lease released on
``gpu_b``, and nothing is tried on ``gpu_a``."""

from __future__ import annotations

import json
import os

import pytest

from benchflow.factory import build_dag
from benchflow.remote import cleanup, layout, lease
from benchflow.spec import load_spec
from benchtools.net import free_port
from tests.unit.benchflow.test_spec import GOOD, write

pytestmark = pytest.mark.integration


@pytest.fixture
def pool(sshd, tmp_path, monkeypatch):
    name, value = sshd.connection_env("gpu_b")
    monkeypatch.setenv(name, value)
    dead = {**json.loads(value), "port": free_port()}  # nothing listens there
    monkeypatch.setenv("AIRFLOW_CONN_GPU_A", json.dumps(dead))
    spec = load_spec(write(tmp_path, GOOD.replace("host: local", "host: gpu_a\nhosts: [gpu_a, gpu_b]")))
    return spec, sshd


def test_a_pool_runs_clean_up_acts_on_the_host_the_run_used(pool):
    spec, sshd = pool
    run_id = "manual__on_b"
    owner = layout.lease_owner(spec.dag_id, run_id)
    lease_file = sshd.workdir / lease.LEASE_FILE
    os.makedirs(sshd.workdir, exist_ok=True)
    lease_file.write_text(f"{owner} 99999999999\n")  # the run took gpu_b's lease
    said: list[str] = []
    problems = cleanup.undo_started(
        build_dag(spec), run_id, {"acquire_host": "success"}, said.append, ["success"], "gpu_b"
    )
    assert problems == [] and not lease_file.exists(), said
    assert any("release_host" in line and "released" in line for line in said), said


def test_a_host_outside_the_pool_is_refused_before_anything_is_touched(pool):
    spec, _ = pool
    with pytest.raises(ValueError, match="host 'gpu_c' of the run is not one of the campaign's hosts"):
        cleanup.undo_started(build_dag(spec), "manual__x", {"acquire_host": "success"}, print, ["success"], "gpu_c")
