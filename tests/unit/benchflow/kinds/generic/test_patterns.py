"""The generic parser: spec patterns with a case key, over real kernel-table outputs of other tools
(tests/fixtures/real/specs/*.yaml hold the patterns a campaign spec would), and its own rules."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from benchflow.kinds import parse_text
from benchflow.kinds.generic import Pattern
from benchflow.parsing import ParseError
from tests.conftest import FIXTURES

pytestmark = pytest.mark.unit

REAL = FIXTURES / "real"
EXPECTED: dict[str, dict[str, Any]] = json.loads((REAL / "expected.json").read_text())
SPECS = {path.stem: yaml.safe_load(path.read_text()) for path in sorted((REAL / "specs").glob("*.yaml"))}
CASES = [(stem, fixture) for stem, spec in SPECS.items() for fixture in spec["fixtures"]]


def patterns_of(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The spec's patterns as the pipeline passes them (validated by the spec model first)."""
    return {name: Pattern(**p).model_dump() for name, p in spec["benchmark"]["patterns"].items()}


def cases(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of one line as one case: {case, metric: value, …}, in output order."""
    by_line: dict[int, dict[str, Any]] = {}
    for row in rows:
        by_line.setdefault(row["line"], {"case": row["case_key"]})[row["metric"]] = row["value"]
    return list(by_line.values())


def test_every_kernel_fixture_has_a_spec():
    kernel = {name for name, entry in EXPECTED.items() if entry["kind"] == "kernel"}
    assert kernel == {fixture for _, fixture in CASES}


@pytest.mark.parametrize(("stem", "fixture"), CASES)
def test_kernel_tables_of_other_tools_load_as_per_case_rows(stem: str, fixture: str):
    text = (REAL / fixture).read_text(encoding="utf-8", errors="replace")
    parsed = parse_text(text, "generic", patterns=patterns_of(SPECS[stem]))
    assert not parsed.dropped
    got, want = cases(parsed.rows), EXPECTED[fixture]["rows"]
    assert len(got) == len(want)
    for got_case, want_case in zip(got, want, strict=True):
        assert set(got_case) == set(want_case)
        for key, value in want_case.items():
            assert float(got_case[key]) == pytest.approx(float(value), rel=1e-9), (fixture, key, got_case)


def test_key_from_the_nearest_line_above_and_from_another_pattern():
    text = "M=16\nTFLOP/s: 1.5\nTFLOP/s: nan\nM=32.0\nTFLOP/s: Infinity\n"
    by_regex = {"tflops": {"regex": r"TFLOP/s: (?P<value>\S+)", "key": r"^M=(?P<key>\S+)"}}
    rows = parse_text(text, "generic", patterns=by_regex).rows
    assert [(r["case_key"], r["line"]) for r in rows] == [("16", 2), ("16", 3), ("32", 5)]
    assert math.isnan(rows[1]["value"]) and rows[2]["value"] == math.inf
    by_name = {"tflops": {"regex": r"TFLOP/s: (?P<value>\S+)", "key": "m"}, "m": {"regex": r"^M=(?P<value>\S+)"}}
    rows = parse_text(text, "generic", patterns=by_name).rows
    assert [(r["metric"], r["case_key"]) for r in rows] == [
        ("m", None),
        ("tflops", "16"),
        ("tflops", "16"),
        ("m", None),
        ("tflops", "32"),
    ]
    assert parse_text("TFLOP/s: 1\n", "generic", patterns=by_regex).rows[0]["case_key"] is None


def test_key_errors_are_clear():
    with pytest.raises(ParseError, match=r"pattern 'a': key 'nope' is no other pattern"):
        parse_text("x\n", "generic", patterns={"a": {"regex": r"(?P<value>\d)", "key": "nope"}})
    with pytest.raises(ValidationError, match=r"key needs a named group \(\?P<key>"):
        Pattern(regex=r"(?P<value>\d)", key=r"M=(\d+)")
    with pytest.raises(ValidationError, match="key is not a regular expression"):
        Pattern(regex=r"(?P<value>\d)", key=r"M=(")
    assert Pattern(regex=r"(?P<value>\d)", key="m").key == "m"


def test_a_value_that_is_not_a_number_drops_that_match_only():
    parsed = parse_text("t: 1\nt: fast\nt: 3\n", "generic", patterns={"t": {"regex": r"t: (?P<value>\S+)"}})
    assert [r["value"] for r in parsed.rows] == [1.0, 3.0] and parsed.dropped
    assert str(parsed.problems[0]).startswith("line 2: pattern 't' matched a value that is not a number")


def test_kernel_tables_are_not_detected_as_serving_logs_nor_the_reverse():
    from benchflow.kinds import detect

    for fixture, entry in EXPECTED.items():
        text = (REAL / fixture).read_text(encoding="utf-8", errors="replace")
        if entry["kind"] == "kernel":
            with pytest.raises(ParseError, match="unknown format"):
                detect(text)
        else:
            assert detect(text)[0].name == "serving"


def test_problems_and_warnings_are_capped_but_dropped_still_counts():
    text = "".join(f"t: bad{i}\n" for i in range(80)) + "t: 1\n"
    parsed = parse_text(text, "generic", patterns={"t": {"regex": r"t: (?P<value>\S+)"}})
    assert [r["value"] for r in parsed.rows] == [1.0]
    assert len(parsed.problems) == 50 and parsed.problems_left_out == 30 and parsed.dropped
    assert len(parsed.warnings) == 21 and parsed.warnings[-1] == "… and 60 more warnings"
