"""Real outputs from public sources (tests/fixtures/real/README.md names each one's source) parsed with format
detection, every value a person reads off by eye compared (tests/fixtures/real/expected.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from benchflow import kinds

pytestmark = pytest.mark.unit

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
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


def score(name: str) -> tuple[int, int, list[str], int]:
    """(values right, values expected, misses, rows) of one serving fixture."""
    parsed = kinds.parse_text((REAL / name).read_text(encoding="utf-8", errors="replace"))
    expected = EXPECTED[name]["rows"]
    right, total, misses = 0, 0, []
    for index, want_row in enumerate(expected):
        got_row = parsed.rows[index] if index < len(parsed.rows) else {}
        for key, want in want_row.items():
            total += 1
            got = got_row.get(key)
            if same(got, want):
                right += 1
            else:
                misses.append(f"row {index} {key}: want {want!r}, got {got!r}")
    if len(parsed.rows) != len(expected):
        misses.append(f"{len(parsed.rows)} rows, want {len(expected)}")
    return right, total, misses, len(parsed.rows)


def report() -> tuple[int, int, dict[str, list[str]], list[str]]:
    right = total = 0
    misses: dict[str, list[str]] = {}
    empty = []
    for name in SERVING:
        r, t, m, n = score(name)
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


if __name__ == "__main__":
    r, t, m, e = report()
    for name, lost in m.items():
        print(name)
        for line in lost:
            print("   ", line)
    print(f"{r}/{t} = {100 * r / t:.1f} %; empty: {e}")


@pytest.mark.parametrize("width", [61, 80, 97])
def test_jsonl_records_wrapped_by_a_doc_read_the_same(width: int):
    name = "sglang_output-file-jsonl-v04_datacrunch-h200-llama70b-online.jsonl"
    records = (REAL / name).read_text().splitlines()
    wrapped = "Output file:\n" + "".join(r[i : i + width] + "\n" for r in records for i in range(0, len(r), width))
    rows = kinds.parse_text(wrapped).rows
    assert len(rows) == len(EXPECTED[name]["rows"])
    for got, want in zip(rows, EXPECTED[name]["rows"], strict=True):
        assert all(same(got.get(key), value) for key, value in want.items()), (got, want)
