"""The glue after a benchmark: parse fetched output, validate it, load it. Plain functions over an
artifacts directory, called by the DAG's TaskFlow tasks and usable from a shell."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchflow.parsers import parse_text
from benchflow.warehouse import RunRecord, Warehouse

ROWS_NAME = "rows.json"
REQUESTS_NAME = "requests.jsonl"
# parser format → result kind (its GX suite and warehouse table)
RESULT_KIND = {"kernel_sweep": "kernel_sweep", "serving_log": "serving", "generic": "generic"}


@dataclass
class ParseSummary:
    status: str  # ok | incomplete | failed
    rows: int
    detail: str
    meta: dict[str, str]


def parse_artifacts(
    directory: Path,
    fmt: str,
    marker: str,
    logs: list[str],
    defaults: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> ParseSummary:
    """Parse the fetched logs into ``rows.json``; a missing or cut-off log keeps the rows it has.

    ``defaults`` fill columns a format does not report (a serving log's input/output lengths);
    ``options`` go to the parser (the generic parser's patterns).
    """
    directory = Path(directory)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    meta: dict[str, str] = {}
    complete = True
    for name in logs:
        log = directory / name
        if not log.exists():
            complete = False
            notes.append(f"{name}: not fetched")
            continue
        parsed = parse_text(log.read_text(errors="replace"), fmt, marker=marker, **(options or {}))
        rows += [{**row, **{k: v for k, v in (defaults or {}).items() if row.get(k) is None}} for row in parsed.rows]
        meta |= parsed.meta
        if not parsed.complete:
            complete = False
            notes.append(f"{name}: ends without {marker!r} after {len(parsed.rows)} rows")
        notes += [f"{name}: {w}" for w in parsed.warnings]
    (directory / ROWS_NAME).write_text(json.dumps(rows))
    if not rows:
        status = "failed"
        notes.insert(0, "no rows")
    else:
        status = "ok" if complete else "incomplete"
    return ParseSummary(status, len(rows), "; ".join(notes), meta)


def read_rows(directory: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((Path(directory) / ROWS_NAME).read_text())
    return rows


def read_requests(directory: Path) -> list[dict[str, Any]] | None:
    """Per-request rows a serving client saved, or None; a record cut off mid-write is dropped."""
    path = Path(directory) / REQUESTS_NAME
    if not path.exists():
        return None
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def load_rows(warehouse: Warehouse, run: RunRecord, kind: str, directory: Path) -> int:
    requests = read_requests(directory) if kind == "serving" else None
    return warehouse.load(run, kind, read_rows(directory), requests=requests)
