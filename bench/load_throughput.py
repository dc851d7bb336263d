"""Warehouse load speed: rows/s for 10k, 100k and 1M rows, DuckDB and PostgreSQL side by side, and
PostgreSQL's COPY path against row-wise INSERT (executemany) of the same rows.

    .venv/bin/python bench/load_throughput.py [--sizes 10000,100000,1000000] [--pg postgresql://postgres@127.0.0.1/postgres]

Each load is the real one: a replace of one run's rows in one transaction (staging table, delete, insert).
Row-wise INSERT runs only up to --insert-max rows (it is the slow path being measured against). Each cell
is the median of --repeat loads; small loads are dominated by the fixed cost of a connection.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from benchflow import kinds
from benchflow.warehouse import RunRecord, Warehouse

ROOT = Path(__file__).resolve().parents[1]

KERNEL = kinds.get("kernel")


def rows(n: int) -> list[dict]:
    return [
        {
            "m": m + 1,
            "ms_per_call": 0.5 + m * 1e-6,
            "tok_per_s": (m + 1) / (0.5e-3 + m * 1e-9),
            "us_per_token": 500.0 / (m + 1),
            "note": "" if m % 7 else "probe",
        }
        for m in range(n)
    ]


def record(n: int) -> RunRecord:
    return RunRecord(
        dag_id="bench_load",
        run_id=f"load_{n}",
        campaign="load",
        host="local",
        spec_hash="x" * 64,
        status="ok",
        started_at=datetime.now(UTC),
    )


def timed(fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls (each call replaces the same run's rows)."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def rowwise_insert(warehouse: Warehouse, run: RunRecord, data: list[dict]) -> None:
    """The path COPY replaces: one INSERT per row (executemany), same transaction shape."""
    values = [
        [run.dag_id, run.run_id, r["m"], r["ms_per_call"], r["tok_per_s"], r["us_per_token"], r["note"]] for r in data
    ]
    with warehouse.transaction() as tx:
        tx.delete_run("kernel_results", run.dag_id, run.run_id)
        tx.executemany(f"INSERT INTO kernel_results VALUES ({', '.join([tx.p] * 7)})", values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--insert-max", type=int, default=100000)
    parser.add_argument("--repeat", type=int, default=3, help="median of this many loads per cell")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    duck = Warehouse.at(Path(tempfile.mkdtemp(prefix="load-bench-")) / "wh.duckdb")
    schema = f"load_bench_{uuid.uuid4().hex[:8]}"
    pg = Warehouse.postgres(args.pg, search_path=schema)
    duck.migrate()
    pg.migrate()
    results = []
    try:
        for n in sizes:
            data = rows(n)
            run = record(n)
            line = {"rows": n}
            line["duckdb"] = n / timed(lambda: duck.load(run, KERNEL, data), args.repeat)  # noqa: B023
            line["pg_copy"] = n / timed(lambda: pg.load(run, KERNEL, data), args.repeat)  # noqa: B023
            if n <= args.insert_max:
                line["pg_insert"] = n / timed(lambda: rowwise_insert(pg, run, data), args.repeat)  # noqa: B023
            count = pg.query(f"SELECT count(*) AS n FROM kernel_results WHERE run_id = {pg.p}", [run.run_id])
            assert int(count["n"][0]) == n  # a reload replaced, never duplicated
            results.append(line)
            print(f"done {n} rows", flush=True)
    finally:
        with pg.transaction() as tx:
            tx.execute(f'DROP SCHEMA "{schema}" CASCADE')

    print(f"\n{'rows':>9} {'DuckDB rows/s':>15} {'PG COPY rows/s':>15} {'PG INSERT rows/s':>17} {'COPY/INSERT':>12}")
    for line in results:
        insert = line.get("pg_insert")
        ratio = f"{line['pg_copy'] / insert:11.1f}x" if insert else f"{'(not run)':>12}"
        insert_text = f"{insert:17,.0f}" if insert else f"{'(not run)':>17}"
        print(f"{line['rows']:>9,} {line['duckdb']:15,.0f} {line['pg_copy']:15,.0f} {insert_text} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
