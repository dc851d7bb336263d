"""Parsers: pure functions from a benchmark's text output to tidy rows. No I/O.

Each format has a name, a ``detect(text) -> bool`` and a ``parse(text, marker) -> ParsedRun``;
:func:`parse_text` picks the format when none is named.
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


Format = tuple[Callable[[str], bool], Callable[..., ParsedRun]]


def _formats() -> dict[str, Format]:
    from benchflow.parsers import generic, kernel_sweep, serving

    return {
        kernel_sweep.FORMAT: (kernel_sweep.detect, kernel_sweep.parse),
        generic.FORMAT: (generic.detect, generic.parse),
        serving.FORMAT_LOG: (serving.detect_log, serving.parse_log),
        serving.FORMAT_SGLANG_JSONL: (serving.detect_sglang_jsonl, serving.parse_sglang_jsonl),
        serving.FORMAT_VLLM_JSON: (serving.detect_vllm_json, serving.parse_vllm_json),
    }


def parse_text(text: str, fmt: str | None = None, marker: str = "ALL_DONE", **options: Any) -> ParsedRun:
    """Parse ``text`` as ``fmt`` (detected when None); ``options`` go to the format (generic: patterns)."""
    formats = _formats()
    if fmt is None:
        found = [name for name, (detect, _) in formats.items() if detect(text)]
        if not found:
            raise ParseError(f"unknown format (known: {', '.join(sorted(formats))})")
        fmt = found[0]
    if fmt not in formats:
        raise ParseError(f"unknown format {fmt!r} (known: {', '.join(sorted(formats))})")
    return formats[fmt][1](text, marker=marker, **options)
