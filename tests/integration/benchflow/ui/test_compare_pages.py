"""The comparison page of the Benchmarks view: TP4, PD and EP4 from three campaigns side by side over a DuckDB
warehouse the test fills (three repeats a point, a contended repeat in PD), through the view's app with real
api-server tokens; and once in headless Chromium on the real api-server, where every config is in the legend and
a hover names its run."""

from __future__ import annotations

import shutil
from html import unescape
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from benchflow.ui import app, compare_pages
from benchflow.warehouse import Warehouse
from tests.integration.benchflow.nightly.test_regressions import SERVING, night_run, serving_row
from tests.view_auth import api_server, auth  # noqa: F401

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
THROUGHPUT = {"tp4": 1000.0, "pd": 1150.0, "ep4": 1002.0}  # PD 15 % faster; EP4 within the noise of TP4
SIDES = ["serving_tp4:tp4", "serving_pd:pd", "serving_ep4:ep4"]


def fill(warehouse: Warehouse) -> dict[str, str]:
    """Last night's run of each seed campaign: concurrency 1/8/16, three repeats each; PD's second repeat at 16
    was contended (a tenth of the throughput, which would sink its mean). Returns each campaign's run id."""
    runs = {}
    for config, throughput in THROUGHPUT.items():
        rows = []
        for c in (1, 8, 16):
            for r, wobble in ((1, 0.99), (2, 1.0), (3, 1.01)):
                value = throughput * c / 16 * wobble
                row = serving_row(config, c, value) | {"repeat": r, "j_per_token": 0.5 / wobble}
                if config == "pd" and c == 16 and r == 2:
                    row |= {"output_throughput": value / 10, "validity": "contended", "validity_reason": "hog"}
                rows.append(row)
        run = night_run(f"serving_{config}", 0)
        verdicts = [  # the seeds' diagnosis: every layout decode-bound at its highest load
            {"kind": "serving", "config": config, "concurrency": 16, "repeat": r, "warmup": False}
            | {"verdict": "decode-bound", "limiter": "decode", "says": f"decode-bound: decode holds 9{r}%"}
            for r in (1, 2, 3)
        ]
        warehouse.load(run, SERVING, rows, None, {"phase_bottlenecks": verdicts if config != "ep4" else []})
        runs[config] = run.run_id
    return runs


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    var = tmp_path_factory.mktemp("compare_var")
    warehouse = Warehouse.at(var / "warehouse.duckdb")
    warehouse.migrate()
    runs = fill(warehouse)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BENCH_VAR_DIR", str(var))
        patch.setenv("BENCH_VIEW_TIMEOUT_S", "300")
        yield runs


def test_three_campaigns_side_by_side_with_ratios_per_gpu_and_the_contended_repeat_kept_apart(seeded, auth):  # noqa: F811
    http = TestClient(app, headers=auth("viewer", "viewer"))
    answer = http.get("/" + compare_pages.href(SIDES))
    assert answer.status_code == 200, answer.text[:500]
    page = answer.text
    for side in SIDES:
        assert side in page
    assert page.count("GPUs (spec)") == 1 and ">4<" in page and ">8<" in page  # TP4 and EP4 on 0-3, PD on 0-7
    assert "better by 15.0 %" in page  # PD over TP4 at 1 and 8 (its contended repeat is not in any mean)
    assert "no detectable difference" in page  # EP4 against TP4
    assert "1 contended" in page and "hollow" in page
    assert "Joules per output token" in page or "j_per_token" in page
    # PD at 16: two ok repeats, so still a mean with an interval, and its ratio is computed from them alone
    assert "n=2" in page
    assert page.count("bottleneck pd at concurrency 16 (3 of 3 repeats): decode-bound: decode holds 91%") == 1
    assert "bottleneck tp4 at concurrency 16" in page and "no verdict recorded" in page  # EP4 has none
    baseline = http.get("/" + compare_pages.href(SIDES, baseline="serving_pd:pd"))
    assert baseline.status_code == 200 and "ratio to serving_pd:pd" in baseline.text


def test_a_side_that_names_no_run_is_refused_saying_what_to_write(seeded, auth):  # noqa: F811
    http = TestClient(app, headers=auth("viewer", "viewer"))
    cases = {
        compare_pages.href(["serving_tp4:tp4", "serving_nope:x"]): "no valid run of a campaign 'serving_nope'",
        compare_pages.href(["serving_tp4:tp4", "serving_pd:zz"]): "has no config 'zz'",
        compare_pages.href(["serving_tp4:tp4", "Robert'); DROP"]): "is not CAMPAIGN[:CONFIG]",
        compare_pages.href(SIDES, baseline="serving_x:y"): "baseline 'serving_x:y' is none of the sides",
        "compare": "name the configs to compare",
    }
    for url, message in cases.items():
        answer = http.get("/" + url)
        assert answer.status_code == 400 and message in unescape(answer.text), (url, answer.text[-400:])


def test_the_index_and_each_seed_campaign_link_to_their_comparison(seeded, auth):  # noqa: F811
    http = TestClient(app, headers=auth("viewer", "viewer"))
    together = sorted(SIDES)  # the campaigns of one kind on one host (the specs'), by name
    assert compare_pages.href(together).replace("&", "&amp;") in http.get("/").text
    assert compare_pages.href(together, prefix="../").replace("&", "&amp;") in http.get("/campaign/serving_pd").text


def test_in_a_browser_every_config_is_in_the_legend_and_a_hover_names_its_run(seeded, api_server, auth):  # noqa: F811
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "`make test` installs Debian's chromium (apt-get)"
    token = auth()["Authorization"].split()[1]
    url = f"{api_server}/benchmarks/{compare_pages.href(SIDES)}"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.add_cookies([{"name": "_token", "value": token, "url": api_server}])
            page = context.new_page()
            answer = page.goto(url)
            assert answer is not None and answer.status == 200
            page.wait_for_selector(".plot-area[data-drawn='1']", timeout=60_000)
            legend = (
                page.locator(".plot-area")
                .first.locator(".legendtext")
                .evaluate_all("els => els.map(e => e.textContent)")
            )
            for side in SIDES:
                assert side in legend, legend
            assert "serving_pd:pd: not ok" in legend, legend  # the contended repeat, in PD's own legend group
            # hover PD's mean at concurrency 16 (trace 1, the last point) and read the tooltip Plotly draws
            page.evaluate(
                "() => { const gd = document.querySelector('.plot-area');"
                " Plotly.Fx.hover(gd, [{curveNumber: 1, pointNumber: 2}]); }"
            )
            tip = page.locator(".plot-area").first.locator(".hoverlayer").text_content()
            assert "serving_pd:pd" in tip and f"run {seeded['pd']}" in tip, tip
            page.evaluate(
                "() => { const gd = document.querySelector('.plot-area');"
                " const i = gd.data.findIndex(t => t.name.endsWith(': not ok'));"
                " Plotly.Fx.hover(gd, [{curveNumber: i, pointNumber: 0}]); }"
            )
            # Plotly draws a hover at most every 50 ms: wait for the new tooltip
            page.wait_for_function(
                "() => document.querySelector('.plot-area .hoverlayer').textContent.includes('contended')"
            )
            tip = page.locator(".plot-area").first.locator(".hoverlayer").text_content()
            assert "not in the mean" in tip and f"run {seeded['pd']}" in tip, tip
        finally:
            browser.close()
