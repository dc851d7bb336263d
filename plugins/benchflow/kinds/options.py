"""The base of a kind's own fields in a spec's ``benchmark`` section (``patterns`` of the generic kind, ``repeats``
and ``warmup`` of serving): a strict pydantic model that :mod:`benchflow.spec` combines with the fields every
benchmark has, so an unknown or misplaced field is reported by file, line and field like any other."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class BenchmarkOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
