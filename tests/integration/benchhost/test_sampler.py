"""benchhost.sampler (the host core) as a real process against the stand-in NVML and nvidia-smi (one scenario, one
truth): samples from the first moment, values as the GPUs reported them, a clean stop on SIGTERM, the size
bound, old drivers' names, no GPU at all; and joules per token from what it sampled, within 1 % of the truth.
The project's existing nvidia-smi calls (preflight, gpus_free) work with the stand-in on PATH too."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from benchflow.remote import gpus, preflight
from benchhost.telemetry import files, summary, window
from tests.gpu_standin import SAMPLER, env, python, scenario_module, write_scenario

pytestmark = pytest.mark.integration
scenario = scenario_module()
THROTTLE = {"from_s": 1.0, "to_s": 2.0, "reasons": 0x8, "sm_mhz": 1100, "power_w": 300.0}


def wait_for(predicate, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def start(out: Path, environ: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    command = [python(), *SAMPLER, "--out", str(out), "--period-ms", "100", *extra]
    return subprocess.Popen(command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def rows(out: Path) -> list[dict[str, str]]:
    with (out / "samples.csv").open() as f:
        return list(csv.DictReader(f))


def latest(out: Path) -> float:
    try:
        return max(float(r["t"]) for r in rows(out))
    except (OSError, ValueError):
        return 0.0


@pytest.mark.parametrize("source", ["nvml", "nvidia-smi"])
def test_sampler_reads_the_gpus_from_the_first_moment_and_stops_cleanly_on_sigterm(tmp_path, source):
    cfg = write_scenario(tmp_path / "scenario.json", count=3, gpus=[{"busy": False}, {}, {"throttle": [THROTTLE]}])
    out, ready = tmp_path / "telemetry", tmp_path / "ready.json"
    proc = start(out, env(tmp_path / "scenario.json", nvml=source == "nvml"), "--marker-file", str(ready))
    wait_for(ready.exists, what="the first samples")
    first = rows(out)
    assert {r["index"] for r in first} == {"0", "1", "2"}  # written before the marker
    wait_for(lambda: latest(out) > cfg["start"] + 2.6, what="samples past the throttle window")
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert all(not c.is_running() or c.status() == psutil.STATUS_ZOMBIE for c in children)  # nvidia-smi ended
    info = json.loads((out / "telemetry.json").read_text())
    assert (info["source"], info["stop_reason"], info["truncated"]) == (source, "signal", False)
    assert [g["uuid"] for g in info["gpus"]] == [scenario.uuid(i) for i in range(3)]
    assert info["driver"] == "550.54.15" and info["period_ms"] == 100
    samples = rows(out)
    assert (
        info["rows"] == len(samples)
        and output.strip().splitlines()[-1] == f"telemetry: stopped (signal), {len(samples)} rows"
    )
    if source == "nvml":
        assert info["fields"][-1] == "nvmlDeviceGetCurrentClocksEventReasons"
    else:
        assert "clocks_event_reasons.active" in info["fields"] and "power.draw.instant" in info["fields"]
        assert info["not_used"].startswith("NVML: ModuleNotFoundError")
    check_values(cfg, samples, counter=source == "nvml")


def check_values(cfg: dict, samples: list[dict[str, str]], counter: bool) -> None:
    """Every row is what the stand-in reported at some instant of its read: after the row's time stamp and before
    the next row of the same GPU (a busy machine may pause the sampler between the two, so the value is judged
    against the truth over that span, not at the stamp); reasons and clocks follow the throttle window."""
    throttle_from, throttle_to = cfg["start"] + THROTTLE["from_s"], cfg["start"] + THROTTLE["to_s"]
    seen = set()
    stamps: dict[int, list[float]] = {}
    for r in samples:
        stamps.setdefault(int(r["index"]), []).append(float(r["t"]))
    for r in samples:
        t, i = float(r["t"]), int(r["index"])
        later = [u for u in stamps[i] if u > t]
        span = (t - 0.05, min(later) if later else t + 1.0)
        truths = [scenario.state(cfg, i, span[0] + (span[1] - span[0]) * k / 50) for k in range(51)]
        powers = [truth["power_w"] for truth in truths]
        assert min(powers) - 1.0 <= float(r["power_w"]) <= max(powers) + 1.0, (r, span)
        assert r["uuid"] == scenario.uuid(i) and int(r["mem_used_mib"]) == truths[0]["mem_used_mib"]
        assert (r["energy_j"] != "") is counter
        if counter:
            low, high = (scenario.energy_j(cfg, i, u) for u in span)
            assert low - 1.0 <= float(r["energy_j"]) <= high + 1.0, (r, span)
        if not any(span[0] <= edge <= span[1] for edge in (throttle_from, throttle_to)):  # not at a boundary
            assert int(r["clock_reasons"]) == truths[0]["reasons"] and int(r["sm_mhz"]) == truths[0]["sm_mhz"]
            seen.add((i, truths[0]["reasons"]))
    assert seen == {(0, 0x1), (1, 0), (2, 0), (2, 0x8)}  # idle GPU; busy; throttled, then not


@pytest.mark.parametrize("source", ["nvml", "nvidia-smi"])
def test_joules_per_token_from_the_samplers_samples_within_1_percent_of_the_truth(tmp_path, source):
    cfg = write_scenario(tmp_path / "scenario.json", count=2, gpus=[{}, {"power_w": 600.0, "swing_w": 80.0}])
    out, ready = tmp_path / "telemetry", tmp_path / "ready.json"
    proc = start(out, env(tmp_path / "scenario.json", nvml=source == "nvml"), "--marker-file", str(ready))
    wait_for(ready.exists, what="the first samples")
    t0 = latest(out)
    wait_for(lambda: latest(out) > t0 + 3.2, what="3 s of samples")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    samples = files.read_samples((out / "samples.csv").read_text())
    starts = [t0 + 0.3 + 0.5 * (k // 4) for k in range(20)]  # 20 requests, 4 at a time, over 2.5 s
    reqs = [
        {"config": "pd", "concurrency": 4, "repeat": 1, "ok": True, "start_s": s, "first_token_s": s + 0.05}
        | {"end_s": s + 0.5, "output_tokens": 40}
        for s in starts
    ]
    row = {"config": "pd", "concurrency": 4, "repeat": 1}
    phase = files.Phase("serving", t0, t0 + 3.0, row)
    (cols,) = summary.serving_rows([row], reqs, [phase], samples, {"pd": {0: "prefill", 1: "decode"}})
    steady = window.steady_window(reqs, 4)
    truth = sum(scenario.truth_energy_j(cfg, i, steady.start, steady.end) for i in (0, 1))
    tokens = window.tokens_between(reqs, steady.start, steady.end)
    assert cols["energy_method"] == ("counter" if source == "nvml" else "power_integral")
    assert cols["steady_tokens"] == tokens and cols["steady_s"] > 1.0
    assert cols["j_per_token"] == pytest.approx(truth / tokens, rel=0.01)


def test_old_drivers_event_reasons_and_energy_missing_and_the_old_nvidia_smi_names(tmp_path):
    scenario_file = tmp_path / "scenario.json"
    always = [{"throttle": [{"from_s": -10, "to_s": 1e6}]}]
    write_scenario(scenario_file, count=1, gpus=always, event_reasons=False, energy=False, smi="old")
    for source in ("nvml", "nvidia-smi"):
        out = tmp_path / source
        proc = start(out, env(scenario_file, nvml=source == "nvml"), "--max-s", "1")
        output, _ = proc.communicate(timeout=60)
        info = json.loads((out / "telemetry.json").read_text())
        assert proc.returncode == 0 and info["stop_reason"] == "max-s", output
        samples = rows(out)
        assert samples and all(r["energy_j"] == "" and r["clock_reasons"] == "8" for r in samples)
        if source == "nvml":
            assert info["fields"][-1] == "nvmlDeviceGetCurrentClocksThrottleReasons"
        else:
            assert "clocks_throttle_reasons.active" in info["fields"] and "power.draw" in info["fields"]
            assert "power.draw.instant" not in info["fields"]


def test_cells_a_gpu_cannot_have_are_empty_and_a_line_without_end_is_dropped_not_held(tmp_path):
    """A broken driver's output: a bitmask that is not hex, a negative power, a temperature of 1e300, and 200 KB
    without a newline. The sampler keeps sampling, writes those cells empty (never -400 W, which would integrate
    to negative joules, nor a 309-digit number), and counts what it could not read."""
    cells = {"clocks_event_reasons.active": "0xZZ", "power.draw.instant": "-400", "temperature.gpu": "1e300"}
    write_scenario(tmp_path / "scenario.json", count=2, gpus=[{"cells": cells}, {}], unterminated=200_000)
    out = tmp_path / "telemetry"
    proc = start(out, env(tmp_path / "scenario.json", nvml=False))

    def both_gpus_sampled_twice() -> bool:  # their rows come after the long line: it was read by then
        found = rows(out) if (out / "samples.csv").exists() else []
        return all(sum(r["index"] == str(i) for r in found) >= 2 for i in (0, 1))

    try:
        wait_for(both_gpus_sampled_twice, 60, "two samples of each GPU after the long line")
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    info = json.loads((out / "telemetry.json").read_text())
    assert proc.returncode == 0 and info["stop_reason"] == "signal", output
    assert info["skipped_lines"] >= 2  # the long line, dropped in pieces
    samples = rows(out)
    broken = [r for r in samples if r["index"] == "0"]
    healthy = [r for r in samples if r["index"] == "1"]
    assert broken and healthy and all(len(line) < 300 for line in (out / "samples.csv").read_text().splitlines())
    assert all((r["clock_reasons"], r["power_w"], r["temp_c"]) == ("", "", "") for r in broken)
    assert all(r["sm_mhz"] != "" and r["mem_used_mib"] != "" for r in broken)  # the rest of the row is kept
    assert all(float(r["power_w"]) > 0 and r["clock_reasons"] != "" for r in healthy)
    read = files.read_samples((out / "samples.csv").read_text())
    assert all(s.power_w is None for s in read if s.index == 0)


def test_the_size_limit_stops_appending_and_says_so(tmp_path):
    write_scenario(tmp_path / "scenario.json", count=4)
    out = tmp_path / "telemetry"
    proc = start(out, env(tmp_path / "scenario.json", nvml=True), "--max-bytes", "2000", "--max-s", "60")
    output, _ = proc.communicate(timeout=60)
    info = json.loads((out / "telemetry.json").read_text())
    assert proc.returncode == 0, output
    assert (info["stop_reason"], info["truncated"]) == ("max-bytes", True)
    assert info["truncated_at"] >= info["started"] and info["rows"] == len(rows(out)) > 0
    assert (out / "samples.csv").stat().st_size <= 2000 and info["rows"] % 4 == 0  # whole samples only


def test_without_a_gpu_it_says_so_once_and_exits_at_once(tmp_path):
    out, ready = tmp_path / "telemetry", tmp_path / "ready.json"
    environ = env(tmp_path / "none.json", nvml=False, smi=False) | {"PATH": "/usr/bin:/bin"}
    proc = start(out, environ, "--marker-file", str(ready))
    output, _ = proc.communicate(timeout=60)
    info = json.loads((out / "telemetry.json").read_text())
    assert proc.returncode == 0 and ready.exists() and not (out / "samples.csv").exists()
    assert info["source"] == "none"
    assert "NVML: ModuleNotFoundError" in info["reason"] and "nvidia-smi is not on PATH" in info["reason"]
    assert output.splitlines() == [f"telemetry: no GPU telemetry on this host ({info['reason']})"]


def test_nvml_that_does_not_load_falls_back_to_nvidia_smi(tmp_path):
    write_scenario(tmp_path / "scenario.json", count=2, nvml="missing")
    out = tmp_path / "telemetry"
    proc = start(out, env(tmp_path / "scenario.json", nvml=True), "--max-s", "1")
    proc.communicate(timeout=60)
    info = json.loads((out / "telemetry.json").read_text())
    assert info["source"] == "nvidia-smi" and "NVMLError_LibraryNotFound" in info["not_used"]


def test_preflight_and_gpus_free_read_the_stand_in(tmp_path):
    write_scenario(tmp_path / "scenario.json", count=3, gpus=[{"busy": False}], compute_apps=[])
    environ = env(tmp_path / "scenario.json", nvml=False)
    state = subprocess.run(["bash", "-c", gpus.query_command()], env=environ, capture_output=True, text=True)
    parsed = gpus.parse_state(state.stdout)
    assert parsed.present and parsed.used_mib == {0: 0.0, 1: 68000.0, 2: 68000.0} and parsed.processes == []
    command = preflight.facts_command(python(), str(tmp_path / "workdir"))
    facts = subprocess.run(["bash", "-c", command], env=environ, capture_output=True, text=True)
    assert facts.returncode == 0, facts.stderr
    parsed_facts = preflight.parse_facts(facts.stdout)
    assert parsed_facts["gpu_count"] == "3"
    assert parsed_facts["gpu"].split("; ")[0] == "NVIDIA H200, 550.54.15, 143771 MiB"
    busy = write_scenario(
        tmp_path / "busy.json", count=1, compute_apps=[{"pid": 4242, "name": "python", "used_mib": 2048}]
    )
    assert busy["compute_apps"]
    state = subprocess.run(
        ["bash", "-c", gpus.query_command()],
        env=env(tmp_path / "busy.json", nvml=False),
        capture_output=True,
        text=True,
    )
    assert gpus.parse_state(state.stdout).processes == [gpus.GpuProcess(4242, "python", 2048.0)]
