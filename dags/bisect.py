"""The bisect DAG (Airflow): which payload commit made a campaign's case slower.

Triggered with ``{campaign, case, metric, good, bad}`` (the Benchmarks view offers it on every regression,
pre-filled). Its steps are tasks (the behaviour is :mod:`benchflow.bisect_steps`):

    start → confirm_plan → confirm_probe[*] → confirm → narrow_1_plan → narrow_1_probe[*] → narrow_1 → … → decide

``confirm`` measures good and bad; unless bad is worse beyond noise it ends ``not reproduced`` with that
evidence. Each narrow round probes the commits that split the suspect range, one mapped probe per commit (as
many at once as the campaign has hosts; one at a time on one host). A probe is a run of the campaign's own DAG
at that commit, only the regressed case, with repeats (``TriggerDagRunOperator``, deferred while it waits), so
the host lease, the timeouts and the teardowns are those of any campaign run. Once the search is over the
remaining rounds are skipped and ``decide`` writes the first bad commit (with its ratio and interval against its
parent), or the narrowest range the budget allowed. Commits that earlier valid runs measured are reused, free.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Param, TriggerRule, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from benchflow.bisect_steps import MAX_ROUNDS, PARAMS, POKE_S

DAG_ID = "bench_bisect"


def _warehouse() -> Any:
    from benchflow.warehouse import Warehouse

    return Warehouse.from_airflow()


def _plan(state: dict[str, Any] | None, **context: Any) -> list[dict[str, Any]]:
    from benchflow import bisect_steps

    if state is None:
        raise AirflowSkipException("no state: an earlier step did not run")
    planned = bisect_steps.plan(state, context["run_id"])
    if not planned["probes"]:
        raise AirflowSkipException("nothing left to probe: decide says why")
    for probe in planned["probes"]:
        print(f"probe {probe['conf']['payload_ref'][:12]}: run {probe['trigger_run_id']} conf {probe['conf']}")
    context["ti"].xcom_push(key="state", value=planned["state"])
    _show(planned["state"], context)
    return planned["probes"]


def _show(state: dict[str, Any], context: dict[str, Any]) -> None:
    """The bisection as it stands, in the warehouse: the Benchmarks view shows it, probe runs under way included."""
    from benchflow import bisect_steps
    from benchflow.analysis.bisect_search import Bisection

    bisect_steps.save(Bisection.from_json(state), _warehouse(), context["dag"].dag_id, context["run_id"])


def _record(number: int, **context: Any) -> dict[str, Any]:
    from benchflow import bisect_steps

    ti = context["ti"]
    planned = {
        "state": ti.xcom_pull(task_ids=f"{_prefix(number)}_plan", key="state"),
        "probes": ti.xcom_pull(task_ids=f"{_prefix(number)}_plan"),
    }
    state = bisect_steps.record(planned, _warehouse(), context["dag"].dag_id, context["run_id"])
    from benchflow.analysis.bisect_search import Bisection

    result = Bisection.from_json(state).result()
    for link in result["chain"]:
        print(f"{link['sha'][:12]} {link['verdict']:<13} n={link['n']} {link['reason']}")
    print(result["summary"])
    return state


def _prefix(number: int) -> str:
    return "confirm" if number == 0 else f"narrow_{number}"


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,
    tags=["bench", "bisect"],
    doc_md=__doc__,
    params={name: Param(default, **schema) for name, (default, schema) in PARAMS.items()},
    dagrun_timeout=timedelta(days=7),
) as dag:

    @task
    def start(**context: Any) -> dict[str, Any]:
        from benchflow import bisect_steps

        try:
            state = bisect_steps.start(dict(context["params"]), _warehouse())
        except bisect_steps.ConfError as exc:
            raise AirflowFailException(str(exc)) from None
        meta = state["meta"]
        if getattr(context["ti"].get_dag(meta["campaign_dag_id"]), "is_paused", False):  # unpaused as the run starts
            raise AirflowFailException(
                f"{meta['campaign_dag_id']} is paused, so the probe runs this bisection triggers would wait unstarted:"
                f" unpause it (its toggle in the UI, or `airflow dags unpause {meta['campaign_dag_id']}`) and trigger"
                " again"
            )
        _show(state, context)
        print(f"{meta['campaign']} {meta['case']} {meta['metric']}: {len(state['commits'])} commits after good")
        for sha, source in state["reused"].items():
            print(f"reused {sha[:12]}: {source}")
        return state

    previous: Any = start()
    records: list[Any] = [previous]
    for number in range(MAX_ROUNDS + 1):
        prefix = _prefix(number)
        plan = task(task_id=f"{prefix}_plan")(_plan)(previous)
        probe = TriggerDagRunOperator.partial(
            task_id=f"{prefix}_probe",
            wait_for_completion=True,
            deferrable=True,
            poke_interval=POKE_S,
            allowed_states=["success"],
            failed_states=["failed"],
            trigger_rule=TriggerRule.ALL_SUCCESS,
        ).expand_kwargs(plan)
        recorded = task(task_id=prefix, trigger_rule=TriggerRule.ALL_DONE_MIN_ONE_SUCCESS)(_record)(number)
        plan >> probe >> recorded
        records.append(recorded)
        previous = recorded

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def decide(**context: Any) -> dict[str, Any]:
        from benchflow import bisect_steps

        ti = context["ti"]
        ids = ["start", *(_prefix(n) for n in range(MAX_ROUNDS + 1))]
        states = [s for s in ti.xcom_pull(task_ids=ids) if s]
        if not states:
            raise AirflowFailException("the bisection never started: see the start task's log")
        result = bisect_steps.decide(states[-1], _warehouse(), context["dag"].dag_id, context["run_id"])
        print(result["summary"])
        for note in result["notes"]:
            print(f"note: {note}")
        return {k: v for k, v in result.items() if k != "chain"}

    records >> decide()
