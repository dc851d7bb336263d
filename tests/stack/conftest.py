"""One Airflow stack for the tests in this folder (see tests/airflow_stack.py), with two SSH hosts on
loopback, ``gpu_a`` and ``gpu_b``, each a real sshd whose host key the connection pins."""

from __future__ import annotations

import pytest

from benchtools.loopback_sshd import LoopbackSSHD
from benchtools.stack import AirflowStack, campaign_folder
from tests.conftest import FIXTURES, VAR

SPEC = """\
description: {what} on host {host}
kind: kernel
host: {host}
payload: fault
schedule: null
tags: [stack]
benchmark:
  script: bench_fault.py
  args: {{mode: ok, rows: 4, delay: {delay}}}
timeouts:
  benchmark: 300
  poke_interval: 2
  host_poke_interval: 3
"""
CAMPAIGNS = {
    "stack_a1": ("first campaign", "gpu_a", 3.0),
    "stack_a2": ("second campaign", "gpu_a", 3.0),
    "stack_b": ("third campaign", "gpu_b", 3.0),
    "stack_ui": ("campaign triggered from the UI", "gpu_b", 0.5),
}


@pytest.fixture(scope="session")
def stack():
    root = VAR / "stack"
    hosts = {name: LoopbackSSHD(root / f"sshd-{name}").start() for name in ("gpu_a", "gpu_b")}
    specs = {name: SPEC.format(what=what, host=host, delay=delay) for name, (what, host, delay) in CAMPAIGNS.items()}
    campaigns, kernels = campaign_folder(root, specs, {"fault": FIXTURES / "payloads" / "fault"})
    airflow = AirflowStack(root, campaigns, kernels, {name: h.connection() for name, h in hosts.items()})
    try:
        airflow.start()
        airflow.wait_for_dags([f"bench_{name}" for name in CAMPAIGNS])
        yield airflow
    finally:
        airflow.stop()
        for host in hosts.values():
            host.stop()
