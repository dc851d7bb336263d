"""The analyst views and regression detection, on both backends, over a history the test writes:
14 scheduled nights with 3% noise, then tonight with and without a 10% throughput drop."""

from __future__ import annotations

import json
import random
import re
import uuid
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest

from benchflow import kinds
from benchflow.nightly.regressions import assess, find, judge
from benchflow.spec import RegressionLimits
from benchflow.warehouse import RunRecord, Warehouse
from tests.conftest import PG_URI, PROJECT_ROOT

pytestmark = pytest.mark.integration
KERNEL = kinds.get("kernel")
SERVING = kinds.get("serving")

QUERIES = re.findall(r"```sql\n(.*?)```", (PROJECT_ROOT / "docs" / "analysts.md").read_text(), re.S)
TONIGHT = datetime.combine(date.today(), datetime.min.time(), tzinfo=UTC) + timedelta(hours=2)
H200 = {"gpu": "NVIDIA H200, 570.86, 143771 MiB", "gpu_count": "1", "cuda": "12.8", "torch": "2.13.0"}


@pytest.fixture(params=["duckdb", "postgres"])
def warehouse(request, tmp_path):
    if request.param == "duckdb":
        warehouse = Warehouse.at(tmp_path / "wh.duckdb")
    else:
        warehouse = Warehouse.postgres(PG_URI, search_path=f"an_{uuid.uuid4().hex[:12]}")
    warehouse.migrate()
    return warehouse


def detect(warehouse: Warehouse, dag_id: str, run_id: str, limits: RegressionLimits) -> list:
    """What the pipeline's detect step does: judge the run, store the findings and the verdict."""
    verdict = assess(warehouse, dag_id, run_id, limits)
    warehouse.record_findings(dag_id, run_id, verdict.findings, verdict)
    return verdict.findings


def night_run(campaign: str, night: int, status: str = "ok", run_type: str = "scheduled", facts=None) -> RunRecord:
    when = TONIGHT - timedelta(days=night)
    return RunRecord(
        dag_id=f"bench_{campaign}",
        run_id=f"{run_type}__{when.isoformat()}",
        campaign=campaign,
        host="gpu_node_1",
        spec_hash="s" * 64,
        status=status,
        started_at=when,
        logical_date=when,
        run_type=run_type,
        host_facts=facts or H200,
        git_sha="abc123",
    )


def kernel_rows(scale: float, rng: random.Random) -> list[dict]:
    rows = []
    for m in (1, 16, 256):
        tok = 1000.0 * m**0.5 * scale * (1 + rng.gauss(0, 0.03))
        rows.append({"m": m, "ms_per_call": m / tok * 1e3, "tok_per_s": tok, "us_per_token": 1e6 / tok, "note": ""})
    return rows


def fill_history(warehouse: Warehouse, tonight_scale: float) -> RunRecord:
    rng = random.Random(7)
    for night in range(14, 0, -1):
        warehouse.load(night_run("moe_kernel_nightly", night), KERNEL, kernel_rows(1.0, rng))
    tonight = night_run("moe_kernel_nightly", 0)
    warehouse.load(tonight, KERNEL, kernel_rows(tonight_scale, rng))
    return tonight


def test_injected_ten_percent_drop_is_found(warehouse):
    tonight = fill_history(warehouse, tonight_scale=0.90)
    findings = detect(warehouse, tonight.dag_id, tonight.run_id, RegressionLimits())
    throughput = sorted((f.case_key, f.metric) for f in findings if f.metric == "tok_per_s")
    assert throughput == [("m=1", "tok_per_s"), ("m=16", "tok_per_s"), ("m=256", "tok_per_s")]
    expected = {"tok_per_s": -0.10, "us_per_token": 1 / 0.9 - 1}  # 10 % fewer tokens/s is 11 % more us/token
    assert {f.metric for f in findings} == set(expected)
    for finding in findings:
        assert finding.baseline_runs == 14
        assert finding.relative_change == pytest.approx(expected[finding.metric], abs=0.05)
    stored = warehouse.query(f"SELECT count(*) AS n FROM regressions WHERE run_id = {warehouse.p}", [tonight.run_id])
    assert int(stored["n"][0]) == len(findings)
    marked = warehouse.query(f"SELECT regressions FROM runs WHERE run_id = {warehouse.p}", [tonight.run_id])
    assert int(marked["regressions"][0]) == len(findings)


def test_same_history_without_the_drop_raises_nothing(warehouse):
    tonight = fill_history(warehouse, tonight_scale=1.0)
    assert detect(warehouse, tonight.dag_id, tonight.run_id, RegressionLimits()) == []


def test_baseline_ignores_manual_runs_other_gpus_and_invalid_runs(warehouse):
    rng = random.Random(1)
    for night in range(6, 0, -1):
        warehouse.load(night_run("k", night, run_type="manual"), KERNEL, kernel_rows(2.0, rng))
        warehouse.load(night_run("k", night, facts={"gpu": "NVIDIA B200, 1, 1"}), KERNEL, kernel_rows(2.0, rng))
        warehouse.load(night_run("k", night, status="incomplete"), KERNEL, kernel_rows(2.0, rng))
    tonight = night_run("k", 0)
    warehouse.load(tonight, KERNEL, kernel_rows(1.0, rng))
    assert detect(warehouse, tonight.dag_id, tonight.run_id, RegressionLimits()) == []  # no usable baseline at all


def stored_verdict(warehouse: Warehouse, run: RunRecord) -> str:
    from benchflow.records import verdict_text

    row = warehouse.query(
        "SELECT verdict, verdict_detail, baseline_runs, regressions FROM runs "
        f"WHERE dag_id = {warehouse.p} AND run_id = {warehouse.p}",
        [run.dag_id, run.run_id],
    ).iloc[0]
    return verdict_text(row["verdict"], row["verdict_detail"], row["baseline_runs"], row["regressions"])


def test_a_verdict_is_regressed_fine_against_n_nights_or_not_judged_and_why(warehouse):
    rng = random.Random(4)
    for night in (4, 3):
        warehouse.load(night_run("k3", night), KERNEL, kernel_rows(1.0, rng))
    short = night_run("k3", 2)  # scheduled, but two nights of history where five are needed
    warehouse.load(short, KERNEL, kernel_rows(0.5, rng))
    manual = night_run("k3", 1, run_type="manual")  # half as fast, but a manual run has no baseline
    warehouse.load(manual, KERNEL, kernel_rows(0.5, rng))
    noisy = night_run("k3", 0)
    warehouse.load(noisy, KERNEL, [{**row, "validity": "noisy"} for row in kernel_rows(1.0, rng)])
    incomplete = night_run("k3", 0.5, status="incomplete")
    warehouse.load(incomplete, KERNEL, kernel_rows(1.0, rng))
    expected = [
        (short, "not judged (2 of 5 nights)"),
        (manual, "not judged (manual run)"),
        (noisy, "not judged (invalid rows: 3 noisy)"),
        (incomplete, "not judged (run incomplete)"),
    ]
    for run, text in expected:
        assert detect(warehouse, run.dag_id, run.run_id, RegressionLimits()) == []
        assert assess(warehouse, run.dag_id, run.run_id, RegressionLimits()).text() == text
        assert stored_verdict(warehouse, run) == text  # what the view and `bench run` read

    fine = fill_history(warehouse, tonight_scale=1.0)
    assert detect(warehouse, fine.dag_id, fine.run_id, RegressionLimits()) == []
    assert stored_verdict(warehouse, fine) == "no regression against 14 baseline nights"
    worse = night_run("moe_kernel_nightly", -1)
    warehouse.load(worse, KERNEL, kernel_rows(0.9, random.Random(7)))
    findings = detect(warehouse, worse.dag_id, worse.run_id, RegressionLimits())
    assert findings and stored_verdict(warehouse, worse) == f"{len(findings)} regression(s) against 14 baseline nights"
    never = night_run("k3", 5)  # loaded, never judged: not "no regression" either
    warehouse.load(never, KERNEL, kernel_rows(1.0, rng))
    assert stored_verdict(warehouse, never) == "not judged (no verdict recorded)"


def test_judge_knows_which_way_is_worse():
    history = [100.0, 101.0, 99.0, 100.5, 99.5]
    assert judge(80.0, history, "output_throughput", RegressionLimits()) is not None
    assert judge(120.0, history, "output_throughput", RegressionLimits()) is None
    assert judge(120.0, history, "mean_ttft_ms", RegressionLimits()) is not None
    assert judge(80.0, history, "mean_ttft_ms", RegressionLimits()) is None
    assert judge(80.0, history[:3], "output_throughput", RegressionLimits()) is None  # too short a history
    assert judge(98.0, history, "output_throughput", RegressionLimits(min_change=0.05)) is None  # quiet but small


def store(tmp_path, name):
    from airflow.sdk import ObjectStoragePath

    return ObjectStoragePath(f"file://{tmp_path / name}")


def serving_row(config: str, concurrency: int | None, throughput: float) -> dict:
    return {
        "config": config,
        "concurrency": concurrency,
        "num_prompts": 32,
        "completed": 32,
        "failed": 0,
        "duration_s": 10.0,
        "total_output_tokens": round(throughput * 10),
        "request_throughput": 3.2,
        "output_throughput": throughput,
        "mean_ttft_ms": 100.0,
        "mean_e2e_ms": 2000.0,
    }


def test_the_five_analyst_questions_from_the_docs(warehouse):
    assert len(QUERIES) == 5
    for campaign, throughput in (("serving_tp4", 900.0), ("serving_pd", 1200.0), ("serving_ep4", 1000.0)):
        for night in (1, 0):
            rows = [serving_row(campaign.split("_")[1], c, throughput * (1 + night) / (16 / c)) for c in (1, 8, 16)]
            verdicts = [
                {"kind": "serving", "config": "pd", "concurrency": c, "repeat": 1, "warmup": False}
                | {"verdict": "decode-bound", "says": f"decode-bound: night {night}"}
                for c in (1, 8, 16)
            ]
            side = {"phase_bottlenecks": verdicts} if campaign == "serving_pd" else None
            warehouse.load(night_run(campaign, night), SERVING, rows, None, side)
    warehouse.load(
        night_run("serving_pd", 0, status="invalid", run_type="manual"), SERVING, [serving_row("pd", 16, 99999.0)]
    )
    tonight = fill_history(warehouse, tonight_scale=0.9)
    detect(warehouse, tonight.dag_id, tonight.run_id, RegressionLimits())
    for week_ago in (3, 10):  # one run this week, one last week, slower
        scale = 1.0 if week_ago == 3 else 0.8
        rows = kernel_rows(scale, random.Random(2))
        warehouse.load(night_run("moe_kernel_nightly", week_ago + 0.5), KERNEL, rows)

    comparison = warehouse.query(QUERIES[0])
    assert comparison["campaign"].tolist() == ["serving_pd", "serving_ep4", "serving_tp4"]
    assert comparison["output_throughput"].tolist() == [1200.0, 1000.0, 900.0]  # last night; invalid run left out

    weeks = warehouse.query(QUERIES[1])
    assert weeks["m"].tolist() == [1, 16, 256]
    assert (weeks["this_week"] < weeks["last_week"]).all()  # faster this week: fewer us per token

    regressed = warehouse.query(QUERIES[2])
    assert set(regressed["campaign"]) == {"moe_kernel_nightly"}
    assert {"tok_per_s", "us_per_token"} <= set(regressed["metric"])

    limits = warehouse.query(QUERIES[3])  # the latest valid run's verdicts, its highest load first
    assert limits["concurrency"].tolist() == [16, 8, 1] and set(limits["says"]) == {"decode-bound: night 0"}

    rates = [  # a rate sweep: at 8 req/s the server no longer kept up
        serving_row("single", None, 100.0 * q)
        | {"request_rate": q, "achieved_rate": 0.98 * q if q < 8 else 5.1, "rate_reached": q < 8}
        | {"prefix_cache_hit_rate": 0.71, "dataset": "shared-prefix:4x256+32"}
        for q in (2.0, 4.0, 8.0)
    ]
    warehouse.load(night_run("serving_rate_local", 0), SERVING, rates)
    kept_up = warehouse.query(QUERIES[4])
    assert kept_up["request_rate"].tolist() == [2.0, 4.0, 8.0]
    assert kept_up["rate_reached"].tolist() == [True, True, False] and set(kept_up["prefix_cache_hit_rate"]) == {0.71}


def test_report_draws_sweep_and_trend_with_regressions(warehouse, tmp_path):
    from benchflow.analysis import plots

    tonight = fill_history(warehouse, tonight_scale=0.9)
    detect(warehouse, tonight.dag_id, tonight.run_id, RegressionLimits())
    files = plots.render(warehouse, tonight.dag_id, tonight.run_id, store(tmp_path, "plots"))
    assert sorted(p.name for p in files) == ["nightly_trend.png", "us_per_token_vs_m.png"]
    for path in files:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000

    serving = night_run("serving_pd", 0)
    warehouse.load(serving, SERVING, [serving_row("pd", c, 100.0 * c) for c in (1, 8, 16)])
    files = plots.render(warehouse, serving.dag_id, serving.run_id, store(tmp_path, "serving"))
    names = ["configs_with_intervals.png", "nightly_trend.png", "serving_vs_concurrency.png"]
    assert sorted(p.name for p in files) == names
    assert plots.render(warehouse, "bench_nope", "nope", store(tmp_path, "none")) == []


def test_thresholds_per_gpu_model_and_the_notify_hook(warehouse, tmp_path, monkeypatch):
    from benchflow.nightly.regressions import notify
    from benchflow.spec import Regressions

    limits = Regressions(min_change=0.5, by_gpu={"NVIDIA H200": {"min_change": 0.03}})
    assert limits.for_gpu("NVIDIA B200").min_change == 0.5 and limits.for_gpu("NVIDIA H200").min_change == 0.03
    tonight = fill_history(warehouse, tonight_scale=0.9)

    def thresholds(gpu: str) -> RegressionLimits:
        return limits.for_gpu(gpu)

    assert find(warehouse, tonight.dag_id, tonight.run_id, thresholds("NVIDIA B200")) == []  # 50 %: not reached
    findings = find(warehouse, tonight.dag_id, tonight.run_id, thresholds("NVIDIA H200"))
    assert {f.metric for f in findings} == {"tok_per_s", "us_per_token"}

    module = f"alerts_probe_{uuid.uuid4().hex[:8]}"  # a module of its own per run: imports are cached
    (tmp_path / f"{module}.py").write_text(
        "import json, pathlib\n"
        "def post(dag_id, run_id, findings):\n"
        "    pathlib.Path(__file__).with_suffix('.json').write_text(json.dumps([dag_id, run_id, findings]))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    notify(f"{module}:post", tonight.dag_id, tonight.run_id, findings)
    dag_id, run_id, sent = json.loads((tmp_path / f"{module}.json").read_text())
    assert (dag_id, run_id) == (tonight.dag_id, tonight.run_id)
    assert sorted(f["case_key"] for f in sent) == sorted(f.case_key for f in findings)
    notify(f"{module}:post", "other", "run", [])  # nothing found: nobody is paged
    assert json.loads((tmp_path / f"{module}.json").read_text())[0] == tonight.dag_id


def repeated_night(warehouse, campaign: str, night: int, slower: float, rng: random.Random, run_type="scheduled"):
    """One night of a two-config serving campaign, 3 repeats a phase, 3 % noise; PD ``slower`` than TP4."""
    rows = []
    for config, scale in (("tp4", 1.0), ("pd", 1.0 - slower)):
        for concurrency in (1, 16):
            for repeat in (1, 2, 3):
                throughput = 100.0 * concurrency * scale * (1 + rng.gauss(0, 0.03))
                rows.append({**serving_row(config, concurrency, throughput), "repeat": repeat})
        rows.append({**serving_row(config, 1, 5.0), "repeat": 0, "warmup": True})  # kept, never counted
    run = night_run(campaign, night, run_type=run_type)
    warehouse.load(run, SERVING, rows)
    return run


def test_repeats_give_intervals_and_a_real_difference_is_found(warehouse):
    from benchflow.analysis.compare import Side, compare_sides

    rng = random.Random(11)
    run = repeated_night(warehouse, "serving_cmp", 0, slower=0.10, rng=rng)
    summary = warehouse.query(
        f"SELECT config, n, mean, ci_low, ci_high FROM case_summary WHERE run_id = {warehouse.p} "
        "AND metric = 'output_throughput' AND point = 'concurrency=16' ORDER BY config",
        [run.run_id],
    ).to_dict("records")
    assert [(s["config"], s["n"]) for s in summary] == [("pd", 3), ("tp4", 3)]  # the warm-up is left out
    for s in summary:
        assert s["ci_low"] < s["mean"] < s["ci_high"]
    rows = compare_sides(
        warehouse, Side("serving_cmp", "tp4"), Side("serving_cmp", "pd"), "concurrency=16", "output_throughput"
    )
    assert len(rows) == 1 and rows[0].result is not None
    result = rows[0].result
    assert result.significant and result.ratio_low <= 0.90 <= result.ratio_high
    assert rows[0].verdict(Side("serving_cmp", "pd")).startswith("serving_cmp:pd is worse by")


def test_the_interval_of_a_positive_metric_never_reaches_below_zero_and_the_view_agrees(warehouse):
    """Three noisy repeats of a throughput (5, 300, 2000 tok/s): a linear t interval would start at about -2400.
    On the logs it stays positive, and case_summary gives what benchflow.analysis.stats.summarize gives, on both
    backends; a metric that can be zero or below keeps the linear interval."""
    from benchflow.analysis.stats import summarize

    values = [5.0, 300.0, 2000.0]
    found = summarize(values)
    assert 0 < found.ci_low < found.mean < found.ci_high
    assert summarize([-1.0, 2.0, 3.0]).ci_low < -1.0  # not all positive: linear
    run = night_run("log_ci", 0)
    rows = [
        {"m": 16, "repeat": i + 1, "ms_per_call": 1.0, "tok_per_s": v, "us_per_token": 1e6 / v, "note": ""}
        for i, v in enumerate(values)
    ]
    warehouse.load(run, KERNEL, rows)
    summary = warehouse.query(
        f"SELECT n, mean, ci_low, ci_high FROM case_summary WHERE run_id = {warehouse.p} AND metric = 'tok_per_s'",
        [run.run_id],
    ).to_dict("records")
    assert summary and summary[0]["n"] == 3
    assert summary[0]["ci_low"] == pytest.approx(found.ci_low, rel=1e-4)
    assert summary[0]["ci_high"] == pytest.approx(found.ci_high, rel=1e-4)


def test_no_difference_is_reported_as_none_in_at_least_95_percent_of_200_trials():
    """The same comparison on generated pairs of 3 repeats with 3 % noise and no real difference."""
    from benchflow.analysis.stats import compare

    quiet = 0
    for seed in range(200):
        rng = random.Random(seed)
        a = [1000 * (1 + rng.gauss(0, 0.03)) for _ in range(3)]
        b = [1000 * (1 + rng.gauss(0, 0.03)) for _ in range(3)]
        quiet += not compare(a, b, "higher").significant
    assert quiet >= 190, quiet
    rng = random.Random(5)
    found = sum(
        compare(
            [100 * (1 + rng.gauss(0, 0.03)) for _ in range(3)],
            [90 * (1 + rng.gauss(0, 0.03)) for _ in range(3)],
            "higher",
        ).significant
        for _ in range(200)
    )
    assert found >= 150, found  # a 10 % drop is seen most of the time with 3 repeats a side


def test_a_nightly_regression_needs_the_repeats_to_say_so(warehouse):
    rng = random.Random(3)
    for night in range(8, 0, -1):
        repeated_night(warehouse, "serving_nightly", night, slower=0.0, rng=rng)
    quiet = repeated_night(warehouse, "serving_nightly", 0, slower=0.0, rng=rng)
    assert detect(warehouse, quiet.dag_id, quiet.run_id, RegressionLimits()) == []
    worse = night_run("serving_nightly", 0)
    worse = RunRecord(**{**worse.__dict__, "run_id": worse.run_id + "_slow"})
    rows = [
        {**serving_row(c, 16, 100.0 * 16 * 0.85 * (1 + rng.gauss(0, 0.01))), "repeat": r}
        for c in ("tp4", "pd")
        for r in (1, 2, 3)
    ]
    warehouse.load(worse, SERVING, rows)
    findings = detect(warehouse, worse.dag_id, worse.run_id, RegressionLimits())
    throughput = [f for f in findings if f.metric == "output_throughput"]
    assert sorted(f.case_key for f in throughput) == ["config=pd,concurrency=16", "config=tp4,concurrency=16"]
    for f in throughput:
        assert f.test == "welch-log" and f.ci_high < 1 and -0.20 < f.relative_change < -0.10 and f.p_value < 0.05
    stored = warehouse.query(
        f"SELECT test, ci_low, ci_high FROM regressions WHERE run_id = {warehouse.p} AND metric = 'output_throughput'",
        [worse.run_id],
    )
    assert set(stored["test"]) == {"welch-log"} and (stored["ci_high"] < 1).all()


def search_record(config: str, pass_load: int) -> dict:
    """A load search's result as the sweep driver writes it to search.jsonl (the fields the table keeps)."""
    return {
        "config": config,
        "over": "concurrency",
        "range": [1, 64],
        "slo": {"p99_ttft_ms": 2000},
        "confidence": 0.95,
        "precision": 0.1,
        "prompts_per_probe": 400,
        "repeats": 3,
        "budget": {"probes": 30, "seconds": 3600},
        "reason": "converged",
        "pass_load": pass_load,
        "fail_load": pass_load + 1,
        "fail_verdict": "fail",
        "probes": 8,
        "loads": 7,
        "seconds": 900.0,
        "goodput_rps": 3.5 * pass_load,
        "trail": [{"load": pass_load, "repeat": 1, "verdict": "pass"}],
    }


def test_a_lower_search_answer_is_a_regression_and_the_answer_is_a_trend_metric(warehouse):
    """The load search's answer (the most load within the SLO) is judged night over night like any trend metric:
    a lower one is worse. It reaches metric_samples from the serving_search table, one value a run and config."""
    for night in range(7, 0, -1):
        rows = [serving_row("pd", c, 100.0 * c) for c in (8, 16)]
        warehouse.load(
            night_run("serving_search", night), SERVING, rows, None, {"serving_search": [search_record("pd", 32)]}
        )
    tonight = night_run("serving_search", 0)
    rows = [serving_row("pd", c, 100.0 * c) for c in (8, 16)]
    warehouse.load(tonight, SERVING, rows, None, {"serving_search": [search_record("pd", 24)]})
    answers = warehouse.query(
        f"SELECT point, case_key, value FROM metric_samples WHERE run_id = {warehouse.p} AND metric = 'pass_load'",
        [tonight.run_id],
    )
    assert answers.to_dict("records") == [{"point": "search", "case_key": "config=pd", "value": 24.0}]
    findings = detect(warehouse, tonight.dag_id, tonight.run_id, RegressionLimits())
    found = [f for f in findings if f.metric == "pass_load"]
    assert len(found) == 1 and found[0].case_key == "config=pd" and found[0].relative_change == pytest.approx(-0.25)
    assert found[0].direction == "higher_is_better"


def test_a_search_answer_carries_the_power_and_energy_measured_there(warehouse):
    """serving_search_answers: the answer of each config with the mean power and joules per output token of its ok
    repeats at that load (their steady states pooled); a noisy repeat and the other loads do not count."""
    run = night_run("serving_search_energy", 0)
    rows = [serving_row("pd", c, 100.0 * c) | {"repeat": 1} for c in (8, 16, 24)]
    rows += [serving_row("pd", 16, 1500.0) | {"repeat": 2}, serving_row("pd", 16, 900.0) | {"repeat": 3}]
    energy = {(16, 1): (600.0, 2.0, 1200), (16, 2): (900.0, 3.0, 1500), (16, 3): (5000.0, 1.0, 100)}
    for row in rows:
        joules, seconds, tokens = energy.get((row["concurrency"], row["repeat"]), (50.0, 1.0, 10))
        row |= {"steady_energy_j": joules, "steady_s": seconds, "steady_tokens": tokens, "validity": "ok"}
    rows[-1]["validity"] = "noisy"
    warehouse.load(run, SERVING, rows, None, {"serving_search": [search_record("pd", 16)]})
    (answer,) = warehouse.query(
        f"SELECT pass_load, answer_rows, power_w_at_answer, j_per_token_at_answer FROM serving_search_answers "
        f"WHERE run_id = {warehouse.p}",
        [run.run_id],
    ).to_dict("records")
    assert answer["pass_load"] == 16 and answer["answer_rows"] == 2
    assert answer["power_w_at_answer"] == pytest.approx(1500.0 / 5.0)
    assert answer["j_per_token_at_answer"] == pytest.approx(1500.0 / 2700)


def test_compare_takes_a_search_answer_by_its_bracket_and_leaves_noisy_rows_out_unless_asked(warehouse):
    """bench compare on load searches: one answer a side is compared by the brackets [highest pass, lowest fail],
    never "not comparable"; a noisy repeat is left out and counted on its line, and compared with include_noisy;
    the answer resting on that repeat's config is not ok either, so it is compared only with include_noisy."""
    from benchflow.analysis.compare import Side, compare_runs

    def night(n: int, search: list[dict], noisy: bool = False) -> RunRecord:
        rows = [serving_row(c, 16, 100.0 + r) | {"repeat": r} for c in ("pd", "tp4") for r in (1, 2, 3)]
        if noisy:
            rows[0] |= {"output_throughput": 10.0, "validity": "noisy"}  # pd, repeat 1: measured beside a hog
        run = night_run("serving_bracket", n)
        warehouse.load(run, SERVING, rows, None, {"serving_search": search})
        return run

    older = night(2, [search_record("pd", 16), search_record("tp4", 8)])
    newer = night(1, [search_record("pd", 24), search_record("tp4", 8) | {"fail_load": None}])

    def row(a: Side, b: Side, metric: str, include_noisy: bool = False):
        (found,) = compare_runs(warehouse, a, b, metric=metric, include_noisy=include_noisy).rows
        return found

    older_pd = Side("serving_bracket", "pd", older.run_id)
    newer_pd = Side("serving_bracket", "pd", newer.run_id)
    better = row(older_pd, newer_pd, "pass_load")
    assert better.bracket is not None and better.bracket.ratio == pytest.approx((24 / 17, 25 / 16))
    assert better.verdict(newer_pd).startswith(f"{newer_pd} is better: its bracket lies wholly above A's")
    worse = row(newer_pd, older_pd, "pass_load")
    assert worse.verdict(older_pd).startswith(f"{older_pd} is worse")
    # tp4: 8 passed both nights; the newer search found no failing load, so its bracket is open above: overlap
    open_above = row(
        Side("serving_bracket", "tp4", older.run_id), Side("serving_bracket", "tp4", newer.run_id), "pass_load"
    )
    assert open_above.bracket.ratio == (8 / 9, float("inf"))
    assert "no difference shown: the brackets overlap" in open_above.verdict(Side("serving_bracket", "tp4"))

    noisy = night(0, [search_record("pd", 24)], noisy=True)
    noisy_pd = Side("serving_bracket", "pd", noisy.run_id)
    tput = row(older_pd, noisy_pd, "output_throughput")
    assert (tput.a_values, tput.b_values, tput.b_left_out) == (3, 2, "1 noisy")
    assert "B left out 1 noisy" in tput.verdict(noisy_pd)
    everything = row(older_pd, noisy_pd, "output_throughput", include_noisy=True)
    assert (everything.b_values, everything.b_left_out) == (3, "")
    # pd's answer rests on the noisy repeat: not compared as measured ok, compared (and counted) when asked
    assert compare_runs(warehouse, older_pd, noisy_pd, metric="pass_load").rows == []
    answer = row(older_pd, noisy_pd, "pass_load", include_noisy=True)
    assert answer.bracket is not None and answer.bracket.ratio == pytest.approx((24 / 17, 25 / 16))


def test_rows_not_measured_ok_are_counted_by_validity_and_reason(warehouse):
    """What bench run prints under a run's table: the rows that are not ok, grouped by validity and reason."""
    from benchflow.warehouse import queries

    rows = kernel_rows(1.0, random.Random(3)) + kernel_rows(1.0, random.Random(4))  # m = 1, 16, 256, twice
    for repeat, row in enumerate(rows):
        row["repeat"] = 1 + repeat // 3
    reason = "contended: the benchmark waited 31 % of its run time for a CPU (limit 10 %)"
    for row in rows[:3]:
        row |= {"validity": "contended", "validity_reason": reason}
    rows[3] |= {"validity": "noisy", "validity_reason": "noisy: p90/p10 of the timed calls 2.4 (limit 1.5)"}
    run = night_run("validity_counts", 0)
    warehouse.load(run, KERNEL, rows)
    found = queries.validity_counts(warehouse, KERNEL, run.dag_id, run.run_id).to_dict("records")
    assert found == [
        {"validity": "contended", "reason": reason, "n": 3},
        {"validity": "noisy", "reason": "noisy: p90/p10 of the timed calls 2.4 (limit 1.5)", "n": 1},
    ]


def test_a_search_answer_whose_probes_were_contended_is_not_ok_and_never_judged(warehouse):
    """The answer rests on every probe of its config: one contended probe and the answer is not ok in
    metric_samples (left out of case_summary and of the baseline), and the view's query says so."""
    from benchflow.kinds import side_table
    from benchflow.warehouse import queries

    run = night_run("search_busy", 0)
    rows = [serving_row("pd", 8, 800.0), {**serving_row("pd", 16, 1600.0), "validity": "contended"}]
    warehouse.load(run, SERVING, rows, None, {"serving_search": [search_record("pd", 12)]})
    answers = warehouse.query(
        f"SELECT value, validity FROM metric_samples WHERE run_id = {warehouse.p} AND campaign = 'search_busy' "
        "AND metric = 'pass_load'",
        [run.run_id],
    )
    assert answers.to_dict("records") == [{"value": 12.0, "validity": "contended"}]
    summary = warehouse.query(
        f"SELECT n FROM case_summary WHERE run_id = {warehouse.p} AND campaign = 'search_busy' "
        "AND metric = 'pass_load'",
        [run.run_id],
    )
    assert summary.empty
    side = side_table(SERVING, "load_search")
    assert side is not None
    shown = queries.search_results(warehouse, side, run.dag_id, run.run_id)
    assert shown["validity"].tolist() == ["contended"]
    answers_view = warehouse.query(
        f"SELECT validity FROM serving_search_answers WHERE dag_id = {warehouse.p} AND run_id = {warehouse.p}",
        [run.dag_id, run.run_id],
    )
    assert answers_view["validity"].tolist() == ["contended"]


def test_a_step_below_the_nightly_threshold_is_a_suspected_drift_stored_with_its_commits(warehouse):
    """30 scheduled nights of a kernel campaign whose payload commit changes each night, 1 % noise and a 3 % step
    down from night 20 (under the 5 % a single night needs): tonight's own check finds nothing, its change point
    search finds the step with the commits around it, and the verdict says since when."""
    rng = random.Random(3)
    runs = []
    for back in range(29, -1, -1):
        index = 29 - back
        scale = (0.97 if index >= 20 else 1.0) * (1 + rng.gauss(0, 0.01))
        run = replace(night_run("moe_nightly_cp", back), payload_commit=f"{index:02d}" * 20)
        rows = [
            {"m": m, "ms_per_call": 1.0, "tok_per_s": 1e3 * m * scale, "us_per_token": 1e3 / (m * scale), "note": ""}
            for m in (1, 16)
        ]
        warehouse.load(run, KERNEL, rows)
        runs.append(run)
    tonight = runs[-1]
    verdict = assess(warehouse, tonight.dag_id, tonight.run_id, RegressionLimits())
    assert verdict.state == "suspected drift" and not verdict.findings, verdict
    warehouse.record_findings(tonight.dag_id, tonight.run_id, verdict.findings, verdict)
    stored = warehouse.query(
        f"SELECT night, at_run_id, good_commit, bad_commit, ratio, ratio_high, worse FROM change_points "
        f"WHERE run_id = {warehouse.p} AND case_key = 'm=16' AND metric = 'tok_per_s'",
        [tonight.run_id],
    ).to_dict("records")
    (point,) = stored
    at = next(i for i, r in enumerate(runs) if r.run_id == point["at_run_id"])
    assert at in (19, 20, 21) and point["worse"] and point["ratio"] == pytest.approx(0.97, abs=0.01)
    assert (point["good_commit"], point["bad_commit"]) == (f"{at - 1:02d}" * 20, f"{at:02d}" * 20)
    detail = warehouse.query(f"SELECT verdict_detail FROM runs WHERE run_id = {warehouse.p}", [tonight.run_id])
    assert str(detail["verdict_detail"][0]).startswith("suspected drift since "), detail


GIT_SPEC = """\
description: a kernel campaign from git that bisects its own regressions
kind: kernel
host: gpu_a
payload: {repo: /srv/git/toy.git, ref: main, path: kernels/toy}
benchmark:
  script: bench_toy.py
  args: {m_list: [1, 16]}
regressions:
  bisect: {max_probes: 12, max_hours: 3}
"""


def test_a_regression_on_a_git_campaign_plans_one_bisection_and_a_second_detection_none(warehouse, tmp_path):
    """Twelve nights, a new commit each; the commit of night 10 makes the kernel 20 % slower. Night 10's check
    plans one bisection of that commit range (the largest change's case, the spec's budget, a conf the bisect DAG
    accepts) and links every finding to it; night 11, still slow, names the same range (the first slow night's
    commit and the one before), starts none, and its findings link to the same run."""
    from benchflow.nightly import auto_bisect
    from benchflow.searches import bisect_campaign
    from benchflow.spec import load_spec

    (tmp_path / "toy_git.yaml").write_text(GIT_SPEC)
    spec = load_spec(tmp_path / "toy_git.yaml")
    rng = random.Random(11)
    commits = [f"{i:02x}" * 20 for i in range(12)]
    runs = []
    for index, back in enumerate(range(11, -1, -1)):
        run = replace(night_run("toy_git", back), payload_commit=commits[index])
        scale = (0.8 if index >= 10 else 1.0) * (1 + rng.gauss(0, 0.01))
        rows = [
            {"m": m, "ms_per_call": 1.0, "tok_per_s": 1e3 * m * scale, "us_per_token": 1e3 / (m * scale), "note": ""}
            for m in (1, 16)
        ]
        warehouse.load(run, KERNEL, rows)
        runs.append(run)
    limits = RegressionLimits()
    planned = {}
    for night in runs[10:]:
        verdict = assess(warehouse, night.dag_id, night.run_id, limits)
        assert verdict.state == "regressed", verdict
        warehouse.record_findings(night.dag_id, night.run_id, verdict.findings, verdict)
        planned[night.run_id] = auto_bisect.plan(spec, warehouse, night.dag_id, night.run_id, verdict)
    first, second = (planned[r.run_id] for r in runs[10:])
    (bisection,) = first
    conf = bisection["conf"]
    assert (conf["good"], conf["bad"]) == (commits[9], commits[10]), conf
    assert (conf["max_probes"], conf["max_hours"], conf["campaign"]) == (12, 3, "toy_git")
    assert conf["metric"] in ("tok_per_s", "us_per_token") and conf["case"] in ("m=1", "m=16")
    assert bisect_campaign.checked_conf(conf)["good"] == commits[9]  # the bisect DAG takes it as it is
    assert bisection["trigger_run_id"] == auto_bisect.bisect_run_id("toy_git", commits[9], commits[10])
    assert second == []  # the same commit range: no second bisection
    from benchflow.warehouse import queries

    links = [queries.auto_bisections(warehouse, r.dag_id, r.run_id) for r in runs[10:]]
    assert set(links[0]["bisect_run_id"]) == set(links[1]["bisect_run_id"]) == {bisection["trigger_run_id"]}
    assert links[0]["started"].all() and not links[1]["started"].any()
    assert len(links[0]) == len(assess(warehouse, runs[10].dag_id, runs[10].run_id, limits).findings) >= 2
    # the Benchmarks view's regressions link each finding to that bisection's page
    from benchflow.ui import bisection_pages

    listed, href = bisection_pages.with_bisect(warehouse, "toy_git", links[1][["run_id", "case_key", "metric"]])
    assert set(listed["bisect"]) == {"bisection"}
    assert href(listed.iloc[0]) == f"../search/bench_bisect/{bisection['trigger_run_id']}"


def test_regressions_bisect_needs_a_payload_from_git(tmp_path):
    from benchflow.spec import SpecError, load_spec

    text = GIT_SPEC.replace("payload: {repo: /srv/git/toy.git, ref: main, path: kernels/toy}", "payload: moe")
    (tmp_path / "toy_dir.yaml").write_text(text)
    with pytest.raises(SpecError, match=r"regressions\.bisect needs a payload from git"):
        load_spec(tmp_path / "toy_dir.yaml")


def test_an_accepted_night_starts_the_baseline_again(warehouse):
    """Eight nights at one level, then night 8 20 % slower: regressed. A person accepts it as the new baseline;
    night 10 is then judged against nights 8 and 9 alone (fine), where without the decision its baseline was all
    ten nights before it."""
    rng = random.Random(5)
    runs = []
    for index, back in enumerate(range(10, -1, -1)):
        run = night_run("toy_decided", back)
        scale = (0.8 if index >= 8 else 1.0) * (1 + rng.gauss(0, 0.01))
        rows = [{"m": 1, "ms_per_call": 1.0, "tok_per_s": 1e3 * scale, "us_per_token": 1e3 / scale, "note": ""}]
        warehouse.load(run, KERNEL, rows)
        runs.append(run)
    limits = RegressionLimits(min_runs=2)
    assert assess(warehouse, runs[8].dag_id, runs[8].run_id, limits).state == "regressed"
    before = assess(warehouse, runs[10].dag_id, runs[10].run_id, limits)
    assert before.baseline_runs == 10, before
    accepted = runs[8]
    warehouse.record_decision(
        {
            "dag_id": accepted.dag_id,
            "run_id": accepted.run_id,
            "campaign": "toy_decided",
            "gpu_model": "NVIDIA H200",
            "night_at": accepted.logical_date,
            "verdict": "regressed",
            "decision": "accept",
            "reason": "the new kernel trades this case for larger M",
            "decided_by": "admin",
            "decided_at": TONIGHT,
            "timed_out": False,
        }
    )
    after = assess(warehouse, runs[10].dag_id, runs[10].run_id, limits)
    assert (after.state, after.baseline_runs) == ("fine", 2), after
    from benchflow.warehouse import queries

    (decided,) = queries.decisions(warehouse, "toy_decided").to_dict("records")
    assert (decided["decision"], decided["decided_by"], decided["timed_out"]) == ("accept", "admin", False)
    # the campaign's page in the Benchmarks view says who decided what
    from benchflow.ui import pages

    page = pages.campaign(warehouse, "toy_decided")
    assert "<h2>Decisions</h2>" in page and "the new kernel trades this case for larger M" in page and "admin" in page
    # a decision on another GPU model leaves this one's baseline alone
    assert queries.accepted_since(warehouse, "toy_decided", "NVIDIA B200", TONIGHT) is None
