"""Real outputs from public sources (tests/fixtures/real/README.md names each one's source) parsed with format
detection, every value a person reads off by eye compared (tests/fixtures/real/expected.json)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from benchflow import kinds
from benchflow.parsing import ParseError
from tests.conftest import FIXTURES

pytestmark = pytest.mark.unit

REAL = FIXTURES / "real"
EXPECTED: dict[str, dict[str, Any]] = json.loads((REAL / "expected.json").read_text())
SERVING = sorted(name for name, entry in EXPECTED.items() if entry["kind"] == "serving")
RELATIVE = 1e-9


def same(got: Any, want: Any) -> bool:
    if got is None:
        return False
    if want == "inf":
        return isinstance(got, float) and math.isinf(got) and got > 0
    if isinstance(got, float) and math.isinf(got):
        return False
    return abs(float(got) - float(want)) <= RELATIVE * max(1.0, abs(float(want)))


def score(
    name: str, folder: Path = REAL, expected: dict[str, dict[str, Any]] = EXPECTED
) -> tuple[int, int, list[str], int]:
    """(values right, values expected, misses, rows) of one serving fixture; a miss no warning names the line of
    is marked ``(silent)``."""
    text = (folder / name).read_text(encoding="utf-8", errors="replace")
    try:
        parsed = kinds.parse_text(text)
    except ParseError as exc:
        lost = [f"row {i} {key}: {exc} (silent)" for i, row in enumerate(expected[name]["rows"]) for key in row]
        return 0, len(lost), lost, 0
    warned = {int(w.split(":")[0][5:]) for w in parsed.warnings if w.startswith("line ")}
    right, total, misses = 0, 0, []
    for index, want_row in enumerate(expected[name]["rows"]):
        got_row = parsed.rows[index] if index < len(parsed.rows) else {}
        for key, want in want_row.items():
            total += 1
            got = got_row.get(key)
            if same(got, want):
                right += 1
            else:
                silent = "" if warned & lines_showing(text, want) else " (silent)"
                misses.append(f"row {index} {key}: want {want!r}, got {got!r}{silent}")
    if len(parsed.rows) != len(expected[name]["rows"]):
        misses.append(f"{len(parsed.rows)} rows, want {len(expected[name]['rows'])}")
    return right, total, misses, len(parsed.rows)


def lines_showing(text: str, want: Any) -> set[int]:
    """The lines that print a value (as is, or in s where the column is in ms)."""
    found = set()
    for number, line in enumerate(text.splitlines(), 1):
        for token in re.findall(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|inf", line):
            value = math.inf if token == "inf" else float(token.replace(",", ""))
            if want == "inf":
                shows = math.isinf(value)
            else:
                shows = any(
                    abs(value * scale - float(want)) <= 1e-6 * max(1.0, abs(float(want))) for scale in (1, 1000)
                )
            if shows:
                found.add(number)
    return found


def report(folder: Path = REAL) -> tuple[int, int, dict[str, list[str]], list[str]]:
    expected = EXPECTED if folder == REAL else json.loads((folder / "expected.json").read_text())
    right = total = 0
    misses: dict[str, list[str]] = {}
    empty = []
    for name in sorted(n for n, entry in expected.items() if entry["kind"] == "serving"):
        r, t, m, n = score(name, folder, expected)
        right, total = right + r, total + t
        if m:
            misses[name] = m
        if n == 0:
            empty.append(name)
    return right, total, misses, empty


def test_serving_outputs_read_as_a_person_reads_them():
    right, total, misses, empty = report()
    print(f"\nreal serving outputs: {right}/{total} values right ({100 * right / total:.1f} %), {len(SERVING)} files")
    for name, lost in misses.items():
        print(f"  {name}: " + "; ".join(lost[:8]))
    assert not empty, f"files with no rows: {empty}"
    assert right / total >= 0.95


@pytest.mark.parametrize("name", SERVING)
def test_each_serving_output_gives_rows(name: str):
    parsed = kinds.parse_text((REAL / name).read_text(encoding="utf-8", errors="replace"))
    assert parsed.rows, parsed.warnings
    assert all(not p.dropped for p in parsed.problems), parsed.problem_lines()


if __name__ == "__main__":  # python tests/unit/benchflow/kinds/test_real_outputs.py [FOLDER with expected.json]
    import sys

    r, t, m, e = report(Path(sys.argv[1]) if len(sys.argv) > 1 else REAL)
    for name, lost in m.items():
        print(name)
        for line in lost:
            print("   ", line)
    silent = sum(line.endswith("(silent)") for lost in m.values() for line in lost)
    print(f"{r}/{t} = {100 * r / t:.1f} %; files without rows: {len(e)} {e}; values lost without a warning: {silent}")


@pytest.mark.parametrize("width", [61, 80, 97])
def test_jsonl_records_wrapped_by_a_doc_read_the_same(width: int):
    name = "sglang_output-file-jsonl-v04_datacrunch-h200-llama70b-online.jsonl"
    records = (REAL / name).read_text().splitlines()
    wrapped = "Output file:\n" + "".join(r[i : i + width] + "\n" for r in records for i in range(0, len(r), width))
    rows = kinds.parse_text(wrapped).rows
    assert len(rows) == len(EXPECTED[name]["rows"])
    for got, want in zip(rows, EXPECTED[name]["rows"], strict=True):
        assert all(same(got.get(key), value) for key, value in want.items()), (got, want)
