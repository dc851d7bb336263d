"""Kernel microbenchmark sweep: header lines, a column line, one row per token count M.

    GPU: NVIDIA RTX PRO 6000 Blackwell Server Edition
    MoE: E=384 hidden=7168 inter=2048 topk=8 bits=4 group=32
    M ms/call tok/s(MoE) us/token note
    1 0.151 6642 150.56 AR C=1
    ALL_DONE

Between us/token and the note, a table may carry more named columns; those this kind stores (the
payload's spread and roofline columns: ``p10_ms p90_ms kernel_ms experts bytes_MB GB/s TFLOP/s roof_ms pct_roof
pct_copy bound``)
are read, others are skipped with a warning. The note column is optional free text. An M that appears more
than once (``--m-list 64,64,64``: a bisection probe's repeats) gives one row per appearance, numbered by
``repeat`` (1, 2, …).

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
    return _Reader(marker, cut_off_last=bool(text) and not text.endswith("\n")).read(text)


MALFORMED = "malformed row (expected: M ms/call tok/s us/token [note])"


class _Reader:
    """The header facts above the column line, then the rows; the state a row's fate depends on: text after
    the rows (a crash's output, or text inside the table if rows follow) and a row that did not read (dropped,
    unless it was the output's last line, cut off mid-write)."""

    def __init__(self, marker: str, cut_off_last: bool):
        self.marker, self.cut_off_last = marker, cut_off_last
        self.meta: dict[str, str] = {}
        self.rows: list[dict[str, object]] = []
        self.notes = Notes()
        self.in_table = self.complete = False
        self.extra: list[str] = []  # names of the columns between us/token and the note
        self.table_end: tuple[int, str] | None = None  # first line of text after the rows
        self.last: tuple[int, str] | None = None  # a row that did not read
        self.seen: dict[int, int] = {}  # rows read per M: an M listed n times is n repeats of its case

    def read(self, text: str) -> ParsedRun:
        for number, line in lines(text):
            if self.last is not None:  # not the last line after all: the row was malformed, not cut off
                self.notes.problem(self.last[0], f"{MALFORMED}: {self.last[1][:160]!r}", dropped=True)
                self.last = None
            if line.strip() == self.marker:
                self.text_inside()
                self.complete = True
                break
            if self.in_table:
                self.row(number, line)
            else:
                self.header(number, line)
        if self.last is not None:
            what = "row cut off mid-write" if self.cut_off_last else MALFORMED
            self.notes.problem(self.last[0], f"{what}: {self.last[1][:160]!r}", dropped=True)
        if not self.in_table:
            raise ParseError("no 'M ms/call tok/s us/token' column line found")
        if self.table_end is not None:
            self.notes.warn(self.table_end[0], f"table ends at {self.table_end[1][:160]!r}")
        return self.notes.run(NAME, self.rows, self.complete, self.meta)

    def text_inside(self) -> None:
        """Text after rows turned out to be inside the table (rows or the marker follow it): a problem."""
        if self.table_end is not None:
            self.notes.problem(self.table_end[0], f"text inside the table, skipped: {self.table_end[1][:160]!r}")
            self.table_end = None

    def header(self, number: int, line: str) -> None:
        if header := COLUMNS_RE.match(line):
            self.in_table = True
            self.extra = header["extra"].split()
            for name in self.extra:
                if name not in EXTRA_COLUMNS:
                    self.notes.warn(number, f"column {name!r} is not stored (known: {', '.join(EXTRA_COLUMNS)})")
        elif fact := HEADER_FACT_RE.match(line.strip()):
            self.meta[fact["key"].strip()] = fact["value"]

    def row(self, number: int, line: str) -> None:
        stripped = line.strip()
        if not stripped:
            return
        row, rest = _split(line, len(self.extra))
        if row is None:
            if stripped[0].isdigit():
                self.last = (number, line)
            elif NOISE_RE.match(line):
                self.notes.warn(number, f"skipped log noise: {line[:120]!r}")
            elif self.table_end is None:
                self.table_end = (number, line)
            return
        self.text_inside()
        try:
            values = {k: to_float(row[k]) for k in ("ms", "tok", "us")}
            extra = _extra_values(self.extra, rest)
        except ValueError:
            self.notes.problem(number, f"row has a value that is not a number: {line[:160]!r}", dropped=True)
            return
        m = int(row["m"])
        self.seen[m] = self.seen.get(m, 0) + 1
        self.rows.append(
            {
                "m": m,
                **({"repeat": self.seen[m]} if self.seen[m] > 1 else {}),  # the kind's default is 1
                "ms_per_call": values["ms"],
                "tok_per_s": values["tok"],
                "us_per_token": values["us"],
                "note": row["note"] or "",
                **extra,
            }
        )


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
