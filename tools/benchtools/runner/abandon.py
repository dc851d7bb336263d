"""``bench down``'s last step, once the stack's processes are stopped: every campaign run still queued or running
(a benchmark in its deferred wait, say) would otherwise stay so, its benchmark running on the host and the host's
services stopped, with no triggerer or scheduler left to end it. For each, what its teardowns would have done is
done here (:func:`benchflow.remote.cleanup.undo_started`: the same clean-up ``bench run`` does on Ctrl-C: end the
benchmark's process group, stop servers, restore the services, release the host), then the run and its unfinished
tasks are marked failed through Airflow's models.

    python -m benchtools.runner.abandon        (in the stack's environment: its metadata DB)
"""

from __future__ import annotations

import sys


def main() -> int:
    from benchflow.factory import build_dag
    from benchflow.remote.cleanup import undo_started
    from benchflow.spec import load_all
    from benchtools.runner import metadata
    from benchtools.runner.watch import STARTED

    specs, _ = load_all()
    by_dag = {spec.dag_id: spec for spec in specs}
    failed = 0
    for dag_id, run_id in metadata.unfinished_runs(sorted(by_dag)):
        print(f"run {run_id} of {dag_id} was still going: undoing what it started on its host", flush=True)
        states = {task_id: state for task_id, state, _, _ in metadata.task_states(dag_id, run_id)}
        host = metadata.run_host(dag_id, run_id) or by_dag[dag_id].host  # where the run ran
        problems = undo_started(
            build_dag(by_dag[dag_id]), run_id, states, lambda line: print(f"  {line}", flush=True), STARTED, host
        )
        tasks = metadata.mark_failed(dag_id, run_id)
        failed += bool(problems)
        note = f"; {len(problems)} clean-up step(s) failed: {', '.join(problems)}" if problems else ""
        print(f"  run {run_id} marked failed ({tasks} unfinished task(s)){note}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
