"""Metrics read by spec-configured patterns, for a tool no built-in format knows: one row per match, tied to
its case (``case_key``: batch size, M, …) when the pattern says how (see :mod:`.patterns`)."""

from __future__ import annotations

from typing import Any

from benchflow.kinds import ResultKind
from benchflow.kinds.generic import patterns


def expectations(metrics: list[str] | None = None) -> list[Any]:
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


def suite_params(benchmark: Any, args: Any) -> dict[str, Any]:
    return {"metrics": sorted(benchmark.patterns)}


def parser_options(benchmark: Any) -> dict[str, Any]:
    return {"patterns": {name: p.model_dump() for name, p in benchmark.patterns.items()}}


KIND = ResultKind(
    name="generic",
    description="metrics matched by the spec's patterns: one row per match, in output order",
    formats=(patterns.FORMAT,),
    table="generic_results",
    columns={"seq": "int", "metric": "text", "value": "float", "unit": "text", "line": "int", "case_key": "text"},
    key=("seq",),
    expectations=expectations,
    suite_params=suite_params,
    parser_options=parser_options,
    takes_patterns=True,
    servers="optional",
    display="seq, case_key, metric, value, unit, line",
    order_by="seq",
    trend={},
    headline="value",
    case_sql="COALESCE(case_key, 'seq=' || CAST(seq AS TEXT))",
    point_sql="COALESCE(case_key, 'seq=' || CAST(seq AS TEXT))",
    group_sql="NULL",
    wide_view="generic_wide",
    wide_sql="SELECT v.campaign, v.dag_id, v.run_id, v.night, v.host, v.gpu_model, v.run_type, t.seq, t.metric,"
    " t.value, t.unit, t.line, t.case_key",
)
