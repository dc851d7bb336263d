"""The glue after a benchmark: parse fetched output, validate it, load it. Plain functions over an
artifacts directory, called by the DAG's TaskFlow tasks and usable from a shell."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchflow.parsers import parse_text
from benchflow.warehouse import RunRecord, Warehouse

LOG_NAME = "bench.log"
ROWS_NAME = "rows.json"


@dataclass
class ParseSummary:
    status: str  # ok | incomplete | failed
    rows: int
    detail: str
    meta: dict[str, str]


def parse_artifacts(directory: Path, fmt: str, marker: str) -> ParseSummary:
    """Parse ``bench.log`` into ``rows.json``; a missing or cut-off log keeps the rows it has."""
    directory = Path(directory)
    log = directory / LOG_NAME
    if not log.exists():
        (directory / ROWS_NAME).write_text("[]")
        return ParseSummary("failed", 0, "no benchmark log was fetched", {})
    parsed = parse_text(log.read_text(errors="replace"), fmt, marker=marker)
    (directory / ROWS_NAME).write_text(json.dumps(parsed.rows))
    if parsed.complete:
        status, detail = ("ok", "") if parsed.rows else ("failed", f"{marker} seen but no rows")
    else:
        status = "incomplete" if parsed.rows else "failed"
        detail = f"log ends without {marker!r} after {len(parsed.rows)} rows"
    return ParseSummary(status, len(parsed.rows), "; ".join(filter(None, [detail, *parsed.warnings])), parsed.meta)


def read_rows(directory: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((Path(directory) / ROWS_NAME).read_text())
    return rows


def load_rows(warehouse: Warehouse, run: RunRecord, kind: str, directory: Path) -> int:
    return warehouse.load(run, kind, read_rows(directory))
