"""The Benchmarks view's chart builders (benchflow.ui.charts, charts_pages) on their figure JSON: axis titles are
the columns' headings with units, error bars wherever repeats exist, log axes for wide ranges, zero-based linear
value axes, ticks at the levels measured, every series present; the load search and telemetry charts."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from benchflow import kinds
from benchflow.ui import charts, charts_pages
from benchflow.ui.charts import Axis, Point, Series

pytestmark = pytest.mark.unit

SERVING = kinds.get("serving")
KERNEL = kinds.get("kernel")
RUN = {"dag_id": "bench_x", "run_id": "scheduled__2026-12-01T02:00:00+00:00", "night": "2026-12-01"}


def href(dag_id: str, run_id: str) -> str:
    return f"/dags/{dag_id}/runs/{run_id}"


def as_json(fig) -> dict:
    return json.loads(fig.to_json())


def serving_frame(repeats: int, levels=(1, 8, 16), configs=("tp4", "pd")) -> pd.DataFrame:
    rows = [
        {"config": c, "concurrency": level, "repeat": r, "value": 100.0 * level + r, "validity": "ok"}
        for c in configs
        for level in levels
        for r in range(1, repeats + 1)
    ]
    return pd.DataFrame(rows)


def test_value_axes_start_at_zero_unless_the_range_is_wide_then_log():
    assert charts.value_axis("output_throughput (tok/s)", [990, 1000]).layout()["rangemode"] == "tozero"
    wide = charts.value_axis("tok_per_s (tok/s)", [10, 5000]).layout()
    assert wide["type"] == "log" and "rangemode" not in wide and wide["title"]["text"].endswith("log scale")
    assert charts.value_axis("delta (ms)", [-5, 5]).layout().get("rangemode") is None  # negatives: no zero floor


def test_level_axes_tick_only_at_the_levels_measured_and_go_log_past_sixteen():
    few = charts.level_axis("concurrency (requests)", [1, 8, 16, 8]).layout()
    assert few["tickvals"] == [1, 8, 16] and few["ticktext"] == ["1", "8", "16"] and few["type"] == "log"
    narrow = charts.level_axis("concurrency (requests)", [4, 8]).layout()
    assert narrow["type"] == "linear" and narrow["tickvals"] == [4, 8]


def test_error_bars_exist_exactly_where_repeats_exist():
    with_repeats = charts_pages.point_chart(SERVING, serving_frame(3), "output_throughput", RUN, href)[0]
    for trace in as_json(with_repeats)["data"]:
        assert trace["error_y"]["visible"] and trace["error_y"]["symmetric"] is False
        assert all(v > 0 for v in trace["error_y"]["array"])
    single = as_json(charts_pages.point_chart(SERVING, serving_frame(1), "output_throughput", RUN, href)[0])
    assert all("error_y" not in t for t in single["data"])
    assert all("no interval" in text for t in single["data"] for text in t["hovertext"])


def test_a_point_chart_has_units_from_the_columns_every_config_and_hover_with_run_interval_and_value():
    fig, caption = charts_pages.point_chart(SERVING, serving_frame(3), "output_throughput", RUN, href)
    data = as_json(fig)
    assert data["layout"]["yaxis"]["title"]["text"] == SERVING.column("output_throughput").heading
    assert SERVING.column("concurrency").heading == "concurrency (requests)"
    assert data["layout"]["xaxis"]["title"]["text"] == "concurrency (requests) — log scale"  # 1 … 16
    assert [t["name"] for t in data["data"]] == ["pd", "tp4"]
    hover = data["data"][0]["hovertext"][0]
    assert RUN["run_id"] in hover and "95 % CI" in hover and "tok/s" in hover and "n=3" in hover
    assert data["data"][0]["customdata"][0] == href(RUN["dag_id"], RUN["run_id"])
    assert "95 % interval" in caption and caption.startswith("higher is better")


def test_rows_that_are_not_ok_are_left_out_of_the_means_and_drawn_apart():
    frame = serving_frame(3)
    frame.loc[0, ["value", "validity"]] = [1e6, "noisy"]
    fig, caption = charts_pages.point_chart(SERVING, frame, "output_throughput", RUN, href)
    data = as_json(fig)
    left = [t for t in data["data"] if t["name"].endswith(": not ok")]
    tp4 = next(t for t in data["data"] if t["name"] == "tp4")
    # the noisy row stays with its config: its legend group, its colour, hollow; hover names config, run and why
    assert len(left) == 1 and left[0]["name"] == "tp4: not ok" and left[0]["y"] == [1e6]
    assert left[0]["legendgroup"] == "tp4" and left[0]["marker"]["color"] == tp4["marker"]["color"]
    assert left[0]["marker"]["symbol"].endswith("-open")
    assert "tp4" in left[0]["hovertext"][0] and RUN["run_id"] in left[0]["hovertext"][0]
    assert "noisy" in left[0]["hovertext"][0]
    assert max(tp4["y"]) < 1e4  # the noisy row is not in the mean
    assert "1 row(s) left out" in caption


def test_many_series_are_all_drawn_and_told_apart():
    series = [Series(f"m={2**i}", [Point(float(d), 10.0 * 2**i + d) for d in range(3)]) for i in range(25)]
    data = as_json(charts.line_chart(series, Axis("night"), Axis("tok_per_s (tok/s)"), "t"))
    assert [t["name"] for t in data["data"]] == [s.name for s in series]
    assert len({(t["marker"]["color"], t["marker"]["symbol"]) for t in data["data"]}) == 25
    assert data["layout"]["showlegend"] is True


def test_regressions_get_their_own_trace_in_the_legend():
    points = [
        Point("2026-12-01 02:00:00", 10.0, run_id="a"),
        Point("2026-12-02 02:00:00", 5.0, run_id="b", marked=True),
    ]
    data = as_json(charts.line_chart([Series("m=1", points)], Axis("run time", "date"), Axis("v (ms)"), "t"))
    marked = [t for t in data["data"] if t["name"] == "regression"]
    assert len(marked) == 1 and marked[0]["y"] == [5.0] and "REGRESSION" in marked[0]["hovertext"][0]
    assert data["layout"]["xaxis"]["type"] == "date" and "range" not in data["layout"]["xaxis"]
    one = as_json(charts.line_chart([Series("m=1", points[:1])], Axis("run time", "date"), Axis("v (ms)"), "t"))
    assert one["layout"]["xaxis"]["range"] == ["2026-11-30 14:00:00", "2026-12-01 14:00:00"]  # a day, not a ms


def test_trend_times_keep_several_runs_a_day_apart():
    from datetime import UTC, datetime

    assert charts.when(datetime(2026, 12, 1, 3, 0, tzinfo=UTC)) != charts.when(datetime(2026, 12, 1, 15, 0, tzinfo=UTC))
    assert charts.when(pd.Timestamp("2026-12-01T15:30:00+01:00")) == "2026-12-01 14:30:00"  # UTC
    assert charts.clock(0.25) == "1970-01-01 00:00:00.250"


def test_render_keeps_any_text_inside_its_script_and_the_loader_uses_the_local_bundle():
    fig = charts.line_chart([Series("</script><b>x</b>", [Point(1.0, 2.0)])], Axis("a"), Axis("b"), "</script>")
    html = charts.render(fig, "caption <i>")
    assert html.count("</script>") == 1 and "<b>x</b>" not in html and "caption &lt;i&gt;" in html
    payload = html.split('type="application/json">')[1].split("</script>")[0]
    assert json.loads(payload)["data"][0]["name"] == "&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;"
    loader = charts.loader("../")
    assert '<script src="../static/plotly.min.js"' in loader and "http" not in loader
    assert charts.plotly_js().stat().st_size > 1_000_000


def test_kernel_sweeps_against_m_are_log_with_a_tick_per_size():
    frame = pd.DataFrame([{"m": 2**i, "repeat": 1, "value": 1000.0 * 2**i, "validity": "ok"} for i in range(12)])
    data = as_json(charts_pages.point_chart(KERNEL, frame, "tok_per_s", RUN, href)[0])
    assert data["layout"]["xaxis"]["type"] == "log" and data["layout"]["xaxis"]["tickvals"] == [2**i for i in range(12)]
    assert data["layout"]["yaxis"]["type"] == "log"  # tok/s over 2048x
    assert data["layout"]["xaxis"]["title"]["text"].startswith("m (tokens)")


def test_the_load_search_chart_has_bounds_slo_answer_and_bracket():
    def step(load, verdict, estimate, repeat=1):
        check = {
            "key": "p99_ttft_ms",
            "limit": 2000,
            "n": 400,
            "estimate": estimate,
            "lower": estimate - 50,
            "upper": None if verdict == "fail" else estimate + 80,
            "verdict": verdict,
        }
        return {"load": load, "repeat": repeat, "verdict": verdict, "pooled": 400, "checks": [check]}

    trail = [
        step(1, "pass", 100),
        step(2, "pass", 200),
        step(4, "fail", 3000),
        step(3, "undecided", 1990),
        step(3, "pass", 1900, 2),
    ]
    result = {
        "config": "pd",
        "over": "concurrency",
        "slo": json.dumps({"p99_ttft_ms": 2000}),
        "reason": "converged",
        "pass_load": 3.0,
        "fail_load": 4.0,
        "fail_verdict": "fail",
        "probes": 5,
        "loads": 4,
        "seconds": 60.0,
        "goodput_rps": 2.5,
        "trail": json.dumps(trail),
    }
    fig, caption = charts_pages.search_chart(result, "run1")
    data = as_json(fig)
    traces = {t["name"]: t for t in data["data"]}
    assert sorted(traces) == ["fail", "pass", "undecided"]
    assert traces["pass"]["error_y"]["array"] == [80, 80, 80] and traces["fail"]["error_y"]["array"] == [None]
    assert data["layout"]["xaxis"]["title"]["text"] == "concurrency (requests)"
    assert data["layout"]["xaxis"]["tickvals"] == [1, 2, 3, 4]
    assert data["layout"]["yaxis"]["title"]["text"].startswith("p99_ttft_ms (ms)")
    shapes = data["layout"]["shapes"]
    assert any(s["type"] == "line" and s["y0"] == 2000 for s in shapes)
    assert any(s["type"] == "line" and s["x0"] == 3 for s in shapes)
    assert any(s["type"] == "rect" and (s["x0"], s["x1"]) == (3, 4) for s in shapes)
    assert "answer 3" in data["layout"]["title"]["text"] and "goodput at the answer 2.5 req/s" in caption


def test_each_panel_colours_a_probe_by_its_own_objective_and_a_contended_answer_says_so():
    """A probe that failed on TTFT passed TPOT: the TPOT panel shows it passing. An answer one of whose probes
    was contended says, in its caption, that it is not ok."""

    def check(key, verdict, estimate):
        return {
            "key": key,
            "limit": 100,
            "n": 400,
            "estimate": estimate,
            "lower": estimate - 5,
            "upper": estimate + 5,
            "verdict": verdict,
        }

    trail = [
        {
            "load": 1,
            "repeat": 1,
            "verdict": "pass",
            "checks": [check("p99_ttft_ms", "pass", 50), check("p99_tpot_ms", "pass", 20)],
        },
        {
            "load": 2,
            "repeat": 1,
            "verdict": "fail",
            "checks": [check("p99_ttft_ms", "fail", 300), check("p99_tpot_ms", "pass", 30)],
        },
    ]
    result = {
        "config": "pd",
        "over": "concurrency",
        "slo": json.dumps({"p99_ttft_ms": 100, "p99_tpot_ms": 100}),
        "reason": "converged",
        "pass_load": 1.0,
        "fail_load": 2.0,
        "fail_verdict": "fail",
        "probes": 2,
        "loads": 2,
        "seconds": 9.0,
        "goodput_rps": None,
        "trail": json.dumps(trail),
        "validity": "contended",
    }
    fig, caption = charts_pages.search_chart(result, "run1")
    panels: dict[str, dict[str, list]] = {}
    for trace in as_json(fig)["data"]:
        panel = "tpot" if trace.get("xaxis") == "x2" else "ttft"
        panels.setdefault(panel, {})[trace["name"]] = trace["x"]
    assert panels["ttft"].get("pass") == [1] and panels["ttft"].get("fail") == [2]
    assert sorted(panels["tpot"]["pass"]) == [1, 2] and not panels["tpot"].get("fail")
    assert caption.startswith("NOT OK: a probe of this config was contended")


def test_a_search_without_an_answer_says_so():
    result = {
        "config": "pd",
        "over": "concurrency",
        "slo": "{}",
        "reason": "range",
        "pass_load": None,
        "fail_load": 1.0,
        "fail_verdict": "fail",
        "trail": "[]",
    }
    data = as_json(charts_pages.search_chart(result)[0])
    assert "no load passed" in data["layout"]["title"]["text"]


def test_the_telemetry_timeline_has_three_rows_with_units_gpus_of_the_servers_and_phases():
    samples = pd.DataFrame(
        [
            {"gpu_index": g, "t": 100.0 + s, "power_w": 300.0, "util_gpu_pct": 50.0, "sm_mhz": 1900.0, "samples": 5}
            for g in range(3)
            for s in range(40)
        ]
    )
    phases = pd.DataFrame(
        [
            {
                "config": "pd",
                "concurrency": c,
                "repeat": 1,
                "warmup": False,
                "dtype": None,
                "m": None,
                "phase_start": 100.0 + 10 * i,
                "phase_end": 108.0 + 10 * i,
                "gpu_index": g,
                "server": server,
                "throttled": c == 8 and g == 1,
                "throttle_reasons": "hw_slowdown" if c == 8 and g == 1 else "",
            }
            for i, c in enumerate((1, 8))
            for g, server in ((0, "prefill"), (1, "decode"), (2, None))
        ]
    )
    fig, caption = charts_pages.telemetry_chart(samples, phases, "config pd", "run1")
    data = as_json(fig)
    assert {t["name"] for t in data["data"]} == {"GPU 0 (prefill)", "GPU 1 (decode)"}  # GPU 2 is no server's
    assert [data["layout"][f"yaxis{i}"]["title"]["text"] for i in ("", "2", "3")] == [
        "power_w (W)",
        "util_gpu_pct (%)",
        "sm_mhz (MHz)",
    ]
    assert all(data["layout"][f"xaxis{i}"]["type"] == "date" for i in ("", "2", "3"))
    rects = data["layout"]["shapes"]
    assert len(rects) == 2 and sum(r["fillcolor"] == "#feb2b2" for r in rects) == 1
    assert "1 throttled" in caption and "means of up to 5 samples" in caption
    assert any("hw_slowdown" in a["hovertext"] for a in data["layout"]["annotations"])
    template = data["data"][0]["hovertemplate"]  # GPU, time, value with its unit, samples behind it, run
    assert "power_w %{y:.4g} W" in template and "%{customdata} samples" in template and "run run1" in template


def test_a_kernel_runs_telemetry_is_one_timeline_of_every_gpu_with_its_sizes_as_phases():
    samples = pd.DataFrame(
        [
            {"gpu_index": g, "t": 10.0 + s, "power_w": 200.0, "util_gpu_pct": 99.0, "sm_mhz": 1800.0, "samples": 1}
            for g in range(2)
            for s in range(20)
        ]
    )
    phases = pd.DataFrame(
        [
            {
                "config": None,
                "concurrency": None,
                "repeat": None,
                "warmup": None,
                "dtype": "bf16",
                "m": m,
                "phase_start": 10.0 + 5 * i,
                "phase_end": 14.0 + 5 * i,
                "gpu_index": g,
                "server": None,
                "throttled": False,
                "throttle_reasons": "",
            }
            for i, m in enumerate((1, 64))
            for g in range(2)
        ]
    )
    fig, caption = charts_pages.telemetry_chart(samples, phases, "the run")
    data = as_json(fig)
    assert {t["name"] for t in data["data"]} == {"GPU 0", "GPU 1"}  # no server named: every GPU sampled
    assert [a["text"] for a in data["layout"]["annotations"]] == ["dtype=bf16, m=1", "dtype=bf16, m=64"]
    assert caption.startswith("2 GPU(s), 2 phase(s) shaded") and "means of" not in caption


def test_a_mean_cell_is_of_the_ok_repeats_with_its_interval_or_says_there_is_none():
    assert charts_pages._mean_cell({"values": ""}) == "no ok repeat"
    assert charts_pages._mean_cell({"values": "100.0"}) == "100 (n=1)"
    cell = charts_pages._mean_cell({"values": "5.0,300.0,2000.0"})
    assert cell.startswith("768.3 (") and cell.endswith(", n=3)") and "–" in cell and "-" not in cell.split("(")[1]


def test_a_case_from_benchmark_output_is_never_markup_on_an_axis():
    axis, label = charts_pages._case_axis("case", ['<a href="https://evil.example">x</a>', "b"])
    assert axis.type == "category" and "<" not in label('<a href="https://evil.example">x</a>')
    assert label("") == "(no case)" and label("plain") == "plain"


def test_a_log_value_axis_labels_its_ticks_in_full():
    from benchflow.ui.charts import value_axis

    layout = value_axis("p99_ttft_ms (ms)", [90.0, 900.0, 2000.0]).layout()
    assert layout["type"] == "log" and layout["tickvals"] == [100.0, 200.0, 500.0, 1000.0, 2000.0]
    assert layout["ticktext"] == ["100", "200", "500", "1000", "2000"]
