"""Which ``bench_results`` events the report DAG draws: only those a campaign run's load emitted about itself."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchflow.analysis.plots import report_targets

pytestmark = pytest.mark.unit


def event(extra, source=(None, None)):
    return SimpleNamespace(extra=extra, source_dag_id=source[0], source_run_id=source[1])


def test_only_events_a_campaign_run_emitted_about_itself_are_drawn():
    run = ("bench_moe_kernel_nightly", "scheduled__2026-12-01")
    events = {
        "bench_results": [
            event({"dag_id": run[0], "run_id": run[1], "campaign": "moe_kernel_nightly"}, run),
            event({"dag_id": run[0], "run_id": run[1]}, run),  # the same run twice: drawn once
            event({"dag_id": run[0], "run_id": "manual__forged"}),  # posted through the REST API: no source
            event({"dag_id": "bench_report", "run_id": "x"}, ("bench_report", "x")),  # not a campaign's load
            event({"dag_id": "other_dag", "run_id": "y"}, ("other_dag", "y")),
            event({}),
        ]
    }
    found, ignored = report_targets(events)
    assert found == [run]
    assert len(ignored) == 4 and "manual__forged that its run did not emit" in ignored[0]
    assert ignored[-1].startswith("an event without a run")


@pytest.mark.parametrize("name", ["report", "bisect"])
def test_a_campaign_may_not_take_the_dag_id_of_the_report_or_bisect_dag(name):
    from benchflow.spec import CampaignSpec

    with pytest.raises(ValueError, match=f"'{name}' is reserved: its DAG id bench_{name} belongs to the {name}"):
        CampaignSpec.model_validate(
            {"name": name, "payload": "moe", "benchmark": {"script": "bench_moe.py"}}, context={"kernels_dir": None}
        )
