"""Spec → DAG. The task graph of every campaign:

    preflight → acquire_host → stop_services → deploy_payload → launch_benchmark → wait_done
        → stop_benchmark (teardown of launch) → restore_services (teardown of stop_services)
        → fetch_artifacts (runs whatever happened) → release_host (teardown of acquire_host)
        → parse → validate → load → verdict

A serving campaign runs one task group per config in turn, in place of the launch … stop_benchmark
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

from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, BaseOperator, Param, TaskGroup, TriggerRule, task
from airflow.sdk.exceptions import AirflowFailException

from benchflow.operators import (
    AcquireHostSensor,
    DeployPayloadOperator,
    DoneMarkerSensor,
    FetchArtifactsOperator,
    LaunchBenchmarkOperator,
    LaunchServersOperator,
    PreflightOperator,
    ReleaseHostOperator,
    ServersReadySensor,
    ServicesOperator,
    StopBenchmarkOperator,
    StopServersOperator,
)
from benchflow.params import param_schemas
from benchflow.results import RESULT_KIND
from benchflow.spec import CampaignSpec

START_DATE = datetime(2026, 1, 1)
RESULTS_ASSET = Asset("bench_results")


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def run_record(spec: CampaignSpec, context: Any, status: str, detail: str = "") -> Any:
    """The ``runs`` row of the current DAG run, from what earlier tasks returned."""
    from benchflow.paths import project_git_sha
    from benchflow.warehouse import RunRecord

    ti = context["ti"]
    deployed = ti.xcom_pull(task_ids="deploy_payload") or {}
    dag_run = context["dag_run"]
    run_type = getattr(dag_run, "run_type", None)
    return RunRecord(
        logical_date=getattr(dag_run, "logical_date", None),
        run_type=str(getattr(run_type, "value", run_type)) if run_type is not None else None,
        conf=dict(getattr(dag_run, "conf", None) or {}),
        git_sha=project_git_sha(),
        dag_id=spec.dag_id,
        run_id=context["run_id"],
        campaign=spec.name,
        host=spec.host,
        spec_hash=spec.spec_hash(),
        status=status,
        payload_sha256=deployed.get("payload_sha256"),
        started_at=getattr(dag_run, "start_date", None),
        ended_at=datetime.now().astimezone(),
        host_facts=ti.xcom_pull(task_ids="preflight") or {},
        detail=detail,
    )


def build_dag(spec: CampaignSpec) -> DAG:
    timeouts = spec.timeouts
    bench = spec.benchmark
    on_host: dict[str, Any] = {"host_id": spec.host, "pool": spec.pool}
    lease_s = timeouts.lease_seconds(len(spec.configs))

    with DAG(
        dag_id=spec.dag_id,
        description=spec.description or None,
        schedule=spec.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=_seconds(timeouts.host_wait + lease_s),
        tags=["bench", spec.kind, *spec.tags],
        doc_md=f"**{spec.name}** ({spec.kind} campaign on host `{spec.host}`)\n\n{spec.description}\n\n"
        f"Spec: `include/campaigns/{spec.name}.yaml` (sha256 `{spec.spec_hash()[:12]}`)\n\n{__doc__}",
        default_args={"retries": spec.retries, "retry_delay": timedelta(seconds=30)},
        params={
            name: Param(default, **schema)
            for name, (default, schema) in param_schemas(dict(bench.args), spec.kind == "serving").items()
        },
    ) as dag:
        preflight = PreflightOperator(
            task_id="preflight", benchmark_args=dict(bench.args), serving=spec.kind == "serving",
            execution_timeout=_seconds(timeouts.preflight), **on_host,
        )  # fmt: skip
        acquire = AcquireHostSensor(
            task_id="acquire_host", lease_ttl_s=lease_s, timeout=timeouts.host_wait,
            poke_interval=timeouts.host_poke_interval, retries=0, **on_host,
        )  # fmt: skip
        services = [s.model_dump() for s in spec.services]
        stop = ServicesOperator(
            task_id="stop_services", services=services, action="stop",
            execution_timeout=_seconds(timeouts.services), **on_host,
        )  # fmt: skip
        deploy = DeployPayloadOperator(
            task_id="deploy_payload", payload=spec.payload, requires=spec.requires,
            execution_timeout=_seconds(timeouts.deploy), **on_host,
        )  # fmt: skip

        def benchmark_chain(job: str, args: dict[str, Any]) -> tuple[BaseOperator, BaseOperator]:
            launch = LaunchBenchmarkOperator(
                task_id="launch_benchmark", script=bench.script, args=args, output=bench.output,
                marker=bench.marker, job=job, execution_timeout=_seconds(120), **on_host,
            )  # fmt: skip
            wait = DoneMarkerSensor(
                task_id="wait_done", marker=bench.marker, benchmark_timeout=timeouts.benchmark, job=job,
                poke_interval=timeouts.poke_interval, deferrable=bench.deferrable, retries=0, **on_host,
            )  # fmt: skip
            stop_bench = StopBenchmarkOperator(
                task_id="stop_benchmark", job=job, marker=bench.marker, execution_timeout=_seconds(120), **on_host
            )
            launch >> wait >> stop_bench
            stop_bench.as_teardown(setups=launch)
            return launch, stop_bench

        jobs: list[str] = []
        if spec.kind == "kernel":
            jobs.append("bench")
            first, last = benchmark_chain("bench", dict(bench.args))
            deploy >> first
        else:
            last = deploy
            for config in spec.configs:
                members = [
                    {**server.model_dump(), "visible_devices": server.visible_devices(), "role": role}
                    for server, role in [(s, "server") for s in config.servers]
                    + ([(config.router, "router")] if config.router else [])
                ]
                args = {**bench.args, "label": config.name, "base_url": f"http://127.0.0.1:{config.endpoint.port}"}
                jobs.append(f"bench_{config.name}")
                with TaskGroup(group_id=f"config_{config.name}"):
                    servers_up = LaunchServersOperator(
                        task_id="launch_servers", config=config.name, servers=members,
                        execution_timeout=_seconds(300), **on_host,
                    )  # fmt: skip
                    ready = ServersReadySensor(
                        task_id="servers_ready", config=config.name, servers=members, timeout=timeouts.server_ready,
                        poke_interval=min(timeouts.poke_interval, 5), retries=0, **on_host,
                    )  # fmt: skip
                    first, stop_bench = benchmark_chain(f"bench_{config.name}", args)
                    servers_down = StopServersOperator(
                        task_id="stop_servers", config=config.name, servers=members,
                        execution_timeout=_seconds(300), **on_host,
                    )  # fmt: skip
                    servers_up >> ready >> first
                    stop_bench >> servers_down
                    servers_down.as_teardown(setups=servers_up)
                last >> servers_up
                last = servers_down
        restore = ServicesOperator(
            task_id="restore_services", services=services, action="start",
            execution_timeout=_seconds(timeouts.services), **on_host,
        )  # fmt: skip
        fetch = FetchArtifactsOperator(
            task_id="fetch_artifacts", output=bench.output, jobs=jobs, trigger_rule=TriggerRule.ALL_DONE,
            execution_timeout=_seconds(timeouts.deploy), **on_host,
        )  # fmt: skip
        kind = RESULT_KIND[bench.parser]
        suite_params: dict[str, Any] = {}
        if kind == "serving" and "concurrency" in bench.args:
            suite_params["swept"] = bench.args["concurrency"]
        parser_options: dict[str, Any] = {}
        if kind == "generic":
            parser_options["patterns"] = {name: p.model_dump() for name, p in bench.patterns.items()}
            suite_params["metrics"] = sorted(bench.patterns)

        @task
        def parse(fetched: dict[str, Any], **context: Any) -> dict[str, Any]:
            from benchflow.params import overlay
            from benchflow.results import parse_artifacts

            effective = overlay(dict(bench.args), context["params"])
            lengths: dict[str, Any] = {k: effective[k] for k in ("input_len", "output_len") if k in effective}
            summary = parse_artifacts(
                Path(fetched["dir"]), bench.parser, bench.marker, fetched["logs"], lengths, parser_options
            )
            print(f"parsed {summary.rows} rows; status {summary.status}; {summary.detail or 'complete'}")
            return {**asdict(summary), "dir": fetched["dir"]}

        @task
        def validate(parsed: dict[str, Any], **context: Any) -> dict[str, Any]:
            from benchflow.expectations import validate_rows
            from benchflow.results import read_rows
            from benchflow.warehouse import Warehouse

            rows = read_rows(Path(parsed["dir"]))
            if not rows:
                return {"success": True, "summary": "no rows to validate"}
            checks = dict(suite_params)  # per run: a manual run may have swept other levels
            if "swept" in checks:
                checks["swept"] = context["params"].get("concurrency", checks["swept"])
            outcome = validate_rows(kind, rows, **checks)
            print(outcome.summary())
            warehouse = Warehouse()
            record = run_record(spec, context, parsed["status"] if outcome.success else "invalid", outcome.summary())
            warehouse.record_validation(record, kind, outcome.success, outcome.evaluated, outcome.failed, len(rows))
            if not outcome.success:
                warehouse.quarantine(record, kind, rows, outcome.row_reasons, outcome.summary())
                raise AirflowFailException(f"{outcome.summary()}\n{len(rows)} rows quarantined, none loaded")
            return {"success": True, "summary": outcome.summary()}

        @task(outlets=[RESULTS_ASSET])
        def load(parsed: dict[str, Any], validated: dict[str, Any], **context: Any) -> dict[str, Any]:
            from benchflow.results import load_rows
            from benchflow.warehouse import Warehouse

            warehouse = Warehouse()
            record = run_record(spec, context, parsed["status"], parsed["detail"])
            loaded = load_rows(warehouse, record, kind, Path(parsed["dir"]))
            print(f"loaded {loaded} rows of run {record.run_id} ({record.status}) into {warehouse.location}")
            # the report DAG, scheduled on this asset, learns which run to draw from the event
            context["outlet_events"][RESULTS_ASSET].extra = {
                "dag_id": spec.dag_id, "run_id": record.run_id, "campaign": spec.name
            }  # fmt: skip
            return {"status": record.status, "rows": loaded, "detail": record.detail, "warehouse": warehouse.location}

        @task
        def detect_regressions(loaded: dict[str, Any], **context: Any) -> dict[str, Any]:
            from benchflow.regressions import Thresholds, detect, notify
            from benchflow.warehouse import Warehouse

            warehouse = Warehouse()
            gpu = warehouse.query("SELECT gpu_model FROM runs WHERE dag_id = ? AND run_id = ?",
                                  [spec.dag_id, context["run_id"]])["gpu_model"]  # fmt: skip
            limits = spec.regressions.for_gpu(str(gpu.iloc[0]) if len(gpu) else "none")
            thresholds = Thresholds(limits.lookback, limits.min_runs, limits.z_threshold, limits.min_change)
            findings = detect(warehouse, spec.dag_id, context["run_id"], thresholds)
            for f in findings:
                print(f"REGRESSION {f.case_key} {f.metric}: {f.value:.4g} vs baseline {f.baseline_mean:.4g} "
                      f"({f.relative_change:+.1%}, z={f.z_score:.1f}, {f.baseline_runs} runs)")  # fmt: skip
            print(f"{len(findings)} regressions against the baseline ({thresholds})")
            notify(spec.regressions.notify, spec.dag_id, context["run_id"], findings)
            return {"regressions": len(findings)}

        @task(trigger_rule=TriggerRule.ALL_DONE)
        def verdict(**context: Any) -> None:
            loaded = context["ti"].xcom_pull(task_ids="load")
            if loaded is None:
                raise AirflowFailException("results were not loaded: see the failed task before 'load'")
            if loaded["status"] != "ok":
                raise AirflowFailException(
                    f"run is {loaded['status']}: {loaded['detail']} ({loaded['rows']} rows kept in the warehouse)"
                )

        release = ReleaseHostOperator(task_id="release_host", execution_timeout=_seconds(120), **on_host)
        preflight >> acquire >> stop >> deploy
        last >> restore
        last >> fetch
        restore.as_teardown(setups=stop, on_failure_fail_dagrun=True)
        [restore, fetch] >> release
        release.as_teardown(setups=acquire, on_failure_fail_dagrun=True)
        parsed = parse(fetch.output)  # type: ignore[arg-type]  # TaskFlow passes XComArgs
        loaded = load(parsed, validate(parsed))  # type: ignore[arg-type]
        detect_regressions(loaded) >> verdict()  # type: ignore[arg-type]
    return dag
