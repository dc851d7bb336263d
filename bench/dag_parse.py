"""What parsing the campaign DAGs costs, against Airflow's own floor, side by side in one run.

For N = 10, 100, 1000 generated specs (copies of ``include/campaigns/moe_kernel_local.yaml``), it times
``DagBag`` on the campaign files as the dag-processor parses them (``dags/campaigns.py``, which builds every DAG,
and ``dags/campaign_errors.py``, which reads and checks every spec) and on a file that builds N DAGs of
EmptyOperators with the same task count and the same dependencies, each in a fresh interpreter (imports
excluded: both import Airflow first), median of ``--repeat`` runs, and prints both and their ratio; then what a
worker's parse for one task of one campaign costs (Airflow's parsing context names the DAG: one spec built).

    .venv/bin/python bench/dag_parse.py [--sizes 10,100,1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "include" / "campaigns" / "moe_kernel_local.yaml"

PROBE = textwrap.dedent(
    """
    import json, sys, time
    import airflow.sdk, airflow.providers.ssh.hooks.ssh  # imports are not what is measured
    from airflow.dag_processing.dagbag import DagBag
    import benchflow.factory, benchflow.spec
    start = time.perf_counter()
    bag = DagBag(dag_folder=sys.argv[1])
    elapsed = time.perf_counter() - start
    tasks = sum(len(d.tasks) for d in bag.dags.values())
    edges = {d: sorted((t.task_id, u) for t in bag.dags[d].tasks for u in t.downstream_task_ids) for d in bag.dags}
    errors = list(bag.import_errors.values())[:1]
    print(json.dumps({"s": elapsed, "dags": len(bag.dags), "tasks": tasks, "errors": errors,
                      "shape": edges[sorted(edges)[0]] if edges else []}))
    """
)

FLOOR = textwrap.dedent(
    """
    import json
    from datetime import datetime
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    SHAPE = json.loads({shape!r})
    for n in range({n}):
        with DAG(f"floor_{{n}}", schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False) as dag:
            ops = {{t: EmptyOperator(task_id=t) for t in sorted({{t for edge in SHAPE for t in edge}})}}
            for up, down in SHAPE:
                ops[up] >> ops[down]
        globals()[dag.dag_id] = dag
    """
)


def probe(folder: Path, env: dict[str, str]) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(folder)], capture_output=True, text=True, env=env, timeout=1800, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(folder: Path, env: dict[str, str], repeat: int) -> tuple[float, dict]:
    runs = [probe(folder, env) for _ in range(repeat)]
    return statistics.median(r["s"] for r in runs), runs[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dag-parse-"))
    base = {
        **os.environ,
        "AIRFLOW_HOME": str(work / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{work}/airflow.db",
    }
    text = SPEC.read_text()
    print(f"{'N':>5} {'campaigns (s)':>14} {'floor (s)':>10} {'ratio':>6} {'tasks':>7} {'one task (s)':>13}")
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            specs = work / f"specs_{n}"
            specs.mkdir()
            for i in range(n):
                (specs / f"camp_{i:04d}.yaml").write_text(text)
            dags = work / f"dags_{n}"
            dags.mkdir()
            for name in ("campaigns.py", "campaign_errors.py"):
                shutil.copy(ROOT / "dags" / name, dags / name)
            ours_s, ours = measure(dags, {**base, "BENCH_CAMPAIGNS_DIR": str(specs)}, args.repeat)
            assert ours["dags"] == n and not ours["errors"], ours
            one = {**base, "BENCH_CAMPAIGNS_DIR": str(specs), "_AIRFLOW_PARSING_CONTEXT_DAG_ID": "bench_camp_0000"}
            task_s, task = measure(dags, one, args.repeat)
            assert task["dags"] == 1, task
            floor_dir = work / f"floor_{n}"
            floor_dir.mkdir()
            (floor_dir / "floor.py").write_text(FLOOR.format(n=n, shape=json.dumps(ours["shape"])))
            floor_s, floor = measure(floor_dir, base, args.repeat)
            if floor["errors"]:
                raise RuntimeError(floor)
            assert floor["dags"] == n and floor["tasks"] == ours["tasks"], (floor, ours["tasks"])
            ratio = ours_s / floor_s
            print(
                f"{n:>5} {ours_s:>14.3f} {floor_s:>10.3f} {ratio:>5.2f}x {ours['tasks']:>7} {task_s:>13.3f}", flush=True
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
