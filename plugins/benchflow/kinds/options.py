"""The base of a kind's own fields in a spec's ``benchmark`` section (``patterns`` of the generic kind, ``repeats``
and ``warmup`` of serving): a strict pydantic model that :mod:`benchflow.spec` combines with the fields every
benchmark has, so an unknown or misplaced field is reported by file, line and field like any other.

The model also says what its fields mean to the rest of a run, each a method a kind overrides where it has
something to say (by default nothing): the parser's keywords, the GX suite's parameters, a config's job arguments,
the values every row gets, and the files the payload takes to the host."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class BenchmarkOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def parser_options(self) -> dict[str, Any]:
        """Keywords of the format's ``parse`` (the generic kind: its patterns)."""
        return {}

    def suite_params(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The GX suite's parameters, given the run's arguments (serving: the levels it swept)."""
        return {}

    def config_args(self, config: Any) -> dict[str, Any]:
        """A config's extra job arguments (serving: its label, endpoint, repeats, warm-up, search, dataset)."""
        return {}

    def row_values(self) -> dict[str, Any]:
        """Values every row of a run gets (serving: the dataset and its sha256)."""
        return {}

    def shipped(self) -> list[Path]:
        """Files on the Airflow side the payload takes to the host, into ``payload/datasets/`` (serving: a dataset)."""
        return []
