"""Runs a result kind's Great Expectations suite on its rows, in an ephemeral GX context.

Each kind (:mod:`benchflow.kinds`) declares its expectations; cross-column rules (tok/s ≈ M / s per
call within 2 %) are derived columns that the kind adds and its suite bounds, so every rule is an
ordinary, readable GX expectation with its own result.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from benchflow.records import Validation

if TYPE_CHECKING:
    from benchflow.kinds import ResultKind


def validate_rows(kind: ResultKind, rows: list[dict[str, Any]], **params: Any) -> Validation:
    """Run the suite of ``kind`` over ``rows``; never raises on failed expectations.

    ``params`` reach the kind's expectations (the serving suite takes ``swept``, the levels swept).
    """
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    frame = kind.derive(kind.frame(rows))
    name = kind.name
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = {"globally": False}  # type: ignore[assignment]
    batch = context.data_sources.add_pandas(name).add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
    suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=kind.expectations(**params)))
    definition = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    result = definition.run(batch_parameters={"dataframe": frame}, result_format="COMPLETE")

    outcome = Validation(name, bool(result.success), len(result.results), [], len(rows))
    for item in result.results:
        if item.success:
            continue
        config = item.expectation_config
        assert config is not None  # every result of a suite run carries its expectation
        kwargs = {k: v for k, v in config.kwargs.items() if k not in ("batch_id", "column")}
        column = config.kwargs.get("column", "")
        arguments = [str(column)] if column else []
        arguments += [f"{k}={v}" for k, v in kwargs.items()]
        name = f"{config.type}({', '.join(arguments)})"
        details = item.result or {}
        indexes = details.get("unexpected_index_list") or []
        examples = details.get("partial_unexpected_list") or []
        outcome.failures.append(f"{name}: {details.get('unexpected_count', '?')} unexpected, e.g. {examples[:3]}")
        for index in indexes:
            outcome.row_reasons.setdefault(int(index), []).append(name)
    return outcome
