"""Spec → DAG: wiring only (tasks, their bounds and their order); behaviour lives in the operators and in
:mod:`benchflow.pipeline`. The task graph of every campaign:

    preflight → acquire_host → stop_services → gpus_free → deploy_payload → launch_benchmark → wait_done
        → stop_benchmark (teardown of launch) → restore_services (teardown of stop_services)
        → fetch_artifacts (runs whatever happened) → release_host (teardown of acquire_host)
        → parse → validate → load → detect_regressions → verdict

A campaign with servers runs one task group per config in turn, in place of the launch … stop_benchmark
chain: launch_servers → servers_ready → launch_benchmark → wait_done → stop_benchmark → stop_servers
(the stops are teardowns, so servers go down whatever happened, and the next config still runs).

``fetch_artifacts`` runs even when the benchmark failed, so rows of completed phases are always
loaded; ``verdict`` then fails the run unless the benchmark reached its done marker and its rows
passed validation.

One campaign per host at a time: every task that touches the host runs in the host's pool (one slot,
``bench pools`` creates them), and ``acquire_host`` … ``release_host`` hold the host's lease, so a
second campaign for the same host waits (holding no worker slot) until the first has restored its
services. Campaigns on other hosts run alongside.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, BaseOperator, Param, TaskGroup, TriggerRule, XComArg

from benchflow import kinds
from benchflow import pipeline as step
from benchflow.deadline import OverBudget, outer_seconds_left, time_budget
from benchflow.hosts import RUN_HOST, routing
from benchflow.hosts.edge import executor_missing
from benchflow.operators import (
    ACQUIRE_TASK,
    ARGS_KEY,
    AcquireHostSensor,
    DeployPayloadOperator,
    DoneMarkerSensor,
    FetchArtifactsOperator,
    GpusFreeSensor,
    LaunchBenchmarkOperator,
    LaunchSamplerOperator,
    LaunchServersOperator,
    PreflightOperator,
    ReleaseHostOperator,
    RestoreServicesOperator,
    ServersReadySensor,
    StopBenchmarkOperator,
    StopSamplerOperator,
    StopServersOperator,
    StopServicesOperator,
)
from benchflow.params import param_schemas, run_option_schemas
from benchflow.paths import campaigns_dir
from benchflow.pipeline import BISECTIONS_KEY, RESULTS_ASSET
from benchflow.searches import bisect_campaign
from benchflow.spec import (
    DAG_PREFIX,
    LIMITS,
    FieldError,
    RejectedSpecs,
    SpecError,
    benchmark_model,
    load_checked,
    spec_paths,
)
from benchflow.telemetry.run import FILES as TELEMETRY_FILES

if TYPE_CHECKING:
    from benchflow.spec import CampaignSpec, Decide, ServingConfig, SpecError

START_DATE = datetime(2026, 1, 1)
log = logging.getLogger(__name__)


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


FILE_RESERVE_S = 3.0  # of the DAG file's import timeout, left for what comes after the builds


def define_campaigns(namespace: dict[str, Any], folder: Path | None = None) -> None:
    """What a DAG file of campaigns does (``dags/campaigns.py``; a spec repository's, ``include/spec-repo/``): the
    DAG of every good spec of ``folder`` (the campaigns folder by default) into the file's ``namespace``, each
    rejected spec logged with its file, line and field. A worker parsing the file to run one task (Airflow's
    parsing context names the DAG) builds that campaign alone."""
    from airflow.sdk import get_parsing_context

    dags, errors = build_all(only_dag=get_parsing_context().dag_id, folder=folder)
    for error in errors:
        log.error("campaign spec rejected, no DAG built:\n%s", error)
    for dag in dags:
        namespace[dag.dag_id] = dag


def raise_rejected(folder: Path | None = None) -> None:
    """What a DAG file of campaign errors does (``dags/campaign_errors.py``): fail to import, with every rejected
    spec of ``folder`` by file, line and field, when (and only when) some spec was rejected; the Airflow UI shows
    it as the file's import error. Specs are read and checked, never built; nothing when parsing for one task."""
    from airflow.sdk import get_parsing_context

    if get_parsing_context().dag_id is None:
        _, errors = build_all(build=False, register=False, folder=folder)
        if errors:
            raise RejectedSpecs(errors)


def build_all(
    build: bool = True, register: bool = True, only_dag: str | None = None, folder: Path | None = None
) -> tuple[list[DAG], list[SpecError]]:
    """Every spec of ``folder`` (the campaigns folder by default), each on its own and within its own time budget
    (``SpecLimits.seconds`` to read, check and build it): the DAGs of the good ones (when ``build``) and the
    errors of the others. Two specs may not share a DAG id (``x.yaml`` and ``x.yml``, say). ``register=False``
    builds DAGs that the file being parsed does not define; :func:`raise_rejected` reads and checks with
    ``build=False``.

    Within Airflow's import timeout of the DAG file no spec's budget reaches past :data:`FILE_RESERVE_S` before
    its end; once the specs before have used that much, the others are not built but errors naming the reason
    (``dags/campaign_errors.py`` does the same work, so it lists them), and the file still imports with what was
    built rather than losing every campaign to the timeout.

    ``only_dag``: the one DAG a worker parses the file for, to run one of its tasks (Airflow's parsing context):
    only its spec is read and built, not every campaign's."""
    import gc

    paths, errors = spec_paths(folder)
    if only_dag is not None:
        paths, errors = [p for p in paths if DAG_PREFIX + p.stem == only_dag], []
    warm_up()
    dags: list[DAG] = []
    # Thousands of operators are made here and none is garbage: the cyclic collector's passes over them cost a
    # third of the parse at 1,000 specs (bench/dag_parse.py), so it waits until the DAGs exist.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        # Two passes: every spec first within QUICK_S (a spec takes milliseconds), then the ones that needed more,
        # each with its whole budget; slow specs are never the reason a quick one after them is not built.
        slow = [path for path in paths if not _build_into(dags, errors, path, build, register, QUICK_S)]
        for path in slow:
            _build_into(dags, errors, path, build, register, None)
    finally:
        if was_enabled:
            gc.enable()
    return dags, errors


QUICK_S = 1.0  # a spec's first try in build_all; the largest the limits allow builds in a few tenths


def _build_into(
    dags: list[DAG], errors: list[SpecError], path: Path, build: bool, register: bool, quick: float | None
) -> bool:
    """Build one spec into ``dags`` (or its error into ``errors``) within its budget, ``quick`` s at most when given,
    and never past :data:`FILE_RESERVE_S` before the DAG file's import timeout; False: it needs more than ``quick``."""

    seconds = LIMITS.build_seconds()
    if (left := outer_seconds_left()) is not None:
        if left < FILE_RESERVE_S + 0.5:
            late = (
                "not built: the specs before it used the DAG file's import timeout "
                "([core] dagbag_import_timeout); raise it, or have fewer or smaller specs"
            )
            errors.append(SpecError(path, [FieldError("", late, None)]))
            return True
        seconds = min(seconds, max(left - FILE_RESERVE_S, 0.1))
    try:
        if quick is not None and quick < seconds:
            try:
                _, dag = load_and_build(path, build, register, quick, over_budget=True)
            except OverBudget:
                return False
        else:
            _, dag = load_and_build(path, build, register, seconds)
    except SpecError as exc:
        errors.append(exc)
        return True
    if dag is not None:
        dags.append(dag)
    return True


def warm_up() -> None:
    """What the first spec would otherwise pay for every other (the kinds, their models, the validators' imports),
    so that a spec's time budget measures its own work."""
    import croniter  # noqa: F401
    import jsonschema  # noqa: F401

    for kind in kinds.all_kinds():
        benchmark_model(kind.name)
    with DAG(dag_id="bench_warm_up", schedule="@daily", start_date=START_DATE, catchup=False, auto_register=False):
        PythonOperator(task_id="nothing", python_callable=print)


def load_and_build(
    path: Path, build: bool = True, register: bool = True, seconds: float | None = None, over_budget: bool = False
) -> tuple[CampaignSpec, DAG | None]:
    """One spec read, checked and (when ``build``) built within its time budget (``seconds``, a spec's by
    default); every failure, the budget's included, is a :class:`SpecError` of its file (``over_budget``: the
    budget's is :class:`~benchflow.deadline.OverBudget`, to try again). ``bench validate`` runs exactly this."""

    seconds = seconds or LIMITS.build_seconds()
    try:
        with time_budget(seconds):
            spec = load_checked(path)
            return spec, build_checked(spec, path, register) if build else None
    except OverBudget:
        if over_budget:
            raise
        work = "reading, checking and building it" if build else "reading and checking it"
        message = (
            f"not built: {work} took more than {seconds:.3g} s, a spec's budget "
            f"(make it smaller: fewer configs, servers or argument values)"
        )
        raise SpecError(path, [FieldError("", message, None)]) from None


def build_checked(spec: CampaignSpec, path: Path | None = None, register: bool = True) -> DAG:
    """:func:`build_dag`, with a failure reported as a :class:`SpecError` of the spec's file; so is a host whose tasks
    need an executor this deployment does not run (an Edge host without the Edge executor), which Airflow would
    otherwise report against the whole DAG file."""
    where = path or campaigns_dir() / f"{spec.name}.yaml"
    if missing := executor_missing(routing(spec.host).executor):
        raise SpecError(where, [FieldError("host", f"{spec.host!r} needs {missing}", None)])
    try:
        return build_dag(spec, register)
    except Exception as exc:  # one spec's failure must not take the others down, nor print a traceback
        raise SpecError(where, [FieldError("", f"the DAG could not be built: {exc}", None)]) from exc


def build_dag(spec: CampaignSpec, register: bool = True) -> DAG:
    timeouts = spec.timeouts
    with DAG(
        dag_id=spec.dag_id,
        auto_register=register,
        description=spec.description or None,
        schedule=spec.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=len(spec.host_ids),
        dagrun_timeout=_seconds(timeouts.host_wait + spec.lease_seconds()),
        deadline=_deadline(spec),
        tags=["bench", spec.kind, *spec.tags],
        doc_md=f"**{spec.name}** ({spec.kind} campaign on host `{spec.host}`)\n\n{spec.description}\n\n"
        f"Spec: `include/campaigns/{spec.name}.yaml` (sha256 `{spec.spec_hash()[:12]}`)\n\n{__doc__}",
        default_args={"retries": spec.retries, "retry_delay": timedelta(seconds=30)},
    ) as dag:
        several = len(spec.host_ids) > 1
        on_host: dict[str, Any] = {
            "host_id": RUN_HOST if several else spec.host,
            "host_ids": spec.host_ids if several else [],
            "pool": spec.pool,
            **routing(spec.host).task_kwargs(),
        }
        preflight, deploy, fetch = _host_stages(spec, on_host)
        _results(spec, preflight, deploy, fetch)
    # The trigger form's Params go on the DAG once its tasks exist: every operator created inside a DAG
    # deep-copies the DAG's Params (several times, once per __init__ in its class chain), and a run merges
    # the DAG's Params into every task's context anyway.
    form = spec.result_kind.form
    for name, (default, schema) in param_schemas(dict(spec.benchmark.args), bool(spec.configs), form).items():
        dag.params[name] = Param(default, **schema)
    for name, (default, schema) in _run_options(spec).items():
        dag.params[name] = Param(default, **schema)
    return dag


def _deadline(spec: CampaignSpec) -> Any:
    """The spec's deadline as an Airflow deadline alert whose callback (in the triggerer) tells the notifier."""
    after = spec.deadline_after()
    if after is None:
        return None
    from airflow.sdk.definitions.callback import AsyncCallback
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

    reference, interval = after
    kwargs = {"notify": spec.regressions.notify, "deadline": spec.deadline}
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT
        if reference == "queued"
        else DeadlineReference.DAGRUN_LOGICAL_DATE,
        interval=interval,
        callback=AsyncCallback("benchflow.nightly.deadline_alert.missed", kwargs=kwargs),
    )


def _run_options(spec: CampaignSpec) -> dict[str, tuple[Any, dict[str, Any]]]:
    git = spec.git_payload
    searches = getattr(spec.benchmark, "search", None) is not None
    return run_option_schemas(
        git.ref if git else None, spec.host_ids, spec.host, [c.name for c in spec.configs], searches
    )


def _before_benchmark(
    spec: CampaignSpec, on_host: dict[str, Any]
) -> tuple[BaseOperator, BaseOperator, BaseOperator, BaseOperator]:
    """preflight → acquire_host → stop_services → gpus_free → deploy_payload, chained; returns preflight, acquire,
    stop and deploy (the setups of the teardowns, and the tasks whose XComs later stages read)."""
    timeouts = spec.timeouts
    preflight = PreflightOperator(
        task_id="preflight",
        benchmark_args=dict(spec.benchmark.args),
        with_servers=bool(spec.configs),
        form=dict(spec.result_kind.form),
        run_options=_run_options(spec),
        paired=spec.result_kind.paired,
        execution_timeout=_seconds(timeouts.preflight),
        **on_host,
    )
    acquire = AcquireHostSensor(
        task_id=ACQUIRE_TASK,
        lease_ttl_s=spec.lease_seconds(),
        timeout=timeouts.host_wait,
        poke_interval=routing(spec.host).interval(timeouts.host_poke_interval),
        # taking the lease is idempotent for its owner: a poke lost to the host or the worker (an SSH drop, a
        # task that never started on a busy worker) is tried again; the wait's own timeout is never retried
        retries=2,
        retry_delay=timedelta(seconds=5),
        **on_host,
    )
    stop = StopServicesOperator(
        task_id="stop_services", services=spec.services, execution_timeout=_seconds(timeouts.services), **on_host
    )
    free = GpusFreeSensor(
        task_id="gpus_free",
        max_used_mib=spec.gpus_free.max_used_mib,
        wait_s=spec.gpus_free.wait,
        poke_interval=spec.gpus_free.poke_interval,
        retries=0,
        **on_host,
    )
    deploy = DeployPayloadOperator(
        task_id="deploy_payload",
        payload=spec.payload_name,
        git=spec.git_payload.model_dump() if spec.git_payload else None,
        requires=spec.requires,
        shipped=[str(path) for path in spec.benchmark.shipped()],
        execution_timeout=_seconds(timeouts.deploy),
        **on_host,
    )
    preflight >> acquire >> stop >> free >> deploy
    return preflight, acquire, stop, deploy


def _host_stages(spec: CampaignSpec, on_host: dict[str, Any]) -> tuple[BaseOperator, BaseOperator, BaseOperator]:
    """preflight → acquire_host → stop_services → gpus_free → deploy_payload → (the benchmark stages) →
    fetch_artifacts, with the teardowns restore_services and release_host. Returns the tasks whose XComs the
    results use: preflight, deploy and fetch."""
    timeouts = spec.timeouts
    preflight, acquire, stop, deploy = _before_benchmark(spec, on_host)
    restore = RestoreServicesOperator(
        task_id="restore_services", services=spec.services, execution_timeout=_seconds(timeouts.services), **on_host
    )
    sampling = _telemetry(spec, preflight, deploy, on_host)
    jobs, last = _benchmark_stages(spec, preflight, sampling[0] if sampling else deploy, on_host)
    if sampling:
        last >> sampling[1]
        last = sampling[1]
    fetch = FetchArtifactsOperator(
        task_id="fetch_artifacts",
        files=[spec.benchmark.output, *(s.file for s in spec.result_kind.side_tables), *TELEMETRY_FILES],
        jobs=jobs,
        trigger_rule=TriggerRule.ALL_DONE,
        execution_timeout=_seconds(timeouts.fetch),
        **on_host,
    )
    release = ReleaseHostOperator(task_id="release_host", execution_timeout=_seconds(120), **on_host)
    last >> [restore, fetch]
    restore.as_teardown(setups=stop, on_failure_fail_dagrun=True)
    [restore, fetch] >> release
    release.as_teardown(setups=acquire, on_failure_fail_dagrun=True)
    release.trigger_rule = TriggerRule.ALL_DONE  # also after a failed acquire_host: see ReleaseHostOperator
    return preflight, deploy, fetch


def _telemetry(
    spec: CampaignSpec, preflight: BaseOperator, deploy: BaseOperator, on_host: dict[str, Any]
) -> tuple[BaseOperator, BaseOperator] | None:
    """start_telemetry after the deploy (the sampler runs beside the servers and the benchmark), and its
    teardown stop_telemetry after them; None when the spec turns telemetry off."""
    if not spec.telemetry.enabled:
        return None
    up = LaunchSamplerOperator(
        task_id="start_telemetry",
        facts=preflight.output,
        period_ms=spec.telemetry.period_ms,
        max_bytes=spec.telemetry.max_bytes,
        metrics_urls=spec.metrics_urls(),
        execution_timeout=_seconds(spec.timeouts.launch),
        **on_host,
    )
    down = StopSamplerOperator(task_id="stop_telemetry", execution_timeout=_seconds(spec.timeouts.launch), **on_host)
    deploy >> up
    down.as_teardown(setups=up)
    return up, down


def _benchmark_stages(
    spec: CampaignSpec, preflight: BaseOperator, deploy: BaseOperator, on_host: dict[str, Any]
) -> tuple[list[str], Any]:
    """The benchmark job (a kernel campaign), or one task group per serving config run in turn.
    Returns the job names whose logs to fetch and the last task of the stage."""
    run_args = XComArg(preflight, key=ARGS_KEY)
    if not spec.configs:
        first, last = _benchmark_chain(spec, "bench", run_args, {}, on_host)
        deploy >> first
        return ["bench"], last
    jobs: list[str] = []
    previous: Any = deploy
    for i, config in enumerate(spec.configs):
        jobs.append(f"bench_{config.name}")
        with TaskGroup(group_id=f"config_{config.name}"):
            up, down = _config_stage(spec, config, run_args, on_host, after_teardown=i > 0)
        previous >> up
        previous = down
    return jobs, previous


def _config_stage(
    spec: CampaignSpec, config: ServingConfig, run_args: Any, on_host: dict[str, Any], after_teardown: bool
) -> tuple[Any, Any]:
    timeouts = spec.timeouts
    stage_args = spec.benchmark.config_args(config)
    servers_up = LaunchServersOperator(  # after the previous config's teardown: runs when this run skipped that one
        task_id="launch_servers",
        config=config,
        trigger_rule=TriggerRule.NONE_FAILED if after_teardown else TriggerRule.ALL_SUCCESS,
        execution_timeout=_seconds(timeouts.server_launch),
        **on_host,
    )
    ready = ServersReadySensor(
        task_id="servers_ready",
        config=config,
        timeout=timeouts.server_ready,
        poke_interval=min(timeouts.poke_interval, 5),
        retries=0,
        **on_host,
    )
    first, stop_bench = _benchmark_chain(spec, f"bench_{config.name}", run_args, stage_args, on_host)
    servers_down = StopServersOperator(
        task_id="stop_servers", config=config, execution_timeout=_seconds(timeouts.server_launch), **on_host
    )
    servers_up >> ready >> first
    stop_bench >> servers_down
    servers_down.as_teardown(setups=servers_up)
    return servers_up, servers_down


def _benchmark_chain(
    spec: CampaignSpec, job: str, run_args: Any, stage_args: dict[str, Any], on_host: dict[str, Any]
) -> tuple[Any, Any]:
    bench, timeouts, where = spec.benchmark, spec.timeouts, routing(spec.host)
    launch = LaunchBenchmarkOperator(
        task_id="launch_benchmark",
        script=bench.script,
        run_args=run_args,
        stage_args=stage_args,
        output=bench.output,
        marker=bench.marker,
        job=job,
        execution_timeout=_seconds(timeouts.launch),
        **on_host,
    )
    wait = DoneMarkerSensor(
        task_id="wait_done",
        marker=bench.marker,
        benchmark_timeout=timeouts.benchmark,
        job=job,
        poke_interval=where.interval(timeouts.poke_interval),
        # where the triggerer cannot see the log (an Edge host), the worker there checks it, in reschedule mode
        deferrable=bench.deferrable and where.deferrable,
        mode=where.wait_mode,
        retries=0,
        **on_host,
    )
    stop_bench = StopBenchmarkOperator(
        task_id="stop_benchmark", job=job, marker=bench.marker, execution_timeout=_seconds(timeouts.launch), **on_host
    )
    launch >> wait >> stop_bench
    stop_bench.as_teardown(setups=launch)
    return launch, stop_bench


def _results(spec: CampaignSpec, preflight: BaseOperator, deploy: BaseOperator, fetch: BaseOperator) -> None:
    """parse → validate → load → detect_regressions → verdict: each a PythonOperator running a pipeline step
    (:mod:`benchflow.pipeline`, XCom dicts in and out). Plain operators rather than TaskFlow: a TaskFlow task
    costs five times as much to build at every DAG parse, and here they would only wrap these calls."""

    def run(name: str, callable_: Any, **kwargs: Any) -> PythonOperator:
        return PythonOperator(task_id=name, python_callable=partial(callable_, spec), **kwargs)

    run_args = XComArg(preflight, key=ARGS_KEY)
    parse = run("parse", step.parse_task, op_kwargs={"fetched": fetch.output, "run_args": run_args})
    validate = run("validate", step.validate_task, op_kwargs={"parsed": parse.output, "run_args": run_args})
    load = run(
        "load",
        step.load_task,
        outlets=[RESULTS_ASSET],
        op_kwargs={
            "parsed": parse.output,
            "validated": validate.output,
            "facts": preflight.output,
            "deployed": deploy.output,
        },
    )
    detect = run("detect_regressions", step.detect_task, op_kwargs={"loaded": load.output})
    verdict = run(
        "verdict", step.verdict_task, trigger_rule=TriggerRule.ALL_DONE, op_kwargs={"load_task_id": load.task_id}
    )
    detect >> verdict
    if spec.regressions.decide is not None:
        _decide(spec, spec.regressions.decide, detect, run)
    if spec.regressions.bisect is not None:
        planned = run(
            "plan_bisections", step.bisections_task, op_kwargs={"planned": XComArg(detect, key=BISECTIONS_KEY)}
        )
        _auto_bisect(planned)


def _decide(spec: CampaignSpec, decide_spec: Decide, detect: BaseOperator, run: Any) -> None:
    """needs_decision → decide → record_decision (→ bisect_decided): after a night that regressed or drifted, a
    person answers in Airflow (a human-in-the-loop task, waiting without a worker slot): accept as the new baseline,
    bisect (a git payload) or ignore, with a reason; unanswered within the spec's hours, its default is taken."""
    from airflow.providers.standard.operators.hitl import HITLOperator

    options = step.decision_options(spec)
    gate = run("needs_decision", step.needs_decision_task)
    decide = HITLOperator(
        task_id="decide",
        subject=f"{spec.name}: a night regressed or drifted. What now?",
        body="{{ ti.xcom_pull(task_ids='needs_decision') }}",
        options=options,
        defaults=[next(label for label in options if step.DECISIONS[label] == decide_spec.default)],
        params={"reason": Param("", type="string", maxLength=500, title="Reason", description="why (kept with it)")},
        response_timeout=timedelta(hours=decide_spec.within_hours),
    )
    record = run("record_decision", step.record_decision_task, op_kwargs={"decision": decide.output})
    detect >> gate >> decide >> record
    if spec.git_payload is not None:
        _auto_bisect(record, "bisect_decided")


def _auto_bisect(planned: BaseOperator, task_id: str = "bisect_regression") -> None:
    """One ``bench_bisect`` run per commit range ``planned`` returned (none: skipped). The run id is the range's
    own, so a range seen again is never bisected twice; the UI links each run it started."""
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

    TriggerDagRunOperator.partial(
        task_id=task_id,
        trigger_dag_id=bisect_campaign.DAG_ID,
        skip_when_already_exists=True,
        wait_for_completion=False,
        retries=0,
    ).expand_kwargs(planned.output)
