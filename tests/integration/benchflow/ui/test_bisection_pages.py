"""Bisections in the warehouse and the Benchmarks view: a finding of a git-payload campaign offers "bisect"
(the bisect DAG's trigger form, its conf filled in from the finding and the commits of the runs), and a
bisection's page shows its probe chain: commit, verdict, ratio with its interval, a link to each probe run."""

from __future__ import annotations

import dataclasses
import json
import random
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient

from benchflow.kinds.kernel import KIND as KERNEL
from benchflow.searches import engine
from benchflow.searches.bisection import Bisection
from benchflow.searches.engine import Search
from benchflow.spec import RegressionLimits
from benchflow.ui import app
from benchflow.warehouse import Warehouse, queries
from tests.integration.benchflow.nightly.test_regressions import detect, kernel_rows, night_run
from tests.view_auth import auth  # noqa: F401

pytestmark = pytest.mark.integration

SHAS = [f"{n:040x}" for n in range(1, 17)]  # commit n is SHAS[n - 1]
OLD, NEW = SHAS[0], SHAS[-1]


@pytest.fixture
def filled(tmp_path, monkeypatch, auth):  # noqa: F811
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path))
    warehouse = Warehouse.at(tmp_path / "warehouse.duckdb")
    warehouse.migrate()
    rng = random.Random(7)
    for night in range(8, 0, -1):
        run = dataclasses.replace(night_run("toy", night), payload_commit=OLD, payload_ref="main")
        warehouse.load(run, KERNEL, kernel_rows(1.0, rng))
    tonight = dataclasses.replace(night_run("toy", 0), payload_commit=NEW, payload_ref="main")
    warehouse.load(tonight, KERNEL, kernel_rows(0.8, rng))
    assert detect(warehouse, tonight.dag_id, tonight.run_id, RegressionLimits())
    return warehouse, tonight, TestClient(app, headers=auth("viewer", "viewer"))


FACTS = {"case": "m=16", "metric": "us_per_token", "good_sha": OLD, "bad_sha": NEW}


def as_search(bisection: Bisection, runs: dict[str, list[str]]) -> Search:
    """The bisection as the search engine hands it from step to step."""
    return Search(
        strategy="bisect", campaign="toy", campaign_dag_id="bench_toy", hosts=["local"], conf={},
        state=bisection.to_json(), facts=dict(FACTS), runs=runs,
    )  # fmt: skip


def probe_run(search_run_id: str, round_number: int, sha: str) -> str:
    return engine.run_id_for("bisect", search_run_id, round_number, sha[:12])


def finished_bisection() -> Search:
    """A bisection of the 16 commits, commit 11 20 % slower, commits 8 and 13 reused from nightly runs."""
    rng = random.Random(1)

    def measure(sha: str) -> list[float]:
        level = 100.0 * (1.2 if int(sha, 16) >= 11 else 1.0)
        return [level * rng.lognormvariate(0, 0.03) for _ in range(5)]

    runs: dict[str, list[str]] = {}
    bisection = Bisection(good=OLD, commits=SHAS[1:], better="lower", repeats=5)
    for n in (8, 13):
        bisection.seed(SHAS[n - 1], measure(SHAS[n - 1]), f"scheduled__night-{n}")
        runs[SHAS[n - 1]] = [f"scheduled__night-{n}"]
    round_number = 0
    while picks := bisection.next_round(now=0.0):
        for sha in picks:
            runs.setdefault(sha, []).append(probe_run("manual__bisect", round_number, sha))
            bisection.record(sha, measure(sha))
        round_number += 1
    return as_search(bisection, runs)


def test_a_finding_offers_bisect_with_its_conf(filled):
    warehouse, _, http = filled
    page = http.get("/campaign/toy").text
    links = [a.split('"')[0] for a in page.split('href="')[1:] if "trigger/single" in a.split('"')[0]]
    assert links, "no bisect link"
    url = urlsplit(links[0].replace("&amp;", "&"))
    assert url.path == "/dags/bench_bisect/trigger/single"
    conf = json.loads(parse_qs(url.query)["conf"][0])
    assert conf["campaign"] == "toy" and conf["good"] == OLD and conf["bad"] == NEW
    found = queries.findings(warehouse, "toy")
    assert {(conf["case"], conf["metric"])} <= set(zip(found["case_key"], found["metric"], strict=True))
    assert len(links) == len(set(found["case_key"]))  # one per regressed case (its metrics are one change)


def test_a_bisection_is_stored_and_its_probe_chain_shown(filled):
    warehouse, _, http = filled
    bisection = finished_bisection()
    result = engine.save(bisection, warehouse, "bench_bisect", "manual__bisect")
    assert result["status"] == "found" and int(result["first_bad"], 16) == 11 and result["reused"] == 2

    row = queries.bisection(warehouse, "bench_bisect", "manual__bisect").iloc[0]
    assert row["status"] == "found" and row["first_bad"] == SHAS[10] and row["parent"] == SHAS[9]
    assert row["ratio_low"] > 1 and row["probes"] == result["probes"] and row["reused"] == 2
    chain = queries.bisection_probes(warehouse, "bench_bisect", "manual__bisect")
    assert list(chain["position"]) == sorted(chain["position"]) and chain["sha"].iloc[0] == OLD
    assert set(chain[chain["reused_from"].notna()]["sha"]) == {SHAS[7], SHAS[12]}

    page = http.get("/search/bench_bisect/manual__bisect").text
    assert "Bisection of toy" in page and "is the first bad commit" in page and SHAS[10][:12] in page
    assert "same as bad" in page and "same as good" in page and "reused: scheduled__night-8" in page
    assert "/dags/bench_toy/runs/bisect_" in page and 'target="_top"' in page  # each probe's DAG run
    assert "/dags/bench_toy/runs/scheduled__night-13" in page
    assert "<script" not in page
    listing = http.get("/searches").text  # every search, whatever its strategy, on one list and one page kit
    assert "search/bench_bisect/manual__bisect" in listing and "found" in listing
    assert "../search/bench_bisect/manual__bisect" in http.get("/campaign/toy").text
    assert http.get("/search/bench_bisect/nope").status_code == 404
    # the strategy's page and list of before the one kit: moved, to the one page and list (a kept link still works)
    moved = http.get("/bisection/bench_bisect/manual__bisect", follow_redirects=False)
    assert moved.status_code == 308 and moved.headers["location"].endswith("/search/bench_bisect/manual__bisect")
    assert http.get("/bisections", follow_redirects=False).headers["location"].endswith("/searches")

    saved_again = engine.save(bisection, warehouse, "bench_bisect", "manual__bisect")  # replaced, never doubled
    assert saved_again == result and len(queries.bisection_probes(warehouse, "bench_bisect", "manual__bisect")) == len(
        chain
    )


def test_a_bisection_is_on_its_page_from_its_start_with_the_probe_runs_under_way(filled):
    """Saved at the start and at each planned round (the bisect DAG's start and plan tasks): before any probe has a
    value the page shows the bisection running and each probe run of the round, linked to its state in Airflow."""
    warehouse, _, http = filled
    bisection = Bisection(good=OLD, commits=SHAS[1:], better="lower", repeats=5)
    runs: dict[str, list[str]] = {}
    engine.save(as_search(bisection, runs), warehouse, "bench_bisect", "manual__fresh")
    assert "manual__fresh" in http.get("/searches").text  # listed from its first second
    picks = bisection.next_round(now=0.0)
    for sha in picks:
        runs[sha] = [probe_run("manual__fresh", 1, sha)]
    result = engine.save(as_search(bisection, runs), warehouse, "bench_bisect", "manual__fresh")
    assert result["summary"] == f"running: confirming good and bad, {len(picks)} probe run(s) under way"
    page = http.get("/search/bench_bisect/manual__fresh").text
    assert "Probe runs under way" in page and "confirming good and bad" in page
    for sha in picks:
        assert f"/dags/bench_toy/runs/{probe_run('manual__fresh', 1, sha)}" in page


def test_the_bisection_pages_need_a_session_and_a_role_that_reads_the_bisect_runs(filled, auth):  # noqa: F811
    warehouse, _, http = filled
    engine.save(finished_bisection(), warehouse, "bench_bisect", "manual__bisect")
    for path in ("/searches", "/search/bench_bisect/manual__bisect"):
        assert http.get(path).status_code == 200
        refused = TestClient(app, headers=auth("no_dags_bisect", "viewer")).get(path)
        if path == "/searches":  # the list of every search: those of DAGs the viewer may not read are left out
            assert refused.status_code == 200 and "manual__bisect" not in refused.text
        else:
            assert refused.status_code == 403 and "may not read the runs of bench_bisect" in refused.text
        assert "is the first bad commit" not in refused.text and "search/bench_bisect/" not in refused.text
        login = TestClient(app).get(path, follow_redirects=False)
        assert login.status_code == 303 and login.headers["location"].startswith("/auth/login?next=%2Fsearch")
    assert http.get("/search/bench_bisect/" + "x" * 5000).status_code == 400
