"""``benchmark.search`` (benchflow.kinds.serving.search): the issue's example section reads, each bad field is
refused with its location and a message that says what would do, and the statistics behind the refusals are
the payload's own file, loaded without Airflow."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml
from pydantic import ValidationError

from benchflow.kinds.serving import search
from benchflow.kinds.serving.search import SearchSpec

pytestmark = pytest.mark.unit

EXAMPLE = yaml.safe_load(
    textwrap.dedent(
        """\
        over: concurrency            # or request_rate
        range: [1, 256]
        slo: {p99_ttft_ms: 2000, p99_tpot_ms: 80, max_failed_fraction: 0.01}
        precision: 0.1               # stop when the bracket is within 10 %
        prompts_per_probe: 400       # checked against the percentile the SLO names
        repeats: 3                   # the most per probe; fewer when the first ones already decide
        budget: {probes: 30, seconds: 3600}
        """
    )
)


def refused(section: dict) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        SearchSpec.model_validate(section)
    return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in caught.value.errors()]


def test_the_issues_example_reads_and_goes_to_the_sweep_as_json():
    spec = SearchSpec.model_validate(EXAMPLE)
    assert spec.range == (1, 256) and spec.confidence == 0.95 and spec.budget.probes == 30
    plan = search.loadsearch.Plan.from_dict(json.loads(spec.argument()))  # what sweep.py --search reads
    assert (plan.over, plan.low, plan.high, plan.slo, plan.prompts_per_probe) == (
        "concurrency",
        1,
        256,
        EXAMPLE["slo"],
        400,
    )
    assert spec.most_probes() == 30  # the budget binds: 3 repeats × 14 loads would be 42


def test_a_range_above_what_a_probe_can_put_in_flight_is_refused():
    """--num-prompts P --max-concurrency L with P < L never has L requests in flight: the answer could be a
    load no probe measured (the README's own [1, 512] with 400 prompts, a range up to 10**6)."""
    for top in (512, 10**6):
        ((where, message),) = refused({**EXAMPLE, "range": [1, top]})
        assert where == "" and f"the range's top ({top:g}) is above prompts_per_probe (400)" in message
    with pytest.raises(ValueError, match="cannot measure that load"):
        search.loadsearch.Plan.from_dict({**EXAMPLE, "range": [1, 401]})  # the host's own guard
    assert SearchSpec.model_validate({**EXAMPLE, "range": [1, 400]}).range == (1, 400)


def test_defaults_fill_what_the_example_leaves_out():
    spec = SearchSpec.model_validate({"over": "request_rate", "range": [0.5, 64], "slo": {"p50_e2e_ms": 900}})
    assert (spec.precision, spec.prompts_per_probe, spec.repeats) == (0.1, 400, 3)
    assert (spec.budget.probes, spec.budget.seconds) == (30, 3600)
    assert spec.range == (0.5, 64)
    assert spec.most_probes() == 30


def test_a_probe_too_small_for_its_percentile_is_refused_at_its_field_naming_the_minimum():
    assert refused({**EXAMPLE, "prompts_per_probe": 100}) == [
        (
            "prompts_per_probe",
            "Value error, p99_ttft_ms: a P99 bound at 95 % confidence needs at least 299 requests per probe, "
            "prompts_per_probe is 100; p99_tpot_ms: a P99 bound at 95 % confidence needs at least 299 requests "
            "per probe, prompts_per_probe is 100; max_failed_fraction: a bound at 0.01 at 95 % confidence needs "
            "at least 299 requests per probe, prompts_per_probe is 100",
        )
    ]
    SearchSpec.model_validate({**EXAMPLE, "prompts_per_probe": 299})
    [(field, message)] = refused({**EXAMPLE, "prompts_per_probe": 400, "confidence": 0.99})
    assert field == "prompts_per_probe" and "at least 459 requests" in message
    [(field, message)] = refused({**EXAMPLE, "slo": {"p99.9_ttft_ms": 2000}})
    assert field == "prompts_per_probe" and "a P99.9 bound" in message and "at least 2995" in message


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"over": "tokens"}, "over", "'concurrency' or 'request_rate'"),
        ({"range": [512, 1]}, "range", "0 < low < high"),
        ({"range": [0, 8]}, "range", "0 < low < high"),
        ({"range": [1.5, 8]}, "range", "whole numbers"),
        ({"range": [1, True]}, "range.1.int", "valid integer"),
        ({"slo": {}}, "slo", "at least 1 item"),
        ({"slo": {"p99_foo_ms": 5}}, "slo.p99_foo_ms.[key]", "p<percentile>_<ttft|tpot|itl|e2e>_ms"),
        ({"slo": {"p100_ttft_ms": 5}}, "slo.p100_ttft_ms.[key]", "between 0 and 100"),
        ({"slo": {"p99_ttft_ms": -1}}, "slo", "must be positive"),
        ({"slo": {"max_failed_fraction": 1.5}}, "slo", "[0, 1)"),
        ({"slo": {"p99_ttft_ms": "fast"}}, "slo.p99_ttft_ms.int", "valid integer"),
        ({"precision": 0}, "precision", "greater than 0"),
        ({"precision": 1}, "precision", "less than 1"),
        ({"repeats": 0}, "repeats", "greater than or equal to 1"),
        ({"repeats": 11}, "repeats", "less than or equal to 10"),
        ({"budget": {"probes": 0}}, "budget.probes", "greater than or equal to 1"),
        ({"budget": {"seconds": 0}}, "budget.seconds", "greater than 0"),
        ({"budget": {"minutes": 5}}, "budget.minutes", "Extra inputs"),
        ({"confidence": 0.5}, "confidence", "greater than 0.5"),
        ({"step": 2}, "step", "Extra inputs"),
    ],
)
def test_each_bad_field_is_refused_where_it_is(change, field, says):
    errors = refused({**EXAMPLE, **change})
    assert any(loc == field and says in message for loc, message in errors), errors


def test_whole_floats_are_a_concurrency_range():
    assert SearchSpec.model_validate({**EXAMPLE, "range": [1.0, 64.0]}).range == (1, 64)


def test_the_statistics_are_the_host_cores_and_importing_them_needs_no_airflow():
    assert search.loadsearch.__name__ == "benchhost.loadsearch"  # the module the sweep driver decides with
    assert search.min_requests(0.99) == 299 and search.min_requests(0.5) == 5
    assert search.undersized({"p90_tpot_ms": 30}, 28) == [
        "p90_tpot_ms: a P90 bound at 95 % confidence needs at least 29 requests per probe, prompts_per_probe is 28"
    ]
    probe = (
        "import sys; from benchflow.kinds.serving.search import SearchSpec; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'airflow'))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
