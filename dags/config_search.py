"""The config search DAG (Airflow): which config of a campaign's config space holds the most load per GPU within
its SLO.

Triggered with ``{campaign}`` (a serving campaign whose spec has ``space:`` and a load search). Its steps are tasks
(the behaviour is :mod:`benchflow.config_search_steps`):

    start → round_1_plan → round_1_probe[*] → round_1 → round_2_plan → … → finish

Round 1 measures every config with cheap probes; each later round measures again, with more prompts and a finer
precision, only the configs whose load per GPU may still be the best. A probe is a run of the campaign's own DAG
with some of its configs and the round's probe settings (``TriggerDagRunOperator``, deferred while it waits): one
per host of the campaign's pool at a time, so the probes of a round run side by side, each holding its host's
lease with the campaign's timeouts and teardowns. Once the answer is decided the remaining rounds are skipped and
``finish`` writes the ranking, the Pareto front and the winner as a config block.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Param, TriggerRule, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from benchflow.config_search_steps import DAG_ID, MAX_ROUNDS, PARAMS, POKE_S


def _warehouse() -> Any:
    from benchflow.warehouse import Warehouse

    return Warehouse.from_airflow()


def _plan(state: dict[str, Any] | None, **context: Any) -> list[dict[str, Any]]:
    from benchflow import config_search_steps

    if state is None:
        raise AirflowSkipException("no state: an earlier step did not run")
    planned = config_search_steps.plan(state, context["run_id"])
    if not planned["probes"]:
        raise AirflowSkipException("nothing left to probe: finish says why")
    for probe in planned["probes"]:
        print(f"probe run {probe['trigger_run_id']}: conf {probe['conf']}")
    context["ti"].xcom_push(key="state", value=planned["state"])
    return planned["probes"]


def _record(number: int, **context: Any) -> dict[str, Any]:
    from benchflow import config_search_steps

    ti = context["ti"]
    planned = {
        "state": ti.xcom_pull(task_ids=f"round_{number}_plan", key="state"),
        "probes": ti.xcom_pull(task_ids=f"round_{number}_plan"),
    }
    result = config_search_steps.record(planned, _warehouse(), context["dag"].dag_id, context["run_id"])
    from benchflow.analysis.config_search import ConfigSearch

    print(ConfigSearch.from_json(result).summary(ConfigSearch.from_json(result).leader()))
    return result


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,
    tags=["bench", "config-search"],
    doc_md=__doc__,
    params={name: Param(default, **schema) for name, (default, schema) in PARAMS.items()},
    dagrun_timeout=timedelta(days=7),
) as dag:

    @task
    def start(**context: Any) -> dict[str, Any]:
        from benchflow import config_search_steps
        from benchflow.params import ConfError

        try:
            state = config_search_steps.start(dict(context["params"]), _warehouse())
        except ConfError as exc:
            raise AirflowFailException(str(exc)) from None
        meta = state["meta"]
        print(f"{meta['campaign']}: {len(state['gpus'])} configs, {len(meta['excluded'])} excluded by constraints")
        for name, source in state["reused"].items():
            print(f"reused {name}: {source}")
        return state

    previous: Any = start()
    records: list[Any] = [previous]
    for number in range(1, MAX_ROUNDS + 1):
        plan = task(task_id=f"round_{number}_plan")(_plan)(previous)
        probe = TriggerDagRunOperator.partial(
            task_id=f"round_{number}_probe",
            wait_for_completion=True,
            deferrable=True,
            poke_interval=POKE_S,
            allowed_states=["success", "failed"],  # a failed probe run still loaded what it measured
            failed_states=[],
            trigger_rule=TriggerRule.ALL_SUCCESS,
        ).expand_kwargs(plan)
        recorded = task(task_id=f"round_{number}", trigger_rule=TriggerRule.ALL_DONE_MIN_ONE_SUCCESS)(_record)(number)
        plan >> probe >> recorded
        records.append(recorded)
        previous = recorded

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def finish(**context: Any) -> dict[str, Any]:
        from benchflow import config_search_steps

        ti = context["ti"]
        ids = ["start", *(f"round_{n}" for n in range(1, MAX_ROUNDS + 1))]
        states = [s for s in ti.xcom_pull(task_ids=ids) if s]
        if not states:
            raise AirflowFailException("the search never started: see the start task's log")
        result = config_search_steps.finish(states[-1], _warehouse(), context["dag"].dag_id, context["run_id"])
        print(result["summary"])
        return {k: v for k, v in result.items() if k not in ("ranking", "excluded")}

    records >> finish()
