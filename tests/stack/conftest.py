"""One Airflow stack for the whole stack tier (:class:`benchtools.stack.AirflowStack`: CeleryExecutor, Redis,
PostgreSQL, the api-server, scheduler, dag-processor, triggerer and a Celery worker as processes), started once
per test process that runs a stack test, with SSH hosts on loopback, ``gpu_a``, ``gpu_b`` and ``gpu_c``, each a real
sshd whose host key the connection pins.

Its campaigns: four of the fault payload for the stack's own tests (two share ``gpu_a``; one runs on ``gpu_b``,
its spec read from a generated git repository of specs through a git DAG bundle; one is triggered from the UI's
form), one of a generated git payload repository for the bisect DAG (``toy_bisect``: commit 6 of 8 is 20 %
slower), and two on the Edge host ``edge:gpu_edge`` (the shipped ``moe_kernel_local``
retargeted, one of the fault payload, and a pool of two Edge hosts), whose Edge worker ``test_edge.py`` starts.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchtools.loopback_sshd import LoopbackSSHD
from benchtools.metadata_db import migrated_template
from benchtools.net import free_port
from benchtools.stack import AirflowStack, campaign_folder
from tests.conftest import FIXTURES, PROJECT_ROOT, VAR
from tests.payload_repo import PayloadRepo, make_payload_repo, make_spec_repo

REPEATS = 5
COMMITS, SLOW_FROM = 8, 6  # the bisected repository: commit 6 makes the kernel 20 % slower
CASE, METRIC = "m=64", "us_per_token"
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
# stack_a2's deadline (12 s of benchmark alone) and the notifier it calls, a module on the components' path
DEADLINE = "deadline: 10s\nregressions: {notify: 'bench_stack_hooks:record'}\n"
HOOKS = """\
import json
from pathlib import Path


def record(dag_id, run_id, events):
    with open(Path(__file__).with_name("notified.jsonl"), "a") as out:
        out.write(json.dumps({"dag_id": dag_id, "run_id": run_id, "events": events}) + "\\n")
"""
# A nightly (every minute, left paused until its test unpauses it) whose regressions a person decides on, on a host
# of its own: the nights after the first one its test deletes, wherever they got to
DECIDE = (
    SPEC.format(what="a nightly a person decides on", host="gpu_c", delay=0.2).replace(
        "schedule: null", 'schedule: "* * * * *"'
    )
    + "telemetry: {enabled: false}\nregressions: {min_runs: 2, decide: {within_hours: 1}}\n"
)
BISECTED = ("toy_bisect",)
EDGE_QUEUE = "gpu_edge"  # the Edge worker's queue: host edge:gpu_edge (a GPU host that takes no inbound SSH)
EDGE_HOST = f"edge:{EDGE_QUEUE}"
SPEC_REPO = "specs.git"  # stack_b's spec, in a git repository Airflow reads as a DAG bundle
# A config space of two configs of the tiny server (capacity 2 and 6 sequences per 100 ms step) on both hosts: the
# config search DAG's one round runs one probe on each host, side by side. Capacities 3 apart: with 4 output tokens a
# request's TPOT averages 3 rounds, and on a busy machine the client's late replacements leave rounds short of
# sequences (b2 has held concurrency 4 when b4 was its rival).
SPACE = """\
description: a config space of two tiny servers on two hosts
kind: serving
host: gpu_a
hosts: [gpu_a, gpu_b]
payload: serving
requires: [moe]
schedule: null
space:
  dimensions: {max_batch: [2, 6]}
  derived: {server_port: "PORT + max_batch"}  # both hosts are this machine: a port per config
  name: "b{max_batch}"
  servers:
    - name: engine
      command: "{python} server.py --layers 1 --hidden 32 --max-batch {max_batch} --step-ms 100 --port {port}"
      port: "{server_port}"
      gpus: "0"
benchmark:
  script: sweep.py
  search:
    over: concurrency
    range: [1, 8]
    slo: {p90_tpot_ms: 190, max_failed_fraction: 0.1}  # 100 ms steps: 100 within capacity, 200 above
    precision: 0.4
    prompts_per_probe: 30
    repeats: 1
  args: {client: local, input_len: 16, output_len: 4}
timeouts: {server_ready: 120, benchmark: 300, poke_interval: 1, host_poke_interval: 2}
"""


def toy_spec(repo: Path, hosts: list[str]) -> str:
    """A campaign of the toy kernel in a generated git repository, on ``hosts`` (the first is its own)."""
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


@pytest.fixture(scope="session")
def repos() -> dict[str, PayloadRepo]:
    root = VAR / "bisect-repos"
    return {
        "toy_bisect": make_payload_repo(root / "slow.git", commits=COMMITS, slow_from=SLOW_FROM),
    }


@pytest.fixture(scope="session")
def ssh_hosts() -> Iterator[dict[str, LoopbackSSHD]]:
    """The stack's SSH hosts on loopback, by name: a test reads what a run left in a host's workdir (its lease)."""
    hosts = {name: LoopbackSSHD(VAR / "stack" / f"sshd-{name}").start() for name in ("gpu_a", "gpu_b", "gpu_c")}
    try:
        yield hosts
    finally:
        for host in hosts.values():
            host.stop()


@pytest.fixture(scope="session")
def stack(repos: dict[str, PayloadRepo], ssh_hosts: dict[str, LoopbackSSHD]) -> Iterator[AirflowStack]:
    root = VAR / "stack"
    hosts = ssh_hosts
    specs = {name: SPEC.format(what=what, host=host, delay=delay) for name, (what, host, delay) in CAMPAIGNS.items()}
    specs["stack_a2"] += DEADLINE  # its run waits behind stack_a1's: past its deadline, whichever goes first
    specs["stack_decide"] = DECIDE
    hooks = root / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    (hooks / "bench_stack_hooks.py").write_text(HOOKS)
    specs |= {name: toy_spec(repos[name].path, ["gpu_a", "gpu_b"]) for name in BISECTED}
    specs["space_stack"] = SPACE.replace("PORT", str(free_port()))
    # the shipped demo campaign retargeted at the Edge host, and one there whose benchmark a test kills
    moe = (PROJECT_ROOT / "include" / "campaigns" / "moe_kernel_local.yaml").read_text()
    specs["edge_moe"] = moe.replace("host: local", f"host: {EDGE_HOST}")
    specs["edge_fault"] = SPEC.format(what="a campaign killed mid-run", host=EDGE_HOST, delay=1.0)
    # a pool of two Edge hosts whose default has no worker: a run that picks edge:gpu_edge must run there
    pool = SPEC.format(what="a pool of Edge hosts", host="edge:gpu_far", delay=1.0)
    specs["edge_pool"] = pool.replace(
        "host: edge:gpu_far\n", f"host: edge:gpu_far\nhosts: [edge:gpu_far, {EDGE_HOST}]\n"
    )
    make_spec_repo(root / SPEC_REPO, {"stack_b": specs.pop("stack_b")})  # read through a git DAG bundle
    payloads = {"fault": FIXTURES / "payloads" / "fault"} | {
        n: PROJECT_ROOT / "kernels" / n for n in ("serving", "moe")
    }
    campaigns, kernels = campaign_folder(root, specs, payloads)
    connections = {name: h.connection() for name, h in hosts.items()}
    airflow = AirflowStack(
        root,
        campaigns,
        kernels,
        connections,
        extra_env={"PYTHONPATH": str(hooks)},
        spec_repo=root / SPEC_REPO,
        edge=True,
    )
    try:
        airflow.start(template=migrated_template())
        dags = [
            "bench_bisect",
            "bench_config_search",
            "bench_space_stack",
            "bench_edge_moe",
            "bench_edge_fault",
            "bench_edge_pool",
        ]
        airflow.wait_for_dags([*dags, *(f"bench_{name}" for name in [*CAMPAIGNS, *BISECTED])])
        yield airflow
    finally:
        airflow.stop()
