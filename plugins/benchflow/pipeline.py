"""The steps after the host work: parse → validate → load → detect regressions → verdict.

Plain functions returning dataclasses, each called by one results task of a campaign DAG (the ``*_task``
functions below convert from and to XCom) and usable from a shell. Only :func:`load` writes to the warehouse:
the run's record, its rows or its quarantine, and the validation's outcome, in one transaction. The run's files
are in its folder of the artifact store (:mod:`benchflow.artifacts`); the run's arguments were resolved once, by
``preflight`` (the spec's with the trigger's params on top), and reach every step from there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset

from benchflow import artifacts, kinds
from benchflow.paths import project_git_sha
from benchflow.records import SERVER_ERROR_KEY, RunRecord, Validation, verdict_text
from benchflow.telemetry.run import FILES, RunTelemetry, ServerOf, merge

if TYPE_CHECKING:
    from benchflow.kinds import ResultKind
    from benchflow.records import RunRecord, Validation, Verdict
    from benchflow.spec import CampaignSpec
    from benchflow.warehouse import Warehouse

RESULTS_ASSET = Asset("bench_results")  # every load emits it; the report DAG is scheduled on it
DETAIL_CAP = 4000  # characters of a run's detail kept in runs.detail and XCom; the rest is counted
NOTES_CAP = 20  # notes (warnings, missing files) kept, with a count of the others


class _Xcom:
    """Dataclasses that travel through XCom as plain dicts."""

    def to_xcom(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_xcom(cls, value: dict[str, Any]) -> Any:
        return cls(**value)


@dataclass
class Fetched(_Xcom):
    store: str  # the run's folder in the artifact store (a URL)
    files: list[str]
    missing: list[str]
    logs: list[str]


@dataclass
class Parsed(_Xcom):
    store: str
    status: str  # ok | incomplete | failed
    rows: int
    detail: str
    meta: dict[str, str] = field(default_factory=dict)


@dataclass
class Loaded(_Xcom):
    status: str
    rows: int
    detail: str
    warehouse: str


def cap_notes(notes: list[str], limit: int = NOTES_CAP, chars: int = DETAIL_CAP) -> str:
    """Join notes for ``runs.detail``: the first ``limit``, then a count of the rest, at most ``chars``."""
    kept = notes[:limit]
    if len(notes) > limit:
        kept.append(f"… and {len(notes) - limit} more")
    text = "; ".join(kept)
    return text if len(text) <= chars else text[: chars - 30] + f" … ({len(text) - chars + 30} chars cut)"


@dataclass
class RunContext:
    """What the telemetry of a run needs from its spec: each config's servers and their GPUs, the validity limits
    and the run's resolved benchmark arguments."""

    configs: dict[str, dict[str, str | None]] = field(default_factory=dict)  # config → server → its ``gpus``
    limits: Any = None
    run_args: dict[str, Any] = field(default_factory=dict)
    servers: list[Any] = field(default_factory=list)  # telemetry.run.ServerOf: role and metrics URL of each
    rules: Any = None  # the spec's bottleneck thresholds over the rules' defaults

    @classmethod
    def of(cls, spec: CampaignSpec, run_args: dict[str, Any]) -> RunContext:
        configs = {c.name: {s.name: s.gpus for s in c.servers} for c in spec.configs}
        servers = []
        for config in spec.configs:
            urls, roles = config.metrics_urls(), config.roles()
            servers += [ServerOf(config.name, name, role, urls.get(name)) for name, role in roles.items()]
        return cls(configs, spec.validity.limits(), run_args, servers, spec.bottleneck)


def parse(
    fetched: Fetched,
    kind: ResultKind,
    fmt: str | None,
    marker: str,
    options: dict[str, Any],
    defaults: dict[str, Any],
    context: RunContext | None = None,
    problems: list[str] | None = None,
) -> Parsed:
    """Parse the fetched logs into the run's rows file; a missing or cut-off log keeps the rows it has.

    ``defaults`` fill columns a format does not report (a serving log's input/output lengths). With a
    ``context``, each row gains its phase's telemetry (energy, host load, validity) and the run's samples and
    per-phase, per-GPU figures are written for their tables (:func:`add_telemetry`).
    """
    folder, rows, meta = artifacts.at(fetched.store), [], dict[str, str]()
    notes: list[str] = list(problems or [])  # what the run's tasks said went wrong: a server that died
    complete = not problems
    for name in fetched.logs:
        if name not in fetched.files:
            complete = False
            notes.append(f"{name}: not fetched")
            continue
        text = (folder / name).read_text(errors="replace")
        parsed = kinds.parse_text(text, kind.name, fmt, marker=marker, **options)
        rows += [{**row, **{k: v for k, v in defaults.items() if row.get(k) is None}} for row in parsed.rows]
        meta |= parsed.meta
        if not parsed.complete:
            complete = False
            notes.append(f"{name}: ends without {marker!r} after {len(parsed.rows)} rows")
        # A row that lost values (a problem that dropped data) makes the run incomplete, whatever its marker says;
        # problems that lost nothing (a block cut off at the end) leave the status to the marker. Either way the
        # problems lead runs.detail, so the cap on the notes never hides one behind warnings.
        if parsed.dropped:
            complete = False
        problems = parsed.problem_lines()
        notes += [f"{name}: {p}" for p in problems] + [f"{name}: {w}" for w in parsed.warnings if w not in problems]
    if kind.from_side_files is not None and rows:
        rows = kind.from_side_files(rows, artifacts.read_side_rows(fetched.store, kind))
    notes += kind.row_notes(rows)
    # a side file's record that does not read (requests.jsonl) is data lost: the run is incomplete, and says so
    if malformed := artifacts.malformed_records(fetched.store, kind, fetched.files):
        complete = False
        notes[:0] = malformed
    if context is not None and kind.telemetry is not None and rows:
        rows = add_telemetry(fetched, kind, rows, context, notes)
    rows, nulled = stored_rows(kind, rows)
    if nulled:
        count = sum(nulled.values())
        columns = ", ".join(f"{column} ({n})" for column, n in sorted(nulled.items()))
        notes.append(
            f"{count} {'value was' if count == 1 else 'values were'} NaN (or infinite where no infinity fits): "
            f"stored as null in {columns}"
        )
    artifacts.write_rows(fetched.store, rows)
    status = "failed" if not rows else "ok" if complete else "incomplete"
    if not rows:
        notes.insert(0, "no rows")
    return Parsed(fetched.store, status, len(rows), cap_notes(notes), meta)


def stored_rows(kind: ResultKind, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The rows as the warehouse stores them: an infinity in a float column is kept (``request_rate = inf``: no
    limit; a latency that never came), NaN anywhere and an infinity elsewhere (an integer or text column) become
    None; with the count of values made None per column, for a note that names them."""
    floats = {c.name for c in kind.columns if c.type == "float"}
    nulled: dict[str, int] = {}
    stored = []
    for row in rows:
        bad = [
            k for k, v in row.items() if isinstance(v, float) and (math.isnan(v) or (math.isinf(v) and k not in floats))
        ]
        for key in bad:
            nulled[key] = nulled.get(key, 0) + 1
        stored.append({k: None if k in bad else v for k, v in row.items()} if bad else row)
    return stored, nulled


def add_telemetry(
    fetched: Fetched, kind: ResultKind, rows: list[dict[str, Any]], context: RunContext, notes: list[str]
) -> list[dict[str, Any]]:
    """The rows with their phases' telemetry (the kind's hook), and the run's samples and per-phase GPU figures
    written beside them for the telemetry tables; a note on where the figures came from, and on the rows that
    are not ``ok``."""

    folder = artifacts.at(fetched.store)

    def text_of(name: str) -> str | None:
        known = name in fetched.files or name not in FILES  # requests.jsonl: a kind's side file, fetched as such
        path = folder / name
        return path.read_text(errors="replace") if known and path.exists() else None

    run = RunTelemetry.read(text_of, context.configs, context.limits, context.run_args, context.servers)
    assert kind.telemetry is not None
    rows = merge(rows, kind.telemetry(rows, run))
    phase_gpus, phase_servers = run.phase_gpus(), run.phase_servers()
    artifacts.write_jsonl(fetched.store, "telemetry_samples.jsonl", run.sample_rows())
    artifacts.write_jsonl(fetched.store, "telemetry_phase_gpus.jsonl", phase_gpus)
    artifacts.write_jsonl(fetched.store, "server_samples.jsonl", run.server_timeline())
    artifacts.write_jsonl(fetched.store, "phase_servers.jsonl", phase_servers)
    given = kind.bottleneck_rules(context.rules)
    verdicts = kind.bottlenecks(rows, run, phase_gpus, phase_servers, given) if kind.bottlenecks else []
    artifacts.write_jsonl(fetched.store, "phase_bottlenecks.jsonl", verdicts)
    notes += [n for n in (run.note(), run.metrics_note()) if n]
    if kind.validity and (judged := [r for r in rows if r.get(kind.validity) not in (None, "ok")]):
        first = judged[0]
        notes.append(
            f"{len(judged)} of {len(rows)} rows are not ok (never a baseline), e.g. "
            f"{first[kind.validity]}: {first.get(f'{kind.validity}_reason') or ''}"
        )
    return rows


def validate(parsed: Parsed, kind: ResultKind, suite_params: dict[str, Any]) -> Validation:
    """Run the kind's GX suite over the parsed rows; writes nothing."""
    from benchflow.expectations import validate_rows  # Great Expectations: in the validate task only

    rows = artifacts.read_rows(parsed.store)
    if not rows:
        return Validation(kind.name, True, 0, [], 0)
    return validate_rows(kind, rows, **suite_params)


def run_record(
    spec: CampaignSpec,
    context: Any,
    status: str,
    detail: str,
    facts: dict[str, Any] | None,
    deployed: dict[str, Any] | None,
) -> RunRecord:
    """The ``runs`` row of the current DAG run."""

    dag_run = context["dag_run"]
    run_type = getattr(dag_run, "run_type", None)
    spec_bundle, spec_commit = spec_source(context)
    return RunRecord(
        logical_date=getattr(dag_run, "logical_date", None),
        run_type=str(getattr(run_type, "value", run_type)) if run_type is not None else None,
        conf=dict(getattr(dag_run, "conf", None) or {}),
        git_sha=project_git_sha(),
        dag_id=spec.dag_id,
        run_id=context["run_id"],
        campaign=spec.name,
        host=str((context.get("params") or {}).get("host") or spec.host) if len(spec.host_ids) > 1 else spec.host,
        spec_hash=spec.spec_hash(),
        status=status,
        payload_sha256=(deployed or {}).get("payload_sha256"),
        payload_commit=(deployed or {}).get("payload_commit"),
        payload_ref=(deployed or {}).get("payload_ref"),
        spec_bundle=spec_bundle,
        spec_commit=spec_commit,
        started_at=getattr(dag_run, "start_date", None),
        ended_at=datetime.now().astimezone(),
        host_facts=facts or {},
        detail=detail,
    )


def spec_source(context: Any) -> tuple[str | None, str | None]:
    """The DAG bundle the run's DAG (and so its spec) was parsed from, and that bundle's version when it has one:
    a git bundle's commit, the one Airflow fixed for the whole run (``dag_run.bundle_version``), or its tracking
    ref's commit when the run has none (``dag.test``). ``(None, None)`` outside a worker's task."""
    bundle = getattr(context.get("ti"), "bundle_instance", None)
    if bundle is None:
        return None, None
    if not bundle.supports_versioning:
        return bundle.name, None
    return bundle.name, bundle.version or bundle.get_current_version()


def load(warehouse: Warehouse, record: RunRecord, kind: ResultKind, parsed: Parsed, validation: Validation) -> Loaded:
    """The run's one write: its record and rows (or quarantine) and the validation, in one transaction."""
    warehouse.migrate()  # a write may bring the schema up to date; reads never do
    rows = artifacts.read_rows(parsed.store)
    loaded = warehouse.load(record, kind, rows, validation, artifacts.read_side_rows(parsed.store, kind))
    return Loaded(record.status, loaded, record.detail, warehouse.location)


def detect(warehouse: Warehouse, spec: CampaignSpec, run_id: str) -> Verdict:
    """Judge the loaded run against its baseline (see :mod:`benchflow.nightly.regressions`); store the findings
    and the verdict (regressed, fine against N nights, or not judged and why)."""
    from benchflow.nightly.regressions import assess  # the nightly check: in its task, never at DAG parse
    from benchflow.warehouse import queries  # the warehouse: a task's, never loaded at DAG parse

    limits = spec.regressions.for_gpu(queries.run_gpu_model(warehouse, spec.dag_id, run_id))
    verdict = assess(warehouse, spec.dag_id, run_id, limits)
    warehouse.record_findings(spec.dag_id, run_id, verdict.findings, verdict)
    return verdict


# What each results task of a campaign DAG runs, XCom dicts in and out: the factory binds the spec
# (functools.partial) and wires them as PythonOperators; Airflow passes the run's context as keywords.


def parse_task(spec: CampaignSpec, fetched: dict[str, Any], run_args: dict[str, Any], **context: Any) -> dict[str, Any]:
    kind, bench = spec.result_kind, spec.benchmark
    defaults = {k: run_args[k] for k in kind.row_defaults if k in run_args} | bench.row_values()
    run = RunContext.of(spec, run_args)
    options = bench.parser_options()
    parsed = parse(
        Fetched.from_xcom(fetched), kind, bench.format, bench.marker, options, defaults, run, dead(spec, context)
    )
    print(f"parsed {parsed.rows} rows; status {parsed.status}; {parsed.detail or 'complete'}")
    return parsed.to_xcom()


def dead(spec: CampaignSpec, context: dict[str, Any]) -> list[str]:
    """What the servers_ready step of each config said of a server that died (none when all came up)."""

    ti = context.get("ti")
    if ti is None:
        return []
    said = [
        (c.name, ti.xcom_pull(task_ids=f"config_{c.name}.servers_ready", key=SERVER_ERROR_KEY)) for c in spec.configs
    ]
    return [f"config {name} did not run: {text}" for name, text in said if text]


def validate_task(
    spec: CampaignSpec, parsed: dict[str, Any], run_args: dict[str, Any], **context: Any
) -> dict[str, Any]:
    kind = spec.result_kind
    outcome = validate(Parsed.from_xcom(parsed), kind, spec.benchmark.suite_params(run_args))
    print(outcome.summary())
    return asdict(outcome)


def load_task(
    spec: CampaignSpec,
    parsed: dict[str, Any],
    validated: dict[str, Any],
    facts: dict[str, Any] | None,
    deployed: dict[str, Any] | None,
    **context: Any,
) -> dict[str, Any]:
    from benchflow.warehouse import Warehouse  # the warehouse: a task's, never loaded at DAG parse

    step = Parsed.from_xcom(parsed)
    validation = Validation(**{**validated, "row_reasons": {int(k): v for k, v in validated["row_reasons"].items()}})
    status = step.status if validation.success else "invalid"
    detail = step.detail if validation.success else cap_notes(validation.failures)
    record = run_record(spec, context, status, detail, facts, deployed)
    loaded = load(Warehouse.from_airflow(), record, spec.result_kind, step, validation)
    print(f"loaded {loaded.rows} rows of run {record.run_id} ({record.status}) into {loaded.warehouse}")
    # the report DAG, scheduled on the results asset, learns which run to draw from the event
    event = {"dag_id": spec.dag_id, "run_id": record.run_id, "campaign": spec.name}
    context["outlet_events"][RESULTS_ASSET].extra = event
    if not validation.success:
        from airflow.sdk.exceptions import AirflowFailException

        rows = len(artifacts.read_rows(step.store))
        raise AirflowFailException(f"validation failed; {rows} rows quarantined, none loaded: {detail}")
    return loaded.to_xcom()


BISECTIONS_KEY = "bisections"  # detect_regressions' XCom: the bisections to trigger (bisect_regression maps over it)


def detect_task(spec: CampaignSpec, loaded: dict[str, Any], run_id: str, **context: Any) -> dict[str, Any]:
    from benchflow.nightly.regressions import notify  # the nightly check: in its task, never at DAG parse
    from benchflow.warehouse import Warehouse  # the warehouse: a task's, never loaded at DAG parse

    verdict = detect(Warehouse.from_airflow(), spec, run_id)
    findings = verdict.findings
    for f in findings:
        print(
            f"REGRESSION {f.case_key} {f.metric}: {f.value:.4g} vs baseline {f.baseline_mean:.4g} "
            f"({f.relative_change:+.1%}, {f.test}, {f.baseline_runs} runs)"
        )
    print(f"verdict: {verdict.text()}")
    notify(spec.regressions.notify, spec.dag_id, run_id, findings)
    if spec.regressions.bisect is not None:
        from benchflow.nightly.auto_bisect import plan  # the nightly check: in its task, never at DAG parse

        context["ti"].xcom_push(
            key=BISECTIONS_KEY, value=plan(spec, Warehouse.from_airflow(), spec.dag_id, run_id, verdict)
        )
    return {"regressions": len(findings), "verdict": verdict.state, "verdict_text": verdict.text()}


def bisections_task(spec: CampaignSpec, planned: list[dict[str, Any]] | None, **context: Any) -> list[dict[str, Any]]:
    """The bisections detect_regressions planned, as this task's return value (Airflow maps only over those)."""
    for b in planned or []:
        conf = b["conf"]
        print(
            f"bisect {conf['good'][:12]}..{conf['bad'][:12]} ({conf['case']} {conf['metric']}): {b['trigger_run_id']}"
        )
    if not planned:
        print("no bisection to start: nothing regressed, or each commit range already has its bisection")
    return list(planned or [])


# A person's decision after a night that regressed or drifted (regressions.decide): the options of the
# human-in-the-loop task and the word each is stored as.
DECISIONS = {"accept as the new baseline": "accept", "bisect": "bisect", "ignore": "ignore"}
DECIDE_ON = ("regressed", "suspected drift")


def decision_options(spec: CampaignSpec) -> list[str]:
    """What the person is offered: bisecting needs a payload from git."""
    return [label for label, word in DECISIONS.items() if word != "bisect" or spec.git_payload is not None]


def needs_decision_task(spec: CampaignSpec, run_id: str, **context: Any) -> str:
    """Skip the decision unless the night regressed or drifted; else say what the person is deciding on."""
    from airflow.sdk.exceptions import AirflowSkipException

    from benchflow.warehouse import Warehouse, queries  # the warehouse: a task's, never loaded at DAG parse

    found = queries.run_record(Warehouse.from_airflow(), spec.dag_id, run_id)
    run = found.iloc[0].to_dict() if len(found) else {}
    if run.get("verdict") not in DECIDE_ON:
        raise AirflowSkipException(f"nothing to decide: the night is {run.get('verdict') or 'not loaded'}")

    said = verdict_text(run["verdict"], run.get("verdict_detail"), run.get("baseline_runs"), run.get("regressions"))
    print(f"asking: {said}")
    return f"{spec.name}, night {run_id}: {said}. Accept the new level as the baseline, bisect, or ignore it."


def record_decision_task(spec: CampaignSpec, decision: dict[str, Any], run_id: str, **context: Any) -> list[Any]:
    """Store what the person chose (or the default, when nobody answered in time); an accepted night starts the
    baseline again. Returns the bisections to trigger (one for 'bisect' on a git campaign, else none)."""
    from benchflow.warehouse import Warehouse, queries  # the warehouse: a task's, never loaded at DAG parse

    warehouse = Warehouse.from_airflow()
    run = queries.run_record(warehouse, spec.dag_id, run_id).iloc[0].to_dict()
    chosen = DECISIONS[decision["chosen_options"][0]]
    user = decision.get("responded_by_user") or {}
    by = (user.get("name") or user.get("id")) if isinstance(user, dict) else str(user)
    row = {
        "dag_id": spec.dag_id,
        "run_id": run_id,
        "campaign": spec.name,
        "gpu_model": run["gpu_model"],
        "night_at": run["logical_date"] if run.get("logical_date") is not None else run["started_at"],
        "verdict": run.get("verdict"),
        "decision": chosen,
        "reason": str((decision.get("params_input") or {}).get("reason") or "") or None,
        "decided_by": by or None,
        "decided_at": decision.get("responded_at"),
        "timed_out": not by,
    }
    warehouse.record_decision(row)
    print(f"decision: {chosen} by {by or 'nobody (the default)'}: {row['reason'] or 'no reason given'}")
    if chosen == "accept":
        print(f"the baseline of {spec.name} on {run['gpu_model']} starts again at this night ({row['night_at']})")
    if chosen != "bisect" or spec.git_payload is None:
        return []
    from benchflow.nightly.auto_bisect import plan  # the nightly check: in its task, never at DAG parse
    from benchflow.nightly.regressions import assess  # the nightly check: in its task, never at DAG parse

    verdict = assess(warehouse, spec.dag_id, run_id, spec.regressions.for_gpu(str(run["gpu_model"])))
    return plan(spec, warehouse, spec.dag_id, run_id, verdict, asked=True)


def verdict_task(spec: CampaignSpec, load_task_id: str, ti: Any, **context: Any) -> None:
    """Fail the DAG run unless the benchmark reached its marker and its rows were valid and loaded. A run that
    failed before its load is recorded as ``failed`` (no rows), so that the warehouse counts every run."""
    from airflow.sdk.exceptions import AirflowFailException

    from benchflow.warehouse import Warehouse  # the warehouse: a task's, never loaded at DAG parse

    loaded = ti.xcom_pull(task_ids=load_task_id)
    if loaded is None:
        facts, deployed = ti.xcom_pull(task_ids="preflight"), ti.xcom_pull(task_ids="deploy_payload")
        detail = "failed before its results were loaded: the first failed task of the run says why"
        record = run_record(spec, context, "failed", detail, facts, deployed)
        warehouse = Warehouse.from_airflow()
        warehouse.migrate()
        if warehouse.record_failed_run(record):
            print(f"recorded run {record.run_id} as failed in {warehouse.location}")
        raise AirflowFailException("results were not loaded: see the failed task before 'verdict'")
    if loaded["status"] != "ok":
        raise AirflowFailException(
            f"run is {loaded['status']}: {loaded['detail']} ({loaded['rows']} rows kept in the warehouse)"
        )
