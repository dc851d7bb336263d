from __future__ import annotations

import math

import pytest

from benchflow.kinds import parse_text
from benchflow.parsing import ParseError
from tests.conftest import FIXTURES

pytestmark = pytest.mark.unit

SAMPLE = (FIXTURES / "kernel_moe_sweep_partial_rtxpro6000.txt").read_text()


def test_real_partial_sample_keeps_completed_rows_and_is_incomplete():
    parsed = parse_text(SAMPLE)
    assert parsed.format == "table"
    assert not parsed.complete
    assert [r["m"] for r in parsed.rows] == [1, 9, 32, 90, 256]
    first = {"m": 1, "ms_per_call": 0.151, "tok_per_s": 6642.0, "us_per_token": 150.56, "note": "AR C=1"}
    assert parsed.rows[0] == first
    assert parsed.rows[3]["note"] == "10 streams b8"
    assert parsed.rows[2]["note"] == ""
    assert parsed.meta["GPU"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert parsed.meta["MoE"].startswith("E=384 hidden=7168")


def test_marker_completes_the_run_and_ends_the_table():
    parsed = parse_text(SAMPLE + "ALL_DONE\nsomething printed after the marker\n")
    assert parsed.complete and len(parsed.rows) == 5


def test_custom_marker():
    assert parse_text(SAMPLE + "SWEEP_FINISHED\n", marker="SWEEP_FINISHED").complete
    other = parse_text(SAMPLE + "ALL_DONE\n", marker="SWEEP_FINISHED")
    assert not other.complete and "table ends at 'ALL_DONE'" in other.warnings[-1]


def test_row_cut_off_mid_write_is_dropped_with_a_warning():
    parsed = parse_text(SAMPLE + "512 9.1")
    assert [r["m"] for r in parsed.rows][-1] == 256
    assert not parsed.complete
    assert "cut off" in parsed.warnings[0] and parsed.dropped


def test_malformed_row_is_dropped_and_named_the_rest_kept():
    parsed = parse_text(SAMPLE.replace("32 3.171 10092 99.09", "32 3.171 oops 99.09"))
    assert [r["m"] for r in parsed.rows] == [1, 9, 90, 256] and parsed.dropped
    assert str(parsed.problems[0]).startswith("line 7: malformed row") and "'32 3.171 oops 99.09'" in str(
        parsed.problems[0]
    )


TABLE = "M ms/call tok/s us/token\n1 0.1 10000 100\n2 0.2 10000 100\n"


def test_text_between_rows_is_skipped_and_named():
    parsed = parse_text(TABLE.replace("\n2 ", "\ngarbage here\n2 "))
    assert [r["m"] for r in parsed.rows] == [1, 2] and not parsed.dropped
    assert str(parsed.problems[0]).startswith("line 3: text inside the table, skipped: 'garbage here'")


def test_text_before_the_marker_of_a_finished_run_is_a_problem():
    parsed = parse_text(TABLE + "garbage here\nALL_DONE\n")
    assert parsed.complete and len(parsed.rows) == 2
    assert str(parsed.problems[0]).startswith("line 4: text inside the table")


def test_non_finite_values_read_alike():
    rows = parse_text("M ms/call tok/s us/token\n1 NaN Infinity -inf\n2 nan inf 1\n").rows
    assert all(math.isnan(r["ms_per_call"]) for r in rows) and rows[0]["tok_per_s"] == rows[1]["tok_per_s"] == math.inf
    assert rows[0]["us_per_token"] == -math.inf


def test_crash_output_ends_the_table_of_an_incomplete_run():
    crash = 'Traceback (most recent call last):\n  File "bench.py", line 3\nRuntimeError: CUDA error\n'
    parsed = parse_text(TABLE + crash)
    assert not parsed.complete and [r["m"] for r in parsed.rows] == [1, 2]
    assert parsed.warnings[-1].startswith("line 4: table ends at 'Traceback")


def test_interleaved_warnings_are_skipped_not_fatal():
    text = SAMPLE.replace("32 3.171", "UserWarning: TF32 is off\n  warnings.warn(msg)\n32 3.171")
    parsed = parse_text(text)
    assert len(parsed.rows) == 5 and len(parsed.warnings) == 2


def test_unknown_format_is_an_error():
    with pytest.raises(ParseError, match="unknown format"):
        parse_text("hello\nworld\n")
    with pytest.raises(ParseError, match="has no format 'nope'"):
        parse_text(SAMPLE, "kernel", "nope")


def test_no_column_line_is_an_error_when_format_forced():
    with pytest.raises(ParseError, match="no 'M ms/call"):
        parse_text("GPU: x\n1 0.1 10 100\n", "kernel")


PATTERNS = {
    "us_per_token": {"regex": r"^\d+ \S+ \S+ (?P<value>[0-9.]+)", "unit": "us"},
    "gpu_count": {"regex": r"group=(?P<value>\d+)", "unit": ""},
}


def test_generic_parser_reads_named_patterns_in_output_order():
    parsed = parse_text(SAMPLE + "ALL_DONE\n", "generic", patterns=PATTERNS)
    assert parsed.format == "patterns" and parsed.complete
    assert [(r["metric"], r["value"], r["line"]) for r in parsed.rows[:3]] == [
        ("gpu_count", 32.0, 2),
        ("us_per_token", 150.56, 5),
        ("us_per_token", 131.16, 6),
    ]
    assert [r["seq"] for r in parsed.rows] == list(range(len(parsed.rows)))
    assert not parse_text(SAMPLE, "generic", patterns=PATTERNS).complete


def test_generic_parser_errors():
    with pytest.raises(ParseError, match="needs patterns"):
        parse_text(SAMPLE, "generic")
    bad = parse_text(SAMPLE, "generic", patterns={"bad": {"regex": r"MoE: (?P<value>\S+)"}})
    assert bad.rows == [] and bad.dropped
    assert str(bad.problems[0]).startswith("line 2: pattern 'bad' matched a value that is not a number")
    with pytest.raises(ValueError, match=r"needs a named group \(\?P<value>"):
        parse_text(SAMPLE, "generic", patterns={"bad": {"regex": r"(\d+)"}})
    assert parse_text("", "generic", patterns=PATTERNS).rows == []
