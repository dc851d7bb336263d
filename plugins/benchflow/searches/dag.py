"""The DAG of a search (Airflow): one builder for every strategy (``dags/bisect.py``, ``dags/config_search.py``).

    start → round_1_plan → round_1_probe[*] → round_1 → round_2_plan → … → finish

``start`` checks the conf and finds the campaign; each round's ``plan`` says what to measure (no probes: the search
is over and the rounds left are skipped); ``probe`` is a mapped ``TriggerDagRunOperator``, one run of the campaign's
own DAG per probe, deferred while it waits (so each holds its host's lease with the campaign's timeouts and
teardowns); the round task reads what they loaded. ``finish`` is ``start``'s teardown: it runs whatever happened,
a run marked failed included, and writes the answer, or how the search ended (``cancelled``, ``failed: probe runs
ended``) with what it knew. The behaviour is :mod:`benchflow.searches.engine`; the strategy names the conf.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Param, TriggerRule, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from benchflow.params import ConfError
from benchflow.searches import engine
from benchflow.searches.engine import CANCELLED_KEY, POKE_S, Search, strategy


def _warehouse() -> Any:
    from benchflow.warehouse import Warehouse  # the warehouse: a task's, never loaded at DAG parse

    return Warehouse.from_airflow()


def _start(name: str, **context: Any) -> dict[str, Any]:
    try:
        search = engine.start(name, dict(context["params"]), _warehouse())
    except ConfError as exc:
        raise AirflowFailException(str(exc)) from None
    if getattr(context["ti"].get_dag(search.campaign_dag_id), "is_paused", False):  # unpaused as the run starts
        raise AirflowFailException(
            f"{search.campaign_dag_id} is paused, so the probe runs this search triggers would wait unstarted: unpause"
            f" it (its toggle in the UI, or `airflow dags unpause {search.campaign_dag_id}`) and trigger again"
        )
    engine.save(search, _warehouse(), context["dag"].dag_id, context["run_id"])
    print(engine.strategy(name).opening(search, context["run_id"]))  # type: ignore[attr-defined]
    return search.to_json()


def _plan(state: dict[str, Any] | None, **context: Any) -> list[dict[str, Any]]:
    if state is None:
        raise AirflowSkipException("no state: an earlier step did not run")
    search = engine.plan(Search.from_json(state), context["run_id"])
    context["ti"].xcom_push(key="state", value=search.to_json())
    engine.save(search, _warehouse(), context["dag"].dag_id, context["run_id"])
    if not search.probes:
        raise AirflowSkipException(search.ended or "nothing left to probe: finish says why")
    for probe in search.probes:
        print(f"probe run {probe.run_id} on {probe.host or search.hosts[0]}: {probe.keys} conf {probe.conf}")
    return [probe.trigger(search.campaign_dag_id) for probe in search.probes]


def _record(number: int, **context: Any) -> dict[str, Any]:
    search = Search.from_json(context["ti"].xcom_pull(task_ids=f"round_{number}_plan", key="state"))
    result = engine.record(search, _warehouse(), context["dag"].dag_id, context["run_id"])
    print(result["summary"])
    return search.to_json()


def _finish(name: str, rounds: int, **context: Any) -> dict[str, Any]:
    ti = context["ti"]
    ids = ["start", *(f"round_{n}" for n in range(1, rounds + 1))]
    states = [s for s in ti.xcom_pull(task_ids=ids) if s]
    planned = [s for s in ti.xcom_pull(task_ids=[f"round_{n}_plan" for n in range(1, rounds + 1)], key="state") if s]
    if not states:
        raise AirflowSkipException("the search never started: see the start task's log")
    cancelled = ti.xcom_pull(task_ids="start", key=CANCELLED_KEY) or ""
    searches = [Search.from_json(s) for s in states + planned]
    search, result = engine.finish(searches, _warehouse(), context["dag"].dag_id, context["run_id"], cancelled)
    for line in strategy(name).lines(result):
        print(line)
    if search.ended:
        raise AirflowFailException(search.ended)
    return {k: v for k, v in result.items() if k in ("status", "summary", "best", "first_bad", "stopped")}


def search_dag(name: str) -> DAG:
    """The search DAG of the strategy ``name``: ``bisect``, ``config``, ``tiles``."""
    kind = strategy(name)
    with DAG(
        dag_id=kind.dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=4,
        tags=list(kind.tags),  # type: ignore[attr-defined]
        doc_md=kind.doc,
        params={field: Param(default, **schema) for field, (default, schema) in kind.params.items()},
        dagrun_timeout=timedelta(days=7),
    ) as dag:
        started = task(task_id="start")(_start)(name)
        previous: Any = started
        for number in range(1, kind.max_rounds + 1):
            plan = task(task_id=f"round_{number}_plan")(_plan)(previous)
            probe = TriggerDagRunOperator.partial(
                task_id=f"round_{number}_probe",
                wait_for_completion=True,
                deferrable=True,
                poke_interval=POKE_S,
                allowed_states=["success", "failed"],  # a failed probe run still loaded what it measured
                failed_states=[],
            ).expand_kwargs(plan)
            recorded = task(task_id=f"round_{number}", trigger_rule=TriggerRule.ALL_DONE_MIN_ONE_SUCCESS)(_record)(
                number
            )
            plan >> probe >> recorded
            previous = recorded
        finish = task(task_id="finish")(_finish)(name, kind.max_rounds)
        previous >> finish
        finish.as_teardown(setups=started.operator, on_failure_fail_dagrun=True)  # type: ignore[attr-defined]
    return dag
