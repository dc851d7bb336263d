from __future__ import annotations

import pytest

from benchflow import kinds
from benchflow.expectations import validate_rows
from tests.conftest import FIXTURES

pytestmark = pytest.mark.integration


def rows(*specs):
    out = []
    for m, ms in specs:
        out.append({"m": m, "ms_per_call": ms, "tok_per_s": m / (ms / 1e3), "us_per_token": 1e3 * ms / m, "note": ""})
    return out


def test_consistent_rows_pass():
    outcome = validate_rows(kinds.get("kernel"), rows((1, 0.151), (9, 1.18), (32, 3.171)))
    assert outcome.success and outcome.failures == [] and outcome.evaluated == 9
    assert "all 9 expectations passed" in outcome.summary()


def test_each_rule_fails_with_a_readable_reason_and_names_rows():
    bad = rows((1, 0.1), (2, 0.2), (2, 0.3), (8, 0.4), (16, 0.5))
    bad[0]["tok_per_s"] *= 1.05  # 5% off M/(ms/1000)
    bad[3]["us_per_token"] *= 0.9  # 10% off 1000*ms/M
    bad[4]["ms_per_call"] = 0.0
    bad[4]["tok_per_s"] = bad[4]["us_per_token"] = 1.0
    outcome = validate_rows(kinds.get("kernel"), bad)
    assert not outcome.success
    text = outcome.summary()
    assert "expect_compound_columns_to_be_unique(column_list=['m', 'repeat'])" in text  # M 2 twice, one repeat
    assert "expect_column_values_to_be_between(tok_per_s_rel_err" in text
    assert "expect_column_values_to_be_between(us_per_token_rel_err" in text
    assert "expect_column_values_to_be_between(ms_per_call" in text
    assert set(outcome.row_reasons) == {0, 1, 2, 3, 4}
    assert any("tok_per_s_rel_err" in r for r in outcome.row_reasons[0])


def test_nulls_and_non_positive_m_fail():
    bad = rows((1, 0.1), (2, 0.2))
    bad[0]["m"] = 0
    bad[1]["ms_per_call"] = None
    outcome = validate_rows(kinds.get("kernel"), bad)
    assert not outcome.success
    assert any("not_be_null(ms_per_call" in f for f in outcome.failures)
    assert any("be_between(m, min_value=1" in f for f in outcome.failures)


SGLANG = (FIXTURES / "sglang_bench_serving_sgl-cookbook_DeepSeek-R1.txt").read_text()


def serving_rows():
    """Three phases of a sweep, from the real SGLang sample, as the sweep driver labels them."""
    rows = []
    for concurrency, prompts in ((1, 10), (8, 10), (16, 10)):
        parsed = kinds.parse_text(SGLANG).rows[0]
        row = dict(parsed, config="PD", concurrency=concurrency, num_prompts=prompts, failed=0)
        rows.append(row)
    return rows


def test_serving_sweep_passes():
    outcome = validate_rows(kinds.get("serving"), serving_rows(), swept=[1, 8, 16])
    assert outcome.success, outcome.summary()


@pytest.mark.parametrize(
    ("what", "change", "rule"),
    [
        ("prompts unaccounted", {"failed": 3}, "unaccounted_prompts"),
        ("nothing completed", {"completed": 0, "num_prompts": 0}, "be_between(completed, min_value=1"),
        ("TTFT above E2E", {"mean_ttft_ms": 5000.0}, "e2e_minus_ttft_ms"),
        ("p99 below median", {"p99_itl_ms": 1.0}, "p99_minus_median_itl_ms"),
        ("negative mean", {"mean_tpot_ms": -1.0}, "be_between(mean_tpot_ms"),
        ("throughput inconsistent", {"output_throughput": 150.0}, "output_throughput_rel_err"),
        ("zero throughput", {"request_throughput": 0.0}, "be_between(request_throughput"),
        ("concurrency not swept", {"concurrency": 4}, "be_in_set(concurrency"),
        ("duplicate phase", {"concurrency": 1}, "compound_columns_to_be_unique"),
    ],
)
def test_serving_rules_fail_readably(what, change, rule):
    rows = serving_rows()
    rows[1].update(change)
    outcome = validate_rows(kinds.get("serving"), rows, swept=[1, 8, 16])
    assert not outcome.success, what
    assert any(rule in failure for failure in outcome.failures), outcome.failures
    assert 1 in outcome.row_reasons


def test_throughput_check_forgives_only_what_the_printed_duration_explains():
    """Clients print the duration to 2 decimals: a 0.10 s phase may really have lasted 0.095–0.105 s."""
    rows = serving_rows()
    short = {"duration_s": 0.10, "total_output_tokens": 48, "completed": 10, "num_prompts": 10}
    rows[0].update(short, output_throughput=458.0)  # 48 / 0.1048 s: 4.6 % off the printed 480, within rounding
    assert validate_rows(kinds.get("serving"), rows, swept=[1, 8, 16]).success
    rows[0].update(output_throughput=420.0)  # 12.5 % off: more than a rounded duration can explain
    outcome = validate_rows(kinds.get("serving"), rows, swept=[1, 8, 16])
    assert not outcome.success and any("output_throughput_rel_err" in f for f in outcome.failures)
