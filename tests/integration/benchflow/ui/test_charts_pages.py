"""The Benchmarks view's charts (benchflow.ui.charts_pages, drawn by Plotly) over a DuckDB warehouse the test
fills: a kernel campaign whose last night regressed, a serving campaign with two configs, repeats, a load search
and GPU telemetry, a nightly M = 1…2048 sweep run twice a day, and a generic campaign; read through the published
snapshot. The charts are read back from the page as the figure JSON the browser draws (and drawn by Chromium in
the last test); their queries run on DuckDB and PostgreSQL alike, and a trend reads the newest ``TREND_RUNS`` runs
and the first ``TREND_CASES`` cases. Users sign in with real api-server tokens (tests/view_auth.py); the pages'
tables, verdicts, permissions and bounds in rows and time are test_benchmarks_view.py's."""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import socket
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from benchflow import kinds
from benchflow.spec import RegressionLimits
from benchflow.ui import app, charts
from benchflow.warehouse import Warehouse, queries
from tests.conftest import PG_URI
from tests.integration.benchflow.nightly.test_regressions import (
    KERNEL,
    SERVING,
    detect,
    fill_history,
    night_run,
    serving_row,
)
from tests.view_auth import auth  # noqa: F401

pytestmark = pytest.mark.integration

GENERIC = kinds.get("generic")
SERVING_PAGE = "/campaign/serving_%3Cb%3Emix%3C%2Fb%3E"
SWEEP = [2**i for i in range(12)]  # M = 1 … 2048
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def server_rows(start: float) -> dict[str, list[dict]]:
    """The servers' gauges (pd: prefill and decode behind a router; tp4: one server), a scrape a second for 30 s,
    and a verdict per phase (pd decode-bound, tp4 KV-bound), as side tables of a serving run."""
    samples = [
        {"t": start + second, "config": config, "server": server, "role": role}
        | {"running": running, "queued": float(second % 5), "kv_usage": 0.4 + 0.01 * second}
        for second in range(30)
        for config, server, role, running in (
            ("pd", "prefill", "prefill", 0.2),
            ("pd", "decode", "decode", 7.5),
            ("pd", "router", "router", 8.0),
            ("tp4", "engine", "single", 12.0),
        )
    ]
    says = {
        "pd": "decode-bound: decode holds 97% of the requests in flight; decode: GPUs 1 at 90 %, 7.5 running",
        "tp4": "KV-cache bound at single: usage 99%, 310 preemptions",
    }
    verdicts = [
        {"kind": "serving", "config": config, "concurrency": c, "repeat": r, "warmup": False}
        | {"phase_start": start, "phase_end": start + 10, "says": says[config], "evidence": "{}"}
        | {
            "verdict": "decode-bound" if config == "pd" else "kv-bound",
            "limiter": "decode" if config == "pd" else "single",
        }
        for config in ("pd", "tp4")
        for c in (1, 8, 16)
        for r in (1, 2, 3)
    ]
    return {"server_samples": samples, "phase_bottlenecks": verdicts}


def telemetry_rows(start: float) -> tuple[list[dict], list[dict]]:
    """Samples of 4 GPUs, one a second, over 9 phases of each config (pd: GPU 0 prefill, GPU 1 decode; tp4: GPUs
    2-3), and the per-phase figures; GPU 1 throttles in the pd phase at concurrency 16, repeat 3."""
    phases, samples = [], []
    t = start
    for config, gpus in (("pd", {0: "prefill", 1: "decode"}), ("tp4", {2: "tp4", 3: "tp4"})):
        for concurrency in (1, 8, 16):
            for repeat in (1, 2, 3):
                hot = config == "pd" and concurrency == 16 and repeat == 3
                for gpu, server in gpus.items():
                    phases.append(
                        {
                            "kind": "serving",
                            "config": config,
                            "concurrency": concurrency,
                            "repeat": repeat,
                            "warmup": False,
                            "phase_start": t,
                            "phase_end": t + 10,
                            "gpu_index": gpu,
                            "server": server,
                            "samples": 10,
                            "mean_power_w": 300.0,
                            "energy_j": 3000.0,
                            "throttled": hot and gpu == 1,
                            "throttle_reasons": "hw_slowdown" if hot and gpu == 1 else "",
                        }
                    )
                t += 12
    for second in range(int(t - start) + 5):
        for gpu in range(4):
            busy = 90.0 if gpu != 0 else 5.0
            samples.append(
                {
                    "t": start + second,
                    "index": gpu,
                    "uuid": f"GPU-{gpu}",
                    "power_w": 100.0 + 50 * gpu,
                    "sm_mhz": 1980.0,
                    "util_gpu_pct": busy,
                    "mem_used_mib": 1000.0,
                }
            )
    return samples, phases


def search_record() -> dict:
    """A load search of the pd config: pass at 8 and 12, fail at 16 and 14, undecided once at 12 (repeated)."""

    def step(load: int, repeat: int, verdict: str, p99: float) -> dict:
        check = {
            "key": "p99_ttft_ms",
            "limit": 2000.0,
            "n": 400,
            "estimate": p99,
            "lower": p99 * 0.9,
            "upper": p99 * 1.1,
            "verdict": verdict,
        }
        return {
            "load": load,
            "repeat": repeat,
            "verdict": verdict,
            "requests": 400,
            "pooled": 400 * repeat,
            "failed": 0,
            "seconds": 30.0,
            "duration_s": 28.0,
            "goodput_rps": 3.0,
            "checks": [check],
        }

    trail = [
        step(1, 1, "pass", 200),
        step(2, 1, "pass", 300),
        step(4, 1, "pass", 500),
        step(8, 1, "pass", 900),
        step(16, 1, "fail", 4000),
        step(12, 1, "undecided", 1950),
        step(12, 2, "pass", 1700),
        step(14, 1, "fail", 2600),
    ]
    return {
        "config": "pd",
        "over": "concurrency",
        "range": [1, 64],
        "slo": {"p99_ttft_ms": 2000},
        "confidence": 0.95,
        "precision": 0.2,
        "prompts_per_probe": 400,
        "repeats": 3,
        "budget": {"probes": 30, "seconds": 3600},
        "reason": "converged",
        "pass_load": 12,
        "fail_load": 14,
        "fail_verdict": "fail",
        "probes": len(trail),
        "loads": 7,
        "seconds": 240.0,
        "goodput_rps": 3.0,
        "trail": trail,
    }


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """The warehouse, filled once for the module (the pages only read it: a test checks that it stays as is)."""
    tmp_path = tmp_path_factory.mktemp("view")
    warehouse = Warehouse.at(tmp_path / "warehouse.duckdb")
    warehouse.migrate()
    tonight = fill_history(warehouse, tonight_scale=0.9)
    assert detect(warehouse, tonight.dag_id, tonight.run_id, RegressionLimits())
    rng = random.Random(3)
    for night in (2, 1, 0):
        rows = [
            {
                **serving_row(config, c, 100.0 * c * (1.2 if config == "pd" else 1.0) * (1 + rng.gauss(0, 0.01))),
                "repeat": repeat,
                "j_per_token": 0.5 / c * (1 + rng.gauss(0, 0.02)),
            }
            for config in ("tp4", "pd")
            for c in (1, 8, 16)
            for repeat in (1, 2, 3)
        ]
        run = night_run("serving_<b>mix</b>", night)
        side = {}
        if night == 0:
            samples, phases = telemetry_rows(run.started_at.timestamp())
            side = {"serving_search": [search_record()], "telemetry_samples": samples, "telemetry_phase_gpus": phases}
            side |= server_rows(run.started_at.timestamp())
        warehouse.load(run, SERVING, rows, None, side)
    for night in (1, 0):  # the nightly sweep, and a second run each day (manual, at 14:00)
        for hour in (0, 12):
            run = night_run("moe_sweep", night, run_type="scheduled" if hour == 0 else "manual")
            when = run.started_at + timedelta(hours=hour)
            run = type(run)(
                **{
                    **vars(run),
                    "started_at": when,
                    "logical_date": when,
                    "run_id": f"{run.run_type}__{when.isoformat()}",
                }
            )
            rows = []
            for m in SWEEP:
                tok = 1000.0 * m * (1 + rng.gauss(0, 0.02))
                rows.append(
                    {"m": m, "ms_per_call": m / tok * 1e3, "tok_per_s": tok, "us_per_token": 1e6 / tok, "note": ""}
                )
            warehouse.load(run, KERNEL, rows)
    for night in (1, 0):
        rows = [
            {
                "seq": i,
                "metric": metric,
                "value": value * (1 + 0.01 * night + 0.01 * rep),
                "unit": unit,
                "line": i + 1,
                "case_key": str(batch),
            }
            for i, (metric, unit, batch, value, rep) in enumerate(
                (metric, unit, batch, value * batch, rep)
                for metric, unit, value in (("latency", "ms", 2.0), ("throughput", "items/s", 50.0))
                for batch in (1, 4, 16)
                for rep in (0, 1, 2)
            )
        ]
        warehouse.load(night_run("generic_tool", night), GENERIC, rows)
    return tonight, tmp_path


@pytest.fixture
def client(filled, monkeypatch, auth):  # noqa: F811
    tonight, tmp_path = filled
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path))
    return TestClient(app, headers=auth("viewer", "viewer")), tonight, tmp_path


def figures(page: str) -> list[dict]:
    """Every chart of a page, as the figure JSON its loader hands to Plotly."""
    found = re.findall(
        r'<figure class="plot[^"]*"><div class="plot-area"></div><script type="application/json">'
        r"(.*?)</script>",
        page,
    )
    return [json.loads(text) for text in found]


def titled(figs: list[dict], text: str) -> list[dict]:
    return [f for f in figs if text in f["layout"]["title"]["text"]]


@pytest.fixture(params=["duckdb", "postgres"])
def backend(request, tmp_path):
    if request.param == "duckdb":
        warehouse = Warehouse.at(tmp_path / "wh.duckdb")
    else:
        warehouse = Warehouse.postgres(PG_URI, search_path=f"view_{uuid.uuid4().hex[:12]}")
    warehouse.migrate()
    return warehouse


def test_every_chart_reads_the_same_from_duckdb_and_postgres(backend):
    """The chart sections' queries (trend intervals, repeats, load search, telemetry in time buckets, named
    measurements) on both backends, through the page itself."""
    from benchflow.ui import pages

    warehouse = backend

    run = night_run("serving_pg", 0)
    rows = [
        {**serving_row(c, level, 100.0 * level + r), "repeat": r, "j_per_token": 0.1}
        for c in ("pd", "tp4")
        for level in (1, 8)
        for r in (1, 2)
    ]
    samples, phases = telemetry_rows(run.started_at.timestamp())
    side = {"serving_search": [search_record()], "telemetry_samples": samples, "telemetry_phase_gpus": phases}
    side |= server_rows(run.started_at.timestamp())
    warehouse.load(run, SERVING, rows, None, side)
    servers = queries.server_timeline(warehouse, run.dag_id, run.run_id, buckets=10)
    assert len(servers) <= 4 * 11 and set(servers["role"]) == {"prefill", "decode", "router", "single"}
    generic = [
        {"seq": i, "metric": "latency", "value": 1.0 + i, "unit": "ms", "line": i + 1, "case_key": "4"}
        for i in range(3)
    ]
    warehouse.load(night_run("generic_pg", 0), GENERIC, generic)
    timeline = queries.telemetry_timeline(warehouse, run.dag_id, run.run_id, buckets=20)
    assert set(timeline["gpu_index"]) == {0, 1, 2, 3} and len(timeline) <= 4 * 21
    assert int(timeline["samples"].sum()) == len(samples)  # every sample in one bucket
    figs = figures(pages.campaign(warehouse, "serving_pg"))
    compared = titled(figs, "output_throughput of each config at each concurrency")[0]
    assert all(t["error_y"]["visible"] for t in compared["data"])
    assert titled(figs, "load search") and len(titled(figs, "GPU telemetry")) == 2 and titled(figs, "j_per_token")
    assert len(titled(figs, "Server metrics of config")) == 2
    latency = titled(figures(pages.campaign(warehouse, "generic_pg")), "latency (latest valid run)")[0]
    assert latency["data"][0]["y"] == [2.0] and latency["data"][0]["error_y"]["visible"]


def test_a_kernel_campaign_has_a_trend_per_metric_with_regressions_circled_and_points_linked(client):
    http, _, _ = client
    page = http.get("/campaign/moe_kernel_nightly").text
    figs = figures(page)
    trends = titled(figs, ": trend")
    assert [f["layout"]["title"]["text"] for f in trends] == ["us_per_token: trend", "tok_per_s: trend"]
    circled = [t for f in trends for t in f["data"] if t["name"] == "regression"]
    assert sum(len(t["x"]) for t in circled) == 6  # 3 cases x 2 trend metrics, circled
    for fig in trends:
        assert fig["layout"]["xaxis"]["type"] == "date"  # a time axis: runs placed by when they ran
        assert [t["name"] for t in fig["data"] if t["name"] != "regression"] == ["m=1", "m=16", "m=256"]
        links = {href for t in fig["data"] for href in t["customdata"]}
        assert all(h.startswith("/dags/bench_moe_kernel_nightly/runs/scheduled__") for h in links)
        assert len(links) == 15
    assert titled(trends, "tok_per_s")[0]["layout"]["yaxis"]["title"]["text"] == "tok_per_s (tok/s)"
    against_m = titled(figs, "tok_per_s against m")[0]
    assert against_m["layout"]["xaxis"]["title"]["text"].startswith("m (tokens)")
    assert against_m["layout"]["xaxis"]["tickvals"] == [1, 16, 256]  # ticks at the Ms measured, no others
    # the scripts are the view's own: the bundled plotly.js, nothing from elsewhere
    assert re.findall(r"<script src=\"([^\"]+)\"", page) == ["../static/plotly.min.js"]
    assert "GPU telemetry" not in page and "Load search" not in page  # none in this campaign: no empty section
    assert "http://" not in page and "https://" not in page


def test_serving_configs_are_compared_at_each_concurrency_with_intervals(client):
    http, _, _ = client
    page = http.get(SERVING_PAGE).text
    assert "output_throughput of each config at each concurrency" in page
    figs = figures(page)
    compared = titled(figs, "output_throughput of each config at each concurrency")[0]
    layout = compared["layout"]
    assert layout["yaxis"]["title"]["text"] == "output_throughput (tok/s)"  # the column's heading, as in the table
    assert layout["xaxis"]["title"]["text"].startswith("concurrency (requests)")
    assert layout["xaxis"]["tickvals"] == [1, 8, 16] and layout["yaxis"]["type"] == "linear"
    for trace in compared["data"]:
        assert trace["name"] in ("pd", "tp4") and trace["x"] == [1, 8, 16]
        bars = trace["error_y"]
        assert bars["visible"] and all(v is not None and v > 0 for v in bars["array"] + bars["arrayminus"])
        assert all("95 % CI" in text and "n=3" in text for text in trace["hovertext"])
    # a linear throughput axis starts at zero (a 1 % gap does not look large) unless the range is wide (log)
    assert layout["yaxis"].get("rangemode") == "tozero" or layout["yaxis"]["type"] == "log"
    energy = titled(figs, "j_per_token of each config at each concurrency")[0]
    assert energy["layout"]["yaxis"]["title"]["text"].startswith("j_per_token (J/token)")
    assert {t["name"] for t in energy["data"]} == {"pd", "tp4"}
    trends = titled(figs, ": trend")
    assert {f["layout"]["title"]["text"] for f in trends} >= {"output_throughput: trend", "pass_load: trend"}
    answer = titled(trends, "pass_load")[0]
    assert answer["layout"]["yaxis"]["title"]["text"].startswith("highest load that passed (requests)")


def test_the_load_search_chart_draws_the_bounds_the_slo_and_the_answer(client):
    http, _, _ = client
    search = titled(figures(http.get(SERVING_PAGE).text), "load search")[0]
    assert (
        "pd: load search over concurrency (converged; answer 12, lowest fail 14)" in search["layout"]["title"]["text"]
    )
    by_verdict = {t["name"]: t for t in search["data"]}
    assert sorted(by_verdict) == ["fail", "pass", "undecided"]
    assert sorted(by_verdict["pass"]["x"]) == [1, 2, 4, 8, 12] and sorted(by_verdict["fail"]["x"]) == [14, 16]
    assert all(v > 0 for v in by_verdict["pass"]["error_y"]["array"])  # the percentile's bounds, as bars
    shapes = search["layout"]["shapes"]
    assert any(s["type"] == "line" and s["y0"] == s["y1"] == 2000 for s in shapes)  # the SLO
    assert any(s["type"] == "line" and s["x0"] == s["x1"] == 12 for s in shapes)  # the answer
    assert any(s["type"] == "rect" and (s["x0"], s["x1"]) == (12, 14) for s in shapes)  # the bracket
    assert search["layout"]["yaxis"]["title"]["text"].startswith("p99_ttft_ms (ms)")
    assert search["layout"]["xaxis"]["title"]["text"].startswith("concurrency (requests)")
    named = {s.get("name") for s in shapes}
    assert {"SLO p99_ttft_ms ≤ 2000", "answer: 12 (highest load that passed)", "lowest fail: 14"} <= named


def test_telemetry_timeline_per_config_shows_its_servers_gpus_with_phases_shaded(client):
    http, _, _ = client
    tele = titled(figures(http.get(SERVING_PAGE).text), "GPU telemetry")
    assert [f["layout"]["title"]["text"] for f in tele] == ["GPU telemetry of config pd", "GPU telemetry of config tp4"]
    pd = tele[0]
    assert {t["name"] for t in pd["data"]} == {"GPU 0 (prefill)", "GPU 1 (decode)"}  # tp4's GPUs are not pd's
    titles = [pd["layout"][f"yaxis{i}"]["title"]["text"] for i in ("", "2", "3")]
    assert titles == ["power_w (W)", "util_gpu_pct (%)", "sm_mhz (MHz)"]
    assert pd["layout"]["xaxis3"]["title"]["text"] == "t (UTC)" and pd["layout"]["xaxis"]["type"] == "date"
    rects = [s for s in pd["layout"]["shapes"] if s["type"] == "rect"]
    assert len(rects) == 9 and all(s["yref"] == "paper" for s in rects)  # every phase shaded across the rows
    assert sum(s["fillcolor"] == "#feb2b2" for s in rects) == 1  # the throttled phase, in red
    hot = [a for a in pd["layout"]["annotations"] if "throttled" in a.get("hovertext", "")]
    assert len(hot) == 1 and "hw_slowdown" in hot[0]["hovertext"] and "concurrency=16, repeat=3" in hot[0]["hovertext"]


def test_each_phase_names_its_bottleneck_and_each_config_draws_its_servers_queues_and_kv(client):
    http, _, _ = client
    page = http.get(SERVING_PAGE).text
    assert "What limits each phase" in page
    assert "bottleneck pd at concurrency 16 (3 of 3 repeats): decode-bound: decode holds 97%" in page
    assert "bottleneck tp4 at concurrency 16 (3 of 3 repeats): KV-cache bound at single: usage 99%" in page
    servers = titled(figures(page), "Server metrics of config")
    assert [f["layout"]["title"]["text"] for f in servers] == [
        "Server metrics of config pd",
        "Server metrics of config tp4",
    ]
    pd = servers[0]
    assert {t["name"] for t in pd["data"]} == {"prefill", "decode", "router"}
    titles = [pd["layout"][f"yaxis{i}"]["title"]["text"] for i in ("", "2", "3")]
    assert titles == ["requests running", "requests queued", "KV-cache usage"]
    decode = next(t for t in pd["data"] if t["name"] == "decode" and t["yaxis"] == "y")
    assert set(decode["y"]) == {7.5}  # the running requests it reported, in time buckets


def test_a_wide_sweep_is_drawn_on_log_axes_with_every_size_and_every_run_of_a_day(client):
    http, _, _ = client
    figs = figures(http.get("/campaign/moe_sweep").text)
    trend = titled(figs, "tok_per_s: trend")[0]
    names = [t["name"] for t in trend["data"]]
    assert names == [f"m={m}" for m in SWEEP]  # all 12 sizes, none dropped
    assert len({(t["marker"]["color"], t["marker"]["symbol"]) for t in trend["data"]}) == 12  # told apart
    assert trend["layout"]["yaxis"]["type"] == "log"  # tok/s spans 1000x: one size does not flatten the others
    times = trend["data"][0]["x"]
    assert len(times) == len(set(times)) == 4 and len({t[:10] for t in times}) == 2  # two runs a day, apart
    against_m = titled(figs, "tok_per_s against m")[0]
    assert against_m["layout"]["xaxis"]["type"] == "log" and against_m["layout"]["xaxis"]["tickvals"] == SWEEP


def test_the_generic_kind_gets_a_chart_per_metric_and_its_trend(client):
    http, _, _ = client
    figs = figures(http.get("/campaign/generic_tool").text)
    latency = titled(figs, "latency (latest valid run)")[0]
    assert latency["layout"]["yaxis"]["title"]["text"] == "latency (ms)"
    assert latency["layout"]["xaxis"]["title"]["text"].startswith("case_key")
    assert latency["layout"]["xaxis"]["tickvals"] == [1, 4, 16]
    assert latency["data"][0]["error_y"]["visible"]  # three matches a case: an interval
    trend = titled(figs, "throughput: trend")[0]
    assert trend["layout"]["yaxis"]["title"]["text"] == "throughput (items/s)"
    assert [t["name"] for t in trend["data"]] == ["1", "4", "16"] and trend["layout"]["xaxis"]["type"] == "date"
    assert trend["layout"]["legend"]["title"]["text"] == "case_key"  # what the series are


def test_the_view_serves_the_bundled_plotly_js_itself(client):
    http, _, _ = client
    served = http.get("/static/plotly.min.js", headers={"Accept-Encoding": "gzip"})
    assert served.status_code == 200 and served.headers["content-type"].startswith("text/javascript")
    assert served.headers.get("content-encoding") == "gzip"  # 4.8 MB on disk, far less on the wire
    assert served.content == charts.plotly_js().read_bytes()
    assert TestClient(app).get("/static/plotly.min.js").status_code == 200  # a library, no data: no session


def test_the_chart_queries_never_write_the_warehouse(client):
    http, _, root = client
    before = hashlib.sha256((root / "warehouse.duckdb").read_bytes()).hexdigest()
    for name in ("moe_kernel_nightly", "serving_%3Cb%3Emix%3C%2Fb%3E", "moe_sweep", "generic_tool"):
        page = http.get(f"/campaign/{name}")
        assert page.status_code == 200 and figures(page.text)
    assert hashlib.sha256((root / "warehouse.duckdb").read_bytes()).hexdigest() == before


def test_a_trend_reads_the_newest_trend_runs_and_the_first_trend_cases_and_the_page_says_so(backend, monkeypatch):
    """``queries.TREND_RUNS`` and ``TREND_CASES`` made small: a kernel and a generic campaign of 5 valid runs of 4
    cases each draw the newest 3 runs of the first 2 cases (text order: m=1, m=16), on both backends; ``CASES``
    made small: the latest run against m draws its first 2 cases (m = 1, 4)."""
    from benchflow.ui import pages

    monkeypatch.setattr(queries, "TREND_RUNS", 3)
    monkeypatch.setattr(queries, "TREND_CASES", 2)
    monkeypatch.setattr(queries, "CASES", 2)  # and a run's chart against m: its first 2 cases
    warehouse = backend
    for night in range(4, -1, -1):
        rows = [
            {"m": m, "ms_per_call": 1.0, "tok_per_s": 1e3 * m + night, "us_per_token": 1e3, "note": ""}
            for m in (1, 4, 16, 256)
        ]
        warehouse.load(night_run("bounded", night), KERNEL, rows)
        generic = [
            {"seq": i, "metric": "latency", "value": 1.0 + night, "unit": "ms", "line": i + 1, "case_key": key}
            for i, key in enumerate(("1", "4", "16", "256"))
        ]
        warehouse.load(night_run("bounded_generic", night), GENERIC, generic)
    newest = {(r.dag_id, r.run_id) for r in (night_run("bounded", n) for n in (0, 1, 2))}
    history = queries.trend_intervals(warehouse, "bounded")
    assert set(zip(history["dag_id"], history["run_id"], strict=True)) == newest
    assert set(history["case_key"]) == {"m=1", "m=16"}
    page = pages.campaign(warehouse, "bounded")
    for trend in titled(figures(page), ": trend"):
        assert [t["name"] for t in trend["data"]] == ["m=1", "m=16"]
        assert {h for t in trend["data"] for h in t["customdata"]} == {pages.run_href(*r) for r in newest}
    assert "trends show the newest 3 of 5 runs" in page and "trends show the first 2 of 4 cases" in page
    against_m = titled(figures(page), "tok_per_s against m")[0]
    assert [t["x"] for t in against_m["data"]] == [[1, 4]] and "the first 2 cases" in page
    page = pages.campaign(warehouse, "bounded_generic")
    trend = titled(figures(page), "latency: trend")[0]
    assert [t["name"] for t in trend["data"]] == ["1", "16"]
    assert {len(t["x"]) for t in trend["data"]} == {3}
    assert "trends show the newest 3 of 5 runs" in page


@pytest.fixture
def served(client):
    """The view on a real HTTP server (uvicorn, a free loopback port), for a browser."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_chromium_draws_every_chart_with_the_local_plotly_and_its_error_bars(served, tmp_path, auth):  # noqa: F811
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "`make test` installs Debian's chromium (apt-get)"
    token = auth("viewer", "viewer")["Authorization"].split()[1]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.add_cookies([{"name": "_token", "value": token, "url": served}])  # signed in, as in the UI
            page = context.new_page()
            requested: list[str] = []
            page.on("request", lambda r: requested.append(r.url))
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{served}{SERVING_PAGE}")
            boxes = page.locator("figure.plot")
            count = boxes.count()
            assert count >= 8
            page.wait_for_function(f"document.querySelectorAll('.plot-area[data-drawn]').length === {count}")
            assert page.evaluate("typeof window.Plotly") == "object"
            assert page.locator(".plot-area svg.main-svg").count() >= count
            assert page.locator("g.errorbar path").count() > 0  # the intervals, drawn
            assert page.locator("g.legend").filter(has_text="tp4").count() > 0
            page.screenshot(path=tmp_path / "serving.png", full_page=True)
            # the kernel page: the regressions are a legend entry of both trend charts (tests/stack/test_ui.py)
            page.goto(f"{served}/campaign/moe_kernel_nightly")
            page.wait_for_function("document.querySelectorAll('.plot-area[data-drawn]').length >= 4")
            assert page.locator("g.legend text.legendtext", has_text="regression").count() == 2
            # a click on a point opens its DAG run (here a 404 of this bare server: the URL is what counts)
            box = page.locator(".plot-area").first.locator("g.points path.point").first.bounding_box()
            assert box is not None
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.wait_for_selector("g.hovertext")  # the hover: run id, value, interval
            assert "run scheduled__" in page.locator("g.hovertext").first.text_content()
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.wait_for_url(re.compile(r".*/dags/bench_moe_kernel_nightly/runs/scheduled__.*"))
        finally:
            browser.close()
    assert not errors
    assert all(url.startswith(served) for url in requested), [u for u in requested if not u.startswith(served)]
    assert f"{served}/static/plotly.min.js" in requested
