"""Phases carry their time, with real processes: bench_moe.py (host env, CPU) and sweep.py (the real SGLang client
against the tiny server, the stand-in GPUs sampled beside it by both sampler paths) write phases.jsonl, the
sweep's requests get their times; per-phase telemetry splits a PD config's GPUs, flags the throttled phase, and
gives joules per token within 1 % of the stand-in's truth. And a kernel sweep beside a CPU hog is judged by the
validity rules from its own phases and rows, against the same sweep shielded from every other process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from itertools import pairwise
from pathlib import Path

import pytest

from benchflow.kinds import parse_text
from benchhost.telemetry import files, hostload, summary, validity, window
from tests.conftest import PROJECT_ROOT
from tests.gpu_standin import HOST_CORE, SAMPLER, env, host_env, python, scenario_module, write_scenario

pytestmark = pytest.mark.integration
MOE = PROJECT_ROOT / "kernels" / "moe"
SERVING = PROJECT_ROOT / "kernels" / "serving"
ROW_KEYS = set(  # bench_moe's rows as before phases existed: the parsers read them
    "M m ms_per_call tok_per_s us_per_token p10_ms p90_ms kernel_ms experts bytes_read gbps tflops roofline_ms "
    "pct_roofline pct_copy_bw bound note flops eager_ms timed dtype config config_source".split()
)


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def check_load(snapshot: dict) -> None:
    assert snapshot["online_cpus"] == os.cpu_count() and snapshot["clk_tck"] > 0
    assert set(snapshot["cpu"]) == set(hostload.CPU_FIELDS) and snapshot["runnable"] >= 1
    assert snapshot["own_cpu_s"] >= 0 and snapshot["own_sched"]["run_s"] > 0


def test_bench_moe_writes_one_phase_per_m_with_its_timed_window_and_host_load(tmp_path):
    out = tmp_path / "results.jsonl"
    command = [python(), "bench_moe.py", "--m-list", "1,4,16", "--iters", "5", "--energy-s", "0.05", "--out", str(out)]
    done = subprocess.run(command, cwd=MOE, env=host_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    rows, phases = jsonl(out), jsonl(tmp_path / "phases.jsonl")
    assert all(set(row) == ROW_KEYS for row in rows)  # the rows are as they were
    assert [(p["kind"], p["m"], p["dtype"], p["device"]) for p in phases] == [
        ("kernel", m, "bf16", "cpu") for m in (1, 4, 16)
    ]
    for p in phases:
        assert p["load_start"]["t"] <= p["start"] <= p["timed_start"] < p["timed_end"] <= p["energy_start"]
        assert p["energy_start"] < p["energy_end"] <= p["end"] <= p["load_end"]["t"]
        assert (p["timed_calls"], p["warmup_calls"]) == (5, 3) and p["energy_calls"] >= 1
        check_load(p["load_start"])
        check_load(p["load_end"])
        assert p["load_end"]["own_cpu_s"] >= p["load_start"]["own_cpu_s"]
    assert all(a["end"] <= b["start"] for a, b in pairwise(phases))
    judged = summary.kernel_rows(rows, files.read_phases((tmp_path / "phases.jsonl").read_text()), [])
    assert all(j["validity"] in validity.VALIDITIES and j["host_busy_pct"] is not None for j in judged)
    assert all(j["validity_unjudged"] == "throttled: no GPU telemetry" for j in judged)


@pytest.mark.parametrize("telemetry", [True, False])
def test_bench_moe_deployed_with_or_without_the_telemetry_payload_prints_the_table_it_printed(tmp_path, telemetry):
    """Deployed layout: the payload's files in one directory, the host core inside it. Without benchhost/ it
    writes no phases and says so in a header line; the table parses as before either way."""
    payload = tmp_path / "payload"
    shutil.copytree(MOE, payload, ignore=shutil.ignore_patterns("__pycache__", "test_*", "conftest.py"))
    if telemetry:
        shutil.copytree(HOST_CORE / "benchhost", payload / "benchhost")
    out = tmp_path / "results.jsonl"
    command = [python(), "bench_moe.py", "--m-list", "2,8", "--iters", "3", "--out", str(out)]
    alone = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what the payload carries
    done = subprocess.run(command, cwd=payload, env=alone, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    parsed = parse_text(done.stdout)
    assert parsed.complete and parsed.warnings == [] and not parsed.dropped
    assert [row["m"] for row in parsed.rows] == [2, 8]
    assert (tmp_path / "phases.jsonl").exists() is telemetry
    note = "Phases: not recorded (no benchhost beside the payload)"
    assert (note in done.stdout.splitlines()) is not telemetry


# ----------------------------------------------------------------------------------------------
# serving: the real SGLang client, the tiny server, both samplers on the stand-in GPUs
# ----------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
            return True
    except OSError:
        return False


def start_sampler(out: Path, environ: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [python(), *SAMPLER, "--out", str(out), "--period-ms", "50", "--marker-file", str(out / "ready")]
    out.mkdir(parents=True)
    return subprocess.Popen(command, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def last_row_of(out: Path, gpu: int) -> tuple[float, int]:
    """(t, clock_reasons) of the newest sample of GPU ``gpu`` in a sampler's samples.csv ((0, 0) before any)."""
    rows = files.read_samples((out / "samples.csv").read_text()) if (out / "samples.csv").exists() else []
    mine = [r for r in rows if r.index == gpu]
    return (mine[-1].t, mine[-1].clock_reasons or 0) if mine else (0.0, 0)


def unthrottled_after(out: Path, when: float):
    """A condition: the sampler writing ``out`` has a sample of GPU 2 after ``when``, not throttled."""

    def holds() -> bool:
        t, reasons = last_row_of(out, 2)
        return t > when and not reasons & 0x8

    return holds


@pytest.fixture(scope="module")
def pd_sweep(tmp_path_factory):
    """A sweep labelled ``pd`` (prefill GPUs 0-1, decode 2-3 of four stand-in GPUs: GPU 1 idle, GPU 2 throttled in
    the first phase and not in the second) run by the real SGLang client against the tiny server, sampled through
    NVML and through nvidia-smi at once. The two phases are two runs of the sweep driver, appending to the same
    files: between them the scenario drops GPU 2's throttle, and the second starts once both samplers report it
    (a condition, not a clock: the stand-ins read the scenario again when it changes)."""
    tmp_path = tmp_path_factory.mktemp("pd_sweep")
    run, payload = tmp_path / "run", tmp_path / "run" / "payload"
    payload.mkdir(parents=True)
    port = free_port()
    server = subprocess.Popen(
        [python(), str(SERVING / "server.py"), "--port", str(port), "--layers", "2", "--hidden", "64"],
        cwd=payload,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    samplers: list[subprocess.Popen[bytes]] = []
    scenario = tmp_path / "scenario.json"
    try:
        wait_for(lambda: healthy(port), 120, "the tiny server")
        throttle = {"from_s": 0.0, "to_s": 1e9, "reasons": 0x8, "sm_mhz": 1100, "power_w": 280.0}
        gpus = [{}, {"busy": False}, {"throttle": [throttle], "power_w": 520.0}, {"power_w": 500.0, "swing_w": 60.0}]
        first = write_scenario(scenario, count=4, gpus=gpus)
        for source in ("nvml", "smi"):
            samplers.append(start_sampler(run / f"tel_{source}", env(scenario, nvml=source == "nvml")))
        wait_for(lambda: all((run / f"tel_{s}" / "ready").exists() for s in ("nvml", "smi")), 60, "first samples")
        sweep = [python(), str(SERVING / "sweep.py"), "--label", "pd", "--base-url", f"http://127.0.0.1:{port}"]
        sweep += ["--client", "sglang", "--input-len", "16", "--output-len", "16", "--out", str(run / "results.jsonl")]
        done = [run_sweep([*sweep, "--concurrency", "1", "--prompts", "4"], payload)]
        gpus[2]["throttle"] = []
        changed = time.time()
        cfg = write_scenario(scenario, start=first["start"], count=4, gpus=gpus)
        for source in ("nvml", "smi"):
            wait_for(unthrottled_after(run / f"tel_{source}", changed), 60, f"{source} samples of GPU 2 unthrottled")
        done.append(run_sweep([*sweep, "--concurrency", "4", "--prompts", "16"], payload))
        ended = time.time()
        for source in ("nvml", "smi"):
            wait_for(unthrottled_after(run / f"tel_{source}", ended + 0.2), 30, f"{source} samples past the end")
        yield (
            run,
            cfg,
            subprocess.CompletedProcess(
                sweep, max(d.returncode for d in done), "".join(d.stdout for d in done), "".join(d.stderr for d in done)
            ),
        )
    finally:
        for proc in [*samplers, server]:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def run_sweep(command: list[str], payload: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=payload, env=host_env(HF_HUB_OFFLINE="1"), capture_output=True, text=True, timeout=600
    )


def test_sweep_phases_and_request_times_with_the_real_sglang_client(pd_sweep):
    run, _, done = pd_sweep
    assert done.returncode == 0 and done.stdout.count("ALL_DONE") == 2, done.stdout[-3000:] + done.stderr
    phases = jsonl(run / "phases.jsonl")
    assert [(p["config"], p["concurrency"], p["repeat"], p["warmup"], p["num_prompts"], p["ok"]) for p in phases] == [
        ("pd", 1, 1, False, 4, True),
        ("pd", 4, 1, False, 16, True),
    ]
    assert all(p["timing"] == "fifo+start_line" for p in phases)
    assert phases[0]["end"] <= phases[1]["start"]
    for p in phases:
        assert p["load_start"]["t"] <= p["start"] < p["end"] <= p["load_end"]["t"]
        check_load(p["load_start"])
        check_load(p["load_end"])
        assert p["load_end"]["own_cpu_s"] > p["load_start"]["own_cpu_s"]  # the client ran, and the server
    requests = jsonl(run / "requests.jsonl")
    for phase in phases:
        mine = [r for r in requests if r["concurrency"] == phase["concurrency"]]
        assert len(mine) == phase["num_prompts"] and all(r["ok"] for r in mine)
        for r in mine:
            assert phase["start"] < r["start_s"] < r["first_token_s"] <= r["end_s"] < phase["end"]
            assert r["first_token_s"] - r["start_s"] == pytest.approx(r["ttft_ms"] / 1e3, abs=1e-6)
            in_flight = sum(1 for o in mine if o["start_s"] <= r["start_s"] < o["end_s"] - 1e-6)
            assert in_flight <= phase["concurrency"]
    parsed = parse_text((run / "results.jsonl").read_text())  # the --out rows still read as before
    assert [(r["config"], r["concurrency"], r["repeat"]) for r in parsed.rows] == [("pd", 1, 1), ("pd", 4, 1)]
    assert all(
        not any(k.endswith("_s") and k.startswith(("start", "end")) for k in r) for r in jsonl(run / "results.jsonl")
    )


@pytest.mark.parametrize("source", ["nvml", "smi"])
def test_pd_telemetry_per_server_the_throttled_phase_and_joules_per_token(pd_sweep, source):
    run, cfg, done = pd_sweep
    assert done.returncode == 0, done.stdout[-3000:]
    truth = scenario_module()
    samples = files.read_samples((run / f"tel_{source}" / "samples.csv").read_text())
    phases = files.read_phases((run / "phases.jsonl").read_text())
    requests = jsonl(run / "requests.jsonl")
    rows = [{**r, "config": r["tag"], "concurrency": r["max_concurrency"]} for r in jsonl(run / "results.jsonl")]
    servers = {"pd": summary.gpu_servers({"prefill": "0,1", "decode": "2,3"})}
    per_gpu = summary.phase_gpu_rows(samples, phases, servers)
    assert [(g["concurrency"], g["gpu_index"], g["server"]) for g in per_gpu] == [
        (c, i, "prefill" if i < 2 else "decode") for c in (1, 4) for i in range(4)
    ]
    idle = [g for g in per_gpu if g["gpu_index"] == 1]
    assert all(g["mean_util_gpu_pct"] == 0 and g["reasons"] == "gpu_idle" and not g["throttled"] for g in idle)
    assert [g["gpu_index"] for g in per_gpu if g["throttled"]] == [2]  # in the first phase only
    assert per_gpu[2]["throttle_reasons"] == "hw_slowdown" and per_gpu[2]["mean_sm_mhz"] < 1980
    first, second = summary.serving_rows(rows, requests, phases, samples, servers)
    assert first["validity"] == "throttled" and first["validity_reason"].startswith(
        "throttled: GPU 2 (decode): hw_slowdown"
    )
    assert second["validity"] != "throttled" and second["throttle_reasons"] == ""
    assert second["energy_method"] == ("counter" if source == "nvml" else "power_integral")
    four = [r for r in requests if r["concurrency"] == 4]
    steady = window.steady_window(four, 4)
    tokens = window.tokens_between(four, steady.start, steady.end)
    joules = sum(truth.truth_energy_j(cfg, i, steady.start, steady.end) for i in range(4))
    assert second["steady_start"] == steady.start and second["steady_tokens"] == tokens > 0
    assert second["j_per_token"] == pytest.approx(joules / tokens, rel=0.01)
    span = window.phase_span(four)
    whole = sum(truth.truth_energy_j(cfg, i, *span) for i in range(4))
    assert second["j_per_token_phase"] == pytest.approx(whole / (16 * 16), rel=0.01)


# ----------------------------------------------------------------------------------------------
# a kernel sweep beside a CPU hog, and shielded from every other process
# ----------------------------------------------------------------------------------------------

HOG = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass\n"


def isolated_sweep(out: Path, hogs: int) -> tuple[list[dict], list[files.Phase]]:
    """bench_moe.py (one thread) in a session of its own, with ``hogs`` busy processes in that session competing
    with it as equals. Without hogs, the session's scheduler group gets the host's top priority (autogroup nice
    -20), so that the other tenants of the machine (the suite's other processes, this VM's neighbours) do not take
    its CPU; with hogs it keeps the default, so the hogs take the CPU from the benchmark and from no one else more
    than their share."""
    out.mkdir(parents=True, exist_ok=True)
    bench = [
        python(),
        "bench_moe.py",
        "--m-list",
        "16,64,256",
        "--iters",
        "200",
        "--warmup",
        "20",
        "--out",
        str(out / "results.jsonl"),
    ]
    launcher = (
        "import subprocess, sys\n"
        f"hogs = [subprocess.Popen([sys.executable, '-c', {HOG!r}]) for _ in range({hogs})]\n"
        f"code = subprocess.run({bench!r}, stdout=subprocess.DEVNULL).returncode\n"
        "for hog in hogs:\n    hog.kill()\n    hog.wait()\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", launcher], cwd=MOE, env=host_env(OMP_NUM_THREADS="1"), start_new_session=True
    )
    try:
        if not hogs:
            Path(f"/proc/{proc.pid}/autogroup").write_text("-20")
        assert proc.wait(600) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    rows = jsonl(out / "results.jsonl")
    return rows, files.read_phases((out / "phases.jsonl").read_text())


def figures(rows: list[dict], phases: list[files.Phase]) -> list[dict]:
    judged = summary.kernel_rows(rows, phases, [])
    keep = ("spread_ratio", "host_wait_share", "host_busy_pct", "host_others_busy_pct", "host_runnable_max", "validity")
    return [
        {"m": r["m"], **{k: j[k] for k in keep}, "reason": j["validity_reason"]}
        for r, j in zip(rows, judged, strict=True)
    ]


def test_a_kernel_sweep_beside_a_cpu_hog_is_contended_and_the_same_sweep_shielded_from_others_is_not(tmp_path):
    """The hog (twice as many busy processes as CPUs) shares the benchmark's scheduler group: the benchmark waits for
    a CPU, and the contention rule says so. The same sweep in a group of its own at the host's top priority waits
    for no one, whatever else this machine runs (the suite's other processes included): its wait share under the
    limit, never contended for waiting. What no scheduler group shields it from, the rules may still say: the
    hypervisor's steal (this VM's neighbours), and timed calls that spread with what other tenants do to the shared
    caches (noisy)."""
    hogged = figures(*isolated_sweep(tmp_path / "hog", hogs=2 * (os.cpu_count() or 2)))
    shielded = figures(*isolated_sweep(tmp_path / "alone", hogs=0))
    report = json.dumps({"hog": hogged, "alone": shielded}, indent=1)
    (tmp_path / "figures.json").write_text(report)
    limit = validity.Limits().max_wait_share
    # each row is judged by what it measured: one that waited past the limit is contended, one that did not is not
    # called so (how much of the CPUs the hog takes from one row to the next depends on what else the machine runs,
    # so not every hogged row need have waited), and the hogged sweep as a whole waited and was found contended
    assert all(("waited for a CPU" in r["reason"]) == (r["host_wait_share"] > limit) for r in hogged + shielded), report
    assert any(r["validity"] == "contended" for r in hogged), report
    assert statistics.fmean(r["host_wait_share"] for r in hogged) > limit, report
    assert all(r["host_wait_share"] < limit and "waited for a CPU" not in r["reason"] for r in shielded), report
