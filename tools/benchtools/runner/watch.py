"""What ``bench run`` shows of a run while it goes: one line per task as it starts and ends (from the task
instances in Airflow's metadata database), and the wait's progress on one line (the benchmark's newest log line
and the wait's check, read from the run's log file as dag.test writes it)."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from benchflow.paths import var_dir

STARTED = ("running", "deferred", "up_for_reschedule", "up_for_retry", "success", "failed", "restarting")
FINISHED = ("success", "failed", "skipped", "upstream_failed", "removed")
BENCH_LINE = re.compile(r"\] log: (.*?) \[benchflow\.triggers")
CHECK_LINE = re.compile(r"\] progress \[check (\d+), ([^,]*), pid ([^\]]*)\]: ?(.*?) \[benchflow\.")
DAG_TEST_START = re.compile(r"\[DAG TEST\] starting task_id=(\S+)")
ERROR_LINE = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception|Timeout|Exit)\w*): (.+)")
TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
PLAIN_EVERY_S = 2.0  # piped output: at most one progress line per this many seconds
READ_CHUNK = 4 << 20  # what one look reads of the run's log file; a longer line without newline is skipped


def log_path(dag_id: str, when: datetime) -> Path:
    folder = var_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"bench-run-{dag_id}-{when:%Y%m%dT%H%M%S}.log"


def _seconds(start: Any, end: Any) -> float | None:
    if start is None or end is None:
        return None
    try:
        return (_as_dt(end) - _as_dt(start)).total_seconds()
    except (TypeError, ValueError):
        return None


def _as_dt(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass
class TaskView:
    state: str | None = None
    start: Any = None
    end: Any = None
    shown_start: bool = False
    shown_end: bool = False


@dataclass
class Watch:
    """What the parent knows of the run: its tasks' states (from the metadata DB) and the newest benchmark
    line and check (from the log file)."""

    dag_id: str
    run_id: str
    log_file: Path
    out: IO[str]
    tty: bool
    tasks: dict[str, TaskView] = field(default_factory=dict)
    newest: str = ""
    check: str = ""
    offset: int = 0
    current: str = ""  # the task dag.test is running now (its "[DAG TEST] starting" line)
    current_began: float = 0.0
    progress_shown: bool = False
    last_plain: float = 0.0
    last_plain_text: str = ""
    began: float = field(default_factory=time.monotonic)

    def say(self, line: str) -> None:
        if self.progress_shown and self.tty:
            self.out.write("\r\033[K")
            self.progress_shown = False
        self.out.write(line + "\n")
        self.out.flush()

    def read_log(self) -> None:
        try:
            with self.log_file.open("rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read(READ_CHUNK)
        except OSError:
            return
        cut = chunk.rfind(b"\n") + 1
        if not cut and len(chunk) == READ_CHUNK:  # one line longer than a look: skip it, never re-read it whole
            self.offset += len(chunk)
            return
        self.offset += cut
        for raw in chunk[:cut].decode(errors="replace").split("\n"):  # not splitlines: a bar's \r stays in its line
            if found := DAG_TEST_START.search(raw):
                self.current, self.current_began = found.group(1), time.monotonic()
                self.newest = self.check = ""
                view = self.tasks.setdefault(self.current, TaskView())
                if not view.shown_start:
                    view.shown_start = True
                    self.say(f"{clock()}  start   {self.current}")
            elif found := BENCH_LINE.search(raw):
                self.newest = progress_text(found.group(1)) or self.newest
            elif found := CHECK_LINE.search(raw):
                self.check = f"check {found.group(1)}, pid {found.group(3)}"
                self.newest = progress_text(found.group(4)) or self.newest

    def update(self, rows: list[tuple[str, str | None, Any, Any]]) -> None:
        for task_id, state, start, end in rows:
            view = self.tasks.setdefault(task_id, TaskView())
            view.state, view.start, view.end = state, start, end
            if state in FINISHED and not view.shown_end:
                view.shown_end = True
                if not view.shown_start and state in STARTED:  # ran between two looks
                    view.shown_start = True
                    self.say(f"{clock(start)}  start   {task_id}")
                took = _seconds(start, end)
                duration = f"{took:6.1f} s" if took is not None else ""
                mark = {"success": "ok  ", "failed": "FAIL", "skipped": "skip", "upstream_failed": "skip"}
                self.say(f"{clock(end)}  {mark.get(state, state):<6}  {task_id:<28} {state:<16} {duration}")

    def progress(self) -> None:
        """The running task's newest benchmark line and check, once it has any (the wait)."""
        task = self.current
        if not task or not (self.newest or self.check) or self.tasks.get(task, TaskView()).shown_end:
            return
        elapsed = time.monotonic() - self.current_began
        detail = f" ({self.check})" if self.check else ""
        text = f"{clock()}  wait    {task}: {elapsed:4.0f} s{detail}  {self.newest[:160]}"
        if self.tty:
            self.out.write("\r\033[K" + text[: _columns() - 1])
            self.out.flush()
            self.progress_shown = True
        elif self.newest != self.last_plain_text and time.monotonic() - self.last_plain >= PLAIN_EVERY_S:
            self.out.write(text + "\n")
            self.out.flush()
            self.last_plain, self.last_plain_text = time.monotonic(), self.newest


WARNING_LINE = re.compile(
    r"\b(warn(ing)?s?|\w+Warning|deprecat\w*)\b|^\s*warnings\.warn\(|^\s*(\^+|~+)\s*$", re.IGNORECASE
)


def progress_text(line: str) -> str:
    """What of a benchmark's log line may stand for its progress: the last frame of a progress bar (``\\r``
    redraws), not a warning of the client (``FutureWarning: ...``, ``WARNING ...``, the source line under it);
    '' when the line is none of its progress."""
    frames = [part.strip() for part in line.replace("\\r", "\r").split("\r")]
    text = next((part for part in reversed(frames) if part), "")
    return "" if WARNING_LINE.search(text) else text


def clock(at: Any = None) -> str:
    try:
        return (_as_dt(at).astimezone() if at is not None else datetime.now()).strftime("%H:%M:%S")
    except (TypeError, ValueError):
        return datetime.now().strftime("%H:%M:%S")


def _columns() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 120


FAILED_MARKS = ("Task failed with exception", "[DAG TEST] Error running task")


def failure_of(log_file: Path, task_id: str, tail: int = 6) -> str:
    """The exception a failed task ended with: its message (the line that names the exception, and the last
    ``tail`` of the lines it carries, e.g. the benchmark's last log lines), read from the traceback Airflow logged
    after "Task failed with exception" (:func:`exception_of`)."""
    try:
        text = log_file.read_text(errors="replace")
    except OSError:
        return ""
    section, current = [], None
    for line in text.splitlines():
        if found := DAG_TEST_START.search(line):
            current = found.group(1)
        if current == task_id:
            section.append(line)
    # a task's own exception, or one dag.test raised around it (a deferred task's trigger runs in line there)
    starts = [i for i, line in enumerate(section) if any(m in line for m in FAILED_MARKS)]
    if not starts:
        return ""
    block: list[str] = []
    for line in section[starts[-1] + 1 :]:
        if TIMESTAMPED.match(line):
            break
        block.append(line)
    message = exception_of(block)
    if not message:
        return ""
    head = re.sub(r"^[\w.]+\.(\w+(?:Error|Exception|Timeout\w*)): ", r"\1: ", message[0])
    rest = [line for line in message[1:] if line.strip()]
    shown = rest[-tail:]
    cause = next((line for line in reversed(rest[:-tail]) if ERROR_LINE.search(line)), None) if rest else None
    lines = [head[:600]] + ([f"    ... {cause.strip()[:300]}"] if cause else []) + [f"    {x[:300]}" for x in shown]
    return "\n".join(lines)


CHAINED = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)


def exception_of(block: list[str]) -> list[str]:
    """The last exception of a Python traceback: the line that names it and every line of its message.

    The frames (``  File ...`` and the indented source and ``^^^`` lines under each) end at the first line that is
    not indented: that line names the exception, and what follows is its message, however it is indented (a GPU
    list, a benchmark's log lines), up to a chained traceback (``The above exception ...``), after which the same
    is read again."""
    found: list[str] = []
    i = 0
    while i < len(block):
        if block[i].startswith("Traceback (most recent call last):"):
            i += 1
            while i < len(block) and (block[i][:1].isspace() or not block[i].strip()):
                i += 1
            if i >= len(block):
                break
            found = [block[i]]
            i += 1
            while i < len(block):
                if block[i].strip() in CHAINED and i + 2 < len(block) and block[i + 2].startswith("Traceback ("):
                    i += 2
                    break
                found.append(block[i])
                i += 1
            continue
        i += 1
    if not found and block:  # no traceback: the block is the message
        found = [line for line in block if line.strip()]
    return found


def last_error(logs: Path) -> str:
    try:
        lines = logs.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if found := ERROR_LINE.search(line):
            return f"{found.group(1).split('.')[-1]}: {found.group(2)}"[:600]
    return ""


def echo(logs: Path, offset: int, out: IO[str], watch: Watch) -> int:
    try:
        with logs.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read(READ_CHUNK)
    except OSError:
        return offset
    cut = chunk.rfind(b"\n") + 1
    if not cut and len(chunk) == READ_CHUNK:  # a line longer than a look: its start, once, never re-read whole
        chunk, cut = chunk[:1000] + b" ...(line cut)\n", len(chunk)
        out.write(chunk.decode(errors="replace"))
        out.flush()
        return offset + cut
    if cut:
        if watch.progress_shown and watch.tty:
            out.write("\r\033[K")
            watch.progress_shown = False
        out.write(chunk[:cut].decode(errors="replace"))
        out.flush()
    return offset + cut
