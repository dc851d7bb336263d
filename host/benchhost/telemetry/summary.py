"""What the pieces add up to: per-phase, per-GPU telemetry rows, and the columns a result row gains (energy per
unit of work, host load, validity). Plain dicts, ready for a warehouse table or a printed summary.

* Serving (per config × concurrency × repeat): energy of the config's GPUs (``gpu_servers_by_config``; every
  sampled GPU when a config names none) over the steady-state window, divided by the output tokens produced in
  it: ``j_per_token``; over the whole phase as the client saw it (first request sent → last answered) the
  same: ``j_per_token_phase``, defined even when the phase is too short for a steady state.
* Kernel (per dtype × M): energy of the kernel's GPUs (``gpus``; every sampled GPU by default) over the window
  of the timed calls, or over the energy loop when bench_moe ran one (``--energy-s``), divided by the number of
  calls in that window: ``j_per_call``. ``energy_samples`` says how many samples fell inside the window: with
  none (calls shorter than the sampling period), the energy is interpolated between the samples around it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from benchhost.telemetry.energy import GpuPhase, energy, phase_gpus
from benchhost.telemetry.files import Phase, Sample, by_gpu, match_rows
from benchhost.telemetry.hostload import HostLoad, host_load
from benchhost.telemetry.validity import Limits, Verdict, contention, kernel_noise, serving_noise, throttling, verdict
from benchhost.telemetry.window import phase_span, steady_window, tokens_between

KERNEL_PHASE = ("dtype", "m")  # what joins a kernel sweep's rows to their phases
SERVING_PHASE = ("config", "concurrency", "request_rate", "repeat")  # and a serving sweep's


def parse_gpus(text: str | None) -> list[int]:
    """A server's ``gpus`` (the spec's CUDA_VISIBLE_DEVICES form): ``"0-3"`` → [0, 1, 2, 3], ``"4,6"`` → [4, 6]."""
    ids: list[int] = []
    for part in (text or "").split(","):
        if part.strip():
            low, _, high = part.partition("-")
            ids += range(int(low), int(high or low) + 1)
    return ids


def gpu_servers(servers: Mapping[str, str | None]) -> dict[int, str]:
    """``{"prefill": "0-3", "decode": "4-7"}`` (server → gpus) → GPU index → server. The indices are
    nvidia-smi's (PCI order); they are CUDA's too on a host of identical GPUs or with CUDA_DEVICE_ORDER=PCI_BUS_ID."""
    return {gpu: name for name, text in servers.items() for gpu in parse_gpus(text)}


def load_columns(load: HostLoad | None) -> dict[str, Any]:
    """Host-load columns of a result row (None: the phase has no snapshots)."""
    keep = ("steal_pct", "busy_pct", "others_busy_pct", "wait_share", "load1", "online_cpus")
    columns: dict[str, Any] = {f"host_{k}": getattr(load, k) if load else None for k in keep}
    columns["host_runnable_max"] = max(load.runnable) if load and load.runnable else None
    return columns


def _gpu_energy(samples: Mapping[int, Sequence[Sample]], gpus: Sequence[int], t0: float, t1: float) -> dict[str, Any]:
    """Energy of ``gpus`` together over ``[t0, t1]``; the method is the least exact one used."""
    parts = [energy(samples[g], t0, t1) for g in gpus if samples.get(g)]
    if not parts or any(p.joules is None for p in parts):
        return {"energy_j": None, "energy_method": "none", "energy_coverage": None}
    methods = {p.method for p in parts}
    method = "counter" if methods == {"counter"} else "power_integral"
    joules = sum(p.joules or 0.0 for p in parts)
    return {"energy_j": joules, "energy_method": method, "energy_coverage": min(p.coverage for p in parts)}


def _judge(
    findings: dict[str, str | None],
    phase: Phase | None,
    samples: Mapping[int, Any],
    stats: Sequence[GpuPhase],
    limits: Limits,
) -> Verdict:
    unjudged = [] if samples else ["throttled: no GPU telemetry"]
    if samples and phase is not None and not any(g.judged for g in stats):
        unjudged.append("throttled: no GPU sample in or next to the phase (the sampler stopped, or a clock is off)")
    if phase is None:
        unjudged.append("contended: no phase record")
    elif host_load(phase.record) is None:
        unjudged.append("contended: no host-load snapshots")
    return verdict(findings, limits, unjudged)


def _verdict_columns(v: Verdict) -> dict[str, Any]:
    return {"validity": v.validity, "validity_reason": v.reason, "validity_unjudged": "; ".join(v.unjudged)}


def _phase_throttle(
    samples: Mapping[int, Sequence[Sample]],
    phase: Phase,
    gpus: Sequence[int],
    servers: Mapping[int, str],
    limits: Limits,
) -> tuple[list[GpuPhase], str | None]:
    """The phase's own GPUs' statistics, and which of them throttled."""
    chosen = {g: samples[g] for g in gpus if g in samples}
    stats = phase_gpus(chosen, phase.start, phase.end, servers, limits.benign_reasons)
    return stats, throttling(stats)


def _window_samples(samples: Mapping[int, Sequence[Sample]], gpus: Sequence[int], t0: float, t1: float) -> int:
    counts = [sum(1 for s in samples[g] if t0 <= s.t <= t1) for g in gpus if samples.get(g)]
    return min(counts) if counts else 0


def kernel_energy(samples: Mapping[int, Sequence[Sample]], gpus: Sequence[int], phase: Phase | None) -> dict[str, Any]:
    """Energy per call of one kernel phase: over its energy loop when it ran one, else over its timed calls."""
    r = phase.record if phase else {}
    window = "energy_loop" if "energy_calls" in r else "timed"
    t0, t1, calls = (r.get(f"{window[:6]}_start"), r.get(f"{window[:6]}_end"), r.get(f"{window[:6]}_calls"))
    empty = {"energy_window": None, "energy_s": None, "energy_calls": None, "energy_samples": 0}
    none = {**empty, "energy_j": None, "energy_method": "none", "energy_coverage": None, "j_per_call": None}
    if not isinstance(t0, int | float) or not isinstance(t1, int | float) or not calls:
        return none
    drawn = _gpu_energy(samples, gpus, t0, t1)
    joules = drawn["energy_j"]
    return {
        "energy_window": window,
        "energy_s": t1 - t0,
        "energy_calls": calls,
        "energy_samples": _window_samples(samples, gpus, t0, t1),
        **drawn,
        "j_per_call": joules / calls if joules is not None else None,
    }


def kernel_rows(
    rows: Sequence[Mapping[str, Any]],
    phases: Sequence[Phase],
    samples: Sequence[Sample],
    limits: Limits | None = None,
    gpus: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """The columns each kernel row gains (same order as ``rows``): spread, energy per call, host load, validity."""
    limits = limits or Limits()
    per_gpu = by_gpu(samples)
    used = list(gpus) if gpus is not None else sorted(per_gpu)
    out = []
    for row, phase in zip(rows, match_rows(KERNEL_PHASE, rows, phases), strict=True):
        p10, p90 = row.get("p10_ms"), row.get("p90_ms")
        spread = p90 / p10 if isinstance(p10, int | float) and isinstance(p90, int | float) and p10 > 0 else None
        load = host_load(phase.record) if phase else None
        findings = {"noisy": kernel_noise(row, limits), "contended": contention(load, limits)}
        cols: dict[str, Any] = {"spread_ratio": spread, **kernel_energy(per_gpu, used, phase), **load_columns(load)}
        stats, findings["throttled"] = _phase_throttle(per_gpu, phase, used, {}, limits) if phase else ([], None)
        cols["throttle_reasons"] = ", ".join(sorted({r for g in stats for r in g.throttle_reasons}))
        out.append({**cols, **_verdict_columns(_judge(findings, phase, per_gpu, stats, limits))})
    return out


def serving_energy(
    samples: Mapping[int, Sequence[Sample]],
    gpus: Sequence[int],
    requests: Sequence[Mapping[str, Any]],
    concurrency: int,
) -> dict[str, Any]:
    """Joules per output token of one serving phase: over its steady state, and over the whole phase."""
    window = steady_window(requests, concurrency)
    cols: dict[str, Any] = {"steady_start": window.start, "steady_end": window.end, "steady_s": window.seconds}
    cols |= {"steady_why": window.why, "energy_gpus": ",".join(str(g) for g in gpus if samples.get(g))}
    steady: dict[str, Any] = {"energy_j": None, "energy_method": "none", "energy_coverage": None}
    tokens = 0
    if window.start is not None and window.end is not None:
        steady = _gpu_energy(samples, gpus, window.start, window.end)
        tokens = tokens_between(requests, window.start, window.end)
    cols |= {"steady_tokens": tokens, "steady_energy_j": steady["energy_j"], "energy_method": steady["energy_method"]}
    cols["j_per_token"] = steady["energy_j"] / tokens if steady["energy_j"] is not None and tokens else None
    span = phase_span(requests)
    whole = _gpu_energy(samples, gpus, *span) if span else {"energy_j": None}
    phase_tokens = sum(int(r.get("output_tokens") or 0) for r in requests if r.get("ok"))
    cols |= {"phase_energy_j": whole["energy_j"], "phase_tokens": phase_tokens}
    cols["j_per_token_phase"] = (
        whole["energy_j"] / phase_tokens if whole["energy_j"] is not None and phase_tokens else None
    )
    return cols


def serving_rows(
    rows: Sequence[Mapping[str, Any]],
    requests: Sequence[Mapping[str, Any]],
    phases: Sequence[Phase],
    samples: Sequence[Sample],
    gpu_servers_by_config: Mapping[str, Mapping[int, str]] | None = None,
    limits: Limits | None = None,
) -> list[dict[str, Any]]:
    """The columns each serving row gains (same order as ``rows``): energy per token, host load, validity."""
    limits = limits or Limits()
    per_gpu = by_gpu(samples)
    by_key: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for request in requests:
        by_key.setdefault(_request_phase(request), []).append(request)
    noise = serving_noise(rows, limits)
    out = []
    keyed = [{**row, "request_rate": finite_rate(row.get("request_rate"))} for row in rows]  # inf: no limit
    for row, phase, noisy in zip(rows, match_rows(SERVING_PHASE, keyed, phases), noise, strict=True):
        servers = (gpu_servers_by_config or {}).get(row.get("config") or "") or {}
        used = sorted(servers) or sorted(per_gpu)
        reqs = by_key.get(_request_phase(row), [])
        load = host_load(phase.record) if phase else None
        findings = {"noisy": noisy, "contended": contention(load, limits)}
        stats, findings["throttled"] = _phase_throttle(per_gpu, phase, used, servers, limits) if phase else ([], None)
        cols = {**serving_energy(per_gpu, used, reqs, in_flight(row)), **load_columns(load)}
        cols["throttle_reasons"] = ", ".join(sorted({r for g in stats for r in g.throttle_reasons}))
        out.append({**cols, **_verdict_columns(_judge(findings, phase, per_gpu, stats, limits))})
    return out


def finite_rate(value: Any) -> float | None:
    """A phase's request rate as its key has it: None for no limit (a client's ``inf``, or none said)."""
    rate = None if value is None else float(value)
    return rate if rate is not None and math.isfinite(rate) else None


def _request_phase(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """A request's (or a row's) phase: config, concurrency, request rate (None: no limit), repeat."""
    return row.get("config"), row.get("concurrency"), finite_rate(row.get("request_rate")), row.get("repeat", 1)


def in_flight(row: Mapping[str, Any]) -> int:
    """The requests a phase keeps in flight, B of its steady state: its concurrency; at a request rate without a
    cap, Little's law over what it measured (rate × mean end-to-end latency, at least 1)."""
    if row.get("concurrency"):
        return int(row["concurrency"])
    rate, e2e_ms = finite_rate(row.get("request_rate")), row.get("mean_e2e_ms")
    if rate and e2e_ms and math.isfinite(float(rate) * float(e2e_ms)):
        return max(1, round(float(rate) * float(e2e_ms) / 1e3))
    return 0


def phase_gpu_rows(
    samples: Sequence[Sample],
    phases: Sequence[Phase],
    gpu_servers_by_config: Mapping[str, Mapping[int, str]] | None = None,
    limits: Limits | None = None,
) -> list[dict[str, Any]]:
    """One row per phase and GPU: the phase's key, the GPU, the server holding it, and its statistics."""
    limits = limits or Limits()
    per_gpu = by_gpu(samples)
    out = []
    for phase in phases:
        r = phase.record
        servers = (gpu_servers_by_config or {}).get(r.get("config") or "") or {}
        key = {k: r.get(k) for k in ("config", "concurrency", "request_rate", "repeat", "warmup", "dtype", "m")}
        for g in phase_gpus(per_gpu, phase.start, phase.end, servers, limits.benign_reasons):
            stats = {k: v for k, v in vars(g).items() if k not in ("reasons", "throttle_reasons", "index", "judged")}
            out.append(
                {"kind": phase.kind, **key, "phase_start": phase.start, "phase_end": phase.end, "gpu_index": g.index}
                | stats
                | {"reasons": ", ".join(g.reasons), "throttle_reasons": ", ".join(g.throttle_reasons)}
                | {"throttled": bool(g.throttle_reasons)}
            )
    return out
