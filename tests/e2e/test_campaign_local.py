"""Whole campaigns through Airflow's ``dag.test()`` against the local host, metadata in PostgreSQL.

One healthy run of the real MoE payload, then the faults: a payload that crashes without its
marker, one that hangs past its timeout, one whose rows fail validation, and a rerun of ``load``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchflow.remote import layout
from benchflow.warehouse import Warehouse
from tests.conftest import live_group_members
from tests.e2e.conftest import campaign_dags, run_dag

pytestmark = pytest.mark.e2e

SERVICES = """\
services:
  - name: gpu_holder
    stop: "echo stopped >> services.log"
    start: "echo started >> services.log"
"""


# Limits no busy machine reaches: these tests are about running, loading and reporting, so a row's validity must
# not depend on how many other tests share this machine's two cores (the rules are tested in test_telemetry*).
ANY_LOAD = "validity: {max_wait_share: 1.0, spread_max: 1000000, repeat_cv_max: 1000000, max_steal_pct: 100}\n"


def spec(payload: str, script: str, args: dict, benchmark_timeout: int = 120) -> str:
    rendered = json.dumps(args)
    return (
        textwrap.dedent(
            f"""\
        description: e2e
        host: local
        payload: {payload}
        benchmark:
          script: {script}
          args: {rendered}
        timeouts:
          benchmark: {benchmark_timeout}
          poke_interval: 1
        """
        )
        + SERVICES
        + ANY_LOAD
    )


CAMPAIGNS = {
    "e2e_moe": spec(
        "moe",
        "bench_moe.py",
        {"m_list": [1, 2, 4, 8], "experts": 4, "hidden": 64, "inter": 32, "topk": 2, "warmup": 1, "iters": 3},
    ),
    "e2e_crash": spec("fault", "bench_fault.py", {"mode": "crash", "rows": 3}),
    "e2e_generic": ("kind: generic\n" + spec("fault", "bench_fault.py", {"mode": "ok", "rows": 4})).replace(
        "  args:",
        "  patterns:\n    ms_per_call: {regex: '^\\d+ (?P<value>[0-9.]+) ', unit: ms}\n  args:",
    ),
    "e2e_hang": spec("fault", "bench_fault.py", {"mode": "hang", "rows": 2}, benchmark_timeout=4),
    "e2e_invalid": spec("fault", "bench_fault.py", {"mode": "inconsistent", "rows": 3}),
    "e2e_silent": spec("fault", "bench_fault.py", {"mode": "silent", "rows": 2}),
    "e2e_poke": spec("fault", "bench_fault.py", {"mode": "ok", "rows": 2}).replace(
        "  args:", "  deferrable: false\n  args:"
    ),
    "e2e_rollback": spec("fault", "bench_fault.py", {"mode": "ok", "rows": 1}).replace(
        SERVICES,
        SERVICES + '  - name: stubborn\n    stop: "echo refused >> services.log; exit 1"\n    start: "true"\n',
    ),
}


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory, airflow_db):
    with campaign_dags(tmp_path_factory.mktemp("campaigns"), CAMPAIGNS) as bag:
        yield bag


run = run_dag


def host_workdir(var_dir: Path) -> Path:
    return var_dir / "hosts" / "local"


def run_dir(var_dir: Path, name: str, run_id: str) -> Path:
    return Path(layout.run_dir(str(host_workdir(var_dir)), f"bench_{name}", run_id))


def services_log(var_dir: Path) -> list[str]:
    path = host_workdir(var_dir) / "services.log"
    lines = path.read_text().split() if path.exists() else []
    path.unlink(missing_ok=True)
    return lines


def kernel_rows(run_id):
    sql = "SELECT m, ms_per_call, tok_per_s, us_per_token FROM kernel_results WHERE run_id = ? ORDER BY m"
    return Warehouse.from_airflow().query(sql, [run_id])


def run_row(run_id):
    return Warehouse.from_airflow().query("SELECT * FROM runs WHERE run_id = ?", [run_id]).to_dict("records")[0]


def test_healthy_campaign_loads_validated_rows_matching_the_jsonl(campaigns, var_dir):
    run_id, state, tasks = run(campaigns, "e2e_moe")
    assert state == "success", tasks
    assert set(tasks.values()) == {"success"}
    assert services_log(var_dir) == ["stopped", "started"]

    # The benchmark was left to exit by itself after its marker: its exit code is there, 0.
    assert (run_dir(var_dir, "e2e_moe", run_id) / "bench" / "exit_code").read_text() == "0"
    jsonl = run_dir(var_dir, "e2e_moe", run_id) / "results.jsonl"
    expected = [json.loads(line) for line in jsonl.read_text().splitlines()]
    loaded = kernel_rows(run_id).to_dict("records")
    assert [r["m"] for r in loaded] == [e["M"] for e in expected] == [1, 2, 4, 8]
    for got, want in zip(loaded, expected, strict=True):
        for column in ("ms_per_call", "tok_per_s", "us_per_token"):
            assert got[column] == pytest.approx(want[column], rel=1e-3)

    record = run_row(run_id)
    assert record["status"] == "ok" and record["rows_loaded"] == 4 and record["campaign"] == "e2e_moe"
    assert len(record["payload_sha256"]) == 64 and len(record["spec_hash"]) == 64
    assert json.loads(record["host_facts"])["gpu"] == "none"
    assert (record["gpu_model"], record["gpu_count"], record["cuda"]) == ("none", 0, "none")
    assert record["run_type"] == "manual" and len(record["git_sha"]) == 40 and record["regressions"] == 0
    assert (record["verdict"], record["verdict_detail"]) == ("not judged", "manual run")  # never "0 regressions"
    assert json.loads(record["versions"])["torch"].startswith("2.")
    sql = "SELECT suite, success, failed, rows_checked FROM validations WHERE run_id = ?"
    validation = Warehouse.from_airflow().query(sql, [run_id]).to_dict("records")
    assert validation == [{"suite": "kernel", "success": True, "failed": 0, "rows_checked": 4}]

    # The load announced the run on the bench_results asset, for the report DAG; the report draws it.
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    from benchflow import artifacts
    from benchflow.analysis import plots

    with create_session() as session:
        extras = [e.extra for e in session.query(AssetEvent).filter(AssetEvent.source_run_id == run_id)]
    assert extras == [{"dag_id": "bench_e2e_moe", "run_id": run_id, "campaign": "e2e_moe"}]
    out = artifacts.store("bench_e2e_moe", run_id) / artifacts.REPORT_DIR
    drawn = plots.render(Warehouse.from_airflow(read_only=True), "bench_e2e_moe", run_id, out)
    assert {p.name for p in drawn} == {"us_per_token_vs_m.png", "gbps_vs_roofline.png", "nightly_trend.png"}

    # Rerun the load task of the same run, as `airflow tasks test` does after a clear: no new rows.
    env = {**os.environ}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "tasks", "test", "bench_e2e_moe", "load", run_id],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "loaded 4 rows" in result.stdout + result.stderr
    assert len(kernel_rows(run_id)) == 4
    runs = Warehouse.from_airflow().query("SELECT count(*) AS n FROM runs WHERE run_id = ?", [run_id])
    assert int(runs["n"][0]) == 1


def test_crash_fails_the_wait_at_once_keeps_rows_and_restores(campaigns, var_dir, capfd):
    run_id, state, tasks = run(campaigns, "e2e_crash")
    output = capfd.readouterr()
    log = output.out + output.err
    assert state == "failed"
    assert tasks["wait_done"] == "failed"
    assert "benchmark exited with code 3 without writing 'ALL_DONE'" in log
    assert "CUDA error: an illegal memory access" in log  # the log tail is in the error
    # the wait ends on the check that finds the benchmark gone: no check after it (how many came before depends on
    # how long a busy machine takes to start the benchmark, so that is not counted)
    checks = [int(n) for n in re.findall(r"progress \[check (\d+),", log)]
    failed = [int(n) for n in re.findall(r"without writing 'ALL_DONE' \(check (\d+)\)", log)]
    assert checks and failed and max(checks) <= min(failed), (checks, failed)
    assert tasks["stop_benchmark"] == "success" and tasks["restore_services"] == "success"
    assert services_log(var_dir) == ["stopped", "started"]
    assert tasks["load"] == "success" and tasks["verdict"] == "failed", sorted(tasks.items())
    assert kernel_rows(run_id)["m"].tolist() == [1, 2, 4]
    record = run_row(run_id)
    assert record["status"] == "incomplete" and "without 'ALL_DONE' after 3 rows" in record["detail"]
    assert not (host_workdir(var_dir) / ".bench-host-lease").exists()  # the failed run gave its host back


def test_hang_is_killed_at_timeout_with_its_whole_process_group(campaigns, var_dir, capfd):
    run_id, state, tasks = run(campaigns, "e2e_hang")
    log = "".join(capfd.readouterr())
    assert state == "failed" and tasks["wait_done"] == "failed"
    assert "ran past its timeout of 4 s; its process group was killed" in log
    pgid = int((run_dir(var_dir, "e2e_hang", run_id) / "bench" / "pid").read_text())
    assert live_group_members(pgid) == []
    assert services_log(var_dir) == ["stopped", "started"]
    assert run_row(run_id)["status"] == "incomplete"
    assert kernel_rows(run_id)["m"].tolist() == [1, 2]


def test_invalid_rows_are_quarantined_and_fail_the_run(campaigns, var_dir, capfd):
    run_id, state, tasks = run(campaigns, "e2e_invalid")
    log = "".join(capfd.readouterr())
    assert state == "failed" and tasks["validate"] == "success" and tasks["load"] == "failed"
    assert tasks["detect_regressions"] == "upstream_failed" and tasks["verdict"] == "failed"
    assert "expectations failed" in log and "tok_per_s_rel_err" in log
    assert len(kernel_rows(run_id)) == 0
    sql = "SELECT row_number, reason FROM quarantine WHERE run_id = ? ORDER BY row_number"
    quarantined = Warehouse.from_airflow().query(sql, [run_id])
    assert quarantined["row_number"].tolist() == [0, 1, 2]
    assert "tok_per_s_rel_err" in quarantined["reason"][1]
    assert run_row(run_id)["status"] == "invalid"
    failed = Warehouse.from_airflow().query("SELECT success, failures FROM validations WHERE run_id = ?", [run_id])
    assert not failed["success"][0] and "tok_per_s_rel_err" in failed["failures"][0]
    assert services_log(var_dir) == ["stopped", "started"]


def test_generic_parser_campaign_loads_its_named_metrics(campaigns, var_dir):
    run_id, state, tasks = run(campaigns, "e2e_generic")
    assert state == "success", tasks
    sql = "SELECT seq, metric, value, unit FROM generic_results WHERE run_id = ? ORDER BY seq"
    rows = Warehouse.from_airflow().query(sql, [run_id])
    assert rows.to_dict("records") == [
        {"seq": i, "metric": "ms_per_call", "value": 0.5 * (i + 1), "unit": "ms"} for i in range(4)
    ]
    assert services_log(var_dir) == ["stopped", "started"]


def test_manual_conf_overrides_the_sweep_and_bad_conf_is_refused(campaigns, var_dir):
    dag = campaigns.get_dag("bench_e2e_moe")
    dag_run = dag.test(run_conf={"m_list": [2, 8], "iters": 2})
    assert str(dag_run.state) == "success"
    assert kernel_rows(dag_run.run_id)["m"].tolist() == [2, 8]
    assert json.loads(run_row(dag_run.run_id)["conf"]) == {"m_list": [2, 8], "iters": 2}
    services_log(var_dir)

    # Airflow validates the conf against the DAG's Params when the run is created (as the UI form and the
    # REST API do): a bad one never becomes a run, so no task touches the host.
    from airflow.sdk.exceptions import ParamValidationError

    runs_before = set((host_workdir(var_dir) / "bench_e2e_moe").iterdir())
    for bad in ({"m_list": [0]}, {"m_list": "1; rm -rf ~"}, {"topk": "two"}, {"iters": -1}):
        with pytest.raises(ParamValidationError):
            dag.test(run_conf=bad)
    assert set((host_workdir(var_dir) / "bench_e2e_moe").iterdir()) == runs_before  # no run directory
    assert services_log(var_dir) == []


def test_preflight_refuses_a_bad_param_before_any_host_command(var_dir):
    from airflow.sdk.exceptions import AirflowFailException

    from benchflow.operators import PreflightOperator

    preflight = PreflightOperator(task_id="preflight", host_id="no_such_host", benchmark_args={"m_list": [1]})
    with pytest.raises(AirflowFailException, match=r"trigger conf refused, nothing ran on the host: param 'm_list'"):
        preflight.execute({"params": {"m_list": ["$(id)"]}})  # an unknown host would fail on first use


def test_exit_zero_without_the_marker_is_a_failure_that_keeps_its_rows(campaigns, var_dir, capfd):
    run_id, state, tasks = run(campaigns, "e2e_silent")
    log = "".join(capfd.readouterr())
    assert state == "failed" and tasks["wait_done"] == "failed"
    assert "benchmark exited with code 0 without writing 'ALL_DONE'" in log
    assert kernel_rows(run_id)["m"].tolist() == [1, 2] and run_row(run_id)["status"] == "incomplete"
    assert services_log(var_dir) == ["stopped", "started"]
    assert not (host_workdir(var_dir) / ".bench-host-lease").exists()


def test_poke_mode_waits_in_a_worker_slot_and_succeeds(campaigns, var_dir, capfd):
    run_id, state, tasks = run(campaigns, "e2e_poke")
    log = "".join(capfd.readouterr())
    assert state == "success", tasks
    assert "progress [check" in log and "Pausing task as DEFERRED" not in log
    assert kernel_rows(run_id)["m"].tolist() == [1, 2]
    services_log(var_dir)


def test_a_stop_that_fails_part_way_restarts_what_it_stopped(campaigns, var_dir):
    run_id, state, tasks = run(campaigns, "e2e_rollback")
    assert state == "failed" and tasks["stop_services"] == "failed"
    assert tasks["deploy_payload"] == "upstream_failed" and tasks["launch_benchmark"] == "upstream_failed"
    assert services_log(var_dir) == ["stopped", "refused", "started"]  # gpu_holder came back at once
    assert not (host_workdir(var_dir) / ".bench-host-lease").exists()
    # The warehouse counts the run although nothing was loaded: failed, no rows, and where to look.
    row = run_row(run_id)
    assert (row["status"], row["rows_loaded"], row["campaign"]) == ("failed", 0, "e2e_rollback")
    assert row["detail"].startswith("failed before its results were loaded")


def test_a_misspelt_conf_key_stops_the_run_before_any_service_is_touched(campaigns, var_dir):
    dag_run = campaigns.get_dag("bench_e2e_moe").test(run_conf={"m_lsit": [4]})
    assert str(dag_run.state) == "failed"
    assert services_log(var_dir) == []
