"""What every output format returns: pure functions from a benchmark's text to tidy rows. No I/O.

A format is a ``detect(text) -> bool`` and a ``parse(text, marker, **options) -> ParsedRun``; each result
kind (:mod:`benchflow.kinds`) lists the formats that produce its rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class ParseError(ValueError):
    """Input that is not the format it claims to be; names the line."""

    def __init__(self, message: str, line_no: int | None = None, line: str | None = None):
        self.line_no = line_no
        where = f"line {line_no}: " if line_no is not None else ""
        shown = f": {line.rstrip()[:200]!r}" if line is not None else ""
        super().__init__(f"{where}{message}{shown}")


@dataclass
class ParsedRun:
    """Rows of one benchmark output, whether it ran to its done marker, and its header facts."""

    format: str
    rows: list[dict[str, Any]]
    complete: bool
    meta: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Format:
    """One output format of a result kind: ``name`` is what a spec's ``benchmark.format`` says."""

    name: str
    detect: Callable[[str], bool]
    parse: Callable[..., ParsedRun]
