"""serving_local end to end: a real tiny MoE server (and a prefill/decode pair behind a router), swept by
the load generator, on the local host and over SSH; and a server that dies before it is healthy."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from benchflow.remote import layout
from benchflow.warehouse import Warehouse
from tests.conftest import PROJECT_ROOT, live_group_members
from tests.e2e.conftest import campaign_dags, run_dag

pytestmark = pytest.mark.e2e

SPEC = (PROJECT_ROOT / "include" / "campaigns" / "serving_local.yaml").read_text()
BROKEN = textwrap.dedent(
    """\
    description: one config whose server dies, then a healthy one
    kind: serving
    host: local
    payload: serving
    requires: [moe]
    services:
      - name: gpu_holder
        stop: "echo stopped >> services.log"
        start: "echo started >> services.log"
    configs:
      - name: broken
        servers:
          - name: engine
            command: "{python} -c 'import sys; print(\\"RuntimeError: CUDA out of memory\\"); sys.exit(1)'"
            port: 30110
      - name: single
        servers:
          - name: engine
            command: "{python} server.py --port {port}"
            port: 30111
    benchmark:
      script: sweep.py
      args: {client: local, concurrency: [1, 2], prompts: [2, 2], input_len: 8, output_len: 4}
    timeouts: {server_ready: 60, benchmark: 300, poke_interval: 1}
    """
)


@pytest.fixture(scope="module")
def bag(tmp_path_factory, airflow_db, sshd):
    specs = {"serving_local": SPEC, "serving_local_ssh": SPEC.replace("host: local", "host: gpu_loopback"),
             "serving_broken": BROKEN}  # fmt: skip
    with campaign_dags(tmp_path_factory.mktemp("serving"), specs) as dags:
        yield dags


run = run_dag


def serving_rows(run_id):
    return Warehouse.from_airflow().query(
        "SELECT config, concurrency, num_prompts, completed, failed, input_len, output_len, output_throughput, "
        "mean_ttft_ms, mean_e2e_ms FROM serving_results WHERE run_id = ? ORDER BY config, concurrency", [run_id]
    )


def servers_gone(workdir: Path, dag_id: str, run_id: str, jobs: list[str]) -> bool:
    rundir = Path(layout.run_dir(str(workdir), dag_id, run_id))
    pgids = [int((rundir / job / "pid").read_text()) for job in jobs]
    return all(live_group_members(pgid) == [] for pgid in pgids)


SERVER_JOBS = ["server_single_engine", "server_pd_prefill", "server_pd_decode", "server_pd_router"]


@pytest.mark.parametrize(("campaign", "workdir"), [("serving_local", "local"), ("serving_local_ssh", "ssh")])
def test_two_config_comparison_loads_one_validated_row_per_config_and_concurrency(bag, sshd, var_dir, campaign,
                                                                                   workdir):  # fmt: skip
    run_id, state, tasks = run(bag, campaign)
    assert state == "success", tasks
    rows = serving_rows(run_id)
    assert list(zip(rows["config"], rows["concurrency"], rows["num_prompts"], strict=True)) == [
        ("pd", 1, 2), ("pd", 2, 4), ("pd", 4, 8), ("single", 1, 2), ("single", 2, 4), ("single", 4, 8)
    ]  # fmt: skip
    assert (rows["completed"] == rows["num_prompts"]).all() and (rows["failed"] == 0).all()
    assert (rows["input_len"] == 16).all() and (rows["output_len"] == 8).all()
    assert (rows["output_throughput"] > 0).all() and (rows["mean_ttft_ms"] <= rows["mean_e2e_ms"]).all()
    status = Warehouse.from_airflow().query("SELECT status FROM runs WHERE run_id = ?", [run_id])["status"].tolist()
    assert status == ["ok"]
    requests = Warehouse.from_airflow().query(
        "SELECT config, concurrency, count(*) AS n, sum(CASE WHEN ok THEN 1 ELSE 0 END) AS ok, "
        "max(CASE WHEN ttft_ms <= e2e_ms THEN 0 ELSE 1 END) AS bad FROM serving_requests WHERE run_id = ? "
        "GROUP BY config, concurrency ORDER BY config, concurrency", [run_id]
    )  # fmt: skip
    assert requests["n"].tolist() == rows["num_prompts"].tolist() == requests["ok"].tolist()
    assert requests["bad"].sum() == 0
    host_workdir = var_dir / "hosts" / "local" if workdir == "local" else sshd.workdir
    assert servers_gone(host_workdir, f"bench_{campaign}", run_id, SERVER_JOBS)


def test_server_that_dies_fails_its_config_with_its_log_and_the_next_config_still_runs(bag, var_dir, capfd):
    run_id, state, tasks = run(bag, "serving_broken")
    log = "".join(capfd.readouterr())
    assert state == "failed"
    assert tasks["config_broken.servers_ready"] == "failed"
    assert "server server_broken_engine is not running (exit 1)" in log and "CUDA out of memory" in log
    assert tasks["config_broken.stop_servers"] == "success"
    assert tasks["config_single.wait_done"] == "success"
    rows = serving_rows(run_id)
    assert list(zip(rows["config"], rows["concurrency"], strict=True)) == [("single", 1), ("single", 2)]
    assert Warehouse.from_airflow().query("SELECT status FROM runs WHERE run_id = ?", [run_id])["status"].tolist() == [
        "incomplete"
    ]
    services = var_dir / "hosts" / "local" / "services.log"
    assert services.read_text().split() == ["stopped", "started"]
    services.unlink()


def test_trigger_conf_changes_the_sweep_and_the_server_arguments(bag, var_dir):
    conf = {"concurrency": [1, 3], "prompts": [1, 3], "output_len": 4, "server_args": "--layers 1 --hidden 32"}
    run_id, state, tasks = run_dag(bag, "serving_local", conf=conf)
    assert state == "success", tasks
    rows = serving_rows(run_id)
    assert list(zip(rows["config"], rows["concurrency"], rows["output_len"], strict=True)) == [
        ("pd", 1, 4), ("pd", 3, 4), ("single", 1, 4), ("single", 3, 4)
    ]  # fmt: skip
    rundir = Path(layout.run_dir(str(var_dir / "hosts" / "local"), "bench_serving_local", run_id))
    launched = {"server_single_engine": "both", "server_pd_prefill": "prefill", "server_pd_decode": "decode"}
    for job, role in launched.items():
        log = (rundir / job / "stdout.log").read_text()
        assert f"serving tiny MoE decoder ({role}, layers 1, hidden 32)" in log, log
