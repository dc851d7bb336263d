"""``bench search`` end to end on this machine: a config space of 5 configs of the tiny server with a known
capacity (a batch limit of B sequences per 80 ms step: TPOT is 80 ms up to concurrency B and 160 ms above, so the
most concurrency within a P90 TPOT of 70 ms is B, and per GPU B / GPUs; the GPUs are declared per server). Each
probe is a real ``bench run`` of the campaign with the round's configs and probe settings, the real load search
on the host. What is checked: the search names the true best (g1_b8, 8 per GPU) with fewer probe runs and prompts
than the full grid, the others are worse (their intervals below the best's), the config whose server refuses its
flags is recorded as failed with the server's own words, and the ranking, the Pareto front and the winner's
config block are in the warehouse."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from benchflow.warehouse import Warehouse, queries
from tests.conftest import PROJECT_ROOT
from tests.e2e.conftest import PAYLOADS, on_free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # two bench runs, the first of five configs
BENCH = Path(sys.executable).parent / "bench"
SPEC = textwrap.dedent(
    """\
    description: a config space of the tiny server, GPUs x batch limit, one config that cannot start
    kind: serving
    host: local
    payload: serving
    requires: [moe]
    schedule: null
    space:
      dimensions: {gpus: [1, 2], max_batch: [0, 4, 8]}
      derived: {last_gpu: "gpus - 1"}
      constraints: ["max_batch > 0 or gpus == 1", "max_batch >= gpus or max_batch == 0"]
      name: "g{gpus}_b{max_batch}"
      servers:
        - name: engine
          command: "{python} server.py --layers 1 --hidden 32 --max-batch {max_batch} --step-ms 80 --port {port}"
          port: 30170
          gpus: "0-{last_gpu}"
      price: {gpu_hour: 2.0}
    benchmark:
      script: sweep.py
      search:
        over: concurrency
        range: [2, 16]
        slo: {p80_tpot_ms: 150, max_failed_fraction: 0.2}
        precision: 0.1
        prompts_per_probe: 60
        repeats: 1
        budget: {probes: 12, seconds: 300}
      args: {client: local, input_len: 16, output_len: 4}
    timeouts: {server_ready: 120, benchmark: 900, poke_interval: 1}
    """
)


@pytest.fixture(scope="module")
def env(tmp_path_factory, airflow_db):
    root = tmp_path_factory.mktemp("space")
    (root / "specs").mkdir()
    (root / "specs" / "space_e2e.yaml").write_text(on_free_ports(SPEC)[0])
    (root / "kernels").mkdir()
    for name in ("serving", "moe"):
        os.symlink(PAYLOADS[name], root / "kernels" / name)
    return {
        **os.environ,
        "BENCH_CAMPAIGNS_DIR": str(root / "specs"),
        "BENCH_KERNELS_DIR": str(root / "kernels"),
        "PYTHONUNBUFFERED": "1",
    }


def test_the_search_names_the_true_best_with_less_than_the_grid_and_keeps_the_config_that_crashed(env):
    listed = subprocess.run(
        [str(BENCH), "validate", str(Path(env["BENCH_CAMPAIGNS_DIR"]) / "space_e2e.yaml")],
        env=env, capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT,
    )  # fmt: skip
    assert "space: 5 configs kept, 1 excluded (6 combinations)" in listed.stdout, listed
    assert "exclude  constraint 'max_batch > 0 or gpus == 1' is false at gpus=2, max_batch=0" in listed.stdout
    done = subprocess.run(
        [str(BENCH), "search", "space_e2e"], env=env, capture_output=True, text=True, timeout=900, cwd=PROJECT_ROOT
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    out = done.stdout
    warehouse = Warehouse.from_airflow()
    (search,) = queries.config_searches(warehouse, "space_e2e").to_dict("records")
    assert (search["status"], search["best"], search["configs"], search["excluded"]) == ("done", "g1_b8", 5, 1), out
    ranking = queries.config_search_configs(warehouse, search["dag_id"], search["run_id"])
    rows = {r["config"]: r for r in ranking.to_dict("records")}
    assert rows["g1_b8"]["rank"] == 1 and rows["g1_b8"]["verdict"] == "best"
    # at the spec's own settings: 8 on a quiet machine; on a busy one the steps' computing (B model passes) can push
    # TPOT past the SLO at 7 or 8, never under it at 9 (two steps, 160 ms)
    assert 6 <= rows["g1_b8"]["load_per_gpu_low"] <= 8 and rows["g1_b8"]["level"] == 2, rows["g1_b8"]
    worse = [r for r in rows.values() if r["verdict"] == "worse"]
    assert len(worse) == 3 and all(r["load_per_gpu_high"] < 8 for r in worse), ranking.to_dict("records")
    assert rows["g1_b0"]["verdict"] == "failed" and "--max-batch needs B >= 1" in rows["g1_b0"]["error"], rows["g1_b0"]
    # spent where the answer was decided: every config once, cheaply (round 1); then one level finer only the configs
    # whose interval still reached the leader's (on a busy machine the cheap level's noise can keep one in for a round),
    # and last the leader alone at the spec's settings
    whole = queries.config_search(warehouse, search["dag_id"], search["run_id"]).iloc[0]
    result = json.loads(whole["result"])
    rounds_of = {r["config"]: r["rounds"] for r in result["ranking"]}
    last = search["rounds"]
    assert all(rounds[0] == 1 for rounds in rounds_of.values()) and 2 <= last <= 3, rounds_of
    assert rounds_of["g1_b8"][-1] == last and all(last not in r for n, r in rounds_of.items() if n != "g1_b8")
    assert rounds_of["g1_b0"] == [1] and search["probes"] == sum(len(r) for r in rounds_of.values())
    assert search["prompts"] < search["grid_prompts"] and search["search_probes"] < search["grid_probes"], search
    # figures only where a load passed (a busy machine can fail a worse config's low end): per GPU, the best gives
    # more tokens/s than every worse config that held a load, and none is claimed for one that held none
    held = [r for r in worse if not math.isnan(r["pass_load"])]
    best_tokens, records = rows["g1_b8"]["tokens_per_s_per_gpu"], ranking.to_dict("records")
    assert held and all(best_tokens > r["tokens_per_s_per_gpu"] > 0 for r in held), records
    assert all(math.isnan(r["tokens_per_s_per_gpu"]) for r in worse if r not in held), records
    assert rows["g1_b8"]["cost_per_mtok"] > 0 and rows["g1_b8"]["pareto"]
    block = yaml.safe_load(whole["winner_yaml"])["configs"][0]
    assert block["name"] == "g1_b8" and "--max-batch 8" in block["servers"][0]["command"]
    assert result["best"] == "g1_b8" and "g1_b8" in result["pareto"]
    # what bench search printed: the rounds, the ranking, the spend against the grid, the winner
    assert "round 1: best g1_b8: " in out and "round 2: best g1_b8: " in out, out
    low, high = (rows["g1_b8"][f"load_per_gpu_{end}"] for end in ("low", "high"))
    said = f"{low:g}" if low == high else f"{low:g}–{high:g}"
    spend = f"3 worse, 1 failed; {last} rounds, {search['probes']} probe runs"
    assert f"config search: best g1_b8: {said} load per GPU (1 GPU); {spend}" in out
    assert "failed: run " in out and "the full grid at the spec's settings: up to" in out
    assert "the winner, as a config block for a nightly spec:" in out
