"""The warehouse stores what was measured and says what happened (issues 20 and 22): a full disk while the
snapshot is published, whole-number floats past 2^63 on PostgreSQL, infinities, the queries of the Benchmarks view
and of ``bench run`` on PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from benchflow import kinds
from benchflow.warehouse import Warehouse
from benchflow.warehouse.hooks import SnapshotNotPublished
from tests.conftest import PG_URI
from tests.integration.benchflow.warehouse.test_warehouse import ROWS, record

pytestmark = pytest.mark.integration
KERNEL = kinds.get("kernel")
SERVING = kinds.get("serving")


@pytest.fixture(params=["duckdb", "postgres"])
def warehouse(request, tmp_path):
    if request.param == "duckdb":
        found = Warehouse.at(tmp_path / "wh.duckdb")
    else:
        schema = f"tr_{uuid.uuid4().hex[:12]}"
        with Warehouse.postgres(PG_URI).transaction() as tx:
            tx.execute(f'CREATE SCHEMA "{schema}"')
        found = Warehouse.postgres(PG_URI, search_path=schema)
    found.migrate()
    return found


@pytest.fixture
def small_disk(tmp_path):
    """A real file system that fills up: a tmpfs of a size the test sets (``mount -o remount,size=``)."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where)], capture_output=True)
    assert mounted.returncode == 0, f"this test mounts a tmpfs (root): {mounted.stderr.decode()}"

    def resize(size: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True)

    try:
        yield where, resize
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_while_publishing_leaves_the_old_snapshot_whole_and_says_the_load_is_committed(small_disk):
    where, resize = small_disk
    path = where / "wh.duckdb"
    Warehouse.at(path).migrate()
    Warehouse.at(path).load(record(run_id="r1"), KERNEL, ROWS)
    snapshot = path.with_name("wh.snapshot.duckdb")
    before = snapshot.read_bytes()
    used = sum(f.stat().st_size for f in where.iterdir())
    resize(used + path.stat().st_size // 2 + (1 << 20))  # room for the load, not for another whole copy
    with pytest.raises(SnapshotNotPublished, match=r"the write is committed in .*wh\.duckdb.*still see the previous"):
        Warehouse.at(path).load(record(run_id="r2"), KERNEL, [dict(r, note="x" * 50_000) for r in ROWS])
    assert sorted(p.name for p in where.iterdir() if p.name.endswith(".partial")) == []  # no partial left
    assert snapshot.read_bytes() == before  # the old snapshot, whole: readers open it as before
    reader = Warehouse.at(path, read_only=True)
    assert reader.query("SELECT run_id FROM runs")["run_id"].tolist() == ["r1"]
    assert Warehouse.at(path).query("SELECT count(*) AS n FROM runs WHERE run_id = 'r2'")["n"].tolist() == [1]
    resize(64 << 20)
    Warehouse.at(path).migrate()  # as the message says: publishes what was committed
    assert sorted(Warehouse.at(path, read_only=True).query("SELECT run_id FROM runs")["run_id"]) == ["r1", "r2"]


def test_a_partial_snapshot_of_a_process_that_died_is_cleaned_up(tmp_path):
    path = tmp_path / "wh.duckdb"
    Warehouse.at(path).migrate()
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = tmp_path / f".wh.snapshot.duckdb.{dead.pid}.partial"
    left.write_bytes(b"half a copy")
    Warehouse.at(path).load(record(), KERNEL, ROWS)
    assert not left.exists()
    assert Warehouse.at(path, read_only=True).query("SELECT count(*) AS n FROM kernel_results")["n"].tolist() == [2]


def test_whole_number_floats_past_two_to_the_63_load_on_both_backends(warehouse):
    """A FLOP count of 1.2e20 is a float column that holds whole numbers: it must not become an integer."""
    rows = [dict(ROWS[0], tflops=1.2e20, bytes_read=2.0**64), dict(ROWS[1], tflops=3.0, bytes_read=4.0)]
    assert warehouse.load(record(), KERNEL, rows) == 2
    stored = warehouse.query("SELECT m, tflops, bytes_read FROM kernel_results ORDER BY m").to_dict("records")
    assert [(r["tflops"], r["bytes_read"]) for r in stored] == [(1.2e20, 2.0**64), (3.0, 4.0)]


def test_the_view_and_bench_runs_reads_answer_on_postgresql(tmp_path, monkeypatch):
    """Every page of the Benchmarks view and the queries ``bench run`` prints from, on a PostgreSQL warehouse
    holding a kernel campaign with a regression and a two-config serving campaign (no SQL the server lacks)."""
    from fastapi.testclient import TestClient

    from benchflow.spec import RegressionLimits
    from benchflow.ui import app, signed_in
    from benchflow.warehouse import queries
    from tests.integration.benchflow.nightly.test_regressions import detect, fill_history, night_run, serving_row

    schema = f"tr_{uuid.uuid4().hex[:12]}"
    writer = Warehouse.postgres(PG_URI, search_path=schema)
    writer.migrate()
    tonight = fill_history(writer, tonight_scale=0.9)
    assert detect(writer, tonight.dag_id, tonight.run_id, RegressionLimits())
    serving = night_run("serving_two", 0)
    writer.load(serving, SERVING, [serving_row(c, n, 100.0 * n) for c in ("tp4", "pd") for n in (1, 8)])
    conn = {
        "conn_type": "postgres",
        "host": "127.0.0.1",
        "port": 5432,
        "login": "postgres",
        "schema": PG_URI.rsplit("/", 1)[1],
        "extra": {"search_path": schema},
    }
    monkeypatch.setenv("AIRFLOW_CONN_BENCH_WAREHOUSE", json.dumps(conn))
    from benchflow.ui import Viewer

    class Reader(Viewer):  # who may read is tested in test_benchmarks_view.py; here, what PostgreSQL answers
        def may_read(self, dag_id: str | None = None, runs: bool = False) -> bool:
            return True

    app.dependency_overrides[signed_in] = lambda: Reader(user=None)
    try:
        http = TestClient(app)
        pages = {url: http.get(url) for url in ("/", "/campaign/moe_kernel_nightly", "/campaign/serving_two")}
    finally:
        app.dependency_overrides.clear()
    assert {url: page.status_code for url, page in pages.items()} == dict.fromkeys(pages, 200), [
        p.text[:500] for p in pages.values() if p.status_code != 200
    ]
    assert tonight.run_id in pages["/campaign/moe_kernel_nightly"].text
    assert "<th>pd</th><th>tp4</th>" in pages["/campaign/serving_two"].text
    reader = Warehouse.from_airflow(read_only=True)
    for kind, run in ((KERNEL, tonight), (SERVING, serving)):
        shown = kind.present(queries.shown_rows(reader, kind, run.dag_id, run.run_id))
        assert len(shown) in (3, 4) and not shown.empty
        assert len(queries.run_record(reader, run.dag_id, run.run_id)) == 1
        assert len(queries.headline_by_case(reader, kind, run.dag_id, run.run_id))


def sglang_run(store_root, requests_text: str | None = None):
    """A PD sweep of the real SGLang client (its log and the requests its --output-details saved) in a store."""
    from benchflow import artifacts, pipeline
    from tests.conftest import FIXTURES

    store = artifacts.store("bench_sglang_pd", f"run_{uuid.uuid4().hex[:8]}")
    (store / "bench_pd.log").write_text((FIXTURES / "clients" / "sweep_sglang_pd.txt").read_text())
    text = (FIXTURES / "clients" / "sweep_sglang_requests.jsonl").read_text()
    (store / "requests.jsonl").write_text(text if requests_text is None else requests_text)
    return pipeline.Fetched(str(store), ["bench_pd.log", "requests.jsonl"], [], ["bench_pd.log"])


def test_an_sglang_run_keeps_request_rate_inf_and_gets_failed_from_its_requests(warehouse, tmp_path, monkeypatch):
    from benchflow import artifacts, pipeline
    from tests.conftest import FIXTURES

    monkeypatch.setenv("BENCH_ARTIFACTS_URL", f"file://{tmp_path / 'store'}")
    lines = (FIXTURES / "clients" / "sweep_sglang_requests.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    flipped = next(i for i, r in enumerate(records) if (r["config"], r["concurrency"]) == ("pd", 8))
    records[flipped] |= {"ok": False, "error": "HTTP 503", "ttft_ms": None}  # one request of c=8 failed
    fetched = sglang_run(tmp_path, "".join(json.dumps(r) + "\n" for r in records))
    parsed = pipeline.parse(fetched, SERVING, None, "ALL_DONE", {}, {})
    assert parsed.status == "ok" and "stored as null" not in parsed.detail, parsed.detail
    run = record(run_id=f"sglang_{warehouse.p}")
    assert warehouse.load(run, SERVING, artifacts.read_rows(parsed.store)) == 3
    stored = warehouse.query(
        "SELECT concurrency, request_rate, failed, completed, started_at FROM serving_wide "
        f"WHERE run_id = {warehouse.p} ORDER BY concurrency",
        [run.run_id],
    ).to_dict("records")
    assert [(r["concurrency"], r["request_rate"], r["failed"]) for r in stored] == [
        (1, float("inf"), 0),
        (4, float("inf"), 0),
        (8, float("inf"), 1),
    ]
    assert {r["started_at"].timestamp() for r in stored} == {run.started_at.timestamp()}  # the run's time, per row


def test_malformed_request_records_are_noted_and_make_the_run_incomplete(tmp_path, monkeypatch):
    from benchflow import pipeline
    from tests.conftest import FIXTURES

    monkeypatch.setenv("BENCH_ARTIFACTS_URL", f"file://{tmp_path / 'store'}")
    lines = (FIXTURES / "clients" / "sweep_sglang_requests.jsonl").read_text().splitlines()
    garbled = [*lines[:6], '{"config": "pd", "concurrency": 8, "se', *lines[6:9], "[1, 2]", *lines[9:]]
    parsed = pipeline.parse(sglang_run(tmp_path, "\n".join(garbled) + "\n"), SERVING, None, "ALL_DONE", {}, {})
    assert parsed.status == "incomplete"
    assert parsed.detail.startswith(
        f"requests.jsonl: 2 of {len(lines) + 2} records malformed, left out (first at line 7)"
    )


def test_nan_is_stored_as_null_naming_its_columns_and_infinities_stay(warehouse, tmp_path, monkeypatch):
    from benchflow import artifacts, pipeline

    monkeypatch.setenv("BENCH_ARTIFACTS_URL", f"file://{tmp_path / 'store'}")
    store = artifacts.store("bench_nan", "r1")
    (store / "bench.log").write_text(
        "M ms/call tok/s us/token kernel_ms\n1 0.5 2000 500 nan\n2 1.0 2000 500 inf\n4 2.0 2000 500 -inf\nALL_DONE\n"
    )
    parsed = pipeline.parse(
        pipeline.Fetched(str(store), ["bench.log"], [], ["bench.log"]), KERNEL, None, "ALL_DONE", {}, {}
    )
    assert "1 value was NaN (or infinite where no infinity fits): stored as null in kernel_ms (1)" in parsed.detail
    warehouse.load(record(), KERNEL, artifacts.read_rows(parsed.store))
    stored = warehouse.query("SELECT m, kernel_ms FROM kernel_results ORDER BY m")
    assert stored["kernel_ms"].tolist()[1:] == [float("inf"), float("-inf")]
    assert stored["kernel_ms"].isna().tolist() == [True, False, False]
