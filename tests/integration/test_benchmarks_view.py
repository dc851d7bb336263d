"""The Benchmarks view's pages (benchflow.ui) over a DuckDB warehouse the test fills: a kernel campaign whose
last night regressed and a serving campaign with two configs, read through the published snapshot."""

from __future__ import annotations

import hashlib
import random

import pytest
from fastapi.testclient import TestClient

from benchflow.spec import RegressionLimits
from benchflow.ui import app, signed_in
from benchflow.warehouse import Warehouse
from tests.integration.test_analytics import SERVING, detect, fill_history, night_run, serving_row

pytestmark = pytest.mark.integration


@pytest.fixture
def client(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path))
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
        warehouse.load(night_run("serving_<b>mix</b>", night), SERVING, rows)
    app.dependency_overrides[signed_in] = lambda: None
    try:
        yield TestClient(app), tonight, tmp_path
    finally:
        app.dependency_overrides.clear()


def test_index_lists_every_campaign_with_its_kind_and_latest_run(client):
    http, _, _ = client
    page = http.get("/")
    assert page.status_code == 200
    assert ">moe_kernel_nightly</a>" in page.text and "serving_&lt;b&gt;mix&lt;/b&gt;" in page.text
    assert "<b>mix</b>" not in page.text  # escaped, never markup
    assert "6 regression(s)" in page.text and "/dags/bench_moe_kernel_nightly/runs/" in page.text


def test_a_campaign_page_has_its_table_trends_with_regressions_and_links(client):
    http, tonight, _ = client
    page = http.get("/campaign/moe_kernel_nightly").text
    assert tonight.run_id in page and "tok_per_s" in page and "us_per_token" in page
    assert page.count('class="regression"') == 6  # 3 cases x 2 trend metrics, circled
    assert page.count("<svg") == 3  # two trends, one comparison against M
    assert 'target="_top"' in page and "/dags/bench_moe_kernel_nightly/runs/scheduled__" in page
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_serving_configs_are_compared_at_each_concurrency(client):
    http, _, _ = client
    page = http.get("/campaign/serving_%3Cb%3Emix%3C%2Fb%3E").text
    assert "output_throughput of each config at each concurrency" in page
    assert "<th>pd</th><th>tp4</th>" in page  # the configs side by side, one row per concurrency
    assert "no regression" in page and "<b>mix</b>" not in page


def test_unknown_campaign_is_404_and_the_warehouse_is_never_written(client):
    http, _, root = client
    before = hashlib.sha256((root / "warehouse.duckdb").read_bytes()).hexdigest()
    assert http.get("/campaign/nope").status_code == 404
    for _ in range(2):
        assert http.get("/").status_code == 200
    assert hashlib.sha256((root / "warehouse.duckdb").read_bytes()).hexdigest() == before


def test_without_a_warehouse_the_page_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path))
    app.dependency_overrides[signed_in] = lambda: None
    try:
        page = TestClient(app).get("/")
    finally:
        app.dependency_overrides.clear()
    assert page.status_code == 503 and "no published warehouse" in page.text


def test_only_signed_in_users_see_it():
    assert TestClient(app).get("/").status_code == 401
