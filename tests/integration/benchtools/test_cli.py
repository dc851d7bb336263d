"""``bench`` as a user runs it: the installed console script in .venv, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, PROJECT_ROOT

pytestmark = pytest.mark.integration
BENCH = str(Path(sys.executable).parent / "bench")


def bench(*args):
    return subprocess.run([BENCH, *args], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120)


@pytest.mark.parametrize("command", [[], ["validate"], ["parse"], ["run"], ["sql"], ["migrate"], ["pools"]])
def test_every_subcommand_has_help(command):
    result = bench(*command, "--help")
    assert result.returncode == 0 and "usage: bench" in result.stdout


def test_validate_all_shipped_specs():
    result = bench("validate")
    assert result.returncode == 0, result.stderr
    assert "moe_kernel_local: ok (bench_moe_kernel_local, kind kernel" in result.stdout


def test_validate_reports_file_line_field(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("payload: moe\nbenchmark:\n  script: x.py\ntimeouts:\n  benchmark: -1\n")
    result = bench("validate", str(bad))
    assert result.returncode == 1
    assert f"{bad}:5: timeouts.benchmark: Input should be greater than 0" in result.stderr


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "fp8.yaml",
            "payload: moe\nschedule: '@daily'\nbenchmark:\n  script: x.py\n  args: {dtype: int3}\n",
            ":5: benchmark.args: Value error, dtype: default 'int3' does not fit its trigger form",
        ),
        ("latin1.yaml", b"description: caf\xe9\npayload: moe\n", ":1: <top>: not UTF-8 text (byte 16)"),
        ("report.yaml", "payload: moe\nbenchmark:\n  script: x.py\n", "name: Value error, 'report' is reserved"),
    ],
)
def test_validate_catches_what_would_break_the_dag_build(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    result = bench("validate", str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert expected in result.stderr, result.stderr


def test_parse_prints_json_lines_and_detects_format():
    result = bench("parse", str(FIXTURES / "kernel_moe_sweep_partial_rtxpro6000.txt"))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["m"] for r in rows] == [1, 9, 32, 90, 256]
    assert "kernel/table, 5 rows, incomplete (no ALL_DONE)" in result.stderr


def test_parse_malformed_exits_nonzero_with_the_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("M ms/call tok/s us/token\n1 0.1 10000 100\n2 x 1 1\n")
    result = bench("parse", str(bad))
    assert result.returncode == 1 and "line 3: malformed row" in result.stderr


def test_parse_unknown_format_exits_nonzero(tmp_path):
    other = tmp_path / "other.txt"
    other.write_text("hello\n")
    assert bench("parse", str(other)).returncode == 1
    assert "unknown format 'nope'" in bench("parse", str(other), "--format", "nope").stderr


def test_sql_queries_the_published_warehouse_and_reports_errors(var_dir):
    migrated = bench("migrate")
    assert migrated.returncode == 0 and "warehouse.duckdb" in migrated.stdout, migrated.stderr
    assert bench("migrate").stdout.strip().endswith("up to date")
    ok = bench("sql", "SELECT 6 * 7 AS answer, count(*) AS n_runs FROM runs")
    assert ok.returncode == 0, ok.stderr
    from benchflow.warehouse import Warehouse

    published = Warehouse.at(var_dir / "warehouse.duckdb", read_only=True).query("SELECT count(*) AS n FROM runs")
    assert ok.stdout.split() == ["answer", "n_runs", "42", str(int(published["n"][0]))]
    bad = bench("sql", "SELECT nope FROM runs")
    assert bad.returncode == 1 and "nope" in bad.stderr


def test_sql_on_the_default_warehouse_imports_no_airflow_and_a_connection_in_the_metadata_db_wins(
    var_dir, tmp_path, airflow_db
):
    """Nothing names another warehouse: bench sql reads the default snapshot without importing Airflow (about a
    second instead of three). A connection bench_warehouse in Airflow's metadata DB (the UI's, the REST API's, bench
    airflow's) names another: bench sql reads that one, through Airflow."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    from benchflow.warehouse import Warehouse

    assert bench("migrate").returncode == 0
    quick = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "benchtools.cli", "sql", "SELECT 42 AS n"],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=120,
    )
    assert quick.returncode == 0 and quick.stdout.split() == ["n", "42"], quick.stderr[-2000:]
    imported = [line.split("|")[-1].strip() for line in quick.stderr.splitlines() if line.startswith("import time:")]
    assert "duckdb" in imported and not [m for m in imported if m.split(".")[0] == "airflow"]

    Warehouse.at(tmp_path / "other.duckdb").migrate()  # publishes other.snapshot.duckdb
    with create_session() as session:
        session.add(Connection(conn_id="bench_warehouse", conn_type="duckdb", host=str(tmp_path / "other.duckdb")))
    try:
        found = bench("sql", "SELECT current_database() AS db")
        assert found.returncode == 0 and found.stdout.split() == ["db", "other"], found.stdout + found.stderr
    finally:
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id == "bench_warehouse").delete()


@pytest.mark.parametrize(
    "statement",
    ["DELETE FROM runs", "DROP VIEW valid_runs", "CREATE TABLE x (a INT)", "COPY runs TO '/tmp/benchflow-leak.csv'"],
)
def test_sql_is_read_only(statement):
    assert bench("migrate").returncode == 0
    refused = bench("sql", statement)
    assert refused.returncode == 1
    assert "bench sql is read-only" in refused.stderr, refused.stderr
    assert not Path("/tmp/benchflow-leak.csv").exists()
    assert bench("sql", "SELECT count(*) AS n FROM valid_runs").returncode == 0


def test_pools_creates_one_slot_per_host_once_and_keeps_an_operators_change(airflow_db, tmp_path):
    """On campaigns of its own, on hosts that no other test names: the metadata DB is the suite's, and every
    ``bench run`` creates its campaigns' pools in it."""
    from airflow.models.pool import Pool

    hosts = ["pools_test_one", "pools_test_two"]
    for n, host in enumerate(hosts):
        spec = f"description: a campaign on {host}\nhost: {host}\npayload: moe\nschedule: null\n"
        (tmp_path / f"c{n}.yaml").write_text(spec + "benchmark:\n  script: bench_moe.py\n  args: {m_list: [1]}\n")
    env = {**os.environ, "BENCH_CAMPAIGNS_DIR": str(tmp_path)}
    pools = [BENCH, "pools"]
    first = subprocess.run(pools, capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120, env=env)
    assert first.returncode == 0, first.stderr
    for host in hosts:
        assert f"bench_host_{host}: created, 1 slot" in first.stdout, first.stdout
        pool = Pool.get_pool(f"bench_host_{host}")
        assert pool is not None and pool.slots == 1 and not pool.include_deferred
    Pool.create_or_update_pool(f"bench_host_{hosts[1]}", 2, "two campaigns at once on this host", False)
    again = subprocess.run(pools, capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120, env=env)
    assert f"bench_host_{hosts[1]}: exists, 2 slot(s)" in again.stdout and "created" not in again.stdout, again.stdout
    assert Pool.get_pool(f"bench_host_{hosts[1]}").slots == 2


def compare_warehouse(var: Path) -> dict[str, str]:
    """A DuckDB warehouse under ``var`` as loads leave it: ``cmp_two`` (serving, configs tp4 and pd, 3 repeats at
    concurrency 1, 8, 16) has a scheduled and a manual run last night (the manual one ran 16 prompts at c=16)
    and one tonight; ``cmp_k`` (kernel) two runs of one value a point."""
    import random

    from benchflow import kinds
    from benchflow.warehouse import Warehouse
    from tests.integration.benchflow.nightly.test_regressions import kernel_rows, night_run, serving_row

    warehouse = Warehouse.at(var / "warehouse.duckdb")
    warehouse.migrate()
    rng = random.Random(3)
    runs = {}
    for name, night, run_type, prompts_at_16 in (
        ("scheduled", 1, "scheduled", 32),
        ("manual", 1, "manual", 16),
        ("tonight", 0, "scheduled", 32),
    ):
        rows = []
        for config in ("tp4", "pd"):
            for concurrency in (1, 8, 16):
                for repeat in (1, 2, 3):
                    row = serving_row(config, concurrency, 100.0 * concurrency * (1 + rng.gauss(0, 0.03)))
                    prompts = prompts_at_16 if concurrency == 16 else 32
                    rows.append({**row, "repeat": repeat, "num_prompts": prompts, "completed": prompts})
        run = night_run("cmp_two", night, run_type=run_type)
        verdicts = [  # tonight both configs are decode-bound at their highest load
            {"kind": "serving", "config": config, "concurrency": c, "repeat": 1, "warmup": False}
            | {"verdict": verdict, "limiter": verdict.split("-")[0], "says": f"{verdict}: {config} at {c}"}
            for config in ("tp4", "pd")
            for c, verdict in ((1, "under-loaded"), (16, "decode-bound"))
        ]
        warehouse.load(run, kinds.get("serving"), rows, None, {"phase_bottlenecks": verdicts if night == 0 else []})
        runs[name] = run.run_id
    for name, night in (("k1", 2), ("k2", 1)):
        run = night_run("cmp_k", night)
        warehouse.load(run, kinds.get("kernel"), kernel_rows(1.0, rng))
        runs[name] = run.run_id
    runs["last_night"] = night_run("cmp_two", 1).run_id.split("__")[1][:10]
    return runs


def test_compare_refuses_an_ambiguous_side_names_its_runs_and_says_what_it_computes(tmp_path, airflow_db):
    import os

    var = tmp_path / "var"
    var.mkdir()
    runs = compare_warehouse(var)
    env = {**os.environ, "BENCH_VAR_DIR": str(var)}

    def compare(*args):
        return subprocess.run([BENCH, "compare", *args], capture_output=True, text=True, env=env, timeout=120)

    pooled = compare("cmp_two", "cmp_two:pd")  # no config on a two-config campaign
    assert pooled.returncode == 1 and "has 2 configs (pd, tp4)" in pooled.stderr, pooled.stderr
    assert "cmp_two:pd, cmp_two:tp4" in pooled.stderr
    night = compare(f"cmp_two:tp4@{runs['last_night']}", "cmp_two:pd")
    assert night.returncode == 1 and "2 valid runs that night" in night.stderr, night.stderr
    assert runs["scheduled"] in night.stderr and runs["manual"] in night.stderr
    for when, said in (("yesterday", "@yesterday is neither a night"), ("2026-13-45", "@2026-13-45 is not a date")):
        unreadable = compare(f"cmp_two:tp4@{when}", "cmp_two:pd")
        assert unreadable.returncode == 1 and said in unreadable.stderr, unreadable.stderr
        assert "share no point" not in unreadable.stderr

    result = compare(f"cmp_two:tp4@{runs['scheduled']}", f"cmp_two:tp4@{runs['manual']}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("A: ")) :]  # after Airflow's warnings
    assert lines[0].startswith(f"A: cmp_two:tp4@{runs['scheduled']} = run {runs['scheduled']} (night ")
    assert lines[1].startswith(f"B: cmp_two:tp4@{runs['manual']} = run {runs['manual']} (night ")
    assert "B/A is the ratio of the geometric means" in lines[2] and "ratio of means" not in result.stdout
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith("warning: concurrency=16: the sides ran different settings")
    assert "num_prompts=32" in warnings[0] and "num_prompts=16" in warnings[0]
    points = [line.split()[0] for line in lines if line.startswith("concurrency=")]
    assert points == sorted(points, key=lambda p: int(p.split("=")[1])) and points[:1] == ["concurrency=1"]
    assert {"concurrency=1", "concurrency=8", "concurrency=16"} == set(points)
    latest = compare("cmp_two:tp4", "cmp_two:pd")  # the latest valid run, each config
    assert latest.returncode == 0 and f"run {runs['tonight']}" in latest.stdout, latest.stderr
    page = "side by side, with charts: <api-server>/benchmarks/compare?side=cmp_two%3Atp4&side=cmp_two%3Apd"
    assert latest.stdout.splitlines()[-1] == page  # the comparison page of the same sides (no bench up here)
    said = latest.stdout.splitlines()[-4:-1]  # each side's verdict at its highest load, and what they share
    assert said == [
        "A bottleneck tp4 at concurrency 16 (1 of 1 repeats): decode-bound: tp4 at 16",
        "B bottleneck pd at concurrency 16 (1 of 1 repeats): decode-bound: pd at 16",
        "both decode-bound",
    ], latest.stdout

    single = compare(f"cmp_k@{runs['k1']}", f"cmp_k@{runs['k2']}")  # one value a side: both are shown
    assert single.returncode == 0, single.stderr
    row = next(line for line in single.stdout.splitlines() if line.startswith("m=16 ") and "tok_per_s" in line)
    assert row.count("(one value)") == 2 and "not comparable: 1 and 1 values" in row

    helped = subprocess.run([BENCH, "compare", "--help"], capture_output=True, text=True, env=env)
    assert "95 % interval" in " ".join(helped.stdout.split()) and "%%" not in helped.stdout


def test_parse_refuses_what_is_not_a_benchmark_output_file_without_blocking(tmp_path):
    """A FIFO would block a plain read forever, /dev/zero never ends (MemoryError), a sparse 257 MiB file is not
    one benchmark's output: each is refused with exit code 2, naming the file, and no traceback."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as handle:
        handle.truncate(257 * 2**20)
    for path, why in (
        (fifo, "not a regular file"),
        ("/dev/zero", "not a regular file"),
        (huge, "over the 256 MiB bench parse reads"),
    ):
        result = subprocess.run([BENCH, "parse", str(path)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and f"{path}: " in result.stderr and why in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_compare_says_when_every_row_was_left_out_as_not_ok_and_reminds_what_include_noisy_compares(
    tmp_path, airflow_db
):
    import os

    from benchflow import kinds
    from benchflow.warehouse import Warehouse
    from tests.integration.benchflow.nightly.test_regressions import night_run

    var = tmp_path / "var"
    var.mkdir()
    warehouse = Warehouse.at(var / "warehouse.duckdb")
    warehouse.migrate()
    runs = {}
    for night, validity in ((1, "ok"), (0, "contended")):
        row = {"ms_per_call": 1.0, "tok_per_s": 1000.0, "us_per_token": 1000.0, "note": "", "validity": validity}
        run = night_run("cmp_busy", night)
        warehouse.load(run, kinds.get("kernel"), [{"m": m, "repeat": r, **row} for m in (1, 2) for r in (1, 2)])
        runs[validity] = run.run_id
    env = {**os.environ, "BENCH_VAR_DIR": str(var)}
    sides = [f"cmp_busy@{runs['ok']}", f"cmp_busy@{runs['contended']}"]
    done = subprocess.run([BENCH, "compare", *sides], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    assert "share no point and metric measured ok (B left out 8 contended; --include-noisy compares" in done.stderr
    noisy = [BENCH, "compare", *sides, "--include-noisy"]
    done = subprocess.run(noisy, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "warning: B compares rows that were not judged ok (8 contended)" in done.stdout


def test_migrate_prints_its_answer_alone_with_a_short_secret_in_the_warehouse_connection(tmp_path, var_dir):
    """Airflow warns of a connection secret too short to mask in a task log; bench migrate has no task log: its
    output is the answer line alone, whatever the connection holds."""
    conn = {"conn_type": "duckdb", "host": str(tmp_path / "short.duckdb"), "password": "pw"}
    env = {**os.environ, "AIRFLOW_CONN_BENCH_WAREHOUSE": json.dumps(conn)}
    result = subprocess.run([BENCH, "migrate"], capture_output=True, text=True, cwd=PROJECT_ROOT, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    said = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(said) == 1 and said[0].startswith(f"{tmp_path / 'short.duckdb'}: 0001_init.sql"), said
