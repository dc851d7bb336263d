"""The UI in a real browser: headless Debian Chromium, driven by Playwright through its executable_path.

Logs in, opens a campaign, fills the trigger form with a new config, starts the run and watches it
finish; then opens the Benchmarks view (the plugin's page in the UI's navigation) and finds the run's
numbers and the regression it made against a history of faster nights. Screenshots of the form, the DAG
graph, the finished run and the Benchmarks view go to ``artifacts/ui/`` (``BENCH_ARTIFACTS_DIR``), which CI
keeps; the Benchmarks view's is copied to ``docs/ui/benchmarks_view.png`` for the README when
``BENCH_UPDATE_DOCS=1`` asks for it (a test run otherwise leaves the checkout as it was).
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import pytest

from benchflow import kinds
from benchflow.nightly.regressions import assess
from benchflow.spec import RegressionLimits
from benchflow.warehouse import RunRecord, Warehouse
from benchtools.stack import USER
from tests.conftest import PROJECT_ROOT

STEP_TIMEOUT_MS = 60_000
pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]  # a whole stack's start, then campaign runs

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(os.environ.get("BENCH_ARTIFACTS_DIR", PROJECT_ROOT / "artifacts")) / "ui"
DAG = "bench_stack_ui"
CAMPAIGN = "stack_ui"


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "`make test` installs Debian's chromium (apt-get)"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            from playwright.sync_api import expect

            # a React UI in headless Chromium on a busy 2-core machine: a minute for a step, not Playwright's 5 s
            expect.set_options(timeout=STEP_TIMEOUT_MS)
            page = browser.new_page(viewport={"width": 1920, "height": 1000})
            page.set_default_timeout(STEP_TIMEOUT_MS)
            page.set_default_navigation_timeout(2 * STEP_TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def test_trigger_a_new_config_from_the_form_and_watch_it_finish(stack, page):
    from playwright.sync_api import expect

    page.goto(f"{stack.url}/dags/{DAG}")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", stack.password)
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
    for section in ("Sweep", "Run options"):  # the form groups its fields; each has a title and a unit
        expect(form.get_by_text(section, exact=True).first).to_be_visible()
    form.get_by_text("Sweep", exact=True).first.click()
    expect(form.get_by_text("Rows (cases)").first).to_be_visible()
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

    # The Benchmarks view: six earlier nights twice as fast, then a scheduled night as slow as this run, which
    # regressed on every case; this manual run itself has no baseline of its kind: "not judged (manual run)".
    warehouse = Warehouse.at(stack.var / "warehouse.duckdb")
    assert assess(warehouse, DAG, run_id, RegressionLimits()).text() == "not judged (manual run)"
    slow = seed_faster_nights(warehouse, run_id)
    verdict = assess(warehouse, DAG, slow, RegressionLimits())
    findings = verdict.findings
    assert verdict.state == "regressed" and findings
    warehouse.record_findings(DAG, slow, findings, verdict)
    manual = assess(warehouse, DAG, run_id, RegressionLimits())
    warehouse.record_findings(DAG, run_id, manual.findings, manual)

    page.goto(f"{stack.url}/plugin/benchmarks")
    view = page.frame_locator("iframe").first
    view.get_by_role("link", name=CAMPAIGN, exact=True).click()
    expect(view.get_by_role("heading", name=CAMPAIGN)).to_be_visible()
    expect(view.get_by_role("link", name=run_id).first).to_be_visible()  # the latest valid run: this one
    table = view.locator("table").first
    for m, tok in ((1, 2000), (2, 2000), (4, 2667), (64, 18286)):  # the fault payload's rows (M, tok/s)
        expect(table.locator("tr", has=page.locator(f"td:text-is('{m}')")).first).to_contain_text(str(tok))
    expect(view.get_by_text("not judged (manual run)").first).to_be_visible()
    expect(view.get_by_role("link", name=slow).first).to_be_visible()  # the slow night's findings are listed
    drawn = view.locator("figure.plot .plot-area[data-drawn]")  # Plotly has drawn the charts (local plotly.js)
    expect(drawn.first).to_be_attached(timeout=60_000)
    expect(view.locator("g.legend text.legendtext", has_text="regression").first).to_be_attached()
    page.screenshot(path=SHOTS / "benchmarks_in_airflow.png")
    # the page by itself, whole, for the README
    page.goto(f"{stack.url}/benchmarks/campaign/{CAMPAIGN}")
    expect(page.locator("g.legend text.legendtext", has_text="regression").first).to_be_attached(timeout=60_000)
    page.set_viewport_size({"width": 1600, "height": 1000})
    page.screenshot(path=SHOTS / "benchmarks_view.png", full_page=True)
    assert (SHOTS / "benchmarks_view.png").stat().st_size > 10_000
    docs = PROJECT_ROOT / "docs" / "ui"
    if os.environ.get("BENCH_UPDATE_DOCS") and docs.is_dir():  # asked for: a test run leaves the checkout as it was
        shutil.copyfile(SHOTS / "benchmarks_view.png", docs / "benchmarks_view.png")


def seed_faster_nights(warehouse: Warehouse, run_id: str, nights: int = 6) -> str:
    """Scheduled runs of the campaign on the nights before, on the same (CPU) host, each twice as fast, then one an
    hour ago as slow as ``run_id``; returns that last one's run id."""
    rows = warehouse.query(
        f"SELECT m, ms_per_call FROM kernel_results WHERE dag_id = {warehouse.p} AND run_id = {warehouse.p} ORDER BY m",
        [DAG, run_id],
    )
    tonight = datetime.now(UTC).replace(microsecond=0)
    for night in [*range(nights, 0, -1), 0]:
        when = tonight - timedelta(days=night) - timedelta(hours=1)
        faster = []
        for m, ms in zip(rows["m"], rows["ms_per_call"], strict=True):
            ms = float(ms) / (2 if night else 1) * (1 + 0.01 * (night % 3 - 1))
            faster.append(
                {"m": int(m), "ms_per_call": ms, "tok_per_s": m / (ms / 1e3), "us_per_token": 1e3 * ms / m, "note": ""}
            )
        record = RunRecord(
            dag_id=DAG,
            run_id=f"scheduled__{when.isoformat()}",
            campaign=CAMPAIGN,
            host="gpu_b",
            spec_hash="s" * 64,
            status="ok",
            started_at=when,
            ended_at=when,
            logical_date=when,
            run_type="scheduled",
            host_facts={"gpu": "none"},
        )
        warehouse.load(record, kinds.get("kernel"), faster)
    return record.run_id
