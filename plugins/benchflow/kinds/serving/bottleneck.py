"""A serving phase's signals for its bottleneck rules (``bottleneck.yaml`` beside this file, judged by
:mod:`benchflow.kinds.rules`): per server role the
requests running and queued (the servers' own metrics), KV-cache usage, preemptions, the share of the requests in
flight it holds and its GPUs' utilisation; the router's figures (as evidence); the load generator's own CPU and
the host's. One verdict per phase, stored with its evidence (``phase_bottlenecks``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchflow.kinds.rules import Rules, Verdict, judge
from benchflow.kinds.serving.workload import phase_of
from benchhost.telemetry.hostload import host_load

SERVER_ROLES = ("prefill", "decode", "single")


def _of(rows: Sequence[Mapping[str, Any]], record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The rows of a phase: config, concurrency, request rate (a client's ``inf``: none) and repeat."""
    return [r for r in rows if phase_of(r) == phase_of(record)]


def _sum(values: Sequence[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return sum(numbers) if numbers else None


def _role_signals(role: str, servers: Sequence[Mapping[str, Any]], gpus: Sequence[Mapping[str, Any]]) -> dict:
    """``role.running``, ``role.queued``, ``role.max_kv_usage``, ``role.preemptions``, ``role.gpu_util_pct`` ..."""
    read = [s for s in servers if s.get("role") == role and s.get("scrapes")]
    names = {s.get("server") for s in servers if s.get("role") == role}
    utils = [
        g["mean_util_gpu_pct"] for g in gpus if g.get("server") in names and g.get("mean_util_gpu_pct") is not None
    ]
    out: dict[str, Any] = {}
    if utils:
        out[f"{role}.gpu_util_pct"] = sum(utils) / len(utils)
        out[f"{role}.gpus"] = ",".join(str(g["gpu_index"]) for g in gpus if g.get("server") in names)
    if not read:
        return out
    kv = [s["max_kv_usage"] for s in read if s.get("max_kv_usage") is not None]
    running, queued = _sum([s.get("mean_running") for s in read]), _sum([s.get("mean_queued") for s in read])
    out |= {f"{role}.running": running, f"{role}.queued": queued, f"{role}.max_kv_usage": max(kv) if kv else None}
    out[f"{role}.preemptions"] = _sum([s.get("preemptions") for s in read])
    if running is not None:
        out[f"{role}.inflight"] = running + (queued or 0.0)
    return out


def signals(
    record: Mapping[str, Any], servers: Sequence[Mapping[str, Any]], gpus: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The signals of one phase (its phases.jsonl record, its servers' and GPUs' rows)."""

    out: dict[str, Any] = {}
    for role in (*SERVER_ROLES, "router"):
        out |= _role_signals(role, servers, gpus)
    present = [r for r in SERVER_ROLES if any(s.get("role") == r for s in servers)]
    inflight = [out.get(f"{r}.inflight") for r in present]
    known = [float(v) for v in inflight if v is not None]
    if present and len(known) == len(present) and (total := sum(known)) > 0:
        out |= {f"{r}.share": out[f"{r}.inflight"] / total for r in present}
    load = host_load(record)
    if load is not None and load.own_cpu_pct is not None and load.online_cpus:
        out["client_core_pct"] = load.own_cpu_pct * load.online_cpus
    if load is not None and load.busy_pct is not None:
        out["host_busy_pct"] = load.busy_pct
    unread = [r for r in present if not any(s.get("scrapes") for s in servers if s.get("role") == r)]
    if unread:  # a role whose metrics were not read: the rules say not enough evidence, naming it
        out["unread_roles"] = float(len(unread))
        out["unread"] = "; ".join(_unread(role, servers) for role in unread)
    notes = sorted({str(s["note"]) for s in servers if s.get("note")})
    if notes and not any(s.get("scrapes") for s in servers):
        out["note"] = "; ".join(notes)
    return out


def _unread(role: str, servers: Sequence[Mapping[str, Any]]) -> str:
    """``prefill (no metrics endpoint (HTTP 404 from …))``: a role whose metrics were not read, and why."""
    notes = sorted({str(s["note"]) for s in servers if s.get("role") == role and s.get("note")})
    return f"{role} ({'; '.join(notes)})" if notes else role


def figures(signals_: Mapping[str, Any]) -> str:
    """Each role's figures in a line: ``decode (GPUs 4,5) 97 % util, 21.0 queued, 3.0 running, KV 42 %``."""
    parts = []
    for role in (*SERVER_ROLES, "router"):
        said = []
        if (util := signals_.get(f"{role}.gpu_util_pct")) is not None:
            said.append(f"GPUs {signals_.get(f'{role}.gpus')} at {util:.0f} %")
        if (running := signals_.get(f"{role}.running")) is not None:
            said.append(f"{running:.1f} running, {signals_.get(f'{role}.queued') or 0.0:.1f} queued")
        if (kv := signals_.get(f"{role}.max_kv_usage")) is not None:
            said.append(f"KV {kv:.0%}")
        if said:
            parts.append(f"{role}: {', '.join(said)}")
    return "; ".join(parts)


def verdict_row(record: Mapping[str, Any], kind: str, start: float, end: float, verdict: Verdict) -> dict[str, Any]:
    key = {k: record.get(k) for k in ("config", "concurrency", "request_rate", "repeat", "warmup", "dtype", "m")}
    return {"kind": kind, **key, "phase_start": start, "phase_end": end} | verdict.columns()


def bottlenecks(
    rows: list[dict[str, Any]],
    run: Any,
    phase_gpus: Sequence[Mapping[str, Any]],
    phase_servers: Sequence[Mapping[str, Any]],
    given: Rules,
) -> list[dict[str, Any]]:
    """One verdict per phase of the run (``run``: benchflow.telemetry.run.RunTelemetry), by ``given`` rules."""
    out = []
    for phase in run.phases:
        found = signals(phase.record, _of(phase_servers, phase.record), _of(phase_gpus, phase.record))
        out.append(verdict_row(phase.record, phase.kind, phase.start, phase.end, judge(found, given, figures(found))))
    return out
