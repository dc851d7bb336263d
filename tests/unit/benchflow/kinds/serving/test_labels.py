"""The serving label tables (labels.tsv, json_keys.tsv) as data: every label maps to a column the warehouse
has or is declared ignored, units and scales agree, and the parser reads each label as its row says."""

from __future__ import annotations

import re

import pytest

from benchflow.kinds.serving.common import COLUMNS, json_column
from benchflow.kinds.serving.labels import (
    JSON_KEYS_FILE,
    LABELS_FILE,
    lookup,
    normalise,
    read_table,
    scale,
)

pytestmark = pytest.mark.unit

LABELS = read_table(LABELS_FILE)
KEYS = read_table(JSON_KEYS_FILE)
DATE = re.compile(r"^$|^\d{4}-\d\d-\d\d$")
PERCENTILES = ("90", "95", "99")


def columns_named(column: str) -> list[str]:
    """A row's column, its ``{p}`` template filled with the percentiles the warehouse has."""
    return [column.replace("{p}", p) for p in PERCENTILES] if "{p}" in column else [column]


def test_the_table_is_large_and_covers_both_tools_from_2023_on():
    tools = {row["tool"] for row in LABELS}
    assert {"sglang", "vllm"} <= tools and len(LABELS) >= 200
    assert min(row["first_seen"] for row in LABELS if row["first_seen"]) <= "2023-12-31"


@pytest.mark.parametrize("row", LABELS, ids=lambda row: f"{row['tool']}:{row['label']}")
def test_every_label_maps_to_a_column_or_is_ignored(row: dict[str, str]):
    assert row["column"] == "ignored" or all(c in COLUMNS for c in columns_named(row["column"])), row
    assert row["unit_place"] in ("label", "suffix", "none") and (row["unit_place"] == "none") == (not row["unit"])
    assert row["source"] and DATE.match(row["first_seen"]) and DATE.match(row["last_seen"])
    assert row["first_seen"] <= row["last_seen"] or not row["last_seen"]
    if row["column"] != "ignored":
        for column in columns_named(row["column"]):
            assert scale(row["unit"] if row["unit_place"] != "none" else "", column) == float(row["scale"]), row


def test_no_label_means_two_different_columns():
    meaning: dict[str, set[str]] = {}
    for row in LABELS:
        if row["column"] != "ignored":
            meaning.setdefault(normalise(row["label"]), set()).add(row["column"])
    assert {label: found for label, found in meaning.items() if len(found) > 1} == {}


@pytest.mark.parametrize("row", LABELS, ids=lambda row: f"{row['tool']}:{row['label']}")
def test_the_parser_reads_each_label_as_its_row_says(row: dict[str, str]):
    label = row["label"].replace("{p}", "99").replace("{i}", "3").replace("{key}", "prefill_cost_time")
    found = lookup(label)
    assert found is not None, label
    want = row["column"].replace("{p}", "99")
    others = {r["column"].replace("{p}", "99") for r in LABELS if normalise(r["label"]) == normalise(row["label"])}
    if want == "ignored" and others != {"ignored"}:
        want = (others - {"ignored"}).pop()  # another tool prints it with a meaning: that one is read
    assert (found.column or "ignored") == want, (label, found)


@pytest.mark.parametrize("row", KEYS, ids=lambda row: f"{row['tool']}:{row['shape']}:{row['key']}")
def test_every_json_key_maps_to_a_column_or_is_ignored(row: dict[str, str]):
    assert row["column"] == "ignored" or all(c in COLUMNS for c in columns_named(row["column"])), row
    assert row["shape"] in ("record", "pytorch") and row["source"]
    key = row["key"].replace("{p}", "99")
    want = row["column"].replace("{p}", "99")
    assert (json_column(key) or "ignored") == want or want == "ignored", key


@pytest.mark.parametrize(
    ("label", "column", "unit"),
    [
        ("Mean E2EL (s)", "mean_e2e_ms", "s"),  # no tool prints it; its parts say what it is
        ("P99.9 TTFT (ms)", None, "ms"),  # a percentile the warehouse has no column for
        ("Std TPOT (ms)", "std_tpot_ms", "ms"),
        ("Mean  TTFT(ms)", "mean_ttft_ms", "ms"),  # spacing of a web page
        ("Total          Requests", None, None),  # a table's row, not a label
    ],
)
def test_labels_no_row_names_are_read_by_their_parts(label: str, column: str | None, unit: str | None):
    found = lookup(label)
    assert (found.column, found.unit) == (column, unit) if found else (column, unit) == (None, None)
