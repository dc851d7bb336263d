"""GPU telemetry end to end: a serving_local prefill/decode run over loopback SSH on a host whose GPUs are the
stand-ins (tests/fixtures/gpu_standin: ``nvidia-smi`` on the host's PATH and ``pynvml`` on its PYTHONPATH, one
scenario behind both), and a kernel sweep beside a CPU hog. What is checked: per-phase, per-GPU figures with the
prefill and decode GPUs apart, the throttling decode GPU flagging the PD phases (and not the single server's,
whose GPU it is not), joules per token within 1 % of the stand-in's truth, and rows that are not ok stored but
never summarised (so never a baseline)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from benchflow.warehouse import Warehouse
from benchtools.loopback_sshd import LoopbackSSHD
from tests.e2e.conftest import campaign_dags, on_free_ports, run_dag
from tests.gpu_standin import BIN, PYTHON, scenario_module, write_scenario

pytestmark = pytest.mark.e2e

SERVER = "{python} server.py --layers 1 --hidden 32 --port {port} --enable-metrics"
ROUTER = (
    "{python} -m sglang_router.launch_router --pd-disaggregation --prefill http://127.0.0.1:30131 30134 "
    "--decode http://127.0.0.1:30132 --host 127.0.0.1 --port {port} --prometheus-port 30135"
)
PREFILL = f"{SERVER} --role prefill --disaggregation-bootstrap-port 30134"
SERVING = textwrap.dedent(
    f"""\
    description: serving_local's two configs on stand-in GPUs over loopback SSH, each with a known bottleneck
    kind: serving
    host: gpu_standin
    payload: serving
    requires: [moe]
    schedule: null
    configs:
      - name: single  # a KV cache of 40 tokens holds one 16 + 16-token request: the rest queue or are retracted
        servers:
          - {{name: engine, command: "{SERVER} --decode-step-ms 10 --max-kv-tokens 40", port: 30130, gpus: "0"}}
      - name: pd  # a slow decode step (40 ms a token): decode-bound
        servers:
          - {{name: prefill, command: "{PREFILL}", port: 30131, gpus: "0,1"}}
          - {{name: decode, command: "{SERVER} --role decode --decode-step-ms 40", port: 30132, gpus: "2,3"}}
        router: {{name: router, command: "{ROUTER}", port: 30133}}
      - name: bare  # exports no metrics (no --enable-metrics: its /metrics answers 404): not enough evidence
        servers:
          - {{name: engine, command: "{SERVER.replace(" --enable-metrics", "")}", port: 30141, gpus: "0"}}
    # the 2-core machine's CPUs are shared by servers, router, client and other tests: host-CPU-bound would be
    # true of most phases here, and is not what this run checks
    bottleneck: {{host_busy_pct: 101}}
    benchmark:
      script: sweep.py
      repeats: 1
      args: {{client: sglang, concurrency: [4], prompts: [16], input_len: 16, output_len: 16}}
    telemetry: {{period_ms: 100}}
    gpus_free: {{max_used_mib: 100000}}  # the stand-in's busy GPUs report 68,000 MiB in use
    timeouts: {{server_ready: 120, benchmark: 600, poke_interval: 1}}
    """
)
KERNEL = textwrap.dedent(
    """\
    description: the fused-MoE sweep on this machine, beside a CPU hog
    kind: kernel
    host: local
    payload: moe
    schedule: null
    benchmark:
      script: bench_moe.py
      args: {m_list: [16, 64], experts: 8, hidden: 128, inter: 64, topk: 2, dtype: fp32, warmup: 3, iters: 60}
    timeouts: {benchmark: 600, poke_interval: 1}
    """
)
DECODE_GPU = 2  # throttles (hardware slowdown, 0x8) for the whole run: only the PD config's servers hold it


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpus") / "scenario.json"
    throttle = [{"from_s": 0, "to_s": 10**6, "reasons": 8, "sm_mhz": 1100, "power_w": 300}]
    gpus = [{}, {"busy": False}, {"throttle": throttle}, {}]
    return path, write_scenario(path, count=4, gpus=gpus)


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory, scenario, airflow_db):
    """A loopback sshd whose sessions see the stand-in GPUs, as the Airflow connection ``gpu_standin``."""
    env = {
        "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": str(PYTHON),
        "BENCH_GPU_STANDIN": str(scenario[0]),
    }
    server = LoopbackSSHD(tmp_path_factory.mktemp("gpu-sshd"), env=env).start()
    name, value = server.connection_env("gpu_standin")
    os.environ[name] = value
    yield server
    os.environ.pop(name, None)
    server.stop()


@pytest.fixture(scope="module")
def bag(tmp_path_factory, gpu_host):
    specs = {"telemetry_pd": on_free_ports(SERVING)[0], "kernel_hog": KERNEL}
    with campaign_dags(tmp_path_factory.mktemp("telemetry"), specs) as dags:
        yield dags


def test_a_pd_run_gets_telemetry_per_phase_and_gpu_with_joules_per_token_to_the_truth(bag, scenario):
    run_id, state, tasks = run_dag(bag, "telemetry_pd")
    assert state == "success", tasks
    assert tasks["start_telemetry"] == tasks["stop_telemetry"] == "success"
    warehouse = Warehouse.from_airflow()
    gpus = warehouse.query(
        "SELECT config, concurrency, gpu_index, server, samples, mean_util_gpu_pct, throttled, throttle_reasons "
        "FROM telemetry_phase_gpus WHERE run_id = ? ORDER BY config, concurrency, gpu_index",
        [run_id],
    )
    pd = gpus[gpus["config"] == "pd"]
    assert list(zip(pd["gpu_index"], pd["server"], strict=True)) == [
        (0, "prefill"),
        (1, "prefill"),
        (2, "decode"),
        (3, "decode"),
    ]
    assert (pd["samples"] > 0).all() and (pd[pd["gpu_index"] == 1]["mean_util_gpu_pct"] == 0).all()  # idle GPU 1
    assert list(pd[pd["throttled"]]["gpu_index"]) == [DECODE_GPU]
    rows = warehouse.query(
        "SELECT config, concurrency, validity, validity_reason, steady_start, steady_end, steady_tokens, "
        "j_per_token, energy_method, energy_gpus FROM serving_results WHERE run_id = ? ORDER BY config, concurrency",
        [run_id],
    ).to_dict("records")
    by_config = {(r["config"], r["concurrency"]): r for r in rows}
    assert {by_config[("pd", c)]["validity"] for c in (4,)} == {"throttled"}
    assert all(
        by_config[("pd", c)]["validity_reason"].startswith("throttled: GPU 2 (decode): hw_slowdown") for c in (4,)
    )
    assert {by_config[("single", c)]["validity"] for c in (4,)} != {"throttled"}  # GPU 2 is not its server's
    cfg, truth = scenario[1], scenario_module()
    for (config, _), row in by_config.items():
        if row["steady_tokens"]:
            used = [int(g) for g in row["energy_gpus"].split(",")]
            joules = sum(truth.truth_energy_j(cfg, g, row["steady_start"], row["steady_end"]) for g in used)
            assert row["energy_method"] == "counter"  # NVML's energy counter (the stand-in pynvml is importable)
            assert row["j_per_token"] == pytest.approx(joules / row["steady_tokens"], rel=0.01), (config, row)
    assert any(r["steady_tokens"] for r in rows)
    (detail,) = warehouse.query("SELECT detail FROM runs WHERE run_id = ?", [run_id])["detail"]
    assert "telemetry: nvml" in detail and "not ok (never a baseline)" in detail
    assert detail.count("no metrics from") == 1 and re.search(
        r"no metrics from http://[\d.:]+/metrics \(HTTP 404\)", detail
    )
    configs = warehouse.query("SELECT DISTINCT config FROM case_summary WHERE run_id = ?", [run_id])["config"]
    assert "pd" not in set(configs)  # throttled rows are stored but never summarised (never a baseline)
    _each_config_names_its_bottleneck(warehouse, run_id)


def _each_config_names_its_bottleneck(warehouse: Warehouse, run_id: str) -> None:
    """The servers' own metrics, read during the run, and a verdict per phase with its evidence."""
    verdicts = warehouse.query(
        "SELECT config, concurrency, verdict, limiter, says, evidence FROM phase_bottlenecks WHERE run_id = ? "
        "AND NOT warmup ORDER BY config, concurrency",
        [run_id],
    )
    top = {r["config"]: r for r in verdicts.to_dict("records") if r["concurrency"] == 4}
    assert (top["pd"]["verdict"], top["single"]["verdict"], top["bare"]["verdict"]) == (
        "decode-bound",
        "kv-bound",
        "not enough evidence",
    ), verdicts.to_dict("records")
    assert re.search(r"no metrics endpoint \(HTTP 404 from http://127\.0\.0\.1:\d+/metrics\)", top["bare"]["says"])
    assert "decode: GPUs 2,3 at 9" in top["pd"]["says"] and "queued" in top["pd"]["says"]  # the evidence, with values
    evidence = json.loads(top["pd"]["evidence"])
    assert evidence["decode.share"] >= 0.7 and evidence["decode.gpu_util_pct"] > 80
    servers = warehouse.query(
        "SELECT config, role, scrapes, max_running, max_queued, max_kv_usage, generation_tokens FROM phase_servers "
        "WHERE run_id = ? AND concurrency = 4",
        [run_id],
    )
    assert set(zip(servers["config"], servers["role"], strict=True)) >= {("pd", "decode"), ("pd", "router")}
    assert (servers[servers["config"] != "bare"]["scrapes"] > 0).all(), servers.to_dict("records")
    single = servers[servers["config"] == "single"].iloc[0]
    assert single["max_kv_usage"] >= 0.8 and single["max_queued"] >= 1
    timeline = warehouse.query("SELECT DISTINCT config, role FROM server_samples WHERE run_id = ?", [run_id])
    assert set(zip(timeline["config"], timeline["role"], strict=True)) == {
        ("single", "single"),
        ("pd", "prefill"),
        ("pd", "decode"),
        ("pd", "router"),
    }  # the server without an endpoint has no samples


def test_a_kernel_sweep_beside_a_cpu_hog_is_not_ok_and_never_a_baseline(bag):
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 2))]
    try:
        time.sleep(1)
        run_id, state, tasks = run_dag(bag, "kernel_hog")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert state == "success", tasks
    warehouse = Warehouse.from_airflow()
    rows = warehouse.query("SELECT m, validity, validity_reason FROM kernel_results WHERE run_id = ?", [run_id])
    assert set(rows["validity"]) <= {"noisy", "contended"} and len(rows) == 2, rows.to_dict("records")
    assert all(reason for reason in rows["validity_reason"]), rows
    samples = warehouse.query("SELECT validity FROM metric_samples WHERE run_id = ?", [run_id])
    assert len(samples) and "ok" not in set(samples["validity"])  # stored, with its validity ...
    assert warehouse.query("SELECT * FROM case_summary WHERE run_id = ?", [run_id]).empty  # ... never summarised
    assert sorted(rows["m"]) == [16, 64]
    # a CPU host runs no sampler, and says so once
    (detail,) = warehouse.query("SELECT detail FROM runs WHERE run_id = ?", [run_id])["detail"]
    assert detail.count("telemetry: ") == 1 and "telemetry: none (no GPU on the host" in detail, detail
