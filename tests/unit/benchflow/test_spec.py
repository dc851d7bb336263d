from __future__ import annotations

from pathlib import Path

import pytest

from benchflow.paths import CAMPAIGNS_DIR
from benchflow.spec import ServingConfig, SpecError, load_all, load_spec

pytestmark = pytest.mark.unit

GOOD = """\
description: test campaign
kind: kernel
host: local
payload: moe
benchmark:
  script: bench_moe.py
  args:
    m_list: [1, 2]
timeouts:
  benchmark: 60
"""


def write(tmp_path: Path, text: str, name: str = "camp") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_shipped_specs_are_valid():
    specs, errors = load_all(CAMPAIGNS_DIR)
    assert errors == []
    assert {"moe_kernel_local", "moe_kernel_nightly"} <= {s.name for s in specs}


def test_good_spec_loads_with_defaults(tmp_path):
    spec = load_spec(write(tmp_path, GOOD))
    assert spec.dag_id == "bench_camp"
    assert spec.benchmark.marker == "ALL_DONE"
    assert spec.timeouts.benchmark == 60 and spec.timeouts.poke_interval == 5
    assert spec.schedule == "@daily" and spec.pool == "bench_host_local"
    assert len(spec.spec_hash()) == 64


@pytest.mark.parametrize("schedule", ["0 2 * * *", "@weekly", "*/30 1-5 * * mon-fri", None])
def test_schedules_cron_preset_or_manual_only(tmp_path, schedule):
    text = GOOD.replace("kind: kernel\n", f"kind: kernel\nschedule: {'null' if schedule is None else repr(schedule)}\n")
    assert load_spec(write(tmp_path, text)).schedule == schedule


def test_spec_hash_changes_with_content(tmp_path):
    first = load_spec(write(tmp_path, GOOD)).spec_hash()
    second = load_spec(write(tmp_path, GOOD.replace("[1, 2]", "[1, 4]"))).spec_hash()
    assert first != second


BAD = [
    # (what, replace this, with this, field named, line)
    ("unknown key", "kind: kernel\n", "kind: kernel\nnightly: true\n", "nightly", 3),
    ("wrong type", "benchmark: 60", "benchmark: soon", "timeouts.benchmark", 10),
    ("negative timeout", "benchmark: 60", "benchmark: -5", "timeouts.benchmark", 10),
    ("bad cron", "kind: kernel\n", "kind: kernel\nschedule: '0 25 * * *'\n", "schedule", 3),
    ("cron with 6 fields", "kind: kernel\n", "kind: kernel\nschedule: '0 0 2 * * *'\n", "schedule", 3),
    ("missing payload dir", "payload: moe", "payload: nosuchpayload", "payload", 4),
    ("no payload at all", "payload: moe\n", "", "payload", 1),
    ("shell metacharacters in host", "host: local", "host: 'gpu1; rm -rf ~'", "host", 3),
    ("path traversal in script", "script: bench_moe.py", "script: ../../etc/passwd", "benchmark.script", 6),
    ("newline in an argument", "m_list: [1, 2]", 'm_list: "1\\n$(id)"', "benchmark.args.m_list", 8),
    (
        "unknown benchmark field",
        "  script: bench_moe.py\n",
        "  script: bench_moe.py\n  command: rm -rf /\n",
        "benchmark.command",
        7,
    ),
    ("wrong list item type", "m_list: [1, 2]", "m_list: [1, {a: 2}]", "benchmark.args.m_list", 8),
]


@pytest.mark.parametrize(("what", "old", "new", "field", "line"), BAD, ids=[b[0] for b in BAD])
def test_bad_spec_error_names_file_field_and_line(tmp_path, what, old, new, field, line):
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    messages = caught.value.lines()
    assert any(f"camp.yaml:{line if line else '?'}: {field}" in m for m in messages), messages
    assert all(str(path.name) in m for m in messages)


def test_name_must_match_file(tmp_path):
    with pytest.raises(SpecError, match=r"camp.yaml:1: name: must match the file name 'camp'"):
        load_spec(write(tmp_path, "name: other\n" + GOOD))


def test_invalid_yaml_names_the_line(tmp_path):
    with pytest.raises(SpecError, match=r"camp.yaml:3: <top>: not valid YAML"):
        load_spec(write(tmp_path, "kind: kernel\nhost: local\n  bad: [\n"))


SERVING = """\
kind: serving
payload: moe
configs:
  - name: one
    servers:
      - name: a
        command: "{python} server.py --port {port}"
        port: 30100
        gpus: "0-3"
benchmark:
  script: sweep.py
"""


def test_serving_spec_and_gpu_sets(tmp_path):
    spec = load_spec(write(tmp_path, SERVING))
    assert spec.configs[0].servers[0].visible_devices() == "0,1,2,3"
    assert spec.configs[0].endpoint.port == 30100
    mixed = load_spec(write(tmp_path, SERVING.replace('"0-3"', '"0,2-3,7"')))
    assert mixed.configs[0].servers[0].visible_devices() == "0,2,3,7"


SERVING_BAD = [
    ("bad gpu set", '"0-3"', '"0-3; reboot"', "configs.0.servers.0.gpus"),
    ("port out of range", "port: 30100", "port: 70000", "configs.0.servers.0.port"),
    (
        "health path with a query",
        "port: 30100",
        'port: 30100\n        health_path: "/h?x=$(id)"',
        "configs.0.servers.0.health_path",
    ),
    ("kernel format for serving", "script: sweep.py", "script: sweep.py\n  format: table", ""),
    (
        "patterns without generic",
        "script: sweep.py",
        "script: sweep.py\n  patterns: {a: {regex: '(?P<value>x)'}}",
        "benchmark.patterns",
    ),
    ("the old parser field", "script: sweep.py", "script: sweep.py\n  parser: serving_log", "benchmark"),
    ("an unknown kind", "kind: serving", "kind: servin", "kind"),
    (
        "duplicate ports",
        'gpus: "0-3"',
        'gpus: "0-3"\n      - name: b\n        command: x\n        port: 30100',
        "configs.0",
    ),
]


@pytest.mark.parametrize(("what", "old", "new", "field"), SERVING_BAD, ids=[b[0] for b in SERVING_BAD])
def test_bad_serving_spec(tmp_path, what, old, new, field):
    assert old in SERVING
    with pytest.raises(SpecError) as caught:
        load_spec(write(tmp_path, SERVING.replace(old, new)))
    assert any(f": {field or '<top>'}:" in line for line in caught.value.lines()), caught.value.lines()


def test_serving_spec_needs_configs(tmp_path):
    without = SERVING.split("configs:")[0] + "benchmark:" + SERVING.split("benchmark:")[1]
    with pytest.raises(SpecError, match=r"camp.yaml:1: <top>: .*needs at least one entry in configs"):
        load_spec(write(tmp_path, without))


def test_a_field_of_another_kind_says_whose_it_is(tmp_path):
    text = GOOD.replace("  script: bench_moe.py\n", "  script: bench_moe.py\n  repeats: 3\n")
    with pytest.raises(
        SpecError, match=r"benchmark.repeats: unknown field for kind 'kernel': it belongs to kind 'serving'"
    ):
        load_spec(write(tmp_path, text))


def test_kernel_spec_cannot_declare_servers(tmp_path):
    text = GOOD + "configs:\n  - name: x\n    servers:\n      - {name: a, command: b, port: 1}\n"
    with pytest.raises(SpecError, match=r"configs .servers. do not belong to a kernel campaign"):
        load_spec(write(tmp_path, text))


def test_old_parser_field_says_what_to_rename(tmp_path):
    old = GOOD.replace("  script: bench_moe.py\n", "  script: bench_moe.py\n  parser: kernel_sweep\n")
    with pytest.raises(SpecError, match=r"benchmark: .*'benchmark.parser' is renamed: write 'kind: kernel'"):
        load_spec(write(tmp_path, old))


def test_generic_kind_needs_valid_patterns(tmp_path):
    generic = GOOD.replace("kind: kernel\n", "kind: generic\n")
    assert generic != GOOD
    with pytest.raises(SpecError, match=r"camp.yaml:6: benchmark.patterns: Field required"):
        load_spec(write(tmp_path, generic))
    good = generic + "  patterns:\n    tok_s: {regex: 'tok/s (?P<value>[0-9.]+)', unit: tok/s}\n"
    good = good.replace("timeouts:\n  benchmark: 60\n", "") + "timeouts:\n  benchmark: 60\n"
    assert load_spec(write(tmp_path, good)).benchmark.patterns["tok_s"].unit == "tok/s"
    broken = good.replace("(?P<value>[0-9.]+)", "(?P<value>[0-9.+")
    with pytest.raises(SpecError, match=r"benchmark.patterns.tok_s.regex: .*not a regular expression"):
        load_spec(write(tmp_path, broken))


def test_duplicate_keys_are_refused_with_their_line(tmp_path):
    twice = GOOD.replace("    m_list: [1, 2]\n", "    m_list: [1, 2]\n    m_list: [4]\n")
    with pytest.raises(SpecError, match=r"camp.yaml:9: benchmark.args.m_list: duplicate key"):
        load_spec(write(tmp_path, twice))


def test_keys_yaml_reads_as_booleans_are_refused_on_their_line(tmp_path):
    switch = GOOD.replace("    m_list: [1, 2]\n", "    m_list: [1, 2]\n    on: 1\n")
    with pytest.raises(SpecError, match=r"camp.yaml:9: benchmark.args.on: key 'on' is read by YAML as a bool; quote"):
        load_spec(write(tmp_path, switch))


def test_a_spec_that_is_not_utf8_is_refused_with_its_line(tmp_path):
    path = tmp_path / "camp.yaml"
    path.write_bytes(GOOD.encode().replace(b"test campaign", b"caf\xe9 campaign"))
    with pytest.raises(SpecError, match=r"camp.yaml:1: <top>: not UTF-8 text \(byte 16\)"):
        load_spec(path)


# --- hostile specs: aliases, sizes, links, suffixes (issue 20) ---


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("base: &b [1, 2]\n" + GOOD.replace("m_list: [1, 2]", "m_list: *b"), 9),
        (GOOD + "services:\n  - &s {name: a, stop: x, start: y}\n  - *s\n", 13),
        (GOOD.replace("timeouts:\n  benchmark: 60\n", "t: &t {benchmark: 60}\ntimeouts:\n  <<: *t\n"), 11),
    ],
    ids=["alias of a list", "alias in a list", "merge key"],
)
def test_yaml_aliases_are_refused_with_their_line(tmp_path, text, line):
    with pytest.raises(SpecError, match=rf"camp.yaml:{line}: .*YAML aliases \(\*name\) are not allowed"):
        load_spec(write(tmp_path, text))


def test_alias_bomb_is_refused_before_it_expands(tmp_path):
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(SpecError, match=r"camp.yaml:2: a1.0: YAML aliases"):
        load_spec(write(tmp_path, "\n".join(lines) + "\n" + GOOD.replace("[1, 2]", "*a8")))


def _serving_with(configs: int = 1, servers: int = 1) -> str:
    server = '{{name: s{j}, command: "{{python}} server.py", port: {port}}}'
    listed = ", ".join(server.format(j=j, port=30100 + j) for j in range(servers))
    entries = "".join(f"  - name: c{i}\n    servers: [{listed}]\n" for i in range(configs))
    return f"kind: serving\npayload: moe\nconfigs:\n{entries}benchmark:\n  script: sweep.py\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_serving_with(configs=65), r"camp.yaml:4: configs: List should have at most 64 items"),
        (_serving_with(servers=33), r"camp.yaml:5: configs.0.servers: List should have at most 32 items"),
        (
            GOOD + "services:\n" + "".join(f"  - {{name: s{i}, stop: x, start: y}}\n" for i in range(33)),
            r"camp.yaml:12: services: List should have at most 32 items",
        ),
        (GOOD + "# " + "x" * 300_000 + "\n", r"camp.yaml:\?: <top>: is 30\d+ bytes: a spec may have 262144 bytes"),
        (GOOD + "deep: " + "[" * 40 + "]" * 40 + "\n", r"camp.yaml:11: deep(\.0)+: nested more than 32 levels"),
        (GOOD + "many: [" + ",".join(["1"] * 50_001) + "]\n", r"camp.yaml:11: many\.\d+: more than 50000 YAML values"),
    ],
    ids=["configs", "servers", "services", "bytes", "depth", "values"],
)
def test_size_limits_are_refused_naming_the_limit(tmp_path, text, expected):
    with pytest.raises(SpecError, match=expected):
        load_spec(write(tmp_path, text))


def test_the_limits_allow_what_is_shipped():
    from benchflow.spec import LIMITS

    specs = load_all(CAMPAIGNS_DIR)[0]
    assert max(len(s.configs) for s in specs if s.space is None) * 10 <= LIMITS.configs * 1
    assert all(len(s.configs) <= s.space.max_configs <= LIMITS.configs for s in specs if s.space is not None)
    assert max(p.stat().st_size for p in CAMPAIGNS_DIR.glob("*.yaml")) * 50 < LIMITS.bytes


def test_a_link_out_of_the_folder_is_not_read(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRETHASH:19000:0:99999:7:::\ntoken: sk-SECRET\n")
    folder = tmp_path / "campaigns"
    folder.mkdir()
    (folder / "leak.yaml").symlink_to(secret)
    (folder / "inside.yaml").symlink_to(write(folder, GOOD, "real"))  # a link within the folder is a spec
    specs, errors = load_all(folder)
    assert {s.name for s in specs} == {"inside", "real"}
    [error] = errors
    assert "leak.yaml:?: <top>: is a symbolic link to a file outside the campaigns folder" in str(error)
    assert "SECRET" not in str(error) and "shadow" not in str(error)  # neither its lines nor where it leads


def test_a_fifo_is_refused_without_blocking(tmp_path):
    import os

    os.mkfifo(tmp_path / "camp.yaml")
    with pytest.raises(SpecError, match=r"camp.yaml:\?: <top>: is not a regular file"):
        load_spec(tmp_path / "camp.yaml")


def test_unknown_keys_that_are_not_names_are_never_echoed(tmp_path):
    text = GOOD + "root:$6$SECRETHASH:19000:0:99999:7:::\n'my key': 1\n"
    with pytest.raises(SpecError) as caught:
        load_spec(write(tmp_path, text))
    message = str(caught.value)
    assert "camp.yaml:11: <a key of 36 characters>: unknown field" in message
    assert "camp.yaml:12: <a key of 6 characters>: unknown field" in message and "SECRET" not in message


def test_yaml_errors_never_quote_the_file(tmp_path):
    with pytest.raises(SpecError) as caught:
        load_spec(write(tmp_path, "token: sk-SECRET {\n  x: [\n"))
    assert "not valid YAML" in str(caught.value) and "SECRET" not in str(caught.value)


@pytest.mark.parametrize("name", ["camp.YAML", "camp.Yml", "camp.yAml"])
def test_a_suffix_in_another_case_is_refused_by_name(tmp_path, name):
    (tmp_path / name).write_text(GOOD)
    with pytest.raises(SpecError, match=r"rename it to camp\.yaml"):
        load_spec(tmp_path / name)  # bench validate FILE, bench run
    (tmp_path / "camp.yaml").write_text(GOOD)  # and beside the right name, it is still this error, not a clash
    specs, errors = load_all(tmp_path)
    assert [s.name for s in specs] == ["camp"]
    assert [e.lines() for e in errors] == [
        [f"{tmp_path / name}:?: <top>: a spec's file name ends in .yaml or .yml, in lower case: rename it to camp.yaml"]
    ]


@pytest.mark.parametrize(
    ("schedule", "deadline", "expected"),
    [
        ('"30 2 * * *"', '"07:00"', ("logical", 4.5 * 3600)),  # a 02:30 nightly due at 07:00
        ("'@daily'", '"06:15"', ("logical", 6.25 * 3600)),
        ('"0 22 * * *"', '"06:00"', ("logical", 8 * 3600)),  # due the next morning
        ("'@hourly'", "90m", ("queued", 5400)),
        ("null", "45s", ("queued", 45)),
    ],
)
def test_a_deadline_is_a_clock_time_of_a_daily_schedule_or_a_time_after_queueing(
    tmp_path, schedule, deadline, expected
):
    spec = load_spec(write(tmp_path, GOOD + f"schedule: {schedule}\ndeadline: {deadline}\n"))
    reference, interval = spec.deadline_after()
    assert (reference, interval.total_seconds()) == expected


@pytest.mark.parametrize(
    ("schedule", "deadline", "says"),
    [
        ("'@hourly'", '"07:00"', "needs a daily schedule"),
        ('"0 2 * * 1"', '"07:00"', "needs a daily schedule"),  # weekly
        ("'@daily'", '"7am"', "deadline"),
        ("'@daily'", '"24:00"', "deadline"),
        ("'@daily'", "0m", "deadline"),
    ],
)
def test_a_deadline_that_cannot_be_kept_is_refused_naming_it(tmp_path, schedule, deadline, says):
    with pytest.raises(SpecError, match=says):
        load_spec(write(tmp_path, GOOD + f"schedule: {schedule}\ndeadline: {deadline}\n"))


def test_a_missed_deadline_tells_the_notifier_what_is_still_running():
    from benchflow.nightly.deadline_alert import missed_event, run_of

    context = {"dag_run": {"dag_id": "bench_x", "dag_run_id": "scheduled__2026-12-04T02:30:00+00:00"}}
    assert run_of(context) == ("bench_x", "scheduled__2026-12-04T02:30:00+00:00")  # the REST API's field names

    states = {"preflight": "success", "acquire_host": "up_for_reschedule", "verdict": None, "parse": "skipped"}
    event = missed_event("07:00", "2026-12-04 07:00:00+00:00", states)
    assert event["still_running"] == {"acquire_host": "up_for_reschedule", "verdict": None}
    assert event["event"] == "deadline missed" and event["deadline"] == "07:00"


def test_server_roles_and_metrics_urls_come_from_the_spec():
    config = ServingConfig.model_validate(
        {
            "name": "pd",
            "servers": [
                {"name": "p", "command": "x --disaggregation-mode prefill", "port": 30000},
                {"name": "decode", "command": "x", "port": 30001, "metrics_port": 31001},
                {"name": "e", "command": "x", "port": 30002, "role": "decode", "metrics": False},
            ],
            "router": {"name": "r", "command": "router --prometheus-port 29100", "port": 8000},
        }
    )
    assert config.roles() == {"r": "router", "p": "prefill", "decode": "decode", "e": "decode"}
    assert config.metrics_urls() == {
        "p": "http://127.0.0.1:30000/metrics",
        "decode": "http://127.0.0.1:31001/metrics",
        "r": "http://127.0.0.1:29100/metrics",
    }


def test_a_spec_repository_campaign_named_as_a_folder_campaign_is_refused_naming_both(tmp_path, monkeypatch):
    """Two bundles, one DAG id: the git spec repository's spec is refused (an import error of its bundle) naming the
    campaigns folder's, which keeps the DAG; the folder's own parse is untouched and the repository's others load."""
    from benchflow.spec import spec_paths

    folder, repo = tmp_path / "campaigns", tmp_path / "repo"
    folder.mkdir()
    repo.mkdir()
    write(folder, GOOD, "shared")
    write(repo, GOOD, "shared")
    write(repo, GOOD, "own")
    monkeypatch.setenv("BENCH_CAMPAIGNS_DIR", str(folder))
    paths, errors = spec_paths(repo)
    assert [p.name for p in paths] == ["own.yaml"]
    (error,) = errors
    assert error.path == repo / "shared.yaml" and str(folder / "shared.yaml") in str(error), str(error)
    assert "bench_shared belongs to that one" in str(error)
    assert spec_paths(folder) == ([folder / "shared.yaml"], [])
