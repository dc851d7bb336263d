"""SGLang ``bench_serving`` and vLLM ``bench serve`` / ``benchmark_serving.py`` text output.

``Serving Benchmark Result`` blocks, optionally under sweep phase headers
(``===== PD concurrency=8 (n=24) =====``), inside whatever else a log, a doc or an issue holds around them.

The parser is a line classifier and a small block state machine, streamed over the lines:

* outside a block, a phase header starts a phase; lines that tools print *above* a block (``Traffic request
  rate: inf``, ``Maximum request concurrency: 30``, a sweep label ``qps 4:``, ``# request rate: 2``, a
  ``Namespace(...)`` dump or a command line with ``--num-prompts``) are kept for the next block;
* a header (any rule width, ``=`` or ``-``, glued to a tqdm bar, or split over two lines) opens a block; the
  text in front of it is the block's line prefix (``# ``, ``service-1  | ``, a timestamp), taken off every line;
* inside a block, ``label: value`` lines fill the row through a table of label synonyms; a section rule is
  skipped; a closing rule, a fence, a new header or the done marker ends the block;
* a blank line or a line that is not ``label: value`` (a fork's extra section, a cut line) *suspends* the block:
  nothing is lost, and a section rule or a known label that follows resumes it (a fork's block goes on after
  its own section), anything else is outside the block;
* a block cut off at the end of the output keeps its values (the rest stay None), with a problem that names
  its line (``dropped=False``); a block that yields no value at all is dropped (``dropped=True``).

Labels differ across releases and tools (``Total throughput`` / ``Total token throughput`` / ``Total Token
throughput``, ``Inter-token`` / ``Inter-Token``, ``Max reqeuest concurrency``); values may be ``inf``, ``not
set``, ``-0.00`` or a number followed by text.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from benchflow.kinds.serving.common import INTS, empty_row, finish, leading_number
from benchflow.parsing import Format, Notes, ParsedRun, lines

NAME = "log"
DETECT_CHARS = 4_000_000  # detect looks at this much of the output at most
SUSPENDED_LINES = 40  # a suspended block resumes only within this many lines

# ===== PD concurrency=8 (n=24) =====   /   ... (n=24) repeat=2 =====   /   ... (n=8) warmup =====
# (the project's own sweep driver: a phase, the repeat of it, or the warm-up phase whose results are kept, marked)
PHASE_RE = re.compile(
    r"={3,}\s*(?P<config>\S.*?)\s+concurrency=(?P<c>\d+)\s+\(n=(?P<n>\d+)\)"
    r"(?:\s+repeat=(?P<repeat>\d+)|\s+(?P<warmup>warmup))?\s*={3,}\s*$"
)
# ============ Serving Benchmark Result ============   /   --- Serving Benchmark Result ---
# 100%|██████████| 80/80 [00:12<00:00]============ Serving Benchmark Result ============   (glued to tqdm)
# ====== Offline Throughput Benchmark Result =======   (SGLang bench_offline_throughput: the same labels)
_TITLE = r"(?:Serving|Offline\s+Throughput)\s+Benchmark"
HEADER_RE = re.compile(rf"(?:={{3,}}|-{{3,}})\s*{_TITLE}\s+Result\b", re.I)
# Serving Benchmark Result   /   ## Serving Benchmark Result   (hand-formatted: the title alone, rules around it)
TITLE_RE = re.compile(rf"^\s*[=\-#*]*\s*{_TITLE}\s+Result\s*[=\-*:]*\s*$", re.I)
# ============ Serving Benchmark       (first half of a header split over two lines; the next starts "Result")
HALF_HEADER_RE = re.compile(rf"(?:={{3,}}|-{{3,}})\s*{_TITLE}\s*$", re.I)
# Result ============
HEADER_TAIL_RE = re.compile(r"^\s*Result\b\s*[=\-]*\s*$", re.I)
# ==================================================   /   --------------------------------------------------
CLOSE_RE = re.compile(r"^\s*(?:={3,}|-{10,})\s*$")
# ---------------Time to First Token----------------   /   -------------- Performance Metrics ---------------
SECTION_RE = re.compile(r"^\s*-{3,}\s*[^-\s].*?-{3,}\s*$")
# ```   /   ```python   /   ~~~
FENCE_RE = re.compile(r"^\s*(?:```|~~~)")
# Mean TTFT (ms):                 153.00   /   Failed requests:   0   <<< note   /   Per-position acceptance (%):
LINE_RE = re.compile(r"^\s*(?P<label>[A-Za-z][^:]*?)\s*:(?:\s+(?P<value>\S.*?))?\s*$")
# P99 Inter-token Latency (ms) / Median E2E Latency (ms) / Mean TPOT (ms)   (a label after normalising)
LATENCY_RE = re.compile(r"^(?P<stat>mean|median|std|p\d+(?:\.\d+)?|max|min|avg|average) (?P<metric>.+?) \(ms\)$")
# concurrency 8:   /   max_concurrency=8   /   Concurrency: 16     (a sweep label above a block)
SWEEP_CONCURRENCY_RE = re.compile(r"^\s*(?:max[ _-]?)?concurrency\s*[:=]?\s*(?P<v>\d+)\s*:?\s*$", re.I)
# qps 4:   /   QPS=inf   /   request rate 16      (a sweep label above a block)
SWEEP_RATE_RE = re.compile(r"^\s*(?:qps|rps|request[ _-]?rate)\s*[:=]?\s*(?P<v>[0-9.]+|inf)\s*:?\s*$", re.I)
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
    r"|\s*\([\w\s=.,-]{1,60}\)\s*"
    r"|\s*[-|]\s+"
    r"|\s*\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s*"
    r"|\s*\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\s*"
    r"|\s*(?:INFO|WARNING|WARN|DEBUG|ERROR|CRITICAL)\b:?\s*)+"
)
_DIGIT_RE = re.compile(r"\d")

_METRIC_NAMES = {
    "ttft": "ttft",
    "time to first token": "ttft",
    "tpot": "tpot",
    "time per output token": "tpot",
    "itl": "itl",
    "inter token latency": "itl",
    "e2e latency": "e2e",
    "e2el": "e2e",
    "e2e": "e2e",
    "end to end latency": "e2e",
    "e2e latency (end to end)": "e2e",
}
_STATS = {
    "mean": "mean",
    "avg": "mean",
    "average": "mean",
    "median": "median",
    "std": "std",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "max": "max",
}
# Label synonyms (normalised: lower case, runs of space/-/_ as one space) → column; None: known, not stored.
_LABELS: dict[str, str | None] = {
    "backend": None,
    "architecture": None,
    "model": None,
    "model id": None,
    "tokenizer id": None,
    "traffic request rate": "request_rate",
    "request rate": "request_rate",
    "request rate configured (rps)": "request_rate",
    "request rate (rps)": "request_rate",
    "max request concurrency": "concurrency",
    "maximum request concurrency": "concurrency",
    "max reqeuest concurrency": "concurrency",
    "max concurrency": "concurrency",
    "concurrency": "concurrency",  # configured only when a whole number; SGLang's achieved mean has decimals
    "burstiness factor": None,
    "number of prompts": "num_prompts",
    "num prompts": "num_prompts",
    "successful requests": "completed",
    "failed requests": "failed",
    "benchmark duration (s)": "duration_s",
    "benchmark duration": "duration_s",
    "total input tokens": "total_input_tokens",
    "total input text tokens": None,
    "total input vision tokens": None,
    "total generated tokens": "total_output_tokens",
    "total output tokens": "total_output_tokens",
    "total generated tokens (retokenized)": None,
    "request throughput (req/s)": "request_throughput",
    "request goodput (req/s)": "goodput",
    "goodput (req/s)": "goodput",
    "input token throughput (tok/s)": "input_throughput",
    "output token throughput (tok/s)": "output_throughput",
    "peak output token throughput (tok/s)": "peak_output_throughput",
    "peak concurrent requests": "peak_concurrent_requests",
    "total token throughput (tok/s)": "total_throughput",
    "total throughput (tok/s)": "total_throughput",
    "accept length": "accept_length",
    "acceptance length": "accept_length",
    "mean acceptance length": "accept_length",
    "average acceptance length": "accept_length",
    "last generation throughput (tok/s)": None,
    "acceptance rate (%)": None,
    "drafts": None,
    "draft tokens": None,
    "accepted tokens": None,
    "per position acceptance (%)": None,
}
_IGNORED_LABEL_RE = re.compile(r"^position \d+$")
# Lines that tools print above their block (vLLM's benchmark_serving.py): kept for the next block.
_ABOVE_BLOCK = {"request_rate", "concurrency", "num_prompts"}
_IN_BLOCK_ONLY = {"request rate configured (rps)"}  # vLLM prints it among the block's counts, never above


def _normalise(label: str) -> str:
    """``Mean  TTFT(ms)`` → ``mean ttft (ms)``; ``Inter-Token`` → ``inter token``."""
    return _SPACE_RE.sub(" ", _PAREN_RE.sub(" (", label.strip().lower())).strip()


_SPACE_RE = re.compile(r"[\s\-_]+")
_PAREN_RE = re.compile(r"\s*\(")


def detect(text: str) -> bool:
    """A result header (or its first half) or a sweep phase header in the first :data:`DETECT_CHARS`."""
    end = min(len(text), DETECT_CHARS)
    return (
        text.find("Serving Benchmark", 0, end) >= 0
        or text.find("Throughput Benchmark Result", 0, end) >= 0
        or PHASE_RE.search(text, 0, end) is not None
    )


class _Block:
    """The block being read: its row, where it started, the prefix its lines carry, its state."""

    def __init__(self, row: dict[str, Any], line: int, prefix: str):
        self.row, self.line, self.prefix = row, line, prefix
        self.masked = _DIGIT_RE.sub("0", prefix)
        self.values = 0
        self.body_values = 0  # values past the block's preamble (rate, concurrency): counts, throughputs, latencies
        self.titled = False  # opened by a title without rules (a doc heading?): an empty one is no loss
        self.suspended_at: int | None = None  # line that suspended it
        self.suspended_by: str = ""  # "blank" or the odd line's text
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


def _phase_name(phase: tuple[str, int, int, int, bool]) -> str:
    config, concurrency, _, repeat, warmup = phase
    return f"{config} concurrency={concurrency}" + (" warmup" if warmup else f" repeat={repeat}" if repeat > 1 else "")


def parse(text: str, marker: str = "ALL_DONE") -> ParsedRun:
    return _Reader(marker).read(text)


_Step = Literal["next", "stop", "outside"]  # what to do with a line after the block has seen it


class _Reader:
    """The line classifier and block state machine behind :func:`parse`: outside a block, lines are phase
    headers, result headers or lines about the next block; inside one, ``label: value`` lines, section rules,
    the closing rule, or an odd line that suspends the block until it resumes or ends."""

    def __init__(self, marker: str):
        self.marker = marker
        self.notes = Notes()
        self.rows: list[dict[str, Any]] = []
        self.phase: tuple[str, int, int, int, bool] | None = None
        self.phase_rows = 0
        self.empty_phases: list[str] = []  # phases whose client printed no result block (a failed phase)
        self.above: dict[str, Any] = {}  # values printed above the next block
        self.block: _Block | None = None
        self.half_header: int | None = None  # line of the first half of a split header
        self.complete = False

    def read(self, text: str) -> ParsedRun:
        last = 0
        for number_, raw in lines(text):
            last = number_
            line = raw.replace("\uff1a", ":") if "\uff1a" in raw else raw  # a full-width colon (a translated doc)
            if "\r" in line:  # tqdm redraws: the text after the last carriage return is what a terminal shows
                parts = [p for p in line.split("\r") if p.strip()]
                line = parts[-1] if parts else ""
            step: _Step = self.in_block(number_, line) if self.block is not None else "outside"
            if step == "outside":
                step = self.outside(number_, line)
            if step == "stop":
                break
        return self.finish(last)

    def finish(self, last: int) -> ParsedRun:
        if self.block is not None:
            self.close("eof", last)
        if self.complete and self.phase is not None and self.phase_rows == 0:
            self.empty_phases.append(_phase_name(self.phase))
        if self.empty_phases:
            self.complete = False
            self.notes.warn(None, f"phases without a result: {', '.join(self.empty_phases)}")
        if self.phase is None and not self.complete:
            # a client's own output (no sweep driver, so no marker): complete when every block was read whole
            self.complete = bool(self.rows) and not self.notes.problems
        return self.notes.run(NAME, self.rows, self.complete)

    def close(self, how: str, at: int) -> None:
        """End the current block: keep its row unless it read nothing; note how it ended when irregular."""
        block, notes = self.block, self.notes
        assert block is not None
        if block.values == 0:
            if block.titled:
                notes.warn(block.line, "a 'Serving Benchmark Result' title without values")
            else:
                notes.problem(block.line, "result block with no values; dropped", dropped=True)
        else:
            self.rows.append(finish(block.row))
            self.phase_rows += 1
            if how == "eof" and block.suspended_by != "blank":
                cut = block.suspended_at if block.suspended_at is not None else at
                notes.problem(
                    cut,
                    f"result block (line {block.line}) cut off at the end of the output; "
                    f"kept its {block.values} values, the rest are unknown",
                )
            elif how in ("phase", "header", "marker") and block.suspended_by != "blank":
                ended = {"phase": "a sweep phase header", "header": "the next result header", "marker": "the marker"}
                notes.problem(
                    at,
                    f"result block (line {block.line}) cut short by {ended[how]}; kept its "
                    f"{block.values} values, the rest are unknown",
                )
            elif how != "rule" and block.suspended_by not in ("", "blank"):
                first = block.odd[0] if block.odd else (block.suspended_at, block.suspended_by)
                notes.problem(
                    first[0],
                    f"result block (line {block.line}) ended by a line that is not "
                    f"'label: value': {str(first[1])[:120]!r}; kept its {block.values} values",
                )
        for number_, odd in block.odd[1 if how != "rule" else 0 :][:3]:
            notes.warn(number_, f"skipped a line inside a result block: {odd[:120]!r}")
        self.block = None

    def open_block(self, at: int, prefix: str) -> _Block:
        config, concurrency, prompts, repeat, warmup = self.phase or (None, None, None, 1, False)
        row = empty_row(config, concurrency, prompts, repeat, warmup)
        for column, value in self.above.items():
            if row[column] is None:
                row[column] = value
        self.above.clear()
        self.block = _Block(row, at, prefix)
        return self.block

    def in_block(self, number_: int, line: str) -> _Step:
        block = self.block
        assert block is not None
        body = block.body(line)
        stripped = body.strip()
        if stripped == self.marker or line.strip() == self.marker:
            self.close("marker", number_)
            self.complete = True
            return "stop"
        if "enchmark" in line and (HEADER_RE.search(line) or TITLE_RE.match(body)):
            if block.values == 0 and block.suspended_at is None:
                return "next"  # the second line of a hand-formatted header
            self.close("header", number_)
            return "outside"  # the new header is read there
        if "concurrency=" in line and PHASE_RE.search(line):
            self.close("phase", number_)
            return "outside"
        if CLOSE_RE.match(body):
            if block.values or block.suspended_at is not None:  # else: the rule under a header on its own line
                self.close("rule", number_)
            return "next"
        if FENCE_RE.match(body):
            self.close("fence", number_)
            return "next"
        if block.suspended_at is not None:
            return self.suspended(block, number_, body, stripped)
        if not stripped:
            block.suspended_at, block.suspended_by = number_, "blank"
        elif SECTION_RE.match(body):
            pass
        elif (found := LINE_RE.match(body)) is not None:
            self.label_line(block, number_, found, stripped)
        else:
            block.suspended_at, block.suspended_by = number_, stripped
            block.odd.append((number_, stripped))
        return "next"

    def suspended(self, block: _Block, number_: int, body: str, stripped: str) -> _Step:
        """A line after a blank or odd line: the block resumes, stays suspended, or has ended."""
        if number_ - (block.suspended_at or 0) > SUSPENDED_LINES:
            self.close("suspended", number_)
            return "outside"
        if SECTION_RE.match(body):
            block.suspended_at = None
        elif (found := LINE_RE.match(body)) and found["value"] and _resumes(block, found["label"]):
            block.suspended_at = None
            _assign(block, found["label"], found["value"], number_, self.notes)
        else:
            if stripped and block.suspended_by != "blank":
                block.odd.append((number_, stripped))
            _above(body, self.above)  # outside the block after all: may be about the next one
        return "next"

    def label_line(self, block: _Block, number_: int, found: re.Match[str], stripped: str) -> None:
        if found["value"] is None:  # a sub-heading ("Per-position acceptance (%):") or a cut line
            if _LABELS.get(_normalise(found["label"])) or LATENCY_RE.match(_normalise(found["label"])):
                self.notes.problem(number_, f"{found['label']!r} has no value")
            else:
                self.notes.warn(number_, f"label without a value inside a result block: {stripped[:120]!r}")
            return
        _assign(block, found["label"], found["value"], number_, self.notes)

    def outside(self, number_: int, line: str) -> _Step:
        if line.strip() == self.marker:
            self.complete = True
            return "stop"
        serving = "enchmark" in line  # cheap: only such a line can be a header
        if "concurrency=" in line and (match := PHASE_RE.search(line)):
            self.new_phase(match)
        elif serving and (header := HEADER_RE.search(line)):
            self.open_block(number_, line[: header.start()])
            self.half_header = None
        elif self.half_header == number_ - 1 and HEADER_TAIL_RE.match(PREFIX_RE.sub("", line)):
            self.open_block(number_, "")
            self.half_header = None
        elif serving and HALF_HEADER_RE.search(line):
            self.half_header = number_
        else:
            body = PREFIX_RE.sub("", line, count=1)
            if serving and TITLE_RE.match(body):
                self.open_block(number_, "").titled = True
            else:
                _above(body, self.above)
        return "next"

    def new_phase(self, match: re.Match[str]) -> None:
        if self.phase is not None and self.phase_rows == 0:
            self.empty_phases.append(_phase_name(self.phase))
        warmup = match["warmup"] is not None
        repeat = 0 if warmup else int(match["repeat"] or 1)
        self.phase, self.phase_rows = (match["config"], int(match["c"]), int(match["n"]), repeat, warmup), 0
        self.above.clear()
        self.half_header = None


def _resumes(block: _Block, label: str) -> bool:
    """Whether a ``label: value`` line after a suspension continues the block: a known, stored label whose
    column the block has not filled yet. Rate and concurrency continue it only while it is still in its
    preamble (SGLang prints them first); after its figures they are vLLM's lines above the next block."""
    row = block.row
    key = _normalise(label)
    if latency := LATENCY_RE.match(key):
        column = _latency_column(latency)
        return column is not None and row.get(column) is None
    column = _LABELS.get(key)
    if column is None or row[column] is not None:
        return False
    return column not in _ABOVE_BLOCK or block.body_values == 0 or key in _IN_BLOCK_ONLY


def _latency_column(latency: re.Match[str]) -> str | None:
    metric = _METRIC_NAMES.get(latency["metric"])
    stat = _STATS.get(latency["stat"])
    return f"{stat}_{metric}_ms" if metric and stat else None


def _assign(block: _Block, label: str, value: str, line_no: int, notes: Notes) -> None:
    row = block.row
    key = _normalise(label)
    if latency := LATENCY_RE.match(key):
        if _METRIC_NAMES.get(latency["metric"]) is None:
            notes.warn(line_no, f"unknown latency metric {label!r}")
            return
        column = _latency_column(latency)  # None: a statistic the table has no column for (P50, min)
    elif key in _LABELS:
        column = _LABELS[key]
    else:
        if not _IGNORED_LABEL_RE.match(key):
            notes.warn(line_no, f"unknown label {label!r}")
        return
    if column is None:
        return
    try:
        number, rest = leading_number(value)
    except ValueError:
        notes.problem(line_no, f"value of {label!r} is not a number: {value[:80]!r}", dropped=True)
        return
    if rest and not (column == "request_rate" and rest.lower().rstrip(".") in ("rps", "req/s")):
        notes.warn(line_no, f"text after the value of {label!r} ignored: {rest[:80]!r}")
    if key == "concurrency" and (number is None or "." in value.split()[0]):
        return  # SGLang's achieved mean concurrency ("Concurrency: 49.12"), not the configured one
    if column in ("concurrency", "request_rate", "num_prompts") and row[column] is not None:
        block.values += 1
        return  # the sweep's phase header or the line above the block said it first
    row[column] = number
    block.body_values += column not in _ABOVE_BLOCK
    if column in INTS and number is not None and math.isfinite(number) and number != int(number):
        notes.warn(line_no, f"{label!r} is not a whole number: {value!r}")
    block.values += 1


def _above(body: str, above: dict[str, Any]) -> None:
    """Remember what a line outside any block says about the next block (vLLM prints rate and concurrency
    above its block; sweeps print ``qps 4:``; a command line or Namespace dump gives the arguments)."""
    if sweep := SWEEP_RATE_RE.match(body):
        above["request_rate"] = leading_number(sweep["v"])[0]
        return
    if sweep := SWEEP_CONCURRENCY_RE.match(body):
        above["concurrency"] = int(sweep["v"])
        return
    if (found := LINE_RE.match(body)) and found["value"]:
        column = _LABELS.get(_normalise(found["label"]))
        if column in _ABOVE_BLOCK:
            try:
                number = leading_number(found["value"])[0]
            except ValueError:
                return
            if column == "concurrency" and _normalise(found["label"]) == "concurrency":
                return
            if number is not None or column != "request_rate":
                above[column] = number
            return
    if "=" in body or "--" in body:
        for arg in ARG_RE.finditer(body):
            column = _ARG_COLUMNS[arg["arg"].lower().replace("-", "_")]
            try:
                above[column] = leading_number(arg["v"])[0]
            except ValueError:
                continue


FORMAT = Format(NAME, detect, parse)
