"""The steps after the host work: fetch → parse → validate → load → detect regressions.

Plain functions returning dataclasses, called by the DAG's TaskFlow tasks (which only convert to and
from XCom) and usable from a shell. Only :func:`load` writes to the warehouse: the run's record, its rows
or its quarantine, and the validation's outcome, in one transaction.

Artifacts live in one store that every worker reads (Airflow's ``ObjectStoragePath``): ``BENCH_ARTIFACTS_URL``
(e.g. ``s3://bench-artifacts`` with an ``aws_default`` connection), else ``file://<var>/artifacts``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset

from benchflow import kinds
from benchflow.parsing import strict_row
from benchflow.paths import project_git_sha, var_dir
from benchflow.remote.layout import run_key

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from benchflow.hosts import Host
    from benchflow.kinds import ResultKind
    from benchflow.spec import CampaignSpec
    from benchflow.warehouse import Finding, RunRecord, Validation, Warehouse

RESULTS_ASSET = Asset("bench_results")  # every load emits it; the report DAG is scheduled on it
ROWS_NAME = "rows.json"
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


def artifact_store(dag_id: str, run_id: str) -> ObjectStoragePath:
    from airflow.sdk import ObjectStoragePath

    root = os.environ.get("BENCH_ARTIFACTS_URL") or f"file://{var_dir() / 'artifacts'}"
    path = ObjectStoragePath(root) / run_key(dag_id) / run_key(run_id)
    path.mkdir(parents=True, exist_ok=True)
    return path


def store_file(host: Host, remote: str, target: ObjectStoragePath) -> bool:
    """Copy one file from the host into the store; False when the host does not have it."""
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "file"
        if not host.get_file(remote, local):
            return False
        with local.open("rb") as source, target.open("wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
    return True


def cap_notes(notes: list[str], limit: int = NOTES_CAP, chars: int = DETAIL_CAP) -> str:
    """Join notes for ``runs.detail``: the first ``limit``, then a count of the rest, at most ``chars``."""
    kept = notes[:limit]
    if len(notes) > limit:
        kept.append(f"… and {len(notes) - limit} more")
    text = "; ".join(kept)
    return text if len(text) <= chars else text[: chars - 30] + f" … ({len(text) - chars + 30} chars cut)"


def parse(
    fetched: Fetched, kind: ResultKind, fmt: str | None, marker: str, options: dict[str, Any], defaults: dict[str, Any]
) -> Parsed:
    """Parse the fetched logs into ``rows.json`` in the store; a missing or cut-off log keeps the rows it has.

    ``defaults`` fill columns a format does not report (a serving log's input/output lengths).
    """
    from airflow.sdk import ObjectStoragePath

    store = ObjectStoragePath(fetched.store)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    meta: dict[str, str] = {}
    complete = True
    for name in fetched.logs:
        if name not in fetched.files:
            complete = False
            notes.append(f"{name}: not fetched")
            continue
        text = (store / name).read_text(errors="replace")
        parsed = kinds.parse_text(text, kind.name, fmt, marker=marker, **options)
        rows += [{**row, **{k: v for k, v in defaults.items() if row.get(k) is None}} for row in parsed.rows]
        meta |= parsed.meta
        if not parsed.complete:
            complete = False
            notes.append(f"{name}: ends without {marker!r} after {len(parsed.rows)} rows")
        # Issue #21: a row that lost values (a problem that dropped data) makes the run incomplete, whatever its
        # marker says; problems that lost nothing (a block cut off at the end) leave the status to the marker.
        # Either way the problems lead runs.detail, so the cap on the notes never hides one behind warnings.
        if parsed.dropped:
            complete = False
        problems = parsed.problem_lines()
        notes += [f"{name}: {p}" for p in problems] + [f"{name}: {w}" for w in parsed.warnings if w not in problems]
    strict = [strict_row(row) for row in rows]
    rows = [row for row, _ in strict]
    if non_finite := sum(len(flagged) for _, flagged in strict):
        notes.append(f"{non_finite} values were NaN or infinite: stored as null")
    (store / ROWS_NAME).write_text(json.dumps(rows, allow_nan=False))
    status = "failed" if not rows else "ok" if complete else "incomplete"
    if not rows:
        notes.insert(0, "no rows")
    return Parsed(fetched.store, status, len(rows), cap_notes(notes), meta)


def read_rows(store: str) -> list[dict[str, Any]]:
    from airflow.sdk import ObjectStoragePath

    rows: list[dict[str, Any]] = json.loads((ObjectStoragePath(store) / ROWS_NAME).read_text())
    return rows


def read_side_rows(store: str, kind: ResultKind) -> dict[str, list[dict[str, Any]]]:
    """Each side table's rows from its JSON-lines file, when the benchmark saved one; a record cut off
    mid-write is dropped."""
    from airflow.sdk import ObjectStoragePath

    found: dict[str, list[dict[str, Any]]] = {}
    for side in kind.side_tables:
        path = ObjectStoragePath(store) / side.file
        if not path.exists():
            continue
        rows = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        found[side.table] = rows
    return found


def validate(parsed: Parsed, kind: ResultKind, suite_params: dict[str, Any]) -> Validation:
    """Run the kind's GX suite over the parsed rows; writes nothing."""
    from benchflow.expectations import validate_rows
    from benchflow.warehouse import Validation

    rows = read_rows(parsed.store)
    if not rows:
        return Validation(kind.name, True, 0, [], 0)
    outcome = validate_rows(kind, rows, **suite_params)
    return Validation(kind.name, outcome.success, outcome.evaluated, outcome.failed, len(rows), outcome.row_reasons)


def run_record(
    spec: CampaignSpec,
    context: Any,
    status: str,
    detail: str,
    facts: dict[str, Any] | None,
    deployed: dict[str, Any] | None,
) -> RunRecord:
    """The ``runs`` row of the current DAG run."""
    from benchflow.warehouse import RunRecord

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
        payload_sha256=(deployed or {}).get("payload_sha256"),
        started_at=getattr(dag_run, "start_date", None),
        ended_at=datetime.now().astimezone(),
        host_facts=facts or {},
        detail=detail,
    )


def load(warehouse: Warehouse, record: RunRecord, kind: ResultKind, parsed: Parsed, validation: Validation) -> Loaded:
    """The run's one write: its record and rows (or quarantine) and the validation, in one transaction."""
    warehouse.migrate()  # a write may bring the schema up to date; reads never do
    rows = read_rows(parsed.store)
    loaded = warehouse.load(record, kind, rows, validation, read_side_rows(parsed.store, kind))
    return Loaded(record.status, loaded, record.detail, warehouse.location)


def detect(warehouse: Warehouse, spec: CampaignSpec, run_id: str) -> list[Finding]:
    """Judge the loaded run against its baseline (see :mod:`benchflow.analysis.regressions`); store the findings."""
    from benchflow.analysis.regressions import Thresholds, find

    p = warehouse.p
    gpu = warehouse.query(f"SELECT gpu_model FROM runs WHERE dag_id = {p} AND run_id = {p}", [spec.dag_id, run_id])
    limits = spec.regressions.for_gpu(str(gpu["gpu_model"].iloc[0]) if len(gpu) else "none")
    thresholds = Thresholds(limits.lookback, limits.min_runs, limits.z_threshold, limits.min_change)
    findings = find(warehouse, spec.dag_id, run_id, thresholds)
    warehouse.record_findings(spec.dag_id, run_id, findings)
    return findings


# What each results task of a campaign DAG runs, XCom dicts in and out: the factory binds the spec
# (functools.partial) and wires them as PythonOperators; Airflow passes the run's context as keywords.


def parse_task(spec: CampaignSpec, fetched: dict[str, Any], params: Any, **context: Any) -> dict[str, Any]:
    from benchflow.params import overlay

    kind, bench = spec.result_kind, spec.benchmark
    run_args = overlay(dict(bench.args), params)
    defaults = {k: run_args[k] for k in kind.row_defaults if k in run_args}
    parsed = parse(Fetched.from_xcom(fetched), kind, bench.format, bench.marker, kind.parser_options(bench), defaults)
    print(f"parsed {parsed.rows} rows; status {parsed.status}; {parsed.detail or 'complete'}")
    return parsed.to_xcom()


def validate_task(spec: CampaignSpec, parsed: dict[str, Any], params: Any, **context: Any) -> dict[str, Any]:
    from benchflow.params import overlay

    kind = spec.result_kind
    run_args = overlay(dict(spec.benchmark.args), params)
    outcome = validate(Parsed.from_xcom(parsed), kind, kind.suite_params(spec.benchmark, run_args))
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
    from benchflow.warehouse import Validation, Warehouse

    step = Parsed.from_xcom(parsed)
    validation = Validation(**{**validated, "row_reasons": {int(k): v for k, v in validated["row_reasons"].items()}})
    status = step.status if validation.success else "invalid"
    detail = step.detail if validation.success else cap_notes(validation.failures)
    record = run_record(spec, context, status, detail, facts, deployed)
    loaded = load(Warehouse.from_airflow(), record, spec.result_kind, step, validation)
    print(f"loaded {loaded.rows} rows of run {record.run_id} ({record.status}) into {loaded.warehouse}")
    # the report DAG, scheduled on the results asset, learns which run to draw from the event
    context["outlet_events"][RESULTS_ASSET].extra = {
        "dag_id": spec.dag_id,
        "run_id": record.run_id,
        "campaign": spec.name,
    }
    if not validation.success:
        from airflow.sdk.exceptions import AirflowFailException

        rows = len(read_rows(step.store))
        raise AirflowFailException(f"validation failed; {rows} rows quarantined, none loaded: {detail}")
    return loaded.to_xcom()


def detect_task(spec: CampaignSpec, loaded: dict[str, Any], run_id: str, **context: Any) -> dict[str, Any]:
    from benchflow.analysis.regressions import notify
    from benchflow.warehouse import Warehouse

    findings = detect(Warehouse.from_airflow(), spec, run_id)
    for f in findings:
        print(
            f"REGRESSION {f.case_key} {f.metric}: {f.value:.4g} vs baseline {f.baseline_mean:.4g} "
            f"({f.relative_change:+.1%}, {f.test}, {f.baseline_runs} runs)"
        )
    print(f"{len(findings)} regressions against the baseline")
    notify(spec.regressions.notify, spec.dag_id, run_id, findings)
    return {"regressions": len(findings)}


def verdict_task(load_task_id: str, ti: Any, **context: Any) -> None:
    """Fail the DAG run unless the benchmark reached its marker and its rows were valid and loaded."""
    from airflow.sdk.exceptions import AirflowFailException

    loaded = ti.xcom_pull(task_ids=load_task_id)
    if loaded is None:
        raise AirflowFailException("results were not loaded: see the failed task before 'verdict'")
    if loaded["status"] != "ok":
        raise AirflowFailException(
            f"run is {loaded['status']}: {loaded['detail']} ({loaded['rows']} rows kept in the warehouse)"
        )
