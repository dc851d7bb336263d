from __future__ import annotations

import pytest

from benchflow.remote import jobs, layout, preflight

pytestmark = pytest.mark.unit


def test_run_key_makes_run_ids_path_safe():
    import hashlib

    key = layout.run_key("manual__2026-11-29T21:14:22.1+00:00")
    digest = hashlib.sha256(b"manual__2026-11-29T21:14:22.1+00:00").hexdigest()[:16]
    assert key == f"manual__2026-11-29T21_14_22.1_00_00-{digest}"
    assert layout.run_key("../../etc").startswith("_.._etc-")
    assert "/" not in layout.run_key("a/b") and layout.run_key("..").startswith("run-")
    assert layout.run_key("r:1") != layout.run_key("r_1")


def test_run_dir_layout_and_absolute_workdir():
    assert layout.run_dir("/srv/bench/", "bench_x", "r:1") == f"/srv/bench/bench_x/{layout.run_key('r:1')}"
    assert layout.run_dir("/w", "bench_ü", "r").split("/")[2].startswith("bench__-")
    with pytest.raises(ValueError, match="absolute"):
        layout.run_dir("relative/dir", "d", "r")


def test_render_args_quotes_every_value():
    args = {"m_list": [1, 2, 4], "dtype": "bf16", "note": "a b; rm -rf ~", "fast": True, "x": False}
    rendered = layout.render_args(args)
    assert rendered == "--m-list 1,2,4 --dtype bf16 --note 'a b; rm -rf ~' --fast"
    assert layout.render_args({"v": "$(id)"}) == "--v '$(id)'"
    assert layout.render_args({"v": "`id`"}) == "--v '`id`'"


def test_render_args_rejects_non_identifier_keys():
    with pytest.raises(ValueError, match="not an identifier"):
        layout.render_args({"x; id": 1})


def test_status_output_is_parsed():
    status = jobs.parse_status("marker=0 exit= alive=1 pid=4242 elapsed=17\n32 3.171 10092 99.09\n")
    assert status == jobs.JobStatus(False, None, True, 4242, 17, "32 3.171 10092 99.09")
    assert status.started
    done = jobs.parse_status("marker=1 exit=0 alive=0 pid=4242 elapsed=20\nALL_DONE\n")
    assert done.marker and done.exit_code == 0
    never = jobs.parse_status("marker=0 exit= alive=0 pid= elapsed=\n")
    assert not never.started and never.last_line == ""


def test_status_output_garbage_is_an_error():
    with pytest.raises(ValueError, match="unexpected status output"):
        jobs.parse_status("bash: command not found\n")


def test_status_checks_liveness_before_the_marker():
    command = jobs.status_command(layout.job_paths("/w/d/r"), "ALL_DONE")
    assert command.index("ps -e -o pgid=") < command.index("grep -qxF")


def test_preflight_facts_join_one_line_per_gpu():
    gpu = "gpu=NVIDIA H200, 570.1, 143771 MiB\n"
    facts = preflight.parse_facts(f"hostname=h1\n{gpu}{gpu}")
    assert facts["gpu_count"] == "2" and facts["hostname"] == "h1"
    assert preflight.parse_facts("gpu=none\n")["gpu_count"] == "0"


@pytest.mark.parametrize(
    ("status", "outcome", "words"),
    [
        ("marker=1 exit= alive=1 pid=9 elapsed=5", "done", "ALL_DONE seen"),
        ("marker=0 exit= alive=1 pid=9 elapsed=5", "running", ""),
        ("marker=0 exit= alive=0 pid= elapsed=", "missing", "no benchmark job in /w/bench"),
        ("marker=0 exit=3 alive=0 pid=9 elapsed=5", "dead", "exited with code 3 without writing 'ALL_DONE' (check 2)"),
        ("marker=0 exit= alive=0 pid=9 elapsed=5", "dead", "died without writing"),
        ("marker=0 exit= alive=1 pid=9 elapsed=61", "timeout", "past its timeout of 60 s"),
        ("marker=1 exit= alive=1 pid=9 elapsed=61", "done", "seen"),  # the marker wins over the clock
    ],
)
def test_judge_one_check(status, outcome, words):
    got, message = jobs.judge(jobs.parse_status(status + "\n"), "ALL_DONE", 60, 2, "/w/bench")
    assert got == outcome and words in message
