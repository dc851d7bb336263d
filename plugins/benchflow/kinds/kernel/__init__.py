"""Kernel micro-benchmark sweeps: one row per token count M (ms/call, tok/s, us/token, a free note)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchflow.kinds import TELEMETRY_TABLES, Column, ResultKind, Trend, telemetry_columns
from benchflow.kinds.kernel import table
from benchflow.kinds.rules import Rules, judge
from benchflow.params import RUN, SWEEP
from benchflow.telemetry.columns import HOST_LOAD, VALIDITY, ColumnType
from benchhost.telemetry.summary import kernel_rows

if TYPE_CHECKING:
    import pandas as pd

RELATIVE_TOLERANCE = 0.02

# The columns a kernel row gains from the run's telemetry (benchhost.telemetry.summary.kernel_rows)
TELEMETRY: dict[str, ColumnType] = {
    "spread_ratio": "float",  # p90 / p10 of the timed calls
    "energy_window": "text",  # energy_loop | timed
    "energy_s": "float",  # s
    "energy_calls": "int",
    "energy_samples": "int",  # samples inside the window (min over the GPUs)
    "energy_j": "float",  # J
    "energy_method": "text",
    "energy_coverage": "float",  # 0..1
    "j_per_call": "float",  # J per call
    **HOST_LOAD,
    **VALIDITY,
}


def derive(frame: pd.DataFrame) -> pd.DataFrame:
    """tok/s and us/token must agree with ms/call: their relative errors, for the suite to bound."""
    seconds = frame["ms_per_call"] / 1e3
    frame["tok_per_s_rel_err"] = (frame["tok_per_s"] - frame["m"] / seconds).abs() / (frame["m"] / seconds)
    expected_us = 1e3 * frame["ms_per_call"] / frame["m"]
    frame["us_per_token_rel_err"] = (frame["us_per_token"] - expected_us).abs() / expected_us
    return frame


def expectations() -> list[Any]:
    import great_expectations as gx

    e = gx.expectations
    checks: list[Any] = [
        e.ExpectColumnValuesToNotBeNull(column=c) for c in ("m", "ms_per_call", "tok_per_s", "us_per_token")
    ]
    checks += [
        e.ExpectCompoundColumnsToBeUnique(column_list=["m", "repeat"]),
        e.ExpectColumnValuesToBeBetween(column="m", min_value=1),
        e.ExpectColumnValuesToBeBetween(column="ms_per_call", min_value=0, strict_min=True),
        e.ExpectColumnValuesToBeBetween(column="tok_per_s_rel_err", min_value=0, max_value=RELATIVE_TOLERANCE),
        e.ExpectColumnValuesToBeBetween(column="us_per_token_rel_err", min_value=0, max_value=RELATIVE_TOLERANCE),
    ]
    return checks


def plots(rows: pd.DataFrame, title: str) -> list[tuple[str, Any]]:
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(7, 4))
    ordered = rows.sort_values("m")
    axis.loglog(ordered["m"], ordered["us_per_token"], marker="o", base=2)
    axis.set(xlabel="tokens per call, M (tokens)", ylabel="us_per_token (us)", title=f"{title}: us/token against M")
    axis.grid(alpha=0.3, which="both")
    figures = [("us_per_token_vs_m.png", fig)]
    measured = ordered.dropna(subset=["gbps", "roofline_ms", "bytes_read"])
    if len(measured):
        fig, axis = plt.subplots(figsize=(7, 4))
        axis.semilogx(measured["m"], measured["gbps"], marker="o", base=2, label="achieved")
        roof = measured["bytes_read"] / (measured["roofline_ms"] * 1e6)  # GB/s if it ran at the roofline
        axis.semilogx(measured["m"], roof, linestyle="--", color="black", base=2, label="roofline")
        axis.set(xlabel="tokens per call, M (tokens)", ylabel="gbps (GB/s)", title=f"{title}: bandwidth vs roofline")
        axis.grid(alpha=0.3, which="both")
        axis.legend()
        figures.append(("gbps_vs_roofline.png", fig))
    return figures


def _int_field(title: str, unit: str, maximum: int = 1 << 20) -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": 1,
        "maximum": maximum,
        "title": f"{title} ({unit})",
        "description": f"{title} of the benchmarked shape. Unit: {unit}.",
        "section": RUN,
    }


FORM: dict[str, dict[str, Any]] = {
    "m_list": {
        "type": "array",
        "items": {"type": "integer", "minimum": 1, "maximum": 65536},
        "minItems": 1,
        "maxItems": 64,
        "title": "Token counts M (tokens per call)",
        "description": "The token counts M to sweep, one measured case each. Unit: tokens per kernel call.",
        "section": SWEEP,
    },
    "dtype": {
        "type": "string",
        "enum": ["bf16", "fp16", "fp32", "fp8"],
        "title": "Weights dtype",
        "description": "Data type of the weights and activations. Unit: none (a dtype name).",
        "section": RUN,
    },
    "impl": {
        "type": "string",
        "enum": ["auto", "triton", "torch"],
        "title": "Kernel implementation",
        "description": "Which implementation runs: auto picks Triton on a GPU, torch elsewhere. Unit: none.",
        "section": RUN,
    },
    "experts": _int_field("Experts", "experts", 4096),
    "hidden": _int_field("Hidden size", "elements"),
    "inter": _int_field("Intermediate size", "elements"),
    "topk": _int_field("Experts per token, top-k", "experts per token", 64),
}


def telemetry(rows: list[dict[str, Any]], run: Any) -> list[dict[str, Any]]:
    """Each row's spread, joules per call, host load and validity; a row meets its phase by dtype and M."""

    keyed = [{**row, "dtype": run.run_args.get("dtype")} for row in rows]
    return kernel_rows(keyed, run.phases, run.samples, run.limits)


def bottlenecks(rows: list[dict[str, Any]], run: Any, phase_gpus: Any, phase_servers: Any, given: Rules) -> list[dict]:
    """One verdict per row with a roofline (bench_moe.py prints it), by ``given`` rules (``bottleneck.yaml``
    beside this file): memory- or compute-bound and how far from the peak; rows without one get none."""
    out = []
    for row in rows:
        if row.get("pct_roofline") is None:
            continue
        bound = str(row.get("bound") or "")
        signals = {"pct_roofline": row["pct_roofline"], "bound": bound}
        signals |= {"bound_compute": float(bound == "compute"), "bound_memory": float(bound == "memory")}
        found = judge(signals, given, f"{row.get('ms_per_call')} ms/call vs a roofline of {row.get('roofline_ms')} ms")
        key = {"kind": KIND.name, "dtype": run.run_args.get("dtype"), "m": row.get("m"), "repeat": row.get("repeat")}
        out.append(key | found.columns())
    return out


KIND = ResultKind(
    name="kernel",
    description="kernel sweep: one row per token count M",
    formats=(table.FORMAT,),
    table="kernel_results",
    columns=(
        Column("m", "int", "tokens"),
        Column("repeat", "int"),
        Column("ms_per_call", "float", "ms", digits=4),
        Column("tok_per_s", "float", "tok/s", digits=1),
        Column("us_per_token", "float", "us", digits=3),
        Column("note", "text"),
        Column("p10_ms", "float", "ms", digits=4),
        Column("p90_ms", "float", "ms", digits=4),
        Column("kernel_ms", "float", "ms", digits=4),
        Column("experts", "int", "experts"),
        Column("bytes_read", "float", "B"),
        Column("gbps", "float", "GB/s", digits=1),
        Column("tflops", "float", "TFLOP/s", digits=2),
        Column("roofline_ms", "float", "ms", digits=4),
        Column("pct_roofline", "float", "%", digits=1),
        Column("pct_copy_bw", "float", "%", digits=1),
        Column("bound", "text"),
        *telemetry_columns(TELEMETRY),
    ),
    key=("m", "repeat"),
    repeat="repeat",
    defaults={"repeat": 1},
    case_args={"m": "m_list"},
    shown=(
        "m",
        "ms_per_call",
        "tok_per_s",
        "us_per_token",
        "gbps",
        "pct_roofline",
        "bound",
        "note",
        "j_per_call",
        "validity",
    ),
    expectations=expectations,
    derive=derive,
    servers="forbidden",
    trend=(Trend("us_per_token", "lower"), Trend("tok_per_s", "higher")),
    headline="tok_per_s",
    default=True,
    former_names=("kernel_sweep",),
    form=FORM,
    wide_view="kernel_sweep_wide",
    plots=plots,
    telemetry=telemetry,
    rules=Path(__file__).with_name("bottleneck.yaml"),
    bottlenecks=bottlenecks,
    validity="validity",
    side_tables=TELEMETRY_TABLES,
)
