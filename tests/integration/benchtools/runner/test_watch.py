"""``bench run``'s report of a run with many rows (issue 20, Low: it printed every loaded row, a million lines):
the first rows and a line that counts the rest, from a real DuckDB warehouse."""

from __future__ import annotations

import importlib
import io
import textwrap
from datetime import UTC, datetime

import pytest

from benchflow import kinds
from benchflow.spec import load_spec
from benchflow.warehouse import RunRecord, Warehouse
from benchtools.runner.watch import Watch

pytestmark = pytest.mark.integration
KERNEL = kinds.get("kernel")
report = importlib.import_module("benchtools.runner.outcome")  # the module (the package exports its function)


def test_a_run_with_many_rows_prints_the_first_and_counts_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path))
    spec_file = tmp_path / "many_rows.yaml"
    spec_file.write_text(
        textwrap.dedent("""\
        description: many rows
        kind: kernel
        host: local
        payload: moe
        schedule: null
        benchmark:
          script: bench_moe.py
        """)
    )
    spec = load_spec(spec_file)
    rows = [
        {"m": m, "ms_per_call": 0.5, "tok_per_s": 2000.0 * m, "us_per_token": 500.0 / m, "note": ""}
        for m in range(1, 5001)
    ]
    warehouse = Warehouse.from_airflow()
    warehouse.migrate()
    record = RunRecord(
        dag_id=spec.dag_id,
        run_id="r1",
        campaign=spec.name,
        host="local",
        spec_hash="h" * 64,
        status="ok",
        started_at=datetime.now(UTC),
    )
    warehouse.load(record, KERNEL, rows)
    out = io.StringIO()
    report._results(spec, "r1", Watch(spec.dag_id, "r1", tmp_path / "run.log", out, tty=False))
    lines = out.getvalue().splitlines()
    assert len(lines) < report.SHOWN_ROWS + 10, len(lines)
    table = [line for line in lines if line.split()[:1] and line.split()[0].isdigit()]
    assert [int(line.split()[0]) for line in table] == list(range(1, report.SHOWN_ROWS + 1))
    assert (
        f"... {5000 - report.SHOWN_ROWS} more rows (5000 in all; the first {report.SHOWN_ROWS} shown)" in out.getvalue()
    )
