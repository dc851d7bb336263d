"""The Benchmarks view in a real browser (headless Debian Chromium through Playwright), on the real api-server app
(Airflow's ``create_app`` with this project's plugin, under uvicorn), after a campaign ran through ``dag.test()``
twice: every link of every view page is followed and none answers 404 (the view's own pages, and each run's page
in the Airflow UI with the REST calls it makes), and the manual runs read "not judged (manual run)", never a
green "no regression"."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest
import requests

from tests.e2e.conftest import campaign_dags, run_dag
from tests.view_auth import api_server, auth  # noqa: F401

pytestmark = pytest.mark.e2e
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SPEC = """\
description: e2e view links
host: local
payload: fault
schedule: null
benchmark:
  script: bench_fault.py
  args: {mode: ok, rows: 3}
timeouts:
  benchmark: 120
  poke_interval: 1
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory, airflow_db, auth):  # noqa: F811
    """Two runs of the campaign, into a warehouse of their own (no other test's seeded runs in the view)."""
    with (
        pytest.MonkeyPatch.context() as patch,
        campaign_dags(tmp_path_factory.mktemp("campaigns"), {"e2e_links": SPEC}) as bag,
    ):
        patch.setenv("BENCH_VAR_DIR", str(tmp_path_factory.mktemp("var")))
        runs = []
        for _ in range(2):
            run_id, state, _tasks = run_dag(bag, "e2e_links")
            assert state == "success"
            runs.append(run_id)
        yield runs


def test_every_link_of_the_view_resolves_and_a_manual_run_is_not_judged(ran, api_server, auth):  # noqa: F811
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "`make test` installs Debian's chromium (apt-get)"
    token = auth()["Authorization"].split()[1]
    origin = urlparse(api_server)
    missing: list[str] = []
    visited: set[str] = set()
    run_pages: set[str] = set()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            context = browser.new_context()
            context.add_cookies([{"name": "_token", "value": token, "url": api_server}])
            page = context.new_page()
            page.set_default_timeout(60_000)  # an in-process api-server on a busy machine: not Playwright's 30 s
            page.set_default_navigation_timeout(120_000)
            page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
            queue = [f"{api_server}/benchmarks/"]
            while queue:
                url = queue.pop(0)
                if url in visited:
                    continue
                visited.add(url)
                answer = page.goto(url)
                assert answer is not None and answer.status == 200, (url, answer and answer.status)
                path = urlparse(url).path
                if path.startswith("/dags/"):  # the Airflow UI's run page: it fetches the run from the REST API
                    run_id = unquote(path.split("/runs/")[1])
                    page.get_by_text(run_id).first.wait_for(timeout=60_000)
                    continue
                if path.startswith("/benchmarks/campaign/e2e_links"):
                    text = page.inner_text("body")
                    assert "not judged (manual run)" in text and "no regression" not in text
                for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))"):
                    target = urljoin(url, href)
                    parsed = urlparse(target)
                    assert parsed.netloc == origin.netloc, f"a link leaves the api-server: {href}"
                    if parsed.path.startswith("/dags/"):
                        run_pages.add(target)
                    if parsed.path.startswith(("/benchmarks/", "/dags/")):
                        queue.append(target)
        finally:
            browser.close()
    assert f"{api_server}/benchmarks/campaign/e2e_links" in visited
    assert {unquote(urlparse(u).path.split("/runs/")[1]) for u in run_pages} >= {ran[-1]}
    assert missing == [], missing
    for url in run_pages:  # what the UI's run page reads, asked directly
        dag_id, run_id = (unquote(p) for p in urlparse(url).path.removeprefix("/dags/").split("/runs/"))
        reply = requests.get(f"{api_server}/api/v2/dags/{dag_id}/dagRuns/{run_id}", headers=auth(), timeout=30)
        assert reply.status_code == 200, (url, reply.text[:300])
