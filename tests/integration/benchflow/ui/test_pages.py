"""The Benchmarks view's pages (benchflow.ui) over a DuckDB warehouse the test fills: a kernel campaign whose
last night regressed and a serving campaign with two configs, read through the published snapshot: the tables, verdicts,
links, who may read and the bounds (its charts: test_benchmarks_charts.py). Users sign in with real api-server
tokens, judged by a real auth manager (tests/view_auth.py)."""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg2
import pytest
import requests
from fastapi.testclient import TestClient

from benchflow.spec import RegressionLimits
from benchflow.ui import app
from benchflow.warehouse import Warehouse
from tests.conftest import PG_URI
from tests.integration.benchflow.nightly.test_regressions import (
    KERNEL,
    SERVING,
    detect,
    fill_history,
    night_run,
    serving_row,
)
from tests.view_auth import api_server, auth  # noqa: F401

pytestmark = pytest.mark.integration


@pytest.fixture
def client(tmp_path, monkeypatch, auth):  # noqa: F811
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("BENCH_VIEW_TIMEOUT_S", "300")  # what these pages show, not how fast a busy machine draws them
    warehouse = Warehouse.at(tmp_path / "warehouse.duckdb")
    warehouse.migrate()
    tonight = fill_history(warehouse, tonight_scale=0.9)
    assert detect(warehouse, tonight.dag_id, tonight.run_id, RegressionLimits())
    rng = random.Random(3)
    for night in (2, 1, 0):
        rows = [
            serving_row(config, c, 100.0 * c * (1.2 if config == "pd" else 1.0) * (1 + rng.gauss(0, 0.01)))
            for config in ("tp4", "pd")
            for c in (1, 8, 16)
        ]
        run = night_run("serving_<b>mix</b>", night)
        warehouse.load(run, SERVING, rows)
    detect(warehouse, run.dag_id, run.run_id, RegressionLimits())  # two nights before it: not judged
    http = TestClient(app, headers=auth("viewer", "viewer"))
    yield http, tonight, tmp_path


def test_index_lists_every_campaign_with_its_kind_and_latest_run(client):
    http, _, _ = client
    page = http.get("/")
    assert page.status_code == 200
    assert ">moe_kernel_nightly</a>" in page.text and "serving_&lt;b&gt;mix&lt;/b&gt;" in page.text
    assert "<b>mix</b>" not in page.text  # escaped, never markup
    assert "6 regression(s)" in page.text and "/dags/bench_moe_kernel_nightly/runs/" in page.text


def test_a_campaign_page_has_its_table_verdict_regressions_and_links(client):
    http, tonight, _ = client
    page = http.get("/campaign/moe_kernel_nightly").text
    assert tonight.run_id in page and "tok_per_s" in page and "us_per_token" in page
    assert 'verdict: <span class="bad">6 regression(s) against 14 baseline nights</span>' in page
    regressions = page.split("<h2>Regressions</h2>")[1].split("<h2>")[0]
    # One row a case: its two trend metrics are one change (us_per_token up is tok_per_s down), listed together,
    # each with the change and how sure it is (one value a night here: the z-score, and no interval to give).
    assert regressions.count("<tr>") == 1 + 3
    rows = regressions.split("<tr>")[2:]
    assert all("us_per_token" in row and "tok_per_s" in row and "(z " in row for row in rows)
    assert 'target="_top"' in page and "/dags/bench_moe_kernel_nightly/runs/scheduled__" in page
    assert "http://" not in page and "https://" not in page  # nothing from elsewhere


def test_a_manual_run_after_a_regressed_night_does_not_hide_it(client):
    """The latest valid run is a manual one (never judged): the page's first lines still say last night regressed,
    with a link to that run."""
    http, tonight, root = client
    warehouse = Warehouse.at(root / "warehouse.duckdb")
    manual = night_run("moe_kernel_nightly", -1, run_type="manual")
    row = {"ms_per_call": 1.0, "tok_per_s": 1000.0, "us_per_token": 1000.0, "note": ""}
    warehouse.load(manual, KERNEL, [{"m": m, **row} for m in (1, 16, 256)])
    detect(warehouse, manual.dag_id, manual.run_id, RegressionLimits())
    page = http.get("/campaign/moe_kernel_nightly").text
    head = page.split("<table>")[0]
    assert manual.run_id in head and 'verdict: <span class="unjudged">not judged (manual run)</span>' in head
    assert "The newest judged run" in head and tonight.run_id in head
    assert '<span class="bad">6 regression(s) against 14 baseline nights</span>' in head


def test_serving_configs_are_compared_at_each_concurrency(client):
    http, _, _ = client
    page = http.get("/campaign/serving_%3Cb%3Emix%3C%2Fb%3E").text
    assert "output_throughput of each config at each concurrency" in page
    assert "<th>pd</th><th>tp4</th>" in page  # the configs side by side, one row per concurrency
    assert "mean of the ok repeats per case (95 % interval)" in page and ", n=1)" not in page
    assert "not judged (2 of 5 nights)" in page and "<b>mix</b>" not in page
    assert "no regression" not in page and "none found" not in page


def test_unknown_campaign_is_404_and_the_warehouse_is_never_written(client):
    http, _, root = client
    before = hashlib.sha256((root / "warehouse.duckdb").read_bytes()).hexdigest()
    assert http.get("/campaign/nope").status_code == 404
    for _ in range(2):
        assert http.get("/").status_code == 200
    assert hashlib.sha256((root / "warehouse.duckdb").read_bytes()).hexdigest() == before


def test_without_a_warehouse_the_page_says_so_and_names_no_server_path(tmp_path, monkeypatch, auth):  # noqa: F811
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path))
    page = TestClient(app, headers=auth()).get("/")
    assert page.status_code == 503 and "no published warehouse at warehouse.snapshot.duckdb" in page.text
    assert str(tmp_path) not in page.text and "/tmp" not in page.text


def test_without_a_session_the_browser_goes_to_the_login_page(auth):  # noqa: F811
    page = TestClient(app).get("/campaign/moe_kernel_nightly", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/auth/login?next=%2Fcampaign%2Fmoe_kernel_nightly"
    forged = TestClient(app, cookies={"_token": "not-a-token"}).get("/", follow_redirects=False)
    assert forged.status_code == 303 and forged.headers["location"] == "/auth/login?next=%2F"  # never the page
    assert TestClient(app, headers={"Authorization": "Bearer nope"}).get("/").status_code == 403


def test_a_role_that_may_not_read_dags_gets_403_from_the_view(client, auth):  # noqa: F811
    _, _, _ = client
    for path in ("/", "/campaign/moe_kernel_nightly"):
        refused = TestClient(app, headers=auth("no_dags_reader", "viewer")).get(path)
        assert refused.status_code == 403 and "may not read" in refused.text
        assert "moe_kernel_nightly</a>" not in refused.text
    assert TestClient(app, headers=auth("viewer", "viewer")).get("/campaign/moe_kernel_nightly").status_code == 200


def test_the_index_lists_every_spec_with_or_without_runs_and_verdicts_that_say_if_a_run_was_judged(client):
    http, _, root = client
    warehouse = Warehouse.at(root / "warehouse.duckdb")
    manual = night_run("moe_kernel_local", 0, run_type="manual")
    warehouse.load(
        manual, KERNEL, [{"m": 1, "ms_per_call": 1.0, "tok_per_s": 1000.0, "us_per_token": 1000.0, "note": ""}]
    )
    detect(warehouse, manual.dag_id, manual.run_id, RegressionLimits())
    page = http.get("/").text
    for name in ("moe_kernel_ssh", "serving_tp4", "serving_local"):  # specs without a run in this warehouse
        assert f">{name}</a>" in page
    assert "no valid run yet" in page and "not judged (no valid run)" in page
    assert "not judged (manual run)" in page and "6 regression(s) against 14 baseline nights" in page
    assert '<span class="ok">' not in page  # nothing here was judged fine
    local = http.get("/campaign/moe_kernel_local").text
    assert 'verdict: <span class="unjudged">not judged (manual run)</span>' in local
    assert "none found" not in local and "no regression" not in local
    spec_only = http.get("/campaign/serving_tp4")
    assert spec_only.status_code == 200 and "No run in the warehouse yet" in spec_only.text


def test_a_run_whose_every_row_was_contended_is_no_valid_run(client):
    """It finished (status ok) but measured nothing usable: never "the latest valid run", not counted as valid,
    and the campaign page says why; a later run with ok rows is."""
    http, _, root = client
    warehouse = Warehouse.at(root / "warehouse.duckdb")
    busy = night_run("moe_kernel_local", 1)
    row = {"ms_per_call": 1.0, "tok_per_s": 1000.0, "us_per_token": 1000.0, "note": ""}
    contended = [{"m": m, **row, "validity": "contended", "validity_reason": "contended: a CPU hog"} for m in (1, 2)]
    warehouse.load(busy, KERNEL, contended)
    sql = "SELECT status, rows_loaded, rows_ok FROM runs WHERE dag_id = ? AND run_id = ?"
    run = warehouse.query(sql, [busy.dag_id, busy.run_id])
    assert run.to_dict("records") == [{"status": "ok", "rows_loaded": 2, "rows_ok": 0}]
    page = http.get("/").text
    line = page.split(">moe_kernel_local</a>")[1].split("</tr>")[0]
    assert "no valid run yet" in line and "<td>0 / 1</td>" in line
    local = http.get("/campaign/moe_kernel_local").text
    assert "finished, but none of its 2 rows was judged ok" in local
    quiet = night_run("moe_kernel_local", 0)
    warehouse.load(quiet, KERNEL, [{"m": 1, **row, "validity": "ok"}, {"m": 2, **row, "validity": "contended"}])
    line = http.get("/").text.split(">moe_kernel_local</a>")[1].split("</tr>")[0]
    assert quiet.run_id in line and "<td>1 / 2</td>" in line


def test_a_page_shows_at_most_max_rows_and_says_how_many_there_are(client):
    from benchflow.ui import pages

    http, _, root = client
    warehouse = Warehouse.at(root / "warehouse.duckdb")
    big = night_run("moe_kernel_nightly", -1)
    rows = [
        {"m": m, "ms_per_call": 1.0, "tok_per_s": 1000.0, "us_per_token": 1000.0, "note": ""} for m in range(1, 1201)
    ]
    warehouse.load(big, KERNEL, rows)
    page = http.get("/campaign/moe_kernel_nightly").text
    assert f"showing {pages.MAX_ROWS} of 1200 rows" in page
    assert page.count("<tr>") < pages.MAX_ROWS + 200


def test_a_bad_request_never_echoes_a_long_value(client):
    http, _, _ = client
    page = http.get("/campaign/" + "x" * 20_000)
    assert page.status_code == 400 and len(page.text) < 5_000 and "20000" in page.text


def test_a_hung_warehouse_answers_503_and_the_api_server_stays_responsive(api_server, auth, monkeypatch):  # noqa: F811
    """A PostgreSQL warehouse whose ``runs`` another connection holds locked: every page answers 503 within its
    limit (more requests than the view has threads), the api-server's health and REST API answer meanwhile, and
    the view answers again once the lock is gone."""
    schema = f"hang_{uuid.uuid4().hex[:10]}"
    warehouse = Warehouse.postgres(PG_URI, search_path=schema)
    warehouse.migrate()
    warehouse.load(
        night_run("moe_kernel_nightly", 0),
        KERNEL,
        [{"m": 1, "ms_per_call": 1.0, "tok_per_s": 1e3, "us_per_token": 1e3, "note": ""}],
    )
    monkeypatch.setenv("AIRFLOW_CONN_BENCH_WAREHOUSE", f"{PG_URI}?search_path={schema}")
    monkeypatch.setenv("BENCH_VIEW_TIMEOUT_S", "3")
    headers = auth()
    answered_within_limit(f"{api_server}/benchmarks/", headers)  # a busy machine may take 3 s once: the next try
    locker = psycopg2.connect(PG_URI)
    try:
        with locker.cursor() as cur:
            cur.execute(f"LOCK TABLE {schema}.runs IN ACCESS EXCLUSIVE MODE")  # held until rollback
        with ThreadPoolExecutor(20) as pool:
            pages = [
                pool.submit(
                    requests.get, f"{api_server}/benchmarks/campaign/moe_kernel_nightly", headers=headers, timeout=60
                )
                for _ in range(20)  # more than the view's threads and queue
            ]
            time.sleep(1)
            health = requests.get(f"{api_server}/api/v2/monitor/health", timeout=60)
            dags = requests.get(f"{api_server}/api/v2/dags", headers=headers, timeout=60)
            answers = [p.result() for p in pages]
        assert health.status_code == 200 and dags.status_code == 200
        assert {a.status_code for a in answers} == {503}
        assert any("did not answer within 3 s" in a.text for a in answers)
        assert any("still waiting for the warehouse on earlier requests" in a.text for a in answers)
        assert all("/tmp" not in a.text and str(PG_URI) not in a.text for a in answers)
    finally:
        locker.rollback()
        locker.close()
    answered_within_limit(f"{api_server}/benchmarks/", headers)  # the held threads came back (statement_timeout)
    page = answered_within_limit(f"{api_server}/benchmarks/campaign/moe_kernel_nightly", headers)
    assert "not judged (no verdict recorded)" in page.text  # PostgreSQL renders it
    refused = requests.get(f"{api_server}/api/v2/dags", headers=auth("no_dags_api", "viewer"), timeout=10)
    view = requests.get(f"{api_server}/benchmarks/", headers=auth("no_dags_api", "viewer"), timeout=10)
    assert refused.status_code == 403 and view.status_code == 403  # the same permission as Airflow's DAG views
    login = requests.get(f"{api_server}/benchmarks/", timeout=10, allow_redirects=False)
    assert login.status_code == 303 and login.headers["location"].startswith("/auth/login?next=%2Fbenchmarks%2F")


def answered_within_limit(url: str, headers: dict[str, str], tries_for_s: float = 120) -> requests.Response:
    """The page, once it answers 200: under the 3 s limit a busy machine may answer 503 to a free warehouse, which
    says nothing of the lock; asked again until it answers (the lock's 503s are asserted above, not these)."""
    deadline = time.monotonic() + tries_for_s
    while (page := requests.get(url, headers=headers, timeout=60)).status_code != 200:
        assert time.monotonic() < deadline, page.text
        time.sleep(0.5)
    return page
