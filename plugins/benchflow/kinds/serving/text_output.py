"""SGLang ``bench_serving`` and vLLM ``bench serve`` / ``benchmark_serving.py`` text output, every generation.

Result blocks, optionally under sweep phase headers (``===== PD concurrency=8 (n=24) =====``), inside whatever
else a log, a doc, an issue or a web page holds around them. Reading is driven by the labels the tools print
(``labels.tsv``, see :mod:`.labels`), not by the layout: headers, rules, fences and blank lines are hints.

The parser is a line classifier and a small block state machine, streamed over the lines:

* a result header (``==== Serving Benchmark Result ====`` at any rule width, glued to a tqdm bar, split over two
  lines, the title alone) opens a block; the text in front of it is the block's line prefix (``# ``, a
  timestamp, ``svc-1  | ``), taken off every line;
* a known label outside a block also opens one, without a header (vLLM's 2023 and early-2024 scripts print none,
  and pastes lose it); such a block becomes a row once it holds :data:`MIN_HEADLESS` figures. The rate and
  concurrency vLLM prints above its block open one too, and the header that follows continues it;
* inside a block, ``label: value`` lines fill the row, values converted to the column's unit (``294.1 s``,
  ``Mean E2EL (s)`` → ms); a label already seen in the block starts the next row; a line holding several
  ``label: value`` pairs (a block flattened onto one line) reads pair by pair; a line quoted as a JSON string
  (``"Successful requests: 256",``), a notebook's output, a list of the lines on one line, an HTML page's
  ``<br>`` lines, a two-column markdown table, bullets, bold and terminal colours read as the text they hold;
* a closing ``=`` rule, a fence, a new header or the done marker ends the block; a plain dashed line, a blank or
  an odd line (a fork's extra section, a cut line) *suspends* it: a known label for a column it has not
  filled resumes it, one it has filled starts the next row, anything else is outside the block;
* nothing is lost in silence: every ``label: number`` line in a block or within :data:`NEAR` lines of one
  either fills a column, is a label the table declares ``ignored``, or is a warning naming its line; figures of
  a block without a header too short to be a row are warnings (problems, ``dropped``, when they follow a block
  that ended at an unexpected line);
* a block cut off at the end of the output keeps its values (the rest stay None), with a problem that names
  its line (``dropped=False``); a headed block that yields no value at all is dropped (``dropped=True``).
"""

from __future__ import annotations

import math
import re
from collections import deque
from typing import Any, Literal

from benchflow.kinds.serving import json_records as records
from benchflow.kinds.serving.common import INTS, LEADING_NUMBER_RE, empty_row, finish, leading_number
from benchflow.kinds.serving.labels import PREAMBLE, Label, lookup, scale, unit_of
from benchflow.parsing import Format, Notes, ParsedRun, lines

NAME = "log"
DETECT_CHARS = 4_000_000  # detect looks at this much of the output at most for a header
HEADLESS_DETECT_CHARS = 256_000  # and at this much for a block without one
SUSPENDED_LINES = 40  # a suspended block resumes only within this many lines
MIN_HEADLESS = 3  # figures a block without a header needs to be a row (the 2023 script prints three)
NEAR = 8  # lines around a block in which an unread ``label: number`` line is reported

# ===== PD concurrency=8 (n=24) =====   /   ... (n=24) repeat=2 =====   /   ... (n=8) warmup =====
# (the project's own sweep driver: a phase, the repeat of it, or the warm-up phase whose results are kept, marked)
# ===== PD request_rate=4 (n=24) =====   /   ===== PD request_rate=4 concurrency=64 (n=24) =====   (a rate sweep,
# under a concurrency cap or none)
PHASE_RE = re.compile(
    r"={3,}\s*(?P<config>\S.*?)\s+(?=(?:request_rate|concurrency)=)(?:request_rate=(?P<q>\d+(?:\.\d+)?)\s+)?"
    r"(?:concurrency=(?P<c>\d+)\s+)?\(n=(?P<n>\d+)\)"
    r"(?:\s+repeat=(?P<repeat>\d+)|\s+(?P<warmup>warmup))?\s*={3,}\s*$"
)
PHASE_WORDS = ("concurrency=", "request_rate=")  # cheap: only a line with one can be a phase header


def _phase_line(line: str) -> re.Match[str] | None:
    return PHASE_RE.search(line) if any(w in line for w in PHASE_WORDS) else None


# ============ Serving Benchmark Result ============   /   --- Serving Benchmark Result ---
# 100%|██████████| 80/80 [00:12<00:00]============ Serving Benchmark Result ============   (glued to tqdm)
# ====== Offline Throughput Benchmark Result =======   (SGLang bench_offline_throughput: the same labels)
# ================ Benchmark Result ================   (xLLM's copy of SGLang's script)
_TITLE = r"(?:(?:Serving|Offline\s+Throughput)\s+)?Benchmark"
HEADER_RE = re.compile(rf"(?:={{3,}}|-{{3,}})\s*{_TITLE}\s+Result\b", re.I)
# Serving Benchmark Result   /   ## Serving Benchmark Result   (hand-formatted: the title alone, rules around it)
TITLE_RE = re.compile(r"^\s*[=\-#*]*\s*(?:Serving|Offline\s+Throughput)\s+Benchmark\s+Result\s*[=\-*:]*\s*$", re.I)
# ============ Serving Benchmark       (first half of a header split over two lines; the next starts "Result")
HALF_HEADER_RE = re.compile(r"(?:={3,}|-{3,})\s*(?:Serving|Offline\s+Throughput)\s+Benchmark\s*$", re.I)
# Result ============
HEADER_TAIL_RE = re.compile(r"^\s*Result\b\s*[=\-]*\s*$", re.I)
# ==================================================   (the tools' closing rule)
EQ_RULE_RE = re.compile(r"^\s*={3,}\s*$")
# --------------------------------------------------   (a plain dashed line: a hint, never an end by itself)
DASH_RULE_RE = re.compile(r"^\s*-{10,}\s*$")
# ---------------Time to First Token----------------   /   -------------- Performance Metrics ---------------
SECTION_RE = re.compile(r"^\s*-{3,}\s*[^-\s].*?-{3,}\s*$")
# ```   /   ```python   /   ~~~
FENCE_RE = re.compile(r"^\s*(?:```|~~~)")
# Mean TTFT (ms):                 153.00   /   Failed requests:   0   <<< note   /   Per-position acceptance (%):
# Successful requests:100   (collapsed by a web page)
# "Mean TTFT (ms)": 12.5,   (a person's dict of the printed labels)
LINE_RE = re.compile(r"^\s*\"?(?P<label>[A-Za-z][^:\"]*?)\"?\s*:(?:(?:\s+|(?=[-+.]?\d))(?P<value>\S.*?))?\s*$")
# \x1b[32m ... \x1b[0m   (a terminal's colours, kept by a log)
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# concurrency 8:  /  max_concurrency=8  /  Concurrency: 16  /  qps 4:  /  QPS=inf  /  request rate 16  /  qps1
# (a sweep's label above a block)
SWEEP_RE = re.compile(
    r"^\s*(?:(?:max[ _-]?)?concurrency\s*[:=]?\s*(?P<concurrency>\d+)"
    r"|(?:qps|rps|request[ _-]?rate)\s*[:=]?\s*(?P<request_rate>[0-9.]+|inf))\s*:?\s*$",
    re.I,
)
_SWEEP_LABEL_CHARS = 40  # a sweep label is a short line; longer ones are not tried
# Namespace(... num_prompts=80, request_rate=inf, max_concurrency=8 ...)  /  --num-prompts 3000  /  num_prompts=80
ARG_RE = re.compile(
    r"(?:^|[\s,(])(?:--)?(?P<arg>num[-_]prompts|max[-_]concurrency|request[-_]rate)(?:=|\s+)(?P<v>[0-9.]+|inf)\b",
    re.I,
)
_ARG_COLUMNS = {"num_prompts": "num_prompts", "max_concurrency": "concurrency", "request_rate": "request_rate"}
# What a log line may carry in front of the tool's own text, repeated: "# ", "service-1  | ", "[rank0]: ",
# "2026-11-29 02:00:01 ", "INFO 07-02 09:38:25 [utils.py:20] ", "(APIServer pid=12) ", "... - INFO - ".
PREFIX_RE = re.compile(
    r"^(?:\s*(?:#+|//|>+)\s?"
    r"|\s*[\w.-]+\s+\|\s"
    r"|\s*\[[^\]]{0,80}\]:?\s*"
    r"|\s*\([\w\s=.,-]{1,60}\)\s*(?=\S)"
    r"|\s*[-|*•]\s+"
    r"|\s*\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s*"
    r"|\s*\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\s*"
    r"|\s*(?:INFO|WARNING|WARN|DEBUG|ERROR|CRITICAL)\b(?::[\w.]+:)?:?\s*)+"
)
# "Successful requests: 256",   /   "Max request concurrency: not set\n",   (a block quoted as JSON strings)
QUOTED_RE = re.compile(r"^(?P<pre>\s*)\"(?P<body>(?:[^\"\\]|\\.)*)\"\s*,?\s*$")
_QUOTE_ENDS = ('"', '",', '", ')
_CLEAN = ("blank", "rule", "heading")  # what suspends a block without a sign that something was lost
_BRACKETS = "[]{}(),;"  # a line of these alone is the bracket of the JSON or list a block is in
_TABLE_STARTS = ("|", " |", "  |")  # a markdown table's row
_OPENERS = "[({\"'"  # what a list, a dict or a string written on one line starts with
_RARE_RE = re.compile(r"[\uff1a\x1b\r*\\<`]")  # what _cleaned changes, and the \\n or <br> of held lines
_BR_RE = re.compile(r"<br\s*/?>", re.I)
_TAG_RE = re.compile(r"</?[A-Za-z][^<>]{0,200}>")
_RULE_RUN_RE = re.compile(r"[=\-]{3,}")
_CLOSING_RE = re.compile(r"={10,}[\s\[\]{}(),;]*$")
_DIGIT_RE = re.compile(r"\d")
_IN_BLOCK_ONLY = {"request rate configured (rps)"}  # vLLM prints it among the block's counts, never above
_WHOLE_ONLY = {"concurrency"}  # read only as a whole number: SGLang's own "Concurrency:" is a measured mean
_NUMBER_START = frozenset("0123456789+-.iInN")
_NUMBER_HEAD_RE = re.compile(r"[-+]?(?:\d|\.\d|inf(?![a-z])|nan(?![a-z]))", re.I)
_LONGEST_LABEL = 8  # words: the longest label a flattened line is searched for


def detect(text: str) -> bool:
    """A result header (or its first half) or a sweep phase header in the first :data:`DETECT_CHARS`; else a
    block without a header (a run of known labels) in the first :data:`HEADLESS_DETECT_CHARS`, unless that
    text is a saved JSON result (its own formats)."""
    end = min(len(text), DETECT_CHARS)
    if (
        text.find("Serving Benchmark", 0, end) >= 0
        or text.find("Benchmark Result", 0, end) >= 0
        or PHASE_RE.search(text, 0, end) is not None
    ):
        return True
    head = text[:HEADLESS_DETECT_CHARS]
    return not records.results(records.head(head)) and bool(_Reader("ALL_DONE").read(head).rows)


class _Block:
    """The block being read: its row, where it started, the prefix its lines carry, its state."""

    def __init__(self, row: dict[str, Any], line: int, prefix: str, header: bool):
        self.row, self.line, self.prefix, self.header = row, line, prefix, header
        self.masked = _DIGIT_RE.sub("0", prefix)
        self.values = 0
        self.body_values = 0  # values past the block's preamble (rate, concurrency): counts, throughputs, latencies
        self.seen: set[str] = set()  # labels read in this block: one read again starts the next row
        self.figures: list[tuple[int, str, str]] = []  # (line, label, column): reported if it is no row
        self.provisional: set[str] = set()  # columns read above its header: its own lines override them
        self.from_above: set[str] = set()  # preamble columns filled from text above it: its own lines override
        self.before: list[tuple[int, str]] = []  # unread label: number lines just above it
        self.titled = False  # opened by a title without rules (a doc heading?): an empty one is no loss
        self.suspended_at: int | None = None  # line that suspended it
        self.suspended_by: str = ""  # one of _CLEAN, or the odd line's text
        self.odd: list[tuple[int, str]] = []  # odd lines skipped inside it

    def body(self, line: str) -> str:
        """The line without this block's prefix (the header's, digits may differ) or a generic log prefix."""
        if self.prefix:
            head = line[: len(self.prefix)]
            if head == self.prefix or _DIGIT_RE.sub("0", head) == self.masked:
                return line[len(self.prefix) :]
            if head.strip() == self.prefix.strip() and not line[len(self.prefix.rstrip()) :].strip():
                return ""  # "#" alone on a line with prefix "# ": a blank line
        return PREFIX_RE.sub("", line, count=1)

    def suspend(self, line: int, by: str) -> None:
        self.suspended_at, self.suspended_by = line, by

    def resume(self) -> None:
        self.suspended_at = None


Phase = tuple[str, int | None, float | None, int, int, bool]  # config, concurrency, rate, prompts, repeat, warm-up


def _phase_name(phase: Phase) -> str:
    config, concurrency, rate, _, repeat, warmup = phase
    load = " ".join(
        f"{name}={value:g}"
        for name, value in (("request_rate", rate), ("concurrency", concurrency))
        if value is not None
    )
    return f"{config} {load}" + (" warmup" if warmup else f" repeat={repeat}" if repeat > 1 else "")


def parse(text: str, marker: str = "ALL_DONE") -> ParsedRun:
    return _Reader(marker).read(text)


_Step = Literal["next", "stop", "outside"]  # what to do with a line after the block has seen it


def unquoted(line: str) -> list[str] | None:
    """A line quoted as a JSON string (``"Successful requests: 256",``, a notebook's ``"...\\n",``), or one
    holding a whole output as one string with ``\\n`` escapes (``{"stdout": "=== Serving ...\\n..."}``), as
    the lines it holds; None when it is neither, or holds nothing a block could be made of."""
    found = QUOTED_RE.match(line)
    if found is not None:
        pre, text = found["pre"], found["body"]
    elif "\\n" in line:
        pre, text = "", line
    elif "<br" in line:  # an HTML page's lines
        pre, text = "", _TAG_RE.sub("", _BR_RE.sub(lambda _: "\\n", line))
    else:
        return None
    if ":" not in text and "enchmark" not in text and not _RULE_RUN_RE.search(text):
        return None
    parts = text.replace('\\"', '"').replace("\\t", "\t").replace("\\r\\n", "\\n").split("\\n")
    if len(parts) > 1 and not parts[-1].strip():
        parts.pop()
    return [pre + part for part in parts]


def _cleaned(line: str) -> str:
    """A line as a terminal or a reader sees it: full-width colons (a translated doc) as ``:``, colours,
    markdown bold and inline-code backticks gone, tqdm's redraws (carriage returns) down to the text after the
    last one."""
    if "\uff1a" in line:
        line = line.replace("\uff1a", ":")
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
    if "\r" in line:
        line = line.rstrip()
        line = line[line.rfind("\r") + 1 :]
    if "`" in line and not FENCE_RE.match(line):  # inline code around a label or a value, or a stray backtick
        line = line.replace("`", "")
    return line.replace("**", "") if "**" in line else line


def table_row(line: str) -> str:
    """A markdown table's row ``| Mean TTFT (ms) | 12.5 |`` whose first cell is a known label as the line
    ``Mean TTFT (ms): 12.5`` (a block a person turned into a two-column table); any other line as it is."""
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    if len(cells) != 2 or not cells[0] or not cells[1] or lookup(cells[0].strip("*` ").rstrip(":")) is None:
        return line
    return f"{cells[0].strip('*` ').rstrip(':')}: {cells[1].strip('*` ')}"


class _Reader:
    """The line classifier and block state machine behind :func:`parse`: outside a block, lines are phase
    headers, result headers, known labels that open a block without a header, or lines about the next block;
    inside one, ``label: value`` lines, section rules, the closing rule, or an odd line that suspends the block
    until it resumes or ends."""

    def __init__(self, marker: str):
        self.marker = marker
        self.notes = Notes()
        self.rows: list[dict[str, Any]] = []
        self.phase: Phase | None = None
        self.phase_rows = 0
        self.empty_phases: list[str] = []  # phases whose client printed no result block (a failed phase)
        self.above: dict[str, Any] = {}  # values printed above the next block
        self.row_line = 0  # where the block of the last row began
        self.block: _Block | None = None
        self.half_header: int | None = None  # line of the first half of a split header
        self.complete = False
        self.loose: deque[tuple[int, str]] = deque(maxlen=NEAR)  # unread label: number lines outside blocks
        self.near_until = 0  # unread label: number lines up to this line follow a block: reported at once
        self.odd_end = 0  # line where the last block ended at an unexpected line (0: none)
        self.unflat: set[str] = set()  # first labels of lines found to hold no known pairs

    def read(self, text: str) -> ParsedRun:
        last = 0
        for number_, raw in lines(text):
            last = number_
            rare = _RARE_RE.search(raw) is not None
            line = _cleaned(raw) if rare else raw
            if line.startswith(_TABLE_STARTS):
                line = table_row(line)
            holds = line.endswith(_QUOTE_ENDS) or (rare and ("\\n" in line or "<br" in line))
            if holds and (held := unquoted(line)):
                if any(self.step(number_, part) == "stop" for part in held):
                    break
                continue
            # self.step(number_, line), inlined: this is the path every line of a 50 MB log takes
            step: _Step = self.in_block(number_, line) if self.block is not None else "outside"
            if step == "outside":
                step = self.outside(number_, line)
            if step == "stop":
                break
        return self.finish(last)

    def step(self, number_: int, line: str) -> _Step:
        step: _Step = self.in_block(number_, line) if self.block is not None else "outside"
        return self.outside(number_, line) if step == "outside" else step

    def finish(self, last: int) -> ParsedRun:
        if self.block is not None:
            self.close("eof", last)
        if self.complete and self.phase is not None and self.phase_rows == 0:
            self.empty_phases.append(_phase_name(self.phase))
        if self.empty_phases:
            self.complete = False
            self.notes.warn(None, f"phases without a result: {', '.join(self.empty_phases)}")
        if not self.rows and not self.empty_phases:
            self.notes.problem(
                None, f"no result block: no '{_TITLE_TEXT}' header and no {MIN_HEADLESS} known labels together"
            )
        if self.phase is None and not self.complete:
            # a client's own output (no sweep driver, so no marker): complete when every block was read whole
            self.complete = bool(self.rows) and not self.notes.problems
        return self.notes.run(NAME, self.rows, self.complete)

    def close(self, how: str, at: int) -> None:
        """End the current block: keep its row unless it read nothing (or, without a header, too little);
        note how it ended when irregular."""
        block, notes = self.block, self.notes
        assert block is not None
        self.block = None
        odd = block.suspended_by not in ("", *_CLEAN)
        if not block.header and block.body_values < MIN_HEADLESS:
            self.dissolve(block)
            return
        if block.values == 0:
            if block.titled:
                notes.warn(block.line, "a 'Serving Benchmark Result' title without values")
            else:
                notes.problem(block.line, "result block with no values; dropped", dropped=True)
        elif not block.header and self.rows and _repeats(block, self.rows[-1]):
            notes.warn(block.line, f"repeats the values of the result block at line {self.row_line}: not a new row")
        else:
            self.rows.append(finish(block.row))
            self.row_line = block.line
            self.phase_rows += 1
            for number_, label in block.before:
                notes.warn(number_, f"unknown label {label!r} above a result block; not read")
            if block.header:
                self.note_end(block, how, at, odd)
        for number_, text in block.odd[1 if how != "rule" and block.header else 0 :][:3]:
            notes.warn(number_, f"skipped a line inside a result block: {text[:120]!r}")
        self.near_until = at + NEAR
        self.odd_end = (block.suspended_at or at) if odd and how != "rule" else 0

    def note_end(self, block: _Block, how: str, at: int, odd: bool) -> None:
        """A problem for a headed block that did not end at its closing rule (cut off, cut short, odd line)."""
        notes = self.notes
        if how == "eof" and block.suspended_by not in _CLEAN:
            cut = block.suspended_at if block.suspended_at is not None else at
            notes.problem(
                cut,
                f"result block (line {block.line}) cut off at the end of the output; "
                f"kept its {block.values} values, the rest are unknown",
            )
        elif how in ("phase", "header", "marker") and block.suspended_by not in _CLEAN:
            ended = {"phase": "a sweep phase header", "header": "the next result header", "marker": "the marker"}
            notes.problem(
                at,
                f"result block (line {block.line}) cut short by {ended[how]}; kept its "
                f"{block.values} values, the rest are unknown",
            )
        elif how != "rule" and odd:
            first = block.odd[0] if block.odd else (block.suspended_at, block.suspended_by)
            notes.problem(
                first[0],
                f"result block (line {block.line}) ended by a line that is not "
                f"'label: value': {str(first[1])[:120]!r}; kept its {block.values} values",
            )

    def dissolve(self, block: _Block) -> None:
        """A block without a header too short to be a row: its settings are about the next block, its figures
        are reported (lost past an unexpected line: a problem that drops them)."""
        for column in PREAMBLE:
            if block.row[column] is not None:
                self.above[column] = block.row[column]
        for number_, label, _ in block.figures:
            if self.odd_end and number_ - self.odd_end <= SUSPENDED_LINES:
                self.notes.problem(
                    number_,
                    f"{label!r} after the result block that ended at line {self.odd_end}: not read",
                    dropped=True,
                )
            else:
                too_few = f"fewer than {MIN_HEADLESS} figures together"
                self.notes.warn(number_, f"{label!r} outside a result block ({too_few}): not read")

    def open_block(self, at: int, prefix: str, header: bool = True) -> _Block:
        config, concurrency, rate, prompts, repeat, warmup = self.phase or (None, None, None, None, 1, False)
        row = empty_row(config, concurrency, prompts, repeat, warmup)
        row["request_rate"] = rate
        from_above = set()
        for column, value in self.above.items():
            if row[column] is None:
                row[column] = value
                from_above.add(column)
        self.above.clear()
        self.block = _Block(row, at, prefix, header)
        self.block.from_above = from_above
        self.block.before = [(n, label) for n, label in self.loose if at - n <= NEAR]
        self.loose.clear()
        return self.block

    def confirm(self, block: _Block, at: int, prefix: str, titled: bool) -> None:
        """A header under a block's preamble (vLLM's rate and concurrency above it, TensorRT-LLM's failed
        count, a person's notes): the block goes on, headed; its own lines override the figures above it."""
        block.header, block.line, block.prefix = True, at, prefix
        block.masked = _DIGIT_RE.sub("0", prefix)
        block.titled = titled and block.values == 0
        block.provisional = {column for _, _, column in block.figures}
        block.body_values = 0
        block.seen.clear()
        block.odd.clear()
        block.resume()

    def in_block(self, number_: int, line: str) -> _Step:
        block = self.block
        assert block is not None
        body = block.body(line)
        stripped = body.strip()
        if stripped == self.marker or line.strip() == self.marker:
            self.close("marker", number_)
            self.complete = True
            return "stop"
        if "enchmark" in line and ((header := HEADER_RE.search(line)) or TITLE_RE.match(body)):
            if block.values if block.header else block.body_values >= MIN_HEADLESS:
                self.close("header", number_)
                return "outside"  # the new header is read there
            self.confirm(block, number_, line[: header.start()] if header else "", header is None)
            return self.flattened(block, number_, line[header.end() :]) if header else "next"
        if _phase_line(line):
            self.close("phase", number_)
            return "outside"
        return self.in_body(block, number_, body, stripped)

    def in_body(self, block: _Block, number_: int, body: str, stripped: str) -> _Step:
        """A line of a block that is neither a header nor the marker."""
        if EQ_RULE_RE.match(body):
            if block.body_values:  # else: the rule under a header, or between a preamble and the figures
                self.close("rule", number_)
            return "next"
        if DASH_RULE_RE.match(body):
            if block.body_values and block.suspended_at is None:
                block.suspend(number_, "rule")
            return "next"
        if FENCE_RE.match(body):
            self.close("fence", number_)
            return "next"
        if block.suspended_at is not None:
            return self.suspended(block, number_, body, stripped)
        if not stripped.strip(_BRACKETS):  # a blank line, or a bracket of the JSON or list the block is in
            block.suspend(number_, "blank")
        elif SECTION_RE.match(body):
            pass
        elif (found := LINE_RE.match(body)) is not None:
            return self.label_line(block, number_, found, stripped)
        else:
            block.suspend(number_, stripped)
            block.odd.append((number_, stripped))
        return "next"

    def suspended(self, block: _Block, number_: int, body: str, stripped: str) -> _Step:
        """A line after a blank, dashed or odd line: the block resumes, stays suspended, or has ended."""
        if number_ - (block.suspended_at or 0) > SUSPENDED_LINES:
            self.close("suspended", number_)
            return "outside"
        if SECTION_RE.match(body):
            block.resume()
            return "next"
        found = LINE_RE.match(body)
        entry = lookup(found["label"]) if found is not None and found["value"] else None
        if found is not None and entry is not None and entry.column is not None:
            if not _resumes(block, entry):
                self.close("suspended", number_)
                return "outside"  # a label the block has: the next row starts here (or is above the next block)
            block.resume()
            return self.label_line(block, number_, found, stripped)
        if found is not None and entry is None and _numeric_line(found):
            self.notes.warn(number_, f"unknown label {found['label']!r} near a result block; not read")
            return "next"
        if stripped and block.suspended_by not in _CLEAN and entry is None:
            block.odd.append((number_, stripped))
        _above(body, self.above)  # outside the block after all: may be about the next one
        return "next"

    def label_line(self, block: _Block, number_: int, found: re.Match[str], stripped: str) -> _Step:
        label, value = found["label"], found["value"]
        entry = lookup(label)
        if value is None:  # a sub-heading ("Per-position acceptance (%):") or a cut line
            if entry is not None and entry.column is not None:
                self.notes.problem(number_, f"{label!r} has no value")
            elif entry is None:  # a heading of the paste's own ("LLAMA 2:"): what follows may be another run
                self.notes.warn(number_, f"label without a value inside a result block: {stripped[:120]!r}")
                block.suspend(number_, "heading")
            return "next"
        if entry is not None and entry.column is not None and _read_already(block, entry):
            self.close("repeat", number_)
            return "outside"  # a label (or figure) the block has read: the next row starts here
        if ":" in value:
            return self.flattened(block, number_, f"{label}: {value}")
        self.assign(block, number_, label, entry, value)
        return "next"

    def flattened(self, block: _Block, number_: int, text: str) -> _Step:
        """A line holding several ``label: value`` pairs (a block flattened onto one line by a web page, or the
        text after a header on its line): a label seen again starts the next row, a closing rule at the end
        ends the block."""
        pairs = _pairs(text)
        for label, value in pairs:
            entry = lookup(label)
            if entry is not None and entry.column is not None and _read_already(block, entry):
                self.close("repeat", number_)
                block = self.open_block(number_, "", header=False)
            if value:
                self.assign(block, number_, label, entry, value)
            elif entry is not None and entry.column is not None:
                self.notes.problem(number_, f"{label!r} has no value")
        if pairs and _CLOSING_RE.search(pairs[-1][1]) and block.body_values and self.block is block:
            self.close("rule", number_)
        return "next"

    def headed(self, number_: int, line: str, header: re.Match[str]) -> _Step:
        """A result header outside a block: the text in front of it is the block's line prefix, or, when it
        holds known labels (a whole output flattened onto one line), the block's first pairs."""
        self.half_header = None
        front, rest = line[: header.start()], line[header.end() :]
        if ":" in front and any(lookup(label) is not None for label, _ in _pairs(front)):
            self.flattened(self.open_block(number_, "", header=False), number_, front)
            if self.block is not None and (self.block.header or self.block.body_values >= MIN_HEADLESS):
                self.close("header", number_)  # the labels in front were a block of their own
            block = self.block or self.open_block(number_, "")
            self.confirm(block, number_, "", False)
            return self.flattened(block, number_, rest)
        return self.flattened(self.open_block(number_, front), number_, rest)

    def assign(self, block: _Block, line_no: int, label: str, entry: Label | None, value: str) -> None:
        """Read one value into the block's row, in its column's unit; what cannot be read is reported."""
        notes = self.notes
        if entry is None:
            if _numeric(value) or not value.strip().startswith(("http", "/")):
                notes.warn(line_no, f"unknown label {label!r}")
            return
        if entry.column is None:
            return  # a label the table declares ignored
        try:
            number, rest = leading_number(value)
        except ValueError:
            if entry.role == "preamble":
                notes.warn(line_no, f"value of {label!r} is not a number: {value[:80]!r}; not read")
            else:
                notes.problem(line_no, f"value of {label!r} is not a number: {value[:80]!r}", dropped=True)
            return
        if entry.key in _WHOLE_ONLY and (number is None or "." in value.split()[0]):
            return  # SGLang's measured mean concurrency ("Concurrency: 49.12"), not the configured level
        factor = _factor(entry, label, rest, line_no, notes)
        if factor is None:
            return
        _store(block, entry, label, number, factor, line_no, value, notes)

    def outside(self, number_: int, line: str) -> _Step:
        if self.marker in line and line.strip() == self.marker:
            self.complete = True
            return "stop"
        serving = "enchmark" in line  # cheap: only such a line can be a header
        if match := _phase_line(line):
            self.new_phase(match)
        elif serving and (header := HEADER_RE.search(line)):
            return self.headed(number_, line, header)
        elif self.half_header == number_ - 1 and HEADER_TAIL_RE.match(PREFIX_RE.sub("", line)):
            self.open_block(number_, "")
            self.half_header = None
        elif serving and HALF_HEADER_RE.search(line):
            self.half_header = number_
        else:
            return self.plain(number_, line, serving)
        return "next"

    def plain(self, number_: int, line: str, serving: bool) -> _Step:
        """A line outside a block that is no header: a title, a known label (a block without a header starts),
        an unread ``label: number`` line, or a line about the next block."""
        body = PREFIX_RE.sub("", line, count=1)
        if body.lstrip().startswith("{") and _json_record(body):
            self.notes.warn(number_, "a JSON record (a client's saved result) in the log: not read as labels")
            return "next"
        if serving and TITLE_RE.match(body):
            self.open_block(number_, "").titled = True
            return "next"
        if len(body) <= _SWEEP_LABEL_CHARS and (sweep := SWEEP_RE.match(body)):
            self.above[sweep.lastgroup or ""] = leading_number(sweep[sweep.lastgroup or ""])[0]
            return "next"
        found = LINE_RE.match(body) if ":" in body else None
        if found is None and body.lstrip()[:1] in _OPENERS and body.count(":") >= MIN_HEADLESS:
            if self.flat_start(number_, body, body.split(":", 1)[0]):  # ["Total time: 166.88 s", "Throughput: ...
                return "next"
        elif found is not None and found["value"]:
            entry = lookup(found["label"])
            if entry is not None and entry.column is not None:
                block = self.open_block(number_, line[: len(line) - len(body)], header=False)
                return self.label_line(block, number_, found, body.strip())
            if entry is None and ":" in found["value"] and self.flat_start(number_, body, found["label"]):
                return "next"
            if entry is None and _numeric_line(found):
                self.loose_line(number_, found["label"])
        if "=" in body or "--" in body:
            _arguments(body, self.above)
        return "next"

    def flat_start(self, number_: int, body: str, label: str) -> bool:
        """Whether a line whose first label is unknown holds known ``label: value`` pairs after it (a block
        flattened onto one line behind other text): read as a block without a header. A first label found to
        hold none is not tried again (log lines repeat their labels)."""
        if label in self.unflat:
            return False
        if not any(_mapped(lookup(other)) for other, _ in _pairs(body)[0 if label[:1] in _OPENERS else 1 :]):
            if len(self.unflat) < 10_000:
                self.unflat.add(label)
            return False
        self.flattened(self.open_block(number_, "", header=False), number_, body)
        return True

    def loose_line(self, number_: int, label: str) -> None:
        """An unknown ``label: number`` line outside any block: reported now if a block just ended, kept to
        be reported if the next block starts within :data:`NEAR` lines."""
        if "=" in label or ("(" in label and ")" not in label):
            return  # a Namespace(...) dump or a key=value line, not a label
        if number_ <= self.near_until:
            self.notes.warn(number_, f"unknown label {label!r} near a result block; not read")
        else:
            self.loose.append((number_, label))

    def new_phase(self, match: re.Match[str]) -> None:
        if self.phase is not None and self.phase_rows == 0:
            self.empty_phases.append(_phase_name(self.phase))
        warmup = match["warmup"] is not None
        repeat = 0 if warmup else int(match["repeat"] or 1)
        concurrency = int(match["c"]) if match["c"] else None
        rate = float(match["q"]) if match["q"] else None
        self.phase, self.phase_rows = (match["config"], concurrency, rate, int(match["n"]), repeat, warmup), 0
        self.above.clear()
        self.half_header = None


_TITLE_TEXT = "Serving Benchmark Result"


_JSON_KEY_RE = re.compile(r'"([^"\\]{1,200})"\s*:')
_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _json_record(body: str) -> bool:
    """Whether a line is a machine's JSON object (``{"request_rate": 10.0, "max_concurrency": 8, …}``: a client's
    saved result echoed into a log), whole or cut off: its keys are identifiers, never printed labels. Such a line
    is a record, never a source of labels for the blocks around it (a person's dict of the printed labels,
    ``{"Mean TTFT (ms)": 12.5}``, is read)."""
    keys = _JSON_KEY_RE.findall(body[:20_000])
    return len(keys) >= 2 and all(_IDENTIFIER_RE.fullmatch(key) for key in keys)


def _repeats(block: _Block, last: dict[str, Any]) -> bool:
    """Whether a block without a header only repeats figures of the row before it (a one-line digest of the block
    a tool prints after it, ``PERF_LINES: Request throughput (req/s): 5.22 | …``): every figure it holds, the same."""
    columns = {column for _, _, column in block.figures}
    return len(columns) >= 2 and all(block.row[c] is not None and block.row[c] == last.get(c) for c in columns)


def _mapped(entry: Label | None) -> bool:
    return entry is not None and entry.column is not None


def _numeric(value: str) -> bool:
    return LEADING_NUMBER_RE.match(value.strip()) is not None


def _numeric_line(found: re.Match[str]) -> bool:
    """Whether a ``label: value`` match has the shape ``label: number`` a tool prints: a short label, a space
    after the colon (``09:15:57`` is a time), a number."""
    value = found["value"]
    if value is None or value[0] not in _NUMBER_START or found.start("value") - found.end("label") < 2:
        return False
    return len(found["label"]) <= 60 and _NUMBER_HEAD_RE.match(value) is not None


def _factor(entry: Label, label: str, rest: str, line_no: int, notes: Notes) -> float | None:
    """The factor from the printed unit (after the value, else in the label) to the column's; None (with a
    warning) when the unit does not fit the column."""
    assert entry.column is not None
    unit = entry.unit
    rest = rest.strip(" ,;").rstrip(" ,;]})'\"")  # the separators and closers of a dict or list it was pasted as
    suffix = unit_of(rest) if rest else None
    if suffix is not None:
        unit = suffix
    elif rest and not _RULE_RUN_RE.match(rest) and not (entry.column == "request_rate" and rest.startswith("(")):
        notes.warn(line_no, f"text after the value of {label!r} ignored: {rest[:80]!r}")
    if suffix is None and entry.suffix:  # the tools that print this label print its unit after the value
        notes.warn(line_no, f"{label!r} without the unit its tools print after the value ({unit}); not read")
        return None
    factor = scale(unit, entry.column)
    if factor is None:
        notes.warn(line_no, f"{label!r}: unit {unit!r} does not fit {entry.column}; not read")
    return factor


def _store(
    block: _Block, entry: Label, label: str, number: float | None, factor: float, line_no: int, value: str, notes: Notes
) -> None:
    row, column = block.row, entry.column
    assert column is not None
    block.seen.add(entry.key)
    if column in PREAMBLE and row[column] is not None and column not in block.from_above:
        block.values += 1  # the sweep's phase header said it first: the driver set it
        if number is not None and number != row[column]:
            notes.warn(
                line_no, f"{label!r}: {value.split()[0]!r} differs from the {column} of the phase ({row[column]}), kept"
            )
        return
    if column in block.from_above:  # text above the block said it: the block's own line says it for this row
        block.from_above.discard(column)
        if number is not None and number != row[column]:
            notes.warn(line_no, f"{label!r}: {value.split()[0]!r} read; {row[column]} printed above the block is not")
        row[column] = None
    if row[column] is not None and column not in block.provisional:
        notes.warn(line_no, f"{label!r}: {column} was read already in this block; kept the first value")
        return
    if column in block.provisional:
        block.provisional.discard(column)
        block.values -= 1  # counted again below
    if number is not None and factor != 1.0:
        number = float(f"{number * factor:.12g}")
    row[column] = number
    block.values += 1
    if column not in PREAMBLE:
        block.body_values += 1
        block.figures.append((line_no, label, column))
    if column in INTS and number is not None and math.isfinite(number) and number != int(number):
        notes.warn(line_no, f"{label!r} is not a whole number: {value!r}")


def _pairs(text: str) -> list[tuple[str, str]]:
    """``label: value`` pairs of a flattened line, each label the longest known one before its colon (the
    words in front of it belong to the previous value: its unit, a section title). Quotes go first: a list of
    the block's lines written on one line (``["Successful requests: 100", "Benchmark ...``) reads too."""
    parts = text.replace('"', " ").replace("'", " ").split(":")
    label = _last_label(parts[0])
    pairs: list[tuple[str, str]] = []
    for index in range(1, len(parts)):
        piece = parts[index]
        if index == len(parts) - 1:
            pairs.append((label, piece.strip()))
            break
        value, following = _split_value(piece)
        pairs.append((label, value))
        label = following
    return [(label, value) for label, value in pairs if label]


def _last_label(text: str) -> str:
    words = _RULE_RUN_RE.split(text)[-1].split()
    for size in range(min(len(words), _LONGEST_LABEL), 0, -1):
        if lookup(" ".join(words[-size:])) is not None:
            return " ".join(words[-size:])
    return " ".join(words)


def _split_value(piece: str) -> tuple[str, str]:
    """``' 294.1 s Total input tokens'`` → ``('294.1 s', 'Total input tokens')``."""
    words = piece.split()
    for size in range(min(len(words), _LONGEST_LABEL), 0, -1):
        candidate = " ".join(words[-size:])
        if lookup(candidate) is not None:
            return " ".join(words[:-size]), candidate
    return (words[0], " ".join(words[1:])) if words else ("", "")


def _read_already(block: _Block, entry: Label) -> bool:
    """Whether the block has read this label, or this figure under another label (``Total time`` then
    ``Benchmark duration``): then the line starts the next row."""
    column = entry.column
    if entry.key in block.seen:
        return True
    return (
        column is not None
        and column not in PREAMBLE
        and block.row[column] is not None
        and (column not in block.provisional)
    )


def _resumes(block: _Block, entry: Label) -> bool:
    """Whether a known label after a suspension continues the block: a stored label whose column the block
    has not filled yet. Rate and concurrency continue it only while it is still in its preamble (SGLang prints
    them first); after its figures they are vLLM's lines above the next block."""
    column = entry.column
    if column is None or entry.key in block.seen:
        return False
    if block.row[column] is not None and column not in block.provisional:
        return False
    return column not in PREAMBLE or block.body_values == 0 or entry.key in _IN_BLOCK_ONLY


def _above(body: str, above: dict[str, Any]) -> None:
    """Remember what a line outside any block says about the next block: a sweep label (``qps 4:``,
    ``Concurrency: 16``), a command line's or a Namespace dump's arguments."""
    if len(body) <= _SWEEP_LABEL_CHARS and (sweep := SWEEP_RE.match(body)):
        above[sweep.lastgroup or ""] = leading_number(sweep[sweep.lastgroup or ""])[0]
    elif "=" in body or "--" in body:
        _arguments(body, above)


def _arguments(body: str, above: dict[str, Any]) -> None:
    for arg in ARG_RE.finditer(body):
        column = _ARG_COLUMNS[arg["arg"].lower().replace("-", "_")]
        try:
            above[column] = leading_number(arg["v"])[0]
        except ValueError:
            continue


FORMAT = Format(NAME, detect, parse)
