"""The UI in a real browser: headless Debian Chromium, driven by Playwright through its executable_path.

Logs in, opens a campaign, fills the trigger form with a new config, starts the run and watches it
finish. Screenshots of the form, the DAG graph and the finished run go to ``artifacts/ui/``
(``BENCH_ARTIFACTS_DIR``), which CI keeps.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import unquote

import pytest

from benchflow.warehouse import Warehouse
from tests.airflow_stack import PASSWORD, USER
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.stack

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(os.environ.get("BENCH_ARTIFACTS_DIR", PROJECT_ROOT / "artifacts")) / "ui"
DAG = "bench_stack_ui"


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "`make test` installs Debian's chromium (apt-get)"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser.new_page(viewport={"width": 1920, "height": 1000})
        finally:
            browser.close()


def test_trigger_a_new_config_from_the_form_and_watch_it_finish(stack, page):
    from playwright.sync_api import expect

    page.goto(f"{stack.url}/dags/{DAG}")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"**/dags/{DAG}")

    page.get_by_role("button", name="Show Graph (Press g)").click()
    page.get_by_role("button", name="Collapse Details Panel").click()  # the graph gets the whole width
    page.get_by_role("button", name=re.compile("fit view", re.I)).click()
    for task in ("acquire_host", "wait_done", "release_host"):
        expect(page.get_by_text(task, exact=True).first).to_be_visible()
    page.screenshot(path=SHOTS / "dag_graph.png")

    page.get_by_role("button", name="Trigger Dag").click()
    form = page.get_by_role("dialog")
    expect(form.get_by_text("Run Parameters")).to_be_visible()
    rows = form.locator("input[name=element_rows]")
    expect(rows).to_have_value("4")  # the spec's default
    rows.fill("7")  # the new config: a longer sweep
    page.screenshot(path=SHOTS / "trigger_form.png")
    form.get_by_role("button", name="Trigger").click()

    page.wait_for_url(re.compile(rf".*/dags/{DAG}/runs/manual__.+"))
    run_id = unquote(page.url.split("/runs/")[1])
    # the run page polls the API by itself; the badge next to the run's id turns to its final state
    badge = page.locator("h2", has_text=run_id).locator("xpath=..").get_by_test_id("state-badge")
    expect(badge).to_have_text(re.compile("Success|Failed"), timeout=300_000)
    assert badge.inner_text().strip() == "Success"
    expect(page.get_by_text("release_host", exact=True).first).to_be_visible()
    page.get_by_role("button", name="Show Graph (Press g)").click()
    page.get_by_role("button", name=re.compile("fit view", re.I)).click()
    page.screenshot(path=SHOTS / "run_finished.png")

    assert stack.run_state(DAG, run_id) == "success"
    loaded = Warehouse.at(stack.var / "warehouse.duckdb").query(
        "SELECT status, rows_loaded, conf FROM runs WHERE dag_id = ? AND run_id = ?", [DAG, run_id]
    )
    assert (loaded["status"].iloc[0], loaded["rows_loaded"].iloc[0]) == ("ok", 7)
    assert '"rows": 7' in str(loaded["conf"].iloc[0])
    for shot in ("dag_graph.png", "trigger_form.png", "run_finished.png"):
        assert (SHOTS / shot).stat().st_size > 10_000
