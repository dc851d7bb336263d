"""Serving sweeps (SGLang ``bench_serving``, vLLM ``bench serve``): one row per config × concurrency."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

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
from benchflow.kinds.serving import bottleneck, sglang_jsonl, text_output, vllm_json
from benchflow.kinds.serving.columns import COLUMNS, METRICS
from benchflow.kinds.serving.common import INTS
from benchflow.kinds.serving.search import SearchSpec
from benchflow.params import SERVER, SWEEP
from benchflow.telemetry.columns import HOST_LOAD, VALIDITY

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


def expectations(swept: list[int] | None = None, load_range: tuple[float, float] | None = None) -> list[Any]:
    import great_expectations as gx

    e = gx.expectations
    checks: list[Any] = [
        e.ExpectColumnValuesToNotBeNull(column=c) for c in ("config", "concurrency", "num_prompts", "completed")
    ]
    checks += [
        e.ExpectCompoundColumnsToBeUnique(column_list=["config", "concurrency", "repeat"]),
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
    if swept:
        checks.append(e.ExpectColumnValuesToBeInSet(column="concurrency", value_set=[float(c) for c in swept]))
    if load_range:
        low, high = load_range
        checks.append(e.ExpectColumnValuesToBeBetween(column="concurrency", min_value=low, max_value=high))
    return checks


def suite_params(options: Any, args: Mapping[str, Any]) -> dict[str, Any]:
    """The concurrency levels this run swept (a manual run may sweep others than the spec); a load search
    probes the levels it chooses, within its range."""
    if getattr(options, "search", None) is not None:
        low, high = options.search.range
        return {"load_range": (low, high)}
    return {"swept": list(args["concurrency"])} if "concurrency" in args else {}


def plots(rows: pd.DataFrame, title: str) -> list[tuple[str, Any]]:
    """Throughput and TTFT against concurrency per config (means over the repeats), and each config's
    throughput at each concurrency as bars with their 95 % intervals. Warm-up phases are left out."""
    import matplotlib.pyplot as plt

    measured = rows[~rows["warmup"].astype(bool)] if "warmup" in rows else rows
    means = measured.groupby(["config", "concurrency"], as_index=False)[["output_throughput", "mean_ttft_ms"]].mean()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for config, group in means.sort_values(["config", "concurrency"]).groupby("config"):
        left.plot(group["concurrency"], group["output_throughput"], marker="o", label=str(config))
        right.plot(group["concurrency"], group["mean_ttft_ms"], marker="o", label=str(config))
    left.set(xlabel="concurrency", ylabel="output tok/s", title=f"{title}: throughput")
    right.set(xlabel="concurrency", ylabel="mean TTFT (ms)", title=f"{title}: time to first token")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend()
    return [("serving_vs_concurrency.png", fig), ("configs_with_intervals.png", _bars(measured, title))]


def _bars(measured: pd.DataFrame, title: str) -> Any:
    import matplotlib.pyplot as plt

    from benchflow.stats import summarize

    configs = sorted(measured["config"].unique())
    levels = sorted(measured["concurrency"].dropna().unique())
    width = 0.8 / max(len(configs), 1)
    fig, axis = plt.subplots(figsize=(max(6, 1.6 * len(levels) * max(len(configs), 1)), 4))
    for n, config in enumerate(configs):
        heights: list[float] = []
        errors: list[list[float]] = [[], []]
        for level in levels:
            values = measured[(measured["config"] == config) & (measured["concurrency"] == level)]
            summary = (
                summarize(values["output_throughput"].dropna()) if values["output_throughput"].notna().any() else None
            )
            heights.append(summary.mean if summary else 0.0)
            errors[0].append(summary.mean - summary.ci_low if summary else 0.0)
            errors[1].append(summary.ci_high - summary.mean if summary else 0.0)
        positions = [i + n * width for i in range(len(levels))]
        axis.bar(positions, heights, width, yerr=errors, capsize=4, label=str(config))
    axis.set_xticks([i + width * (len(configs) - 1) / 2 for i in range(len(levels))], [str(int(c)) for c in levels])
    axis.set(xlabel="concurrency", ylabel="output tok/s (mean, 95 % CI)", title=f"{title}: configs compared")
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


class ServingOptions(BenchmarkOptions):
    """The serving kind's fields of a spec's benchmark section: repeats and warm-up of a fixed sweep, or a load
    search (``search``) in place of the fixed levels."""

    repeats: int = Field(default=3, ge=1, le=20, description="runs of each phase, back to back (95 % intervals)")
    warmup: bool = Field(default=False, description="one warm-up phase first, kept but marked")
    search: SearchSpec | None = Field(default=None, description="the most load within an SLO, searched on the host")

    @field_validator("search")
    @classmethod
    def _by_concurrency(cls, value: SearchSpec | None) -> SearchSpec | None:
        """A result row is keyed by its concurrency (config, concurrency, repeat): a search over request_rate
        (probes without a concurrency limit) has no row key yet, so it is refused here rather than on the host."""
        if value is not None and value.over != "concurrency":
            raise ValueError("a search over request_rate is not supported yet: result rows are keyed by concurrency")
        return value


def config_args(options: Any, config: Any) -> dict[str, Any]:
    """The sweep driver's contract: the config's label, where its endpoint listens, repeats and warm-up, and the
    load search when the spec has one (the driver then probes its loads instead of the fixed levels)."""
    args = {
        "label": config.name,
        "base_url": f"http://127.0.0.1:{config.endpoint.port}",
        "repeats": options.repeats,
        "warmup": options.warmup,
    }
    if options.search is not None:
        args["search"] = options.search.argument()
    return args


_LEVELS = {"type": "array", "minItems": 1, "maxItems": 64}
FORM: dict[str, dict[str, Any]] = {
    "concurrency": {
        **_LEVELS,
        "items": {"type": "integer", "minimum": 1, "maximum": 4096},
        "title": "Concurrency levels (requests in flight)",
        "description": "Client concurrency of each phase. Unit: requests in flight at once. "
        "Goes with Prompts per phase by position (the n-th prompts count is for the "
        "n-th level): change both together, as lists of one length; a run that "
        "changes the levels alone, or gives two lengths, is refused before it starts.",
        "section": SWEEP,
    },
    "prompts": {
        **_LEVELS,
        "items": {"type": "integer", "minimum": 1, "maximum": 100000},
        "title": "Prompts per phase (prompts)",
        "description": "Prompts sent in each phase, one number per concurrency level, in the same "
        "order (as many numbers as levels). Unit: prompts.",
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


def failed_from_requests(rows: list[dict[str, Any]], sides: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """``failed`` of each row whose output has none (SGLang's block and record print no failed count) from the
    phase's requests that the client saved (``requests.jsonl``: SGLang's ``--output-details`` errors, vLLM's
    detailed result): the requests of its config, load and repeat that did not succeed. Rows of a phase with no
    saved request keep None."""
    counts: dict[tuple[Any, ...], int] = {}
    for request in sides.get(REQUESTS.table) or []:
        key = _phase_key(request)
        counts[key] = counts.get(key, 0) + (0 if request.get("ok") else 1)
    filled = []
    for row in rows:
        key = _phase_key(row)
        if row.get("failed") is None and key in counts:
            row = {**row, "failed": counts[key]}
        filled.append(row)
    return filled


def _phase_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """A phase: config, concurrency (or, for a request-rate probe without one, its rate), repeat."""
    rate, repeat = row.get("request_rate"), row.get("repeat")
    load = row.get("concurrency") if row.get("concurrency") is not None else None if rate is None else float(rate)
    return row.get("config"), row.get("concurrency") is None, load, 1 if repeat is None else repeat


def telemetry(rows: list[dict[str, Any]], run: Any) -> list[dict[str, Any]]:
    """Each row's joules per output token over its phase's steady state, host load and validity; the GPUs of a
    config are its servers' (``gpus`` in the spec), so prefill and decode GPUs are told apart."""
    from benchhost.telemetry.summary import serving_rows

    return serving_rows(rows, run.requests, run.phases, run.samples, run.gpu_servers, run.limits)


KIND = ResultKind(
    name="serving",
    description="serving sweep: one row per config and concurrency, every figure of the client's result",
    formats=(text_output.FORMAT, sglang_jsonl.FORMAT, vllm_json.FORMAT),
    table="serving_results",
    columns=(*(_column(name) for name in COLUMNS), *telemetry_columns(TELEMETRY)),
    key=("config", "concurrency", "repeat"),
    shown=(
        "config",
        "concurrency",
        "repeat",
        "warmup",
        "num_prompts",
        "completed",
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
    suite_params=suite_params,
    servers="required",
    trend=(Trend("output_throughput", "higher"), Trend("mean_ttft_ms", "lower"), Trend("mean_tpot_ms", "lower")),
    headline="output_throughput",
    repeat="repeat",
    group="config",
    warmup="warmup",
    options=ServingOptions,
    former_names=("serving_log",),
    form=FORM,
    paired=(("concurrency", "prompts"),),
    config_args=config_args,
    wide_view="serving_wide",
    defaults={"repeat": 1, "warmup": False},
    row_defaults=("input_len", "output_len", "num_prompts"),  # the run's arguments, where the output has none
    side_tables=(REQUESTS, SEARCH, *TELEMETRY_TABLES),
    telemetry=telemetry,
    bottlenecks=bottleneck.bottlenecks,
    validity="validity",
    from_side_files=failed_from_requests,
    plots=plots,
)
