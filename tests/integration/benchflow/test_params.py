"""A trigger's conf against the real DAGs: NaN and Infinity are refused when the run is created (Airflow's own Params
check, on the DAG as the api-server holds it, serialized), anything else odd at preflight before a host command, and
no message echoes a huge value whole. Lists that go together (serving's concurrency and prompts) are refused when
one is changed alone or the lengths differ."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.integration
CAMPAIGNS = PROJECT_ROOT / "include" / "campaigns"

KERNEL = """\
kind: kernel
payload: moe
schedule: null
benchmark:
  script: bench_moe.py
  args:
    m_list: [1, 2]
    alpha: 0.5
    ratios: [1, 2.5]
"""


@pytest.fixture(scope="module")
def dags(tmp_path_factory):
    """The kernel DAG above and the shipped serving_local DAG, each built as dags/campaigns.py builds it, and
    also as the api-server holds it (serialized to JSON and back)."""
    from airflow.serialization.serialized_objects import DagSerialization

    from benchtools.airflow_env import configure_airflow

    configure_airflow()
    from benchflow.factory import load_and_build

    folder = tmp_path_factory.mktemp("campaigns")
    (folder / "floats.yaml").write_text(KERNEL)
    shutil.copy(CAMPAIGNS / "serving_local.yaml", folder / "serving_local.yaml")
    built = {name: load_and_build(folder / f"{name}.yaml")[1] for name in ("floats", "serving_local")}
    served = {
        name: DagSerialization.from_dict(json.loads(json.dumps(DagSerialization.to_dict(dag))))
        for name, dag in built.items()
    }
    return built, served


def rest_conf(text: str) -> dict:
    """A conf as the REST API reads its JSON body (Python's reader takes NaN and Infinity)."""
    return json.loads(text)


@pytest.mark.parametrize(
    ("dag", "body", "field"),
    [
        ("floats", '{"alpha": NaN}', "alpha"),
        ("floats", '{"alpha": Infinity}', "alpha"),
        ("floats", '{"ratios": [1, -Infinity]}', "ratios"),
        ("floats", '{"ratios": [NaN]}', "ratios"),
        ("floats", '{"m_list": [1, NaN]}', "m_list"),
        ("serving_local", '{"input_len": NaN}', "input_len"),
    ],
)
def test_nan_and_infinity_never_become_a_run(dags, dag, body, field):
    from airflow.exceptions import ParamValidationError as ServerParamError
    from airflow.sdk.exceptions import ParamValidationError

    built, served = dags
    with pytest.raises(ServerParamError, match=rf"^Invalid input for param {field}:"):
        served[dag].params.deep_merge(rest_conf(body)).validate()  # what create_dagrun runs for REST and UI
    params = copy.deepcopy(built[dag].params)
    with pytest.raises(ParamValidationError, match=rf"Invalid input for param {field}:"):
        params.update(rest_conf(body))  # dag.test, the CLI
        params.validate()
    served[dag].params.deep_merge({"alpha": 0.25} if dag == "floats" else {"input_len": 8}).validate()


def preflight(dag, conf: dict):
    from airflow.sdk.exceptions import AirflowFailException

    task = dag.task_dict["preflight"]
    assert task.host_id in ("local", "gpu_rtxpro6000")
    task = task.__class__(  # the same checks, on a host that does not exist: any host command would fail on it
        task_id="preflight",
        host_id="no_such_host",
        benchmark_args=task.benchmark_args,
        with_servers=task.with_servers,
        form=task.form,
        paired=task.paired,
    )
    with pytest.raises(AirflowFailException, match="trigger conf refused, nothing ran on the host") as caught:
        task.execute({"params": conf})
    return str(caught.value)


@pytest.mark.parametrize(
    ("body", "field"),
    [('{"extra": {"deep": [1, NaN]}}', "extra.deep[1]"), ('{"alpha": NaN}', "alpha")],
)
def test_preflight_refuses_nan_at_any_depth_naming_where(dags, body, field):
    built, _ = dags
    message = preflight(built["floats"], rest_conf(body))
    assert f"param {field}: NaN and Infinity are not numbers a benchmark can take" in message


def test_no_message_echoes_a_huge_value_whole(dags):
    built, _ = dags
    huge = list(range(100_000))
    message = preflight(built["floats"], {"ratios": huge})
    assert "is too long" in message and len(message) < 400
    message = preflight(built["serving_local"], {"client": "x" * 100_000})
    assert len(message) < 400


def test_spec_defaults_too_long_are_not_echoed_whole(tmp_path):
    from benchflow.spec import SpecError, load_spec

    path = tmp_path / "camp.yaml"
    path.write_text(KERNEL.replace("m_list: [1, 2]", f"m_list: [{', '.join(['0'] * 2000)}]"))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert "does not fit its trigger form" in str(caught.value) and len(str(caught.value)) < 800


SPEC = {"concurrency": [1, 4, 8], "prompts": [8, 16, 32]}


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        (  # the UI sends every field: the levels changed, the prompts as the spec has them
            {**SPEC, "concurrency": [4, 8, 64]},
            "concurrency was changed to [4, 8, 64] and prompts left as the spec has it ([8, 16, 32]), but they go "
            "together by position (the n-th prompts is for the n-th concurrency): give prompts too, one value per "
            "concurrency value (3), e.g. prompts [16, 32, ?]",
        ),
        ({"concurrency": [4, 8]}, "give prompts too, one value per concurrency value (2), e.g. prompts [16, 32]"),
        (
            {"concurrency": [1, 2], "prompts": [8, 16, 32]},
            "concurrency was changed to [1, 2] and prompts left as the spec has it",
        ),
        (
            {"prompts": [8, 16]},
            "concurrency has 3 values and prompts has 2, but they go together by position (the n-th prompts is "
            "for the n-th concurrency): give them the same length",
        ),
        ({"concurrency": [2, 4], "prompts": [8, 16, 32, 64]}, "concurrency has 2 values and prompts has 4"),
    ],
)
def test_paired_lists_are_refused_before_the_host_when_they_no_longer_pair(dags, conf, expected):
    built, _ = dags
    assert built["serving_local"].task_dict["preflight"].benchmark_args["prompts"] == SPEC["prompts"]
    assert expected in preflight(built["serving_local"], conf)


def test_paired_lists_changed_together_or_prompts_alone_are_taken(dags):
    from benchflow.params import check_conf

    built, _ = dags
    task = built["serving_local"].task_dict["preflight"]
    for conf in ({"concurrency": [2, 4], "prompts": [4, 8]}, {"prompts": [2, 4, 6]}, SPEC, {}):
        resolved = check_conf(task.benchmark_args, True, conf, task.form, task.run_options, task.paired)
        assert len(resolved["concurrency"]) == len(resolved["prompts"])


def test_the_trigger_form_states_the_pairing_rule(dags):
    _, served = dags
    description = served["serving_local"].params.get_param("concurrency").description  # the form shows it
    assert "Goes with Prompts per phase by position" in description and "changes the levels alone" in description


def test_a_spec_whose_paired_lists_differ_in_length_is_refused(tmp_path):
    from benchflow.spec import SpecError, load_spec

    text = (CAMPAIGNS / "serving_local.yaml").read_text().replace("prompts: [8, 16, 32]", "prompts: [8, 16]")
    path = tmp_path / "serving_local.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=r"benchmark.args: Value error, concurrency has 3 values and prompts has 2"):
        load_spec(path, payloads=PROJECT_ROOT / "kernels")
