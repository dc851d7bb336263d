"""Metrics read by spec-configured patterns, for a tool no built-in format knows: one row per match, tied to
its case (``case_key``: batch size, M, …) when the pattern says how (see :mod:`.patterns`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from benchflow.kinds import BenchmarkOptions, Column, Measures, ResultKind
from benchflow.kinds.generic import patterns

PatternName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,62}$")]


class Pattern(BaseModel):
    """A metric read by the generic parser: a regex with a ``(?P<value>...)`` group, its unit, and what ties
    each value to its case: a ``(?P<key>...)`` group in the regex itself, or ``key``: a regex with a
    ``(?P<key>...)`` group (the nearest line above that matches it) or the name of another pattern (its
    latest value)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    regex: Annotated[str, StringConstraints(min_length=1, max_length=400)]
    unit: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9/%._ -]{0,32}$")] = ""
    key: Annotated[str, StringConstraints(min_length=1, max_length=400)] | None = Field(
        default=None, description="the case of each value: a regex with (?P<key>...), or another pattern's name"
    )

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        patterns.compile_patterns({"pattern": {"regex": value}})
        return value

    @field_validator("key")
    @classmethod
    def _key_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            patterns.compile_key("pattern", value)  # a name is checked against the other patterns when they are read
        return value


class GenericOptions(BenchmarkOptions):
    """The generic kind's fields of a spec's benchmark section: the patterns that read its metrics."""

    patterns: dict[PatternName, Pattern] = Field(min_length=1, description="metrics: name → regex, unit, key")

    @field_validator("patterns")
    @classmethod
    def _keys_name_patterns(cls, value: dict[str, Pattern]) -> dict[str, Pattern]:
        patterns.compile_patterns({name: p.model_dump() for name, p in value.items()})
        return value

    def parser_options(self) -> dict[str, Any]:
        return {"patterns": {name: p.model_dump() for name, p in self.patterns.items()}}

    def suite_params(self, args: Any) -> dict[str, Any]:
        return {"metrics": sorted(self.patterns)}


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


KIND = ResultKind(
    name="generic",
    description="metrics matched by the spec's patterns: one row per match, in output order",
    formats=(patterns.FORMAT,),
    table="generic_results",
    columns=(
        Column("seq", "int"),
        Column("metric", "text"),
        Column("value", "float"),
        Column("unit", "text"),
        Column("line", "int"),
        Column("case_key", "text"),
    ),
    key=("seq",),
    shown=("seq", "case_key", "metric", "value", "unit", "line"),
    expectations=expectations,
    options=GenericOptions,
    former_names=("generic",),
    servers="optional",
    wide_view="generic_wide",
    measures=Measures(name="metric", value="value", unit="unit", case="case_key"),
)
