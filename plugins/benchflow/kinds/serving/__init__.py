"""Serving sweeps (SGLang ``bench_serving``, vLLM ``bench serve``): one row per config × load (a concurrency, a
request rate, or both) × repeat."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from benchflow.analysis.stats import summarize
from benchflow.kinds import (
    LOAD_SEARCH,
    TELEMETRY_TABLES,
    BenchmarkOptions,
    Column,
    ColumnType,
    ResultKind,
    SideTable,
    Trend,
    telemetry_columns,
)
from benchflow.kinds.serving import bottleneck, sglang_jsonl, text_output, vllm_json, workload
from benchflow.kinds.serving.columns import COLUMNS, METRICS
from benchflow.kinds.serving.common import INTS
from benchflow.kinds.serving.search import SearchSpec
from benchflow.kinds.serving.workload import WORKLOAD_COLUMNS, WORKLOAD_UNITS, Dataset
from benchflow.params import SERVER, SWEEP
from benchflow.telemetry.columns import HOST_LOAD, VALIDITY
from benchhost.telemetry.summary import serving_rows

if TYPE_CHECKING:
    import pandas as pd

RELATIVE_TOLERANCE = 0.02
DURATION_PRINTED_TO = 0.005  # seconds: half the last digit of "Benchmark duration (s):  1.04"
_INTS = set(INTS)

# The columns a serving row gains from the run's telemetry (benchhost.telemetry.summary.serving_rows)
TELEMETRY: dict[str, ColumnType] = {
    "steady_start": "float",  # epoch s
    "steady_end": "float",
    "steady_s": "float",  # s
    "steady_why": "text",
    "energy_gpus": "text",  # the GPUs counted, e.g. "0,1,2,3"
    "steady_tokens": "int",  # output tokens produced in the steady state
    "steady_energy_j": "float",  # J
    "energy_method": "text",
    "j_per_token": "float",  # J per output token over the steady state
    "phase_energy_j": "float",  # J, first request sent → last answered
    "phase_tokens": "int",
    "j_per_token_phase": "float",  # J per output token over the whole phase
    **HOST_LOAD,
    **VALIDITY,
}
# The times a request row gains (the sweep driver's requests.jsonl)
REQUEST_TIMES: dict[str, ColumnType] = {
    "start_s": "float",  # epoch s, request sent
    "first_token_s": "float",  # epoch s, first token (null: failed)
    "end_s": "float",  # epoch s, last token (null: failed)
}


def derive(frame: pd.DataFrame) -> pd.DataFrame:
    frame["load_key"] = [_load_key(c, q) for c, q in zip(frame["concurrency"], frame["request_rate"], strict=True)]
    frame["unaccounted_prompts"] = frame["num_prompts"] - frame["completed"] - frame["failed"]
    frame["e2e_minus_ttft_ms"] = frame["mean_e2e_ms"] - frame["mean_ttft_ms"]
    for metric in METRICS:
        frame[f"p99_minus_median_{metric}_ms"] = frame[f"p99_{metric}_ms"] - frame[f"median_{metric}_ms"]
    expected = frame["total_output_tokens"] / frame["duration_s"]
    # Clients print the duration to 2 decimals: on a sub-second phase that alone moves tokens / duration by
    # several per cent, so the deviation the rounding can explain (half a hundredth of a second) is forgiven.
    rounding = frame["total_output_tokens"] * DURATION_PRINTED_TO / frame["duration_s"] ** 2
    excess = ((frame["output_throughput"] - expected).abs() - rounding).clip(lower=0)
    frame["output_throughput_rel_err"] = excess / expected
    return frame


LOAD_AXES = ("concurrency", "request_rate")


def expectations(
    swept: dict[str, list[Any]] | list[int] | None = None, load_range: tuple[str, float, float] | None = None
) -> list[Any]:
    import great_expectations as gx

    e = gx.expectations
    checks: list[Any] = [
        e.ExpectColumnValuesToNotBeNull(column=c) for c in ("config", "load_key", "num_prompts", "completed")
    ]
    checks += [
        e.ExpectCompoundColumnsToBeUnique(column_list=["config", "load_key", "repeat"]),
        e.ExpectColumnValuesToBeBetween(column="completed", min_value=1),
        e.ExpectColumnValuesToBeBetween(column="unaccounted_prompts", min_value=0, max_value=0),
        e.ExpectColumnValuesToBeBetween(column="e2e_minus_ttft_ms", min_value=0),
        e.ExpectColumnValuesToBeBetween(column="output_throughput_rel_err", min_value=0, max_value=RELATIVE_TOLERANCE),
    ]
    checks += [e.ExpectColumnValuesToBeBetween(column=f"mean_{m}_ms", min_value=0) for m in METRICS]
    checks += [e.ExpectColumnValuesToBeBetween(column=f"p99_minus_median_{m}_ms", min_value=0) for m in METRICS]
    checks += [
        e.ExpectColumnValuesToBeBetween(column=c, min_value=0, strict_min=True)
        for c in ("request_throughput", "output_throughput", "duration_s")
    ]
    if isinstance(swept, list):  # the concurrency levels alone (before request rates)
        swept = {"concurrency": swept}
    for axis, levels in (swept or {}).items():
        checks.append(e.ExpectColumnValuesToBeInSet(column=axis, value_set=[float(v) for v in levels]))
    if load_range:
        axis, low, high = load_range
        checks.append(e.ExpectColumnValuesToBeBetween(column=axis, min_value=low, max_value=high))
    return checks


def _load_key(concurrency: Any, rate: Any) -> str | None:
    """A phase's load as one value (the suite's key): ``c8``, ``q4``, ``c64q4``; None when it has neither."""
    parts = [f"{p}{float(v):g}" for p, v in (("c", concurrency), ("q", rate)) if v is not None and math.isfinite(v)]
    return "".join(parts) or None


def plots(rows: pd.DataFrame, title: str) -> list[tuple[str, Any]]:
    """Throughput and TTFT against the load (concurrency or request rate) per config (means over the repeats), and
    each config's throughput at each load as bars with their 95 % intervals. Warm-up phases are left out."""
    import matplotlib.pyplot as plt

    measured = rows[~rows["warmup"].astype(bool)] if "warmup" in rows else rows
    axis_name = KIND.axis(measured)
    means = measured.groupby(["config", axis_name], as_index=False)[["output_throughput", "mean_ttft_ms"]].mean()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for config, group in means.sort_values(["config", axis_name]).groupby("config"):
        left.plot(group[axis_name], group["output_throughput"], marker="o", label=str(config))
        right.plot(group[axis_name], group["mean_ttft_ms"], marker="o", label=str(config))
    heading = KIND.column(axis_name).heading
    left.set(xlabel=heading, ylabel="output tok/s", title=f"{title}: throughput")
    right.set(xlabel=heading, ylabel="mean TTFT (ms)", title=f"{title}: time to first token")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend()
    return [(f"serving_vs_{axis_name}.png", fig), ("configs_with_intervals.png", _bars(measured, title, axis_name))]


def _bars(measured: pd.DataFrame, title: str, axis_name: str) -> Any:
    import matplotlib.pyplot as plt

    configs = sorted(measured["config"].unique())
    levels = sorted(measured[axis_name].dropna().unique())
    width = 0.8 / max(len(configs), 1)
    fig, axis = plt.subplots(figsize=(max(6, 1.6 * len(levels) * max(len(configs), 1)), 4))
    for n, config in enumerate(configs):
        heights: list[float] = []
        errors: list[list[float]] = [[], []]
        for level in levels:
            values = measured[(measured["config"] == config) & (measured[axis_name] == level)]
            summary = (
                summarize(values["output_throughput"].dropna()) if values["output_throughput"].notna().any() else None
            )
            heights.append(summary.mean if summary else 0.0)
            errors[0].append(summary.mean - summary.ci_low if summary else 0.0)
            errors[1].append(summary.ci_high - summary.mean if summary else 0.0)
        positions = [i + n * width for i in range(len(levels))]
        axis.bar(positions, heights, width, yerr=errors, capsize=4, label=str(config))
    axis.set_xticks([i + width * (len(configs) - 1) / 2 for i in range(len(levels))], [f"{c:g}" for c in levels])
    axis.set(xlabel=KIND.column(axis_name).heading, ylabel="output tok/s (mean, 95 % CI)")
    axis.set(title=f"{title}: configs compared")
    axis.grid(alpha=0.3, axis="y")
    axis.legend()
    return fig


UNITS = {
    "concurrency": "requests",
    "num_prompts": "prompts",
    "input_len": "tokens",
    "output_len": "tokens",
    "completed": "requests",
    "failed": "requests",
    "duration_s": "s",
    "total_input_tokens": "tokens",
    "total_output_tokens": "tokens",
    "request_throughput": "req/s",
    "input_throughput": "tok/s",
    "output_throughput": "tok/s",
    "total_throughput": "tok/s",
    "peak_output_throughput": "tok/s",
    "peak_concurrent_requests": "requests",
    "request_rate": "req/s",
    "goodput": "req/s",
    "accept_length": "tokens",
}
SHOWN_DIGITS = {"output_throughput": 1, "mean_ttft_ms": 2, "mean_tpot_ms": 2, "mean_itl_ms": 2, "mean_e2e_ms": 1}


def _column(name: str) -> Column:
    kind: ColumnType = (
        "text" if name == "config" else "bool" if name == "warmup" else "int" if name in _INTS else "float"
    )
    unit = "ms" if name.endswith("_ms") else UNITS.get(name, "")
    return Column(name, kind, unit, digits=SHOWN_DIGITS.get(name, 2 if kind == "float" else None))


def _workload_columns() -> tuple[Column, ...]:
    return tuple(
        Column(name, kind, WORKLOAD_UNITS.get(name, ""), digits=3 if kind == "float" else None)
        for name, kind in WORKLOAD_COLUMNS.items()
    )


class ServingOptions(BenchmarkOptions):
    """The serving kind's fields of a spec's benchmark section: repeats and warm-up of a fixed sweep, or a load
    search (``search``) in place of the fixed levels, and the dataset the phases send."""

    repeats: int = Field(default=3, ge=1, le=20, description="runs of each phase, back to back (95 % intervals)")
    warmup: bool = Field(default=False, description="one warm-up phase first, kept but marked")
    search: SearchSpec | None = Field(default=None, description="the most load within an SLO, searched on the host")

    dataset: Dataset | None = Field(default=None, description="what each phase sends (default: fixed-length random)")

    def suite_params(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The levels this run swept on its load axis (a manual run may sweep others than the spec); a load search
        probes the levels it chooses, within its range."""
        if self.search is not None:
            low, high = self.search.range
            return {"load_range": (self.search.over, low, high)}
        return {"swept": {axis: list(args[axis]) for axis in LOAD_AXES if axis in args}}

    def config_args(self, config: Any) -> dict[str, Any]:
        """The sweep driver's contract: the config's label, where its endpoint listens, repeats and warm-up, and the
        load search when the spec has one (the driver then probes its loads instead of the fixed levels)."""
        args = {
            "label": config.name,
            "base_url": f"http://127.0.0.1:{config.endpoint.port}",
            "repeats": self.repeats,
            "warmup": self.warmup,
        }
        if self.search is not None:
            args["search"] = self.search.argument()
        if self.dataset is not None:
            args["dataset"] = self.dataset.argument()
        return args

    def shipped(self) -> list[Path]:
        """The dataset file the payload takes to the host, when the spec names one of include/datasets/."""
        return self.dataset.shipped() if self.dataset is not None else []

    def row_values(self) -> dict[str, Any]:
        """Every row's dataset and its sha256 (the driver checks the file against it on the host)."""
        return workload.row_values(self.dataset)


_LEVELS = {"type": "array", "minItems": 1, "maxItems": 64}
FORM: dict[str, dict[str, Any]] = {
    "concurrency": {
        **_LEVELS,
        "uniqueItems": True,  # two phases of one level would be one case twice: refused before the run, not after
        "items": {"type": "integer", "minimum": 1, "maximum": 4096},
        "title": "Concurrency levels (requests in flight)",
        "description": "Client concurrency of each phase. Unit: requests in flight at once. "
        "Goes with Prompts per phase by position (the n-th prompts count is for the "
        "n-th level): change both together, as lists of one length; a run that "
        "changes the levels alone, or gives two lengths, is refused before it starts.",
        "section": SWEEP,
    },
    "request_rate": {
        **_LEVELS,
        "uniqueItems": True,
        "items": {"type": "number", "exclusiveMinimum": 0, "maximum": 100000},
        "title": "Request rates (requests/s)",
        "description": "Requests sent per second in each phase, on the arrival process of Burstiness (1: Poisson), "
        "in place of concurrency levels. Unit: requests per second. Goes with Prompts per phase by position, "
        "like concurrency levels.",
        "section": SWEEP,
    },
    "burstiness": {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 100,
        "title": "Burstiness (gamma shape)",
        "description": "Arrivals of a request-rate sweep: 1 is a Poisson process, below 1 burstier, above 1 more "
        "even (gamma-distributed gaps; the vLLM client only, SGLang's sends Poisson). Unit: none.",
        "section": SWEEP,
    },
    "max_concurrency": {
        "type": "integer",
        "minimum": 1,
        "maximum": 4096,
        "title": "Concurrency cap of a request-rate sweep (requests in flight)",
        "description": "The most requests in flight while sending at a rate (none: no cap). Unit: requests.",
        "section": SWEEP,
    },
    "prompts": {
        **_LEVELS,
        "items": {"type": "integer", "minimum": 1, "maximum": 100000},
        "title": "Prompts per phase (prompts)",
        "description": "Prompts sent in each phase, one number per level (concurrency or request rate), in the "
        "same order (as many numbers as levels). Unit: prompts.",
        "section": SWEEP,
    },
    "input_len": {
        "type": "integer",
        "minimum": 1,
        "maximum": 1048576,
        "title": "Input length (tokens)",
        "description": "Input tokens of every prompt. Unit: tokens.",
        "section": SWEEP,
    },
    "output_len": {
        "type": "integer",
        "minimum": 1,
        "maximum": 1048576,
        "title": "Output length (tokens)",
        "description": "Output tokens generated per prompt. Unit: tokens.",
        "section": SWEEP,
    },
    "client": {
        "type": "string",
        "enum": ["local", "sglang", "vllm"],
        "title": "Benchmark client",
        "description": "The load generator that drives the servers. Unit: none (a client name).",
        "section": SERVER,
    },
}

REQUESTS = SideTable(
    table="serving_requests",
    columns=(
        Column("config", "text"),
        Column("concurrency", "int", "requests"),
        Column("request_rate", "float", "req/s"),
        Column("repeat", "int"),
        Column("seq", "int"),
        Column("ok", "bool"),
        Column("input_len", "int", "tokens"),
        Column("output_tokens", "int", "tokens"),
        Column("ttft_ms", "float", "ms"),
        Column("e2e_ms", "float", "ms"),
        Column("mean_itl_ms", "float", "ms"),
        Column("error", "text"),
        *telemetry_columns(REQUEST_TIMES),
        Column("cached_tokens", "int", "tokens"),
    ),
    file="requests.jsonl",
    defaults={"repeat": 1, "error": ""},
)


def search_row(record: dict[str, Any]) -> dict[str, Any]:
    """A ``search.jsonl`` record (the sweep driver's, one per config) as a ``serving_search`` row: the section's
    settings and the answer flat, the SLO and the probes' trail as JSON text."""
    low, high = (record.get("range") or [None, None])[:2]
    budget = record.get("budget") or {}
    flat = {k: v for k, v in record.items() if k not in ("range", "budget", "slo", "trail")}
    return {
        **flat,
        "range_low": low,
        "range_high": high,
        "budget_probes": budget.get("probes"),
        "budget_seconds": budget.get("seconds"),
        "slo": json.dumps(record.get("slo") or {}, sort_keys=True),
        "trail": json.dumps(record.get("trail") or []),
    }


SEARCH = SideTable(
    table="serving_search",
    columns=(
        Column("config", "text"),
        Column("over", "text"),
        Column("range_low", "float", "requests"),
        Column("range_high", "float", "requests"),
        Column("slo", "text"),
        Column("confidence", "float"),
        Column("precision", "float"),
        Column("prompts_per_probe", "int", "prompts"),
        Column("repeats", "int"),
        Column("budget_probes", "int"),
        Column("budget_seconds", "float", "s"),
        Column("reason", "text"),
        Column("pass_load", "float", "requests", "highest load that passed"),
        Column("fail_load", "float", "requests", "lowest load that failed"),
        Column("fail_verdict", "text"),
        Column("probes", "int"),
        Column("loads", "int"),
        Column("seconds", "float", "s"),
        Column("goodput_rps", "float", "req/s", "goodput at the answer"),
        Column("trail", "text"),
    ),
    file="search.jsonl",
    prepare=search_row,
    role=LOAD_SEARCH,
    trend=(Trend("pass_load", "higher", bracket="fail_load"),),  # the answer: a lower one is a regression
    case=("config",),
    point="search",
    judged_by=("config",),  # an answer rests on every probe of its config: one contended probe and it is not ok
)


def from_requests(rows: list[dict[str, Any]], sides: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """What each row's phase requests (``requests.jsonl``, as the client saved them) tell: ``failed`` where the
    output has none (SGLang's block and record print no failed count: the requests of its config, load and repeat
    that did not succeed; rows of a phase with no saved request keep None), and what the workload did (the rate
    sent and whether it reached the requested one, the achieved lengths, the prefix-cache reuse)."""
    by_phase: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for request in sides.get(REQUESTS.table) or []:
        by_phase.setdefault(workload.phase_of(request), []).append(request)
    filled = []
    for row in rows:
        requests = by_phase.get(workload.phase_of(row))
        if row.get("failed") is None and requests is not None:
            row = {**row, "failed": sum(0 if r.get("ok") else 1 for r in requests)}
        filled.append({**row, **workload.workload_columns(row, requests or [])})
    return filled


def telemetry(rows: list[dict[str, Any]], run: Any) -> list[dict[str, Any]]:
    """Each row's joules per output token over its phase's steady state, host load and validity; the GPUs of a
    config are its servers' (``gpus`` in the spec), so prefill and decode GPUs are told apart."""

    return serving_rows(rows, run.requests, run.phases, run.samples, run.gpu_servers, run.limits)


KIND = ResultKind(
    name="serving",
    description="serving sweep: one row per config and load (concurrency or request rate), every figure of the "
    "client's result",
    formats=(text_output.FORMAT, sglang_jsonl.FORMAT, vllm_json.FORMAT),
    table="serving_results",
    columns=(*(_column(name) for name in COLUMNS), *telemetry_columns(TELEMETRY), *_workload_columns()),
    key=("config", "concurrency", "request_rate", "repeat"),
    sparse=LOAD_AXES,
    comparable_by=("dataset", "dataset_sha256"),
    row_notes=workload.rate_notes,
    shown=(
        "config",
        "concurrency",
        "request_rate",
        "repeat",
        "warmup",
        "num_prompts",
        "completed",
        "achieved_rate",
        "prefix_cache_hit_rate",
        "output_throughput",
        "mean_ttft_ms",
        "mean_tpot_ms",
        "mean_itl_ms",
        "mean_e2e_ms",
        "j_per_token",
        "validity",
    ),
    expectations=expectations,
    derive=derive,
    servers="required",
    trend=(Trend("output_throughput", "higher"), Trend("mean_ttft_ms", "lower"), Trend("mean_tpot_ms", "lower")),
    headline="output_throughput",
    repeat="repeat",
    group="config",
    warmup="warmup",
    options=ServingOptions,
    former_names=("serving_log",),
    form=FORM,
    paired=(("concurrency", "prompts"), ("request_rate", "prompts")),
    wide_view="serving_wide",
    defaults={"repeat": 1, "warmup": False},
    row_defaults=(
        "input_len",
        "output_len",
        "num_prompts",
        "burstiness",
    ),  # the run's arguments, where the output has none
    side_tables=(REQUESTS, SEARCH, *TELEMETRY_TABLES),
    telemetry=telemetry,
    rules=Path(__file__).with_name("bottleneck.yaml"),
    bottlenecks=bottleneck.bottlenecks,
    validity="validity",
    from_side_files=from_requests,
    plots=plots,
)
