"""``bench compare``'s sides as text: what a side may say, and the order its points print in."""

from __future__ import annotations

import pytest

from benchflow.analysis.compare import Side, point_order

pytestmark = pytest.mark.unit


def test_points_sort_by_number_not_text():
    points = ["concurrency=16", "concurrency=1", "concurrency=8", "concurrency=128"]
    assert sorted(points, key=point_order) == ["concurrency=1", "concurrency=8", "concurrency=16", "concurrency=128"]
    assert sorted(["m=1,tp=8", "m=1,tp=16", "m=1,tp=2"], key=point_order) == ["m=1,tp=2", "m=1,tp=8", "m=1,tp=16"]
    assert sorted(["x=b", "x=10", "x=a", "x=9"], key=point_order) == ["x=9", "x=10", "x=a", "x=b"]


def test_a_side_says_campaign_config_and_when():
    assert Side.parse("serving_local:pd@2026-11-28") == Side("serving_local", "pd", "2026-11-28")
    assert Side.parse("moe@scheduled__2026-11-29T02:00:00+00:00").when == "scheduled__2026-11-29T02:00:00+00:00"
    assert str(Side.parse("serving_local:pd")) == "serving_local:pd"


@pytest.mark.parametrize("text", ["x@2026-13-45", "x@2026-02-30", "x@2026-1-5"])
def test_a_date_that_is_none_is_an_error_naming_it(text):
    with pytest.raises(ValueError, match=f"@{text.split('@')[1]} is not a date"):
        Side.parse(text)


def test_text_that_is_no_side_is_refused():
    with pytest.raises(ValueError, match="is not CAMPAIGN"):
        Side.parse("Serving Local")
