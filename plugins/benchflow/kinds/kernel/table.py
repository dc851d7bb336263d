"""Kernel microbenchmark sweep: header lines, a column line, one row per token count M.

    GPU: NVIDIA RTX PRO 6000 Blackwell Server Edition
    MoE: E=384 hidden=7168 inter=2048 topk=8 bits=4 group=32
    M ms/call tok/s(MoE) us/token note
    1 0.151 6642 150.56 AR C=1
    ALL_DONE

The note column is optional free text. Without the done marker the run is incomplete and the rows
that completed are kept; a final line cut off mid-write (no newline) is dropped with a warning, and
text that ends the table of a crashed run (a traceback) is reported as a warning. Text in the middle
of the table, or before the marker of a run that finished, is an error naming its line.
"""

from __future__ import annotations

import re

from benchflow.parsing import Format, ParsedRun, ParseError

NAME = "table"

# M ms/call tok/s(MoE) us/token note
COLUMNS_RE = re.compile(r"^\s*M\s+ms/call\s+tok/s(?:\([^)]*\))?\s+us/token(?:\s+note)?\s*$")
# 90 5.189 17344 57.66 10 streams b8
ROW_RE = re.compile(
    r"^\s*(?P<m>\d+)\s+(?P<ms>[-+0-9.eE]+|nan|inf)\s+(?P<tok>[-+0-9.eE]+|nan|inf)"
    r"\s+(?P<us>[-+0-9.eE]+|nan|inf)(?:\s+(?P<note>\S.*?))?\s*$"
)
# GPU: NVIDIA RTX PRO 6000 ...   /   MoE: E=384 hidden=7168 ...
HEADER_FACT_RE = re.compile(r"^(?P<key>[A-Za-z][\w ]{0,30}):\s*(?P<value>.*?)\s*$")
# Interpreter and library chatter that may interleave with the table in a merged stdout/stderr log.
NOISE_RE = re.compile(r"^(\S*Warning:|\s+warnings\.warn|\s|W\d{4} |\[[^\]]*\] )")


def detect(text: str) -> bool:
    return any(COLUMNS_RE.match(line) for line in text.splitlines()[:200])


def parse(text: str, marker: str = "ALL_DONE") -> ParsedRun:
    lines = text.splitlines()
    cut_off_last = bool(text) and not text.endswith("\n")
    meta: dict[str, str] = {}
    rows: list[dict[str, object]] = []
    warnings: list[str] = []
    in_table = complete = False
    table_end: tuple[int, str] | None = None  # first line of text after the rows (a crash's output?)
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped == marker:
            if table_end is not None:
                raise ParseError("text inside the table (expected: M ms/call tok/s us/token [note])", *table_end)
            complete = True
            break
        if not in_table:
            if COLUMNS_RE.match(line):
                in_table = True
            elif fact := HEADER_FACT_RE.match(stripped):
                meta[fact["key"].strip()] = fact["value"]
            continue
        if not stripped:
            continue
        row = ROW_RE.match(line)
        if row is None:
            if number == len(lines) and cut_off_last:
                warnings.append(f"line {number}: dropped a row cut off mid-write: {line!r}")
                continue
            if stripped[0].isdigit():
                raise ParseError("malformed row (expected: M ms/call tok/s us/token [note])", number, line)
            if NOISE_RE.match(line):
                warnings.append(f"line {number}: skipped log noise: {line[:120]!r}")
            elif table_end is None:
                table_end = (number, line)
            continue
        if table_end is not None:
            raise ParseError("text inside the table (expected: M ms/call tok/s us/token [note])", *table_end)
        try:
            values = {k: float(row[k]) for k in ("ms", "tok", "us")}
        except ValueError:
            raise ParseError("row has a value that is not a number", number, line) from None
        rows.append(
            {
                "m": int(row["m"]),
                "ms_per_call": values["ms"],
                "tok_per_s": values["tok"],
                "us_per_token": values["us"],
                "note": row["note"] or "",
            }
        )
    if not in_table:
        raise ParseError("no 'M ms/call tok/s us/token' column line found")
    if table_end is not None:
        warnings.append(f"line {table_end[0]}: table ends at {table_end[1][:160]!r}")
    return ParsedRun(NAME, rows, complete, meta, warnings)


FORMAT = Format(NAME, detect, parse)
