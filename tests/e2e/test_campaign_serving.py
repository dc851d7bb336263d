"""serving_local end to end with the real clients: tiny MoE servers (one, and a prefill/decode pair behind
sglang-router in PD mode) swept by SGLang's ``bench_serving`` (and vLLM's ``bench serve``) from the host
environment (.venv-host), on the local host and over SSH; the loaded rows against the clients' own JSON; and a
server that dies before it is healthy."""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
from pathlib import Path

import pytest

from benchflow.remote import layout
from benchflow.warehouse import Warehouse
from tests.conftest import PROJECT_ROOT, live_group_members
from tests.e2e.conftest import campaign_dags, on_free_ports, run_dag

pytestmark = pytest.mark.e2e

SPEC = (PROJECT_ROOT / "include" / "campaigns" / "serving_local.yaml").read_text()
assert "  args:\n" in SPEC
TWICE = SPEC.replace("  args:\n", "  repeats: 2\n  args:\n")  # each phase twice, back to back
ONCE = SPEC.replace("  args:\n", "  repeats: 1\n  args:\n")
BROKEN = textwrap.dedent(
    """\
    description: one config whose server dies, then a healthy one
    kind: serving
    host: local
    payload: serving
    requires: [moe]
    services:
      - name: gpu_holder
        stop: "echo stopped >> services.log"
        start: "echo started >> services.log"
    configs:
      - name: broken
        servers:
          - name: engine
            command: "{python} -c 'import sys; print(\\"RuntimeError: CUDA out of memory\\"); sys.exit(1)'"
            port: 30110
      - name: single
        servers:
          - name: engine
            command: "{python} server.py --port {port}"
            port: 30111
    benchmark:
      script: sweep.py
      repeats: 1
      args: {client: local, concurrency: [1, 2], prompts: [2, 2], input_len: 8, output_len: 4}
    timeouts: {server_ready: 60, benchmark: 300, poke_interval: 1}
    """
)


# vLLM's client at three request rates (Poisson arrivals) on a ShareGPT-format file the test makes, shipped with the
# payload: the single config only (the PD pair is the SSH case's)
assert "    concurrency: [1, 4, 8]\n    prompts: [8, 16, 32]\n" in SPEC
RATES = (
    ONCE.replace("client: sglang", "client: vllm")
    .replace(
        "    concurrency: [1, 4, 8]\n    prompts: [8, 16, 32]\n",
        "    request_rate: [4, 8, 16]\n    prompts: [8, 8, 8]\n",
    )
    .replace("  repeats: 1\n", "  repeats: 1\n  dataset: {name: sharegpt, file: chat.json}\n")
)


def sharegpt_file(folder: Path) -> Path:
    """40 two-turn conversations of 8 to 30 words, ShareGPT's format."""
    import random

    rng, words = random.Random(1), "the a model kernel token prefill decode batch cache server latency".split()
    turns = [
        [
            {"from": who, "value": " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))}
            for who in ("human", "gpt")
        ]
        for _ in range(40)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "chat.json"
    path.write_text(json.dumps([{"id": f"c{n}", "conversations": t} for n, t in enumerate(turns)]))
    return path


@pytest.fixture(scope="module")
def bag(tmp_path_factory, airflow_db, sshd):
    specs = {
        "serving_local": TWICE,
        "serving_local_ssh": ONCE.replace("host: local", "host: gpu_loopback"),
        "serving_local_vllm": RATES,
        "serving_broken": BROKEN,
    }
    specs = dict(zip(specs, on_free_ports(*specs.values()), strict=True))
    datasets = sharegpt_file(tmp_path_factory.mktemp("datasets")).parent
    saved = os.environ.get("BENCH_DATASETS_DIR")
    os.environ["BENCH_DATASETS_DIR"] = str(datasets)  # read when the DAGs are built: the file and its sha256
    try:
        with campaign_dags(tmp_path_factory.mktemp("serving"), specs) as dags:
            yield dags
    finally:
        os.environ.pop("BENCH_DATASETS_DIR") if saved is None else os.environ.update(BENCH_DATASETS_DIR=saved)


run = run_dag


def serving_rows(run_id):
    return Warehouse.from_airflow().query(
        "SELECT config, concurrency, repeat, warmup, num_prompts, completed, failed, input_len, output_len, "
        "total_output_tokens, duration_s, output_throughput, mean_ttft_ms, mean_e2e_ms FROM serving_results "
        "WHERE run_id = ? ORDER BY config, concurrency, repeat",
        [run_id],
    )


def servers_gone(workdir: Path, dag_id: str, run_id: str, jobs: list[str]) -> bool:
    rundir = Path(layout.run_dir(str(workdir), dag_id, run_id))
    pgids = [int((rundir / job / "pid").read_text()) for job in jobs]
    return all(live_group_members(pgid) == [] for pgid in pgids)


SERVER_JOBS = ["server_single_engine", "server_pd_prefill", "server_pd_decode", "server_pd_router"]
SWEEP = {"concurrency": [1, 4], "prompts": [8, 16]}  # two levels of the spec's three: a shorter test


def client_records(rundir: Path) -> dict[tuple[str, int, int], dict]:
    """What the client itself wrote, per (config, concurrency, repeat): the sweep's --out JSON lines."""
    records = [json.loads(line) for line in (rundir / "results.jsonl").read_text().splitlines()]
    return {(r["tag"], r["max_concurrency"], r["repeat"]): r for r in records}


# The first case's run is also a manual trigger with a new config: the sweep's levels, output length and the
# servers' own arguments come from its conf (the servers print what they were started with).
NEW_CONFIG = {**SWEEP, "output_len": 40, "server_args": "--layers 3 --hidden 192"}


@pytest.mark.parametrize(
    ("campaign", "workdir", "repeats", "conf"),
    [
        ("serving_local", "local", 2, NEW_CONFIG),
        ("serving_local_ssh", "ssh", 1, {**SWEEP, "configs": ["pd"]}),  # one config per run (its configs param)
    ],
)
def test_the_real_clients_rows_match_their_own_json(bag, sshd, var_dir, campaign, workdir, repeats, conf):
    run_id, state, tasks = run(bag, campaign, conf=conf)
    assert state == "success", tasks
    rows = serving_rows(run_id)
    configs = conf.get("configs") or ["pd", "single"]
    expected = [(c, level, n, r) for c in configs for level, n in ((1, 8), (4, 16)) for r in range(1, repeats + 1)]
    assert list(zip(rows["config"], rows["concurrency"], rows["num_prompts"], rows["repeat"], strict=True)) == expected
    assert not rows["warmup"].any()
    assert (rows["completed"] == rows["num_prompts"]).all()
    assert (rows["input_len"] == 64).all() and (rows["output_len"] == conf.get("output_len", 32)).all()
    assert (rows["mean_ttft_ms"] <= rows["mean_e2e_ms"]).all()
    host_workdir = var_dir / "hosts" / "local" if workdir == "local" else sshd.workdir
    rundir = Path(layout.run_dir(str(host_workdir), f"bench_{campaign}", run_id))
    records = client_records(rundir)
    for row in rows.itertuples(index=False):
        record = records[(row.config, row.concurrency, row.repeat)]  # the client's own figures, full precision
        assert row.completed == record["completed"] and row.total_output_tokens == record["total_output_tokens"]
        assert row.output_throughput == pytest.approx(record["output_throughput"], rel=0.02)
        # the log prints the duration to 0.01 s: the true one lies within half of that, and so does the rate
        low = row.total_output_tokens / (row.duration_s + 0.005) - 0.01
        high = row.total_output_tokens / max(row.duration_s - 0.005, 1e-9) + 0.01
        assert low <= row.output_throughput <= high, (row.output_throughput, row.total_output_tokens, row.duration_s)
    status = Warehouse.from_airflow().query("SELECT status FROM runs WHERE run_id = ?", [run_id])["status"].tolist()
    assert status == ["ok"]
    requests = Warehouse.from_airflow().query(
        "SELECT config, concurrency, repeat, count(*) AS n, sum(CASE WHEN ok THEN 1 ELSE 0 END) AS ok, "
        "max(CASE WHEN ttft_ms <= e2e_ms THEN 0 ELSE 1 END) AS bad FROM serving_requests WHERE run_id = ? "
        "GROUP BY config, concurrency, repeat ORDER BY config, concurrency, repeat",
        [run_id],
    )
    assert requests["n"].tolist() == rows["num_prompts"].tolist() == requests["ok"].tolist()
    assert requests["bad"].sum() == 0
    assert servers_gone(
        host_workdir, f"bench_{campaign}", run_id, [j for j in SERVER_JOBS if j.split("_")[1] in configs]
    )
    size = "layers 3, hidden 192" if "server_args" in conf else "layers 4, hidden 256"
    launched = {"server_single_engine": "both", "server_pd_prefill": "prefill", "server_pd_decode": "decode"}
    for job, role in launched.items():
        if job.split("_")[1] not in configs:  # a config the run left out: its task group skipped, nothing started
            assert not (rundir / job).exists() and tasks[f"config_{job.split('_')[1]}.launch_servers"] == "skipped"
            continue
        log = (rundir / job / "stdout.log").read_text()
        assert f"serving tiny MoE decoder ({role}, {size})" in log, log


def test_vllm_at_three_request_rates_on_a_shipped_sharegpt_file(bag, var_dir):
    """Rows keyed by rate (no concurrency cap), each with the rate it achieved and the dataset's sha256, which the
    driver checked on the host before its first phase; the file went with the payload."""
    run_id, state, tasks = run(bag, "serving_local_vllm", conf={"configs": ["single"]})
    assert state == "success", tasks
    rows = Warehouse.from_airflow().query(
        "SELECT config, concurrency, request_rate, repeat, completed, achieved_rate, rate_reached, burstiness, "
        "dataset, dataset_sha256, achieved_input_len FROM serving_results WHERE run_id = ? ORDER BY request_rate",
        [run_id],
    )
    assert rows["request_rate"].tolist() == [4.0, 8.0, 16.0] and rows["concurrency"].isna().all()
    assert (rows["completed"] == 8).all() and (rows["burstiness"] == 1.0).all()
    assert (rows["achieved_rate"] > 0).all(), rows  # from vLLM's saved start times
    rundir = Path(layout.run_dir(str(var_dir / "hosts" / "local"), "bench_serving_local_vllm", run_id))
    shipped = rundir / "payload" / "datasets" / "chat.json"
    sha = hashlib.sha256(shipped.read_bytes()).hexdigest()
    assert set(rows["dataset"]) == {"sharegpt:chat.json"} and set(rows["dataset_sha256"]) == {sha}
    assert rows["achieved_input_len"].between(8, 400).all()  # conversations' first turns, not input_len
    keys = Warehouse.from_airflow().query(
        "SELECT DISTINCT case_key FROM metric_samples WHERE run_id = ? AND metric = 'output_throughput' ORDER BY 1",
        [run_id],
    )["case_key"]
    assert keys.tolist() == [f"config=single,request_rate={q}" for q in (16, 4, 8)]


def test_server_that_dies_fails_its_config_with_its_log_and_the_next_config_still_runs(bag, var_dir):
    run_id, state, tasks = run(bag, "serving_broken")
    assert state == "failed"
    assert tasks["config_broken.servers_ready"] == "failed"
    (detail,) = Warehouse.from_airflow().query("SELECT detail FROM runs WHERE run_id = ?", [run_id])["detail"]
    # what the server said, first in the run's detail (the task log says it too; a busy machine may flush it late)
    assert detail.startswith("config broken did not run: server server_broken_engine is not running (exit 1)"), detail
    assert "CUDA out of memory" in detail
    assert tasks["config_broken.stop_servers"] == "success"
    assert tasks["config_single.wait_done"] == "success"
    rows = serving_rows(run_id)
    assert list(zip(rows["config"], rows["concurrency"], strict=True)) == [("single", 1), ("single", 2)]
    assert Warehouse.from_airflow().query("SELECT status FROM runs WHERE run_id = ?", [run_id])["status"].tolist() == [
        "incomplete"
    ]
    services = var_dir / "hosts" / "local" / "services.log"
    assert services.read_text().split() == ["stopped", "started"]
    services.unlink()
