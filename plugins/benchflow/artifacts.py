"""Where a run's files live: one store that every worker reads (Airflow's ``ObjectStoragePath``), one folder per
run named by its run key (:func:`run_key`: one folder per run id), and the files in it (the fetched logs and
results, the parsed rows, the report's plots). Fetch, parse, validate, load, the report DAG and ``bench run``
all find a run's files through here.

The store is ``BENCH_ARTIFACTS_URL`` (e.g. ``s3://bench-artifacts`` with an ``aws_default`` connection), else
``file://<var>/artifacts``. A run's folder is ``<store>/<dag key>/<run key>``; the host keeps the same keys for
its run directory (:mod:`benchflow.remote.layout`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchflow.parsing import strict_row
from benchflow.paths import var_dir

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from benchflow.hosts import Host
    from benchflow.kinds import ResultKind

ROWS_NAME = "rows.json"  # the parsed rows of a run, for validate and load: JSON, infinities as ±Infinity
REPORT_DIR = "report"  # the report DAG's plots
_RUN_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_DAG_KEY_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
KEY_HASH_CHARS = 16  # hex digits of sha256 in a run key: 64 bits, no two run ids of a campaign meet
KEY_PREFIX_CHARS = 80  # the readable part of a run key


def run_key(run_id: str) -> str:
    """A path-safe name for an Airflow run id, one per run id: a readable prefix (the run id with every character
    but letters, digits, ``.``, ``_`` and ``-`` as ``_``), ``-``, and 16 hex digits of the sha256 of the exact
    run id. ``coll:1`` and ``coll_1`` (both valid run ids) share the prefix, never the key, so they never share a
    run directory, a lease owner or an artifact folder."""
    if not run_id:
        raise ValueError("run id is empty")
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:KEY_HASH_CHARS]
    prefix = _RUN_KEY_UNSAFE.sub("_", run_id)[:KEY_PREFIX_CHARS].strip(".") or "run"
    return f"{prefix}-{digest}"


def dag_key(dag_id: str) -> str:
    """A DAG id as a path part: the id itself when it is ASCII letters, digits, ``.``, ``_``, ``-`` not led by a
    dot (every ``bench_<name>``), else hashed like a run key (Airflow allows any Unicode letter)."""
    return dag_id if _DAG_KEY_SAFE.fullmatch(dag_id) else run_key(dag_id)


def root() -> str:
    return os.environ.get("BENCH_ARTIFACTS_URL") or f"file://{var_dir() / 'artifacts'}"


def store(dag_id: str, run_id: str, create: bool = True) -> ObjectStoragePath:
    """The run's folder in the store (created unless ``create`` is false)."""
    from airflow.sdk import ObjectStoragePath

    path = ObjectStoragePath(root()) / dag_key(dag_id) / run_key(run_id)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def local_folder(dag_id: str, run_id: str) -> Path | None:
    """The run's folder as a path on this machine, when the store is a local one and the folder exists."""
    location = root()
    if not location.startswith("file://"):
        return None
    folder = Path(location.removeprefix("file://")) / dag_key(dag_id) / run_key(run_id)
    return folder if folder.is_dir() else None


def store_file(host: Host, remote: str, target: ObjectStoragePath) -> bool:
    """Copy one file from the host into the store; False when the host does not have it."""
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "file"
        if not host.get_file(remote, local):
            return False
        target.parent.mkdir(parents=True, exist_ok=True)  # a file of a job's folder: telemetry/samples.csv
        with local.open("rb") as source, target.open("wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
    return True


def at(url: str) -> ObjectStoragePath:
    """A run's folder from the URL that travelled through XCom."""
    from airflow.sdk import ObjectStoragePath

    return ObjectStoragePath(url)


def write_rows(folder: str, rows: list[dict[str, Any]]) -> None:
    """The rows as JSON; an infinite measurement stays one (``Infinity``, which Python's ``json`` reads back);
    NaN must have become None before (:func:`benchflow.pipeline.stored_rows`)."""
    if any(isinstance(v, float) and v != v for row in rows for v in row.values()):
        raise ValueError("rows to store hold NaN: make it None first")
    (at(folder) / ROWS_NAME).write_text(json.dumps(rows))


def write_jsonl(folder: str, name: str, rows: list[dict[str, Any]]) -> None:
    """One JSON object per line (NaN and infinities as null: strict JSON), for a side table to load."""

    with (at(folder) / name).open("w") as out:
        for row in rows:
            out.write(json.dumps(strict_row(row)[0], allow_nan=False) + "\n")


def read_rows(folder: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((at(folder) / ROWS_NAME).read_text())
    return rows


def read_side_rows(folder: str, kind: ResultKind) -> dict[str, list[dict[str, Any]]]:
    """Each side table's rows from its JSON-lines file, when the benchmark saved one; a record that does not read
    (cut off mid-write, garbled) is left out: :func:`malformed_records` counts them for the run's notes."""
    found: dict[str, list[dict[str, Any]]] = {}
    for side in kind.side_tables:
        path = at(folder) / side.file
        if path.exists():
            found[side.table] = read_jsonl(path.read_text(errors="replace"))[0]
    return found


def read_jsonl(text: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The JSON objects of a JSON-lines text, and the numbers of the lines (from 1) that are not one (blank
    lines are neither)."""
    rows: list[dict[str, Any]] = []
    bad: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            bad.append(number)
            continue
        if isinstance(record, dict):
            rows.append(record)
        else:
            bad.append(number)
    return rows, bad


def malformed_records(folder: str, kind: ResultKind, names: list[str]) -> list[str]:
    """A note per side file among ``names`` (the fetched ones) with records that do not read: how many, and the
    first line, e.g. ``requests.jsonl: 2 of 40 records malformed, left out (first at line 7)``."""
    notes = []
    for side in kind.side_tables:
        path = at(folder) / side.file
        if side.file not in names or not path.exists():
            continue
        rows, bad = read_jsonl(path.read_text(errors="replace"))
        if bad:
            total = len(rows) + len(bad)
            notes.append(f"{side.file}: {len(bad)} of {total} records malformed, left out (first at line {bad[0]})")
    return notes
