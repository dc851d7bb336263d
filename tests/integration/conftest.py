"""Fixtures the integration tier shares."""

from __future__ import annotations

import uuid

import pytest

from benchflow.warehouse import Warehouse
from tests.conftest import PG_URI


@pytest.fixture(params=["duckdb", "postgres"])
def warehouse_backend(request, tmp_path):
    """Both backends, empty: a DuckDB file, and a schema of its own on the real PostgreSQL."""
    if request.param == "duckdb":
        return Warehouse.at(tmp_path / "wh.duckdb")
    schema = f"wh_{uuid.uuid4().hex[:12]}"
    with Warehouse.postgres(PG_URI).transaction() as tx:
        tx.execute(f'CREATE SCHEMA "{schema}"')
    return Warehouse.postgres(PG_URI, search_path=schema)
