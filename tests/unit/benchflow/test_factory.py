"""The DAG factory's waits: a sensor that waits in reschedule mode checks no more often than RESCHEDULE_MIN_S,
whatever interval its spec gives (Airflow's scheduler fails a task rescheduled sooner than its executor reports),
on any kind of host (an Edge host's, reported later still, three times that)."""

from __future__ import annotations

import pytest

from benchflow.factory import build_dag
from benchflow.hosts.base import RESCHEDULE_MIN_S
from benchflow.spec import load_spec
from tests.unit.benchflow.test_spec import GOOD, write

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("host", ["local", "edge:gpu_edge", "gpu_a\nhosts: [gpu_a, gpu_b]"])
def test_no_reschedule_wait_checks_sooner_than_the_scheduler_can_follow(tmp_path, host):
    text = GOOD.replace("host: local", f"host: {host}") + "  host_poke_interval: 2\n  poke_interval: 1\n"
    dag = build_dag(load_spec(write(tmp_path, text)), register=False)
    waits = {t.task_id: t.poke_interval for t in dag.tasks if getattr(t, "mode", None) == "reschedule"}
    assert "acquire_host" in waits and all(s >= RESCHEDULE_MIN_S for s in waits.values()), waits
    if not host.startswith("edge:"):  # a poke-mode wait holds its slot between checks: it keeps what it was given
        assert dag.task_dict["servers_ready" if "servers_ready" in dag.task_dict else "gpus_free"].mode == "poke"
