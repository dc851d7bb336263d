"""Great Expectations suites, one per result kind, run on a pandas frame in an ephemeral context.

GX checks columns; the cross-column consistency rules (tok/s ≈ M / s per call within 2%) are
expressed as derived relative-error columns that the suite bounds, so every rule is an ordinary,
readable GX expectation with its own result.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KERNEL_SUITE = "kernel_sweep"
SERVING_SUITE = "serving"
RELATIVE_TOLERANCE = 0.02
LATENCIES = ("ttft", "tpot", "itl", "e2e")


@dataclass
class ValidationOutcome:
    suite: str
    success: bool
    evaluated: int
    failed: list[str] = field(default_factory=list)
    # row position → reasons, for rows that a failed expectation names
    row_reasons: dict[int, list[str]] = field(default_factory=dict)

    def summary(self) -> str:
        if self.success:
            return f"GX suite {self.suite!r}: all {self.evaluated} expectations passed"
        lines = [f"GX suite {self.suite!r}: {len(self.failed)} of {self.evaluated} expectations failed:"]
        lines += [f"  - {item}" for item in self.failed]
        return "\n".join(lines)


def _kernel_frame(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    frame = pd.DataFrame.from_records(rows, columns=["m", "ms_per_call", "tok_per_s", "us_per_token", "note"])
    seconds = frame["ms_per_call"] / 1e3
    frame["tok_per_s_rel_err"] = (frame["tok_per_s"] - frame["m"] / seconds).abs() / (frame["m"] / seconds)
    expected_us = 1e3 * frame["ms_per_call"] / frame["m"]
    frame["us_per_token_rel_err"] = (frame["us_per_token"] - expected_us).abs() / expected_us
    return frame


def _kernel_expectations(**_: Any) -> list[Any]:
    import great_expectations as gx

    e = gx.expectations
    numeric = ("m", "ms_per_call", "tok_per_s", "us_per_token")
    checks: list[Any] = [e.ExpectColumnValuesToNotBeNull(column=c) for c in numeric]
    checks += [
        e.ExpectColumnValuesToBeUnique(column="m"),
        e.ExpectColumnValuesToBeBetween(column="m", min_value=1),
        e.ExpectColumnValuesToBeBetween(column="ms_per_call", min_value=0, strict_min=True),
        e.ExpectColumnValuesToBeBetween(column="tok_per_s_rel_err", min_value=0, max_value=RELATIVE_TOLERANCE),
        e.ExpectColumnValuesToBeBetween(column="us_per_token_rel_err", min_value=0, max_value=RELATIVE_TOLERANCE),
    ]
    return checks


def _serving_frame(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    from benchflow.parsers.serving import COLUMNS

    frame = pd.DataFrame.from_records(rows, columns=list(COLUMNS)).astype({"config": "object"})
    numeric = [c for c in COLUMNS if c != "config"]
    frame[numeric] = frame[numeric].apply(pd.to_numeric, errors="coerce").astype("float64")
    frame["unaccounted_prompts"] = frame["num_prompts"] - frame["completed"] - frame["failed"]
    frame["e2e_minus_ttft_ms"] = frame["mean_e2e_ms"] - frame["mean_ttft_ms"]
    for metric in LATENCIES:
        frame[f"p99_minus_median_{metric}_ms"] = frame[f"p99_{metric}_ms"] - frame[f"median_{metric}_ms"]
    expected = frame["total_output_tokens"] / frame["duration_s"]
    frame["output_throughput_rel_err"] = (frame["output_throughput"] - expected).abs() / expected
    return frame


def _serving_expectations(swept: list[int] | None = None) -> list[Any]:
    import great_expectations as gx

    e = gx.expectations
    checks: list[Any] = [
        e.ExpectColumnValuesToNotBeNull(column=c) for c in ("config", "concurrency", "num_prompts", "completed")
    ]
    checks += [
        e.ExpectCompoundColumnsToBeUnique(column_list=["config", "concurrency"]),
        e.ExpectColumnValuesToBeBetween(column="completed", min_value=1),
        e.ExpectColumnValuesToBeBetween(column="unaccounted_prompts", min_value=0, max_value=0),
        e.ExpectColumnValuesToBeBetween(column="e2e_minus_ttft_ms", min_value=0),
        e.ExpectColumnValuesToBeBetween(column="output_throughput_rel_err", min_value=0, max_value=RELATIVE_TOLERANCE),
    ]
    checks += [e.ExpectColumnValuesToBeBetween(column=f"mean_{m}_ms", min_value=0) for m in LATENCIES]
    checks += [e.ExpectColumnValuesToBeBetween(column=f"p99_minus_median_{m}_ms", min_value=0) for m in LATENCIES]
    checks += [
        e.ExpectColumnValuesToBeBetween(column=c, min_value=0, strict_min=True)
        for c in ("request_throughput", "output_throughput", "duration_s")
    ]
    if swept:
        checks.append(e.ExpectColumnValuesToBeInSet(column="concurrency", value_set=[float(c) for c in swept]))
    return checks


def _generic_frame(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    return pd.DataFrame.from_records(rows, columns=["seq", "metric", "value", "unit", "line"])


def _generic_expectations(metrics: list[str] | None = None) -> list[Any]:
    import great_expectations as gx

    e = gx.expectations
    checks: list[Any] = [e.ExpectColumnValuesToNotBeNull(column=c) for c in ("metric", "value", "line")]
    checks += [
        e.ExpectColumnValuesToBeUnique(column="seq"),
        e.ExpectColumnValuesToBeBetween(column="line", min_value=1),
    ]
    if metrics:
        checks.append(e.ExpectColumnValuesToBeInSet(column="metric", value_set=metrics))
    return checks


SUITES: dict[str, tuple[Callable[..., Any], Callable[..., list[Any]]]] = {
    KERNEL_SUITE: (_kernel_frame, _kernel_expectations),
    SERVING_SUITE: (_serving_frame, _serving_expectations),
    "generic": (_generic_frame, _generic_expectations),
}


def validate_rows(kind: str, rows: list[dict[str, Any]], **params: Any) -> ValidationOutcome:
    """Run the suite for ``kind`` over ``rows``; never raises on failed expectations.

    ``params`` reach the suite (the serving suite takes ``swept``, the concurrency levels swept).
    """
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    make_frame, make_expectations = SUITES[kind]
    frame = make_frame(rows)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = {"globally": False}  # type: ignore[assignment]
    batch = context.data_sources.add_pandas(kind).add_dataframe_asset(kind).add_batch_definition_whole_dataframe(kind)
    suite = context.suites.add(gx.ExpectationSuite(name=kind, expectations=make_expectations(**params)))
    definition = context.validation_definitions.add(gx.ValidationDefinition(name=kind, data=batch, suite=suite))
    result = definition.run(batch_parameters={"dataframe": frame}, result_format="COMPLETE")

    outcome = ValidationOutcome(kind, bool(result.success), len(result.results))
    for item in result.results:
        if item.success:
            continue
        config = item.expectation_config
        assert config is not None  # every result of a suite run carries its expectation
        kwargs = {k: v for k, v in config.kwargs.items() if k not in ("batch_id", "column")}
        column = config.kwargs.get("column", "")
        name = f"{config.type}({column}{', ' if kwargs else ''}{', '.join(f'{k}={v}' for k, v in kwargs.items())})"
        details = item.result or {}
        indexes = details.get("unexpected_index_list") or []
        examples = details.get("partial_unexpected_list") or []
        outcome.failed.append(
            f"{name}: {details.get('unexpected_count', '?')} unexpected, e.g. {examples[:3]}"
        )
        for index in indexes:
            outcome.row_reasons.setdefault(int(index), []).append(name)
    return outcome
