"""Hostile specs against the real DagBag and the real ``bench validate``: an alias bomb, a spec past its time budget,
a symbolic link to a file of secrets, a suffix in capitals. Each is refused by name while every other campaign loads,
and nothing of the linked file reaches the import error, the DAG file's log or the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from benchflow.searches.listener import SEARCH_DAGS
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.e2e
BENCH = str(Path(sys.executable).parent / "bench")
CAMPAIGNS = PROJECT_ROOT / "include" / "campaigns"
SECRETS = ("SECRETHASH", "sk-SECRET123", "hunter2")

PROBE = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=sys.argv[1])
    print(json.dumps({"dags": sorted(bag.dags), "errors": {k: str(v) for k, v in bag.import_errors.items()}}))
    """
)


def alias_bomb() -> str:
    """Nine levels of ten aliases: 10^9 values once expanded, in about 300 bytes."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\npayload: moe\nbenchmark:\n  script: bench_moe.py\n  args:\n    m_list: *a8\n"


def biggest_serving_spec() -> str:
    """A serving spec at the size limits (64 configs of 32 servers): its DAG takes a few tenths of a second."""
    spec = yaml.safe_load((CAMPAIGNS / "serving_local.yaml").read_text())
    server = spec["configs"][0]["servers"][0] | {"command": "{python} server.py --port {port} --enable-metrics"}
    spec["configs"] = [
        {"name": f"c{i}", "servers": [{**server, "name": f"s{j}", "port": 9000 + j} for j in range(32)]}
        for i in range(64)
    ]
    return yaml.safe_dump(json.loads(json.dumps(spec)))  # no shared objects, so no aliases


def unknown_keys() -> str:
    """20,000 unknown keys, 189 KB: within the size limits, and each key an error."""
    keys = "".join(f"k{i}: 1\n" for i in range(20_000))
    return (CAMPAIGNS / "moe_kernel_local.yaml").read_text() + keys


def rare_percentile_search() -> str:
    """A few hundred bytes asking for the P0.0001 of 10**6 requests per probe: a probe far too small for it."""
    spec = yaml.safe_load((CAMPAIGNS / "serving_local.yaml").read_text())
    spec["benchmark"]["args"] = {"client": "sglang", "input_len": 16, "output_len": 8}
    spec["benchmark"]["search"] = {
        "over": "concurrency",
        "range": [1, 8],
        "slo": {"p0.0001_ttft_ms": 2000},
        "prompts_per_probe": 1_000_000,
    }
    return yaml.safe_dump(spec)


@pytest.fixture
def hostile(tmp_path):
    folder = tmp_path / "campaigns"
    folder.mkdir()
    shutil.copy(CAMPAIGNS / "moe_kernel_local.yaml", folder / "moe_kernel_local.yaml")
    shutil.copy(CAMPAIGNS / "serving_local.yaml", folder / "serving_local.yaml")
    (folder / "bomb.yaml").write_text(alias_bomb())
    secret = tmp_path / "shadow"
    secret.write_text(
        "root:$6$SECRETHASH:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\napi_token: sk-SECRET123\npw: hunter2\n"
    )
    os.symlink(secret, folder / "leak.yaml")
    (folder / "shout.YAML").write_text((CAMPAIGNS / "moe_kernel_local.yaml").read_text())
    (folder / "slow.yaml").write_text(biggest_serving_spec())
    (folder / "unknown.yaml").write_text(unknown_keys())
    (folder / "rare.yaml").write_text(rare_percentile_search())
    return folder


def environment(folder: Path, seconds: str) -> dict[str, str]:
    return {**os.environ, "BENCH_CAMPAIGNS_DIR": str(folder), "BENCH_SPEC_SECONDS": seconds}


def dagbag(
    folder: Path, seconds: str, import_timeout: str | None = None
) -> tuple[subprocess.CompletedProcess[str], dict]:
    env = environment(folder, seconds)
    if import_timeout is not None:
        env["AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT"] = import_timeout
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(PROJECT_ROOT / "dags")],
        capture_output=True,
        text=True,
        timeout=300,  # an expanded bomb never returns; this only stops the test hanging
        cwd=PROJECT_ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result, json.loads(result.stdout.strip().splitlines()[-1])


def test_dagbag_loads_every_other_campaign_and_names_each_hostile_spec(hostile):
    # budgets well above the defaults (10 s a spec, 30 s the file): what is refused is refused for what it is, not
    # for how long a busy machine took to build the biggest spec the limits allow (bench/dag_parse.py times that)
    result, parsed = dagbag(hostile, "60", import_timeout="240")
    assert {"bench_moe_kernel_local", "bench_serving_local", "bench_slow", "bench_report"} <= set(parsed["dags"])
    assert not {"bench_bomb", "bench_leak", "bench_shout"} & set(parsed["dags"])
    assert [Path(p).name for p in parsed["errors"]] == ["campaign_errors.py"]  # campaigns.py itself loads
    [error] = parsed["errors"].values()
    assert "bomb.yaml:2: a1.0: YAML aliases (*name) are not allowed in a campaign spec" in error
    assert "leak.yaml:?: <top>: is a symbolic link to a file outside the campaigns folder: not read" in error
    assert "shout.YAML:?: <top>: a spec's file name ends in .yaml or .yml, in lower case: rename it" in error
    # Twenty of the unknown keys by line, the rest counted; the rare percentile refused for its probe size.
    assert "unknown.yaml:24: k0: unknown field" in error
    assert "unknown.yaml:?: <top>: and 19980 more problems of the same kinds (the first 20 are listed)" in error
    assert error.count("unknown.yaml:") == 21
    assert "p0.0001_ttft_ms: a P0.0001 bound at 95 % confidence needs at least 2995731 requests" in error
    assert "slow.yaml" not in error
    for secret in SECRETS:
        assert secret not in result.stdout + result.stderr


def test_a_spec_past_its_time_budget_is_an_error_naming_it_and_the_file_still_imports(hostile):
    """With a budget no spec can meet (10 µs; reading the smallest file takes longer), every campaign spec is "not
    built" with the budget named, the bomb is still refused, and the DAG files import."""
    _, parsed = dagbag(hostile, "0.00001")
    assert set(parsed["dags"]) == {*SEARCH_DAGS, "bench_report"}  # DAG files of no campaign
    [error] = parsed["errors"].values()
    for name in ("moe_kernel_local", "serving_local", "slow"):
        assert f"{name}.yaml:?: <top>: not built: reading and checking it took more than 1e-05 s" in error
    assert "bomb.yaml:" in error  # refused too, for whichever comes first: its aliases or its budget


def test_bench_validate_refuses_each_hostile_spec_and_returns(hostile):
    result = subprocess.run(
        [BENCH, "validate"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PROJECT_ROOT,
        env=environment(hostile, "10"),
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "moe_kernel_local: ok" in result.stdout and "serving_local: ok" in result.stdout
    for name in ("bomb.yaml:2:", "leak.yaml:?:", "shout.YAML:?:"):
        assert name in result.stderr, result.stderr
    assert "5 of 8 specs invalid" in result.stderr
    for secret in SECRETS:
        assert secret not in result.stdout + result.stderr
    slow = subprocess.run(
        [BENCH, "validate"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PROJECT_ROOT,
        env=environment(hostile, "0.001"),
    )
    assert (
        slow.returncode == 1
        and "slow.yaml:?: <top>: not built" in slow.stderr
        and "8 of 8 specs invalid" in slow.stderr
    )


def test_bench_validate_of_one_linked_file_prints_none_of_it(hostile):
    result = subprocess.run(
        [BENCH, "validate", str(hostile / "leak.yaml")], capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT
    )
    assert result.returncode == 1
    assert "is a symbolic link to a file outside the campaigns folder" in result.stderr
    for secret in SECRETS:
        assert secret not in result.stdout + result.stderr


def test_the_biggest_spec_the_limits_allow_builds_within_the_default_budget(hostile):
    result = subprocess.run(
        [BENCH, "validate", str(hostile / "slow.yaml")], capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT
    )
    assert result.returncode == 0, result.stderr
    assert "slow: ok (bench_slow, kind serving" in result.stdout


def test_a_dag_file_short_of_import_time_still_imports_and_names_the_specs_it_left_out(tmp_path):
    """With the file's import timeout shorter than the reserve kept for its end, no spec is built, and both DAG
    files still import (no timeout): campaign_errors.py names every spec and why."""
    folder = tmp_path / "campaigns"
    folder.mkdir()
    for name in ("moe_kernel_local", "serving_local"):
        shutil.copy(CAMPAIGNS / f"{name}.yaml", folder / f"{name}.yaml")
    imports = "import benchflow.factory, benchflow.spec\n"  # imported before the timer starts, as Airflow would have
    probe = PROBE.replace("from airflow.dag_processing", imports + "from airflow.dag_processing")
    result = subprocess.run(
        [sys.executable, "-c", probe, str(PROJECT_ROOT / "dags")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
        env={**environment(folder, "10"), "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "3.4"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed["dags"] == sorted({*SEARCH_DAGS, "bench_report"})  # DAG files of no campaign
    [(path, error)] = parsed["errors"].items()
    assert path.endswith("campaign_errors.py") and "Timeout" not in error
    for name in ("moe_kernel_local", "serving_local"):
        assert f"{name}.yaml:?: <top>: not built: the specs before it used the DAG file's import timeout" in error
