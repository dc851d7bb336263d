"""What a bisection is given and what it hands the campaign: its conf checked field by field, the conf of a
probe run (only the case, repeated, at one commit, on one host), and a spec's git payload and host pool."""

from __future__ import annotations

import pytest

from benchflow import kinds, params
from benchflow.kinds.kernel import KIND as KERNEL
from benchflow.kinds.kernel import table
from benchflow.searches import bisect_campaign, engine
from benchflow.spec import SpecError, load_spec

pytestmark = pytest.mark.unit

CONF = {"campaign": "toy", "case": "m=64", "metric": "us_per_token", "good": "c1", "bad": "main"}
SPEC = """\
description: toy from git
kind: kernel
host: gpu_a
hosts: [gpu_a, gpu_b]
payload: {repo: /srv/git/toy.git, ref: main, path: kernels/toy}
benchmark:
  script: bench_toy.py
  args: {m_list: [1, 64]}
"""


def test_a_conf_gets_its_defaults():
    conf = bisect_campaign.checked_conf(CONF)
    assert conf["repeats"] == 5 and conf["max_probes"] == 40 and conf["probe_conf"] == {}


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"bad": ""}, "bad", "required"),
        ({"campaign": "Bad Name"}, "campaign", "does not match"),
        ({"case": "m=64; rm -rf /"}, "case", "does not match"),
        ({"good": "--upload-pack=x"}, "good", "does not match"),
        ({"repeats": 1}, "repeats", "less than the minimum"),
        ({"repeats": 9, "max_samples": 6}, "max_samples", "fewer than repeats"),
        ({"max_hours": 0}, "max_hours", "less than or equal to the minimum"),
        ({"typo": 1}, "typo", "not a field of a bisection"),
    ],
)
def test_a_bad_conf_names_its_field(change, field, says):
    with pytest.raises(params.ConfError, match=f"^conf.{field}: .*{says}"):
        bisect_campaign.checked_conf({**CONF, **change})


def test_a_kernel_probe_runs_only_its_case_repeated():
    assert KERNEL.case_args
    assert KERNEL.case_conf("m=64", 3) == {"m_list": [64, 64, 64]}
    with pytest.raises(ValueError, match="a kernel case is m="):
        KERNEL.case_conf("concurrency=8", 3)
    for outside in ("m=0", "m=65537", "m=x"):  # the form's bounds on m_list's items, and a number
        with pytest.raises(ValueError, match=r"m within 1\.\.65536"):
            KERNEL.case_conf(outside, 3)
    with pytest.raises(ValueError, match="not one a run can narrow to"):
        kinds.get("serving").case_conf("config=pd,concurrency=8", 1)


def test_an_m_listed_n_times_is_n_repeats():
    out = "M ms/call tok/s us/token note\n64 1.0 64000 15.6 a\n64 1.1 58000 17.2 b\n1 0.1 10000 100 c\nALL_DONE\n"
    rows = table.parse(out).rows
    assert [(r["m"], r.get("repeat", 1)) for r in rows] == [(64, 1), (64, 2), (1, 1)]
    assert KERNEL.frame(rows)["repeat"].tolist() == [1, 2, 1]


def test_a_git_payload_spec_with_a_host_pool(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(SPEC)
    spec = load_spec(path)
    assert spec.git_payload is not None and spec.git_payload.path == "kernels/toy"
    assert spec.host_ids == ["gpu_a", "gpu_b"] and spec.pool == "bench_hosts_toy" and spec.pool_slots == 2
    options = params.run_option_schemas("main", spec.host_ids, spec.host)
    assert options["payload_ref"][0] == "main" and options["host"][1]["enum"] == ["gpu_a", "gpu_b"]
    assert params.check_conf({"m_list": [1]}, False, {"payload_ref": "c3", "host": "gpu_b"}, {}, list(options)) == {
        "m_list": [1]
    }
    with pytest.raises(ValueError, match="unknown param"):
        params.check_conf({"m_list": [1]}, False, {"payload_ref": "c3"}, {}, [])


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("repo: /srv/git/toy.git", "repo: ext::sh -c evil", "transport helpers"),
        ("ref: main", "ref: a..b", "is not a branch, tag or commit"),
        ("path: kernels/toy", "path: ../etc", "not a relative folder"),
        ("hosts: [gpu_a, gpu_b]", "hosts: [gpu_b, gpu_c]", "is not one of hosts"),
    ],
)
def test_a_bad_git_payload_or_pool_names_its_field(tmp_path, old, new, says):
    path = tmp_path / "toy.yaml"
    path.write_text(SPEC.replace(old, new))
    with pytest.raises(SpecError, match=says):
        load_spec(path)


def test_probe_run_ids_are_stable_per_round_and_commit():
    sha = "ab" * 20
    one = engine.run_id_for("bisect", "manual__2026-12-01T00:00:00+00:00", 2, sha[:12])
    assert one == engine.run_id_for("bisect", "manual__2026-12-01T00:00:00+00:00", 2, sha[:12])
    assert one != engine.run_id_for("bisect", "manual__2026-12-01T00:00:00+00:00", 3, sha[:12])
    assert one.startswith(engine.run_tag("bisect", "manual__2026-12-01T00:00:00+00:00"))
    assert one.startswith("bisect_") and one.endswith("_r2_" + sha[:12])


def test_a_campaign_that_bisects_its_regressions_maps_a_trigger_of_the_bisect_dag(tmp_path):
    """bisect_regression after detect_regressions: one bench_bisect run per planned range, never a second run of
    the same range (its run id is the range's, and an existing run is skipped, not an error)."""
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

    from benchflow.factory import build_dag

    plain, bisecting = tmp_path / "toy.yaml", tmp_path / "toy_auto.yaml"
    plain.write_text(SPEC)
    bisecting.write_text(SPEC + "regressions:\n  bisect: {max_probes: 10}\n")
    assert "bisect_regression" not in build_dag(load_spec(plain), register=False).task_dict
    dag = build_dag(load_spec(bisecting), register=False)
    task = dag.task_dict["bisect_regression"]
    assert task.operator_class is TriggerDagRunOperator or issubclass(task.operator_class, TriggerDagRunOperator)
    kwargs = task.partial_kwargs
    assert kwargs["trigger_dag_id"] == "bench_bisect" and kwargs["skip_when_already_exists"] is True
    assert task.upstream_task_ids == {"plan_bisections"}
    assert dag.task_dict["plan_bisections"].upstream_task_ids == {"detect_regressions"}


def test_a_campaign_with_a_decision_asks_a_person_after_its_regressions(tmp_path):
    """needs_decision → decide (Airflow's human-in-the-loop operator: the three options, the spec's default and
    hours, a reason) → record_decision → bisect_decided (a git payload: bisect is on offer); a payload that is
    not from git is offered no bisection, and may not default to one."""
    from datetime import timedelta

    from airflow.providers.standard.operators.hitl import HITLOperator

    from benchflow.factory import build_dag

    path = tmp_path / "toy_decide.yaml"
    path.write_text(SPEC + "regressions:\n  decide: {within_hours: 8, default: accept}\n")
    dag = build_dag(load_spec(path), register=False)
    decide = dag.task_dict["decide"]
    assert isinstance(decide, HITLOperator)
    assert decide.options == ["accept as the new baseline", "bisect", "ignore"]
    assert decide.defaults == ["accept as the new baseline"] and decide.response_timeout == timedelta(hours=8)
    assert "reason" in decide.params
    assert dag.task_dict["needs_decision"].upstream_task_ids == {"detect_regressions"}
    assert decide.upstream_task_ids == {"needs_decision"}
    assert dag.task_dict["bisect_decided"].upstream_task_ids == {"record_decision"}

    local = tmp_path / "toy_local.yaml"
    text = SPEC.replace("payload: {repo: /srv/git/toy.git, ref: main, path: kernels/toy}", "payload: moe")
    local.write_text(text + "regressions:\n  decide: {}\n")
    plain = build_dag(load_spec(local), register=False)
    assert plain.task_dict["decide"].options == ["accept as the new baseline", "ignore"]
    assert "bisect_decided" not in plain.task_dict
    local.write_text(text + "regressions:\n  decide: {default: bisect}\n")
    with pytest.raises(SpecError, match="bisect needs a payload from git"):
        load_spec(local)
