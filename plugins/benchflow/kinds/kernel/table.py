"""Kernel microbenchmark sweep: header lines, a column line, one row per token count M.

    GPU: NVIDIA RTX PRO 6000 Blackwell Server Edition
    MoE: E=384 hidden=7168 inter=2048 topk=8 bits=4 group=32
    M ms/call tok/s(MoE) us/token note
    1 0.151 6642 150.56 AR C=1
    ALL_DONE

Between us/token and the note, a table may carry more named columns; those this kind stores (the
payload's spread and roofline columns: ``p10_ms p90_ms kernel_ms experts bytes_MB GB/s TFLOP/s roof_ms pct_roof
pct_copy bound``)
are read, others are skipped with a warning. The note column is optional free text.

Without the done marker the run is incomplete and the rows
that completed are kept; a final line cut off mid-write (no newline) is dropped (a problem naming its
line), and text that ends the table of a crashed run (a traceback) is reported as a warning. Text in the
middle of the table is skipped and a malformed row dropped, each a problem naming its line: the other rows
are kept. ``NaN``, ``inf``, ``Infinity`` read alike.
"""

from __future__ import annotations

import re
from itertools import islice

from benchflow.parsing import Format, Notes, ParsedRun, ParseError, lines, to_float

NAME = "table"

# M ms/call tok/s(MoE) us/token note   /   M ms/call tok/s us/token kernel_ms experts bytes_MB GB/s ... bound note
COLUMNS_RE = re.compile(
    r"^\s*M\s+ms/call\s+tok/s(?:\([^)]*\))?\s+us/token(?P<extra>(?:\s+(?!note\s*$)[\w/%().-]+)*?)(?:\s+note)?\s*$"
)
# extra column header → (row key, scale); text columns have scale None
EXTRA_COLUMNS: dict[str, tuple[str, float | None]] = {
    "p10_ms": ("p10_ms", 1.0),
    "p90_ms": ("p90_ms", 1.0),
    "kernel_ms": ("kernel_ms", 1.0),
    "experts": ("experts", 1.0),
    "bytes_MB": ("bytes_read", 1e6),
    "GB/s": ("gbps", 1.0),
    "TFLOP/s": ("tflops", 1.0),
    "roof_ms": ("roofline_ms", 1.0),
    "pct_roof": ("pct_roofline", 1.0),
    "pct_copy": ("pct_copy_bw", 1.0),
    "bound": ("bound", None),
}
# 5.189   /   1.2e+03   /   nan   /   -inf   /   Infinity
_NUM = r"(?:[-+0-9.eE]+|(?i:[-+]?(?:nan|inf(?:inity)?)))"
# 90 5.189 17344 57.66 10 streams b8
ROW_RE = re.compile(rf"^\s*(?P<m>\d+)\s+(?P<ms>{_NUM})\s+(?P<tok>{_NUM})\s+(?P<us>{_NUM})(?:\s+(?P<note>\S.*?))?\s*$")
# GPU: NVIDIA RTX PRO 6000 ...   /   MoE: E=384 hidden=7168 ...
HEADER_FACT_RE = re.compile(r"^(?P<key>[A-Za-z][\w ]{0,30}):\s*(?P<value>.*?)\s*$")
# Interpreter and library chatter that may interleave with the table in a merged stdout/stderr log.
NOISE_RE = re.compile(r"^(\S*Warning:|\s+warnings\.warn|\s|W\d{4} |\[[^\]]*\] )")


def detect(text: str) -> bool:
    """The column line within the first 200 lines (streamed: a serving log never has it)."""
    return any(COLUMNS_RE.match(line) for _, line in islice(lines(text), 200))


def parse(text: str, marker: str = "ALL_DONE") -> ParsedRun:
    cut_off_last = bool(text) and not text.endswith("\n")
    meta: dict[str, str] = {}
    rows: list[dict[str, object]] = []
    notes = Notes()
    in_table = complete = False
    extra: list[str] = []  # names of the columns between us/token and the note
    table_end: tuple[int, str] | None = None  # first line of text after the rows (a crash's output?)
    last: tuple[int, str] | None = None  # a row that did not read: dropped, unless it was cut off mid-write
    for number, line in lines(text):
        if last is not None:  # not the last line after all: the row was malformed, not cut off
            notes.problem(
                last[0], f"malformed row (expected: M ms/call tok/s us/token [note]): {last[1][:160]!r}", dropped=True
            )
            last = None
        stripped = line.strip()
        if stripped == marker:
            if table_end is not None:
                notes.problem(table_end[0], f"text inside the table, skipped: {table_end[1][:160]!r}")
                table_end = None
            complete = True
            break
        if not in_table:
            if header := COLUMNS_RE.match(line):
                in_table = True
                extra = header["extra"].split()
                for name in extra:
                    if name not in EXTRA_COLUMNS:
                        notes.warn(number, f"column {name!r} is not stored (known: {', '.join(EXTRA_COLUMNS)})")
            elif fact := HEADER_FACT_RE.match(stripped):
                meta[fact["key"].strip()] = fact["value"]
            continue
        if not stripped:
            continue
        row, rest = _split(line, len(extra))
        if row is None:
            if stripped[0].isdigit():
                last = (number, line)
            elif NOISE_RE.match(line):
                notes.warn(number, f"skipped log noise: {line[:120]!r}")
            elif table_end is None:
                table_end = (number, line)
            continue
        if table_end is not None:  # rows after text: the text was inside the table, not its end
            notes.problem(table_end[0], f"text inside the table, skipped: {table_end[1][:160]!r}")
            table_end = None
        try:
            values = {k: to_float(row[k]) for k in ("ms", "tok", "us")}
        except ValueError:
            notes.problem(number, f"row has a value that is not a number: {line[:160]!r}", dropped=True)
            continue
        record: dict[str, object] = {
            "m": int(row["m"]),
            "ms_per_call": values["ms"],
            "tok_per_s": values["tok"],
            "us_per_token": values["us"],
            "note": row["note"] or "",
        }
        try:
            record |= _extra_values(extra, rest)
        except ValueError:
            notes.problem(number, f"row has a value that is not a number: {line[:160]!r}", dropped=True)
            continue
        rows.append(record)
    if last is not None:
        if cut_off_last:
            notes.problem(last[0], f"row cut off mid-write: {last[1][:160]!r}", dropped=True)
        else:
            notes.problem(
                last[0], f"malformed row (expected: M ms/call tok/s us/token [note]): {last[1][:160]!r}", dropped=True
            )
    if not in_table:
        raise ParseError("no 'M ms/call tok/s us/token' column line found")
    if table_end is not None:
        notes.warn(table_end[0], f"table ends at {table_end[1][:160]!r}")
    return notes.run(NAME, rows, complete, meta)


def _split(line: str, extra: int) -> tuple[re.Match[str] | None, list[str]]:
    """The base columns (and note) of a row, and the ``extra`` named columns' words between them."""
    if not extra:
        return ROW_RE.match(line), []
    words = line.split(None, 4 + extra)
    if len(words) < 4 + extra:
        return None, []
    base = " ".join(words[:4]) + (f" {words[4 + extra]}" if len(words) > 4 + extra else "")
    return ROW_RE.match(base), words[4 : 4 + extra]


def _extra_values(names: list[str], words: list[str]) -> dict[str, object]:
    values: dict[str, object] = {}
    for name, word in zip(names, words, strict=True):
        if name not in EXTRA_COLUMNS:
            continue
        key, scale = EXTRA_COLUMNS[name]
        values[key] = word if scale is None else to_float(word) * scale
    return values


FORMAT = Format(NAME, detect, parse)
