"""Kernel micro-benchmark sweeps: one row per token count M (ms/call, tok/s, us/token, a free note)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchflow.kinds import ResultKind
from benchflow.kinds.kernel import table

if TYPE_CHECKING:
    import pandas as pd

RELATIVE_TOLERANCE = 0.02


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
        e.ExpectColumnValuesToBeUnique(column="m"),
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
    axis.set(xlabel="tokens per call (M)", ylabel="us per token", title=f"{title}: us/token against M")
    axis.grid(alpha=0.3, which="both")
    figures = [("us_per_token_vs_m.png", fig)]
    measured = ordered.dropna(subset=["gbps", "roofline_ms", "bytes_read"])
    if len(measured):
        fig, axis = plt.subplots(figsize=(7, 4))
        axis.semilogx(measured["m"], measured["gbps"], marker="o", base=2, label="achieved")
        roof = measured["bytes_read"] / (measured["roofline_ms"] * 1e6)  # GB/s if it ran at the roofline
        axis.semilogx(measured["m"], roof, linestyle="--", color="black", base=2, label="roofline")
        axis.set(xlabel="tokens per call (M)", ylabel="GB/s", title=f"{title}: bandwidth against the roofline")
        axis.grid(alpha=0.3, which="both")
        axis.legend()
        figures.append(("gbps_vs_roofline.png", fig))
    return figures


KIND = ResultKind(
    name="kernel",
    description="kernel sweep: one row per token count M",
    formats=(table.FORMAT,),
    table="kernel_results",
    columns={
        "m": "int",
        "ms_per_call": "float",
        "tok_per_s": "float",
        "us_per_token": "float",
        "note": "text",
        "p10_ms": "float",
        "p90_ms": "float",
        "kernel_ms": "float",
        "experts": "int",
        "bytes_read": "float",
        "gbps": "float",
        "tflops": "float",
        "roofline_ms": "float",
        "pct_roofline": "float",
        "pct_copy_bw": "float",
        "bound": "text",
    },
    key=("m",),
    expectations=expectations,
    derive=derive,
    servers="forbidden",
    display="m AS M, ms_per_call, tok_per_s, us_per_token, round(gbps, 1) AS gb_s, round(pct_roofline, 1) AS "
    "pct_roof, bound, note",
    order_by="m",
    trend={"us_per_token": "lower", "tok_per_s": "higher"},
    headline="tok_per_s",
    case_sql="'m=' || CAST(m AS TEXT)",
    point_sql="'m=' || CAST(m AS TEXT)",
    group_sql="NULL",
    wide_view="kernel_sweep_wide",
    wide_sql="SELECT v.campaign, v.dag_id, v.run_id, v.night, v.host, v.gpu_model, v.run_type, t.m, t.ms_per_call,"
    " t.tok_per_s, t.us_per_token, t.note, t.p10_ms, t.p90_ms, t.kernel_ms, t.experts, t.bytes_read, t.gbps,"
    " t.tflops, t.roofline_ms,"
    " t.pct_roofline, t.pct_copy_bw, t.bound",
    plots=plots,
)
