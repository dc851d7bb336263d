"""What a bisection is given and what it hands the campaign: its conf checked field by field, the conf of a
probe run (only the case, repeated, at one commit, on one host), and a spec's git payload and host pool."""

from __future__ import annotations

import pytest

from benchflow import bisect_steps, params
from benchflow.kinds.kernel import KIND as KERNEL
from benchflow.kinds.kernel import table
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
    conf = bisect_steps.checked_conf(CONF)
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
    with pytest.raises(bisect_steps.ConfError, match=f"^conf.{field}: .*{says}"):
        bisect_steps.checked_conf({**CONF, **change})


def test_a_kernel_probe_runs_only_its_case_repeated():
    assert KERNEL.case_conf is not None
    assert KERNEL.case_conf("m=64", 3) == {"m_list": [64, 64, 64]}
    with pytest.raises(ValueError, match="a kernel case is m="):
        KERNEL.case_conf("concurrency=8", 3)


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
    one = bisect_steps.run_id_for("manual__2026-12-01T00:00:00+00:00", 2, sha)
    assert one == bisect_steps.run_id_for("manual__2026-12-01T00:00:00+00:00", 2, sha)
    assert one != bisect_steps.run_id_for("manual__2026-12-01T00:00:00+00:00", 3, sha)
    assert one.startswith("bisect_") and one.endswith("_r2_" + sha[:12])
