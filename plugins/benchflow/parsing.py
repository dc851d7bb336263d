"""What every output format returns: pure functions from a benchmark's text to tidy rows. No I/O.

A format is a ``detect(text) -> bool`` and a ``parse(text, marker, **options) -> ParsedRun``; each result
kind (:mod:`benchflow.kinds`) lists the formats that produce its rows.

A parser never gives up on a whole output because of one line it cannot read: it keeps every row it could
read and lists a :class:`Problem` per line it could not, ``dropped`` when a row or a block was lost with it.
Callers mark a run incomplete when :attr:`ParsedRun.dropped` and show :attr:`ParsedRun.problems`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

WARNINGS_KEPT = 20  # warnings kept with their line numbers; the rest are counted in one summary line
PROBLEMS_KEPT = 50  # problems kept as objects; the rest are counted (see ParsedRun.problems_left_out)


class ParseError(ValueError):
    """Input that is not the format it claims to be (or a format asked for that does not exist)."""


@dataclass(frozen=True)
class Problem:
    """A line a parser could not read. ``dropped``: a row or block was lost with it (else only noted)."""

    line: int | None
    message: str
    dropped: bool = False

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{where}{self.message}{' (dropped)' if self.dropped else ''}"


@dataclass
class ParsedRun:
    """Rows of one benchmark output, whether it ran to its done marker, and its header facts.

    ``warnings`` are human-readable (capped: the first :data:`WARNINGS_KEPT` with line numbers, then
    ``… and N more warnings``) and include the text of every problem, so showing ``warnings`` shows them too;
    ``problems`` are the lines that ended, cut short or dropped a block or row, as objects (capped at
    :data:`PROBLEMS_KEPT`, the rest counted in ``problems_left_out``). ``dropped``: the run is incomplete.
    """

    format: str
    rows: list[dict[str, Any]]
    complete: bool
    meta: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    problems_left_out: int = 0  # problems beyond PROBLEMS_KEPT, counted only
    any_dropped: bool = False  # set by Notes when a left-out problem dropped something

    @property
    def dropped(self) -> bool:
        """Whether any row or block was lost (a run with this is ``incomplete``; ``bench parse`` exits 1)."""
        return self.any_dropped or any(p.dropped for p in self.problems)

    def problem_lines(self) -> list[str]:
        """The problems as text, one per line, with the count of those left out: for runs.detail and stderr."""
        lines = [str(p) for p in self.problems]
        if self.problems_left_out:
            lines.append(f"… and {self.problems_left_out} more problems")
        return lines


class Notes:
    """Collects a parser's warnings and problems, capped so logs, XComs and runs.detail stay small."""

    def __init__(self, kept: int = WARNINGS_KEPT, problems_kept: int = PROBLEMS_KEPT):
        self.kept, self.problems_kept = kept, problems_kept
        self.warnings: list[str] = []
        self.more = 0
        self.problems: list[Problem] = []
        self.problems_more = 0
        self.any_dropped = False

    def warn(self, line: int | None, message: str) -> None:
        if len(self.warnings) < self.kept:
            self.warnings.append(f"line {line}: {message}" if line is not None else message)
        else:
            self.more += 1

    def problem(self, line: int | None, message: str, dropped: bool = False) -> None:
        self.any_dropped |= dropped
        if len(self.problems) < self.problems_kept:
            self.problems.append(Problem(line, message, dropped))
        else:
            self.problems_more += 1
        self.warn(line, message + (" (dropped)" if dropped else ""))

    def run(
        self, fmt: str, rows: list[dict[str, Any]], complete: bool, meta: dict[str, str] | None = None
    ) -> ParsedRun:
        warnings = list(self.warnings)
        if self.more:
            warnings.append(f"… and {self.more} more warnings")
        return ParsedRun(
            fmt, rows, complete, meta or {}, warnings, list(self.problems), self.problems_more, self.any_dropped
        )


def lines(text: str) -> Iterator[tuple[int, str]]:
    """``(number, line)`` from 1, streamed: one slice per line, never a copy of the whole text (a 50 MB log
    stays one string). The line ending goes (``\\n`` or ``\\r\\n``); a lone ``\\r`` inside a line (tqdm
    redraws) stays in it, so line numbers are an editor's."""
    number, end, size = 0, 0, len(text)
    while end < size:
        cut = text.find("\n", end)
        stop = size if cut < 0 else cut
        line = text[end:stop]
        number += 1
        yield number, line[:-1] if line.endswith("\r") else line
        end = stop + 1


_NON_FINITE = {
    "nan": math.nan,
    "+nan": math.nan,
    "-nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-inf": -math.inf,
    "-infinity": -math.inf,
}


def to_float(text: str) -> float:
    """A number as printed: ``1.5``, ``1e3``, ``NaN``/``nan``, ``inf``/``Infinity``/``-inf`` alike; ValueError else."""
    value = text.strip()
    special = _NON_FINITE.get(value.lower())
    if special is not None:
        return special
    return float(value)


def strict_row(row: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A row for strict JSON: NaN and ±inf (read alike from ``NaN``, ``nan``, ``inf``, ``Infinity``, …) become
    None; also returns the columns that were non-finite, for a note (``json.dumps(row, allow_nan=False)``)."""
    flagged = [key for key, value in row.items() if isinstance(value, float) and not math.isfinite(value)]
    if not flagged:
        return row, []
    return {key: None if key in flagged else value for key, value in row.items()}, flagged


@dataclass(frozen=True)
class Format:
    """One output format of a result kind: ``name`` is what a spec's ``benchmark.format`` says."""

    name: str
    detect: Callable[[str], bool]
    parse: Callable[..., ParsedRun]
