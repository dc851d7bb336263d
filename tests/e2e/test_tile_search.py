"""``bench tune`` end to end on this machine: the tile search over a kernel campaign of the stand-in kernel
(tests/fixtures/payloads/tiles: a modelled time per call whose best tile, BLOCK_M=32 BLOCK_N=64 BLOCK_K=128, is
known; 3 % noise from a fresh seed each run). Each probe is a real ``bench run`` of the campaign with one tile: the
search names the known best tile, ranks no tile below it that the values cannot tell apart from it, and its answer
is in the warehouse's ``searches`` and ``search_keys``, as every strategy's is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchflow.warehouse import Warehouse, queries
from tests.conftest import FIXTURES, PROJECT_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # five bench runs, maybe a few more
BENCH = Path(sys.executable).parent / "bench"
BEST = "BLOCK_M=32,BLOCK_N=64,BLOCK_K=128,GROUP_M=1,num_warps=4,num_stages=3"
OTHERS = [
    BEST.replace("BLOCK_M=32", "BLOCK_M=16"),  # 1.25 x the best's time
    BEST.replace("BLOCK_N=64", "BLOCK_N=32"),  # 1.25 x
    BEST.replace("BLOCK_K=128", "BLOCK_K=64"),  # 1.15 x
    "BLOCK_M=64,BLOCK_N=128,BLOCK_K=256,GROUP_M=1,num_warps=4,num_stages=3",  # 1.65 x
]
SPEC = textwrap.dedent(
    """\
    description: the stand-in kernel whose best tile is known, one token count per run
    kind: kernel
    host: local
    payload: tiles
    schedule: null
    telemetry: {enabled: false}
    benchmark:
      script: bench_tiles.py
      args: {m_list: [64], iters: 3, noise: 0.03, tile: ""}
    timeouts: {benchmark: 120, poke_interval: 1}
    """
)


@pytest.fixture(scope="module")
def env(tmp_path_factory, airflow_db):
    root = tmp_path_factory.mktemp("tiles")
    (root / "specs").mkdir()
    (root / "specs" / "tiles_e2e.yaml").write_text(SPEC)
    (root / "kernels").mkdir()
    os.symlink(FIXTURES / "payloads" / "tiles", root / "kernels" / "tiles")
    return {**os.environ, "BENCH_CAMPAIGNS_DIR": str(root / "specs"), "BENCH_KERNELS_DIR": str(root / "kernels")}


def test_the_tile_search_names_the_known_best_tile_of_the_stand_in_kernel(env):
    conf = {"tiles": [*OTHERS[:2], BEST, *OTHERS[2:]], "repeats": 3, "max_samples": 6}
    command = [str(BENCH), "tune", "tiles_e2e", "--case", "m=64", "--conf", json.dumps(conf)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=800, cwd=PROJECT_ROOT)
    said = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, said
    assert f"tile search: best {BEST}" in done.stdout, said
    warehouse = Warehouse.from_airflow()
    (row,) = [r for r in queries.searches(warehouse, "tiles_e2e").to_dict("records")]
    assert (row["strategy"], row["status"], row["best"]) == ("tiles", "done", BEST), row["summary"]
    keys = queries.search_keys(warehouse, row["dag_id"], row["run_id"]).to_dict("records")
    assert keys[0]["key"] == BEST and keys[0]["verdict"] == "best" and len(keys) == 5, keys
    # every other tile is slower by at least 15 %: the values tell each apart from the best, and it is ranked below
    assert all(k["verdict"] == "worse" and k["value"] > keys[0]["value"] for k in keys[1:]), keys
    assert all(len(json.loads(k["probe_runs"])) >= 1 for k in keys)  # each measured by its own bench runs
