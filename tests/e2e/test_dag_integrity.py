"""Parsing the DAG folder: every spec yields a DAG, no import errors, no I/O, no heavy imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from benchflow.searches.listener import SEARCH_DAGS
from benchflow.spec import load_all
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.e2e

PROBE = textwrap.dedent(
    """
    import json, socket, sys

    def refuse(*args, **kwargs):
        raise AssertionError("DAG parsing must not touch the network, a database or a connection")

    socket.socket.connect = refuse
    socket.create_connection = refuse
    from airflow.sdk import BaseHook, Variable
    BaseHook.get_connection = classmethod(refuse)
    Variable.get = staticmethod(refuse)
    from airflow.models.connection import Connection
    Connection.get_connection_from_secrets = classmethod(refuse)

    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=sys.argv[1])
    heavy = sorted(m for m in ("pandas", "torch", "triton", "great_expectations", "duckdb") if m in sys.modules)
    print(json.dumps({
        "dags": {d: sorted(bag.dags[d].task_ids) for d in bag.dags},
        "errors": {k: str(v) for k, v in bag.import_errors.items()},
        "heavy": heavy,
    }))
    """
)


@pytest.fixture(scope="module")
def parsed():
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(PROJECT_ROOT / "dags")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_worker_parsing_for_one_campaigns_task_builds_that_campaign_alone(tmp_path):
    """Airflow's parsing context names the DAG a task runner parses the file for: the campaigns file builds its
    spec alone (not every campaign's), a broken spec beside it costs nothing, and the errors file reports none."""
    folder = tmp_path / "campaigns"
    folder.mkdir()
    for name in ("moe_kernel_local", "serving_local"):
        (folder / f"{name}.yaml").write_text((PROJECT_ROOT / "include" / "campaigns" / f"{name}.yaml").read_text())
    (folder / "broken.yaml").write_text("kind: [\n")
    env = {**os.environ, "BENCH_CAMPAIGNS_DIR": str(folder), "_AIRFLOW_PARSING_CONTEXT_DAG_ID": "bench_serving_local"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(PROJECT_ROOT / "dags")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(found["dags"]) == {
        "bench_serving_local",
        "bench_report",
        "bench_bisect",
        "bench_config_search",
        "bench_tile_search",
    }
    assert found["errors"] == {}  # the broken spec is not this task's: not read


def test_no_import_errors(parsed):
    assert parsed["errors"] == {}


def test_every_spec_yields_a_dag_and_the_report_dag_exists(parsed):
    specs, errors = load_all()
    assert errors == []
    assert {s.dag_id for s in specs} | {"bench_report", *SEARCH_DAGS} == set(parsed["dags"])
    assert parsed["dags"]["bench_report"] == ["render_plots"]


def test_every_search_dag_has_the_engines_steps_as_tasks(parsed):
    """One DAG builder for every strategy: start, the rounds (plan, mapped probes, record) its DAG has, finish."""
    from benchflow.searches.engine import STRATEGIES

    for kind in STRATEGIES.values():
        rounds = [f"round_{n}" for n in range(1, kind.max_rounds + 1)]
        steps = {"start", "finish"} | {f"{r}{s}" for r in rounds for s in ("", "_plan", "_probe")}
        assert set(parsed["dags"][kind.dag_id]) == steps, kind.dag_id


COMMON = {
    "preflight",
    "acquire_host",
    "release_host",
    "stop_services",
    "gpus_free",
    "deploy_payload",
    "start_telemetry",
    "stop_telemetry",
    "restore_services",
    "fetch_artifacts",
    "parse",
    "validate",
    "load",
    "detect_regressions",
    "verdict",
}
BENCHMARK = {"launch_benchmark", "wait_done", "stop_benchmark"}
SERVERS = {"launch_servers", "servers_ready", "stop_servers"}


def test_task_graph_has_every_stage(parsed):
    for spec in load_all()[0]:  # the report DAG is checked above
        tasks = set(parsed["dags"][spec.dag_id])
        if not spec.configs:
            assert tasks == COMMON | BENCHMARK
        else:
            groups = {f"config_{c.name}.{t}" for c in spec.configs for t in BENCHMARK | SERVERS}
            assert tasks == COMMON | groups


def test_serving_specs_place_servers_on_their_gpus_and_numa_nodes():
    from benchflow.factory import build_dag
    from benchflow.remote import jobs

    spec = next(s for s in load_all()[0] if s.name == "serving_pd")
    dag = build_dag(spec)
    launch_servers = dag.task_dict["config_pd.launch_servers"]
    members = {s.name: (s, router) for s, router in launch_servers.members()}
    prefill, decode = members["prefill"][0], members["decode"][0]
    assert (prefill.env(), prefill.numa_node) == ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 0)
    assert (decode.env(), decode.numa_node) == ({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 1)
    assert members["router"][0].port == 8000 and members["router"][1] is True
    command = jobs.server_command(prefill.command, "/opt/py", prefill.port, "--x 1", prefill.numa_node)
    assert command.startswith("numactl --cpunodebind=0 --membind=0 /opt/py -m sglang") and command.endswith(" --x 1")
    launch = dag.task_dict["config_pd.launch_benchmark"]
    assert launch.stage_args["base_url"] == "http://127.0.0.1:8000" and launch.stage_args["label"] == "pd"
    assert launch.run_args.operator.task_id == "preflight" and launch.run_args.key == "args"  # resolved once there
    assert spec.benchmark.args["concurrency"] == [1, 8, 16] and spec.benchmark.args["prompts"] == [6, 24, 32]
    assert dag.task_dict["config_pd.stop_servers"].is_teardown


def test_parsing_imports_no_heavy_library(parsed):
    assert parsed["heavy"] == []


def test_dag_settings():
    from benchflow.factory import build_dag

    spec = next(s for s in load_all()[0] if s.name == "moe_kernel_nightly")
    dag = build_dag(spec)
    assert dag.catchup is False and dag.max_active_runs == 1
    assert "bench" in dag.tags and dag.doc_md and "moe_kernel_nightly.yaml" in dag.doc_md
    assert dag.task_dict["restore_services"].is_teardown and dag.task_dict["stop_benchmark"].is_teardown
    assert dag.task_dict["stop_services"].is_setup and dag.task_dict["launch_benchmark"].is_setup
    assert dag.task_dict["fetch_artifacts"].trigger_rule == "all_done"
    assert dag.task_dict["acquire_host"].is_setup and dag.task_dict["release_host"].is_teardown
    # the lease is given back whenever the run asked for it, a failed acquire_host too (its poke may have taken it)
    assert dag.task_dict["release_host"].trigger_rule == "all_done"
    assert dag.task_dict["acquire_host"].mode == "reschedule"  # a queued campaign holds no worker slot
    t = spec.timeouts
    lease = t.preflight + 2 * t.services + t.deploy + 2 * t.launch + t.benchmark + t.fetch + 600 + spec.gpus_free.wait
    assert dag.task_dict["acquire_host"].lease_ttl_s == lease
    assert dag.dagrun_timeout.total_seconds() == t.host_wait + lease


def test_every_task_on_the_host_runs_in_the_hosts_pool():
    from benchflow.factory import build_dag
    from benchflow.operators import HostOperator

    for spec in load_all()[0]:
        dag = build_dag(spec)
        on_host = {t.task_id for t in dag.tasks if isinstance(t, HostOperator)}
        assert {"acquire_host", "stop_services", "restore_services", "release_host"} <= on_host
        for task in dag.tasks:
            assert task.pool == (f"bench_host_{spec.host}" if task.task_id in on_host else "default_pool"), task


def test_serving_lease_covers_every_config():
    from benchflow.factory import build_dag

    one = next(s for s in load_all()[0] if s.name == "serving_pd")
    spec = one.model_copy(update={"configs": [*one.configs, one.configs[0].model_copy(update={"name": "again"})]})
    assert build_dag(spec).task_dict["acquire_host"].lease_ttl_s > build_dag(one).task_dict["acquire_host"].lease_ttl_s
