from __future__ import annotations

import pytest

from benchflow.expectations import KERNEL_SUITE, validate_rows

pytestmark = pytest.mark.integration


def rows(*specs):
    out = []
    for m, ms in specs:
        out.append({"m": m, "ms_per_call": ms, "tok_per_s": m / (ms / 1e3), "us_per_token": 1e3 * ms / m, "note": ""})
    return out


def test_consistent_rows_pass():
    outcome = validate_rows(KERNEL_SUITE, rows((1, 0.151), (9, 1.18), (32, 3.171)))
    assert outcome.success and outcome.failed == [] and outcome.evaluated == 9
    assert "all 9 expectations passed" in outcome.summary()


def test_each_rule_fails_with_a_readable_reason_and_names_rows():
    bad = rows((1, 0.1), (2, 0.2), (2, 0.3), (8, 0.4), (16, 0.5))
    bad[0]["tok_per_s"] *= 1.05  # 5% off M/(ms/1000)
    bad[3]["us_per_token"] *= 0.9  # 10% off 1000*ms/M
    bad[4]["ms_per_call"] = 0.0
    bad[4]["tok_per_s"] = bad[4]["us_per_token"] = 1.0
    outcome = validate_rows(KERNEL_SUITE, bad)
    assert not outcome.success
    text = outcome.summary()
    assert "expect_column_values_to_be_unique(m)" in text
    assert "expect_column_values_to_be_between(tok_per_s_rel_err" in text
    assert "expect_column_values_to_be_between(us_per_token_rel_err" in text
    assert "expect_column_values_to_be_between(ms_per_call" in text
    assert set(outcome.row_reasons) == {0, 1, 2, 3, 4}
    assert any("tok_per_s_rel_err" in r for r in outcome.row_reasons[0])


def test_nulls_and_non_positive_m_fail():
    bad = rows((1, 0.1), (2, 0.2))
    bad[0]["m"] = 0
    bad[1]["ms_per_call"] = None
    outcome = validate_rows(KERNEL_SUITE, bad)
    assert not outcome.success
    assert any("not_be_null(ms_per_call" in f for f in outcome.failed)
    assert any("be_between(m, min_value=1" in f for f in outcome.failed)
