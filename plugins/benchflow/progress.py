"""``bench run``, quiet: one line per task as it starts and ends, the wait's progress on one line, then the
table and where the results are. Airflow's own logs go to ``var/logs/bench-run-<dag>-<time>.log`` (``-v``
shows them as well).

The run itself is ``dag.test()`` in a child process (its own session, its output into the log file); this
process watches the run's task instances in Airflow's metadata database and the log file. Ctrl-C or SIGTERM
ends the child, then does what the run's teardowns would have done (each teardown whose setup had started:
stop the benchmark's process group, stop servers, restore the services, release the host) and marks the run
failed, so nothing is left running on the host and its services are back.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from benchflow.paths import var_dir

if TYPE_CHECKING:
    from benchflow.spec import CampaignSpec

STARTED = ("running", "deferred", "up_for_reschedule", "up_for_retry", "success", "failed", "restarting")
FINISHED = ("success", "failed", "skipped", "upstream_failed", "removed")
BENCH_LINE = re.compile(r"\] log: (.*?) \[benchflow\.triggers")
CHECK_LINE = re.compile(r"\] progress \[check (\d+), ([^,]*), pid ([^\]]*)\]: ?(.*?) \[benchflow\.")
DAG_TEST_START = re.compile(r"\[DAG TEST\] starting task_id=(\S+)")
ERROR_LINE = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception|Timeout|Exit)\w*): (.+)")
TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
PLAIN_EVERY_S = 2.0  # piped output: at most one progress line per this many seconds


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
                chunk = handle.read()
        except OSError:
            return
        cut = chunk.rfind(b"\n") + 1
        self.offset += cut
        for raw in chunk[:cut].decode(errors="replace").splitlines():
            if found := DAG_TEST_START.search(raw):
                self.current, self.current_began = found.group(1), time.monotonic()
                self.newest = self.check = ""
                view = self.tasks.setdefault(self.current, TaskView())
                if not view.shown_start:
                    view.shown_start = True
                    self.say(f"{_clock()}  start   {self.current}")
            elif found := BENCH_LINE.search(raw):
                self.newest = found.group(1).strip()
            elif found := CHECK_LINE.search(raw):
                self.check = f"check {found.group(1)}, pid {found.group(3)}"
                if found.group(4).strip():
                    self.newest = found.group(4).strip()

    def update(self, rows: list[tuple[str, str | None, Any, Any]]) -> None:
        for task_id, state, start, end in rows:
            view = self.tasks.setdefault(task_id, TaskView())
            view.state, view.start, view.end = state, start, end
            if state in FINISHED and not view.shown_end:
                view.shown_end = True
                if not view.shown_start and state in STARTED:  # ran between two looks
                    view.shown_start = True
                    self.say(f"{_clock(start)}  start   {task_id}")
                took = _seconds(start, end)
                duration = f"{took:6.1f} s" if took is not None else ""
                mark = {"success": "ok  ", "failed": "FAIL", "skipped": "skip", "upstream_failed": "skip"}
                self.say(f"{_clock(end)}  {mark.get(state, state):<6}  {task_id:<28} {state:<16} {duration}")

    def progress(self) -> None:
        """The running task's newest benchmark line and check, once it has any (the wait)."""
        task = self.current
        if not task or not (self.newest or self.check) or self.tasks.get(task, TaskView()).shown_end:
            return
        elapsed = time.monotonic() - self.current_began
        detail = f" ({self.check})" if self.check else ""
        text = f"{_clock()}  wait    {task}: {elapsed:4.0f} s{detail}  {self.newest[:160]}"
        if self.tty:
            self.out.write("\r\033[K" + text[: _columns() - 1])
            self.out.flush()
            self.progress_shown = True
        elif self.newest != self.last_plain_text and time.monotonic() - self.last_plain >= PLAIN_EVERY_S:
            self.out.write(text + "\n")
            self.out.flush()
            self.last_plain, self.last_plain_text = time.monotonic(), self.newest


def _clock(at: Any = None) -> str:
    try:
        return (_as_dt(at).astimezone() if at is not None else datetime.now()).strftime("%H:%M:%S")
    except (TypeError, ValueError):
        return datetime.now().strftime("%H:%M:%S")


def _columns() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 120


def metadata_engine() -> Any:
    from airflow.configuration import conf
    from sqlalchemy import create_engine

    return create_engine(conf.get("database", "sql_alchemy_conn"))


def task_rows(engine: Any, dag_id: str, run_id: str) -> tuple[str | None, list[tuple[str, str | None, Any, Any]]]:
    """(run state, [(task_id, state, start, end)]) from the metadata DB; (None, []) until the run exists."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with engine.connect() as con:
            run = con.execute(
                text("SELECT state FROM dag_run WHERE dag_id = :d AND run_id = :r"), {"d": dag_id, "r": run_id}
            ).fetchone()
            if run is None:
                return None, []
            tis = con.execute(
                text(
                    "SELECT task_id, state, start_date, end_date FROM task_instance "
                    "WHERE dag_id = :d AND run_id = :r ORDER BY start_date"
                ),
                {"d": dag_id, "r": run_id},
            ).fetchall()
    except SQLAlchemyError:  # tables not there yet (the child is migrating), or a locked SQLite file
        return None, []
    return run[0], [(r[0], r[1], r[2], r[3]) for r in tis]


def failure_of(log_file: Path, task_id: str, tail: int = 6) -> str:
    """The exception a failed task ended with: the lines after its traceback's last frame (the message, and
    what the message carries, e.g. the benchmark's last log lines, the last ``tail`` of them)."""
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
    starts = [i for i, line in enumerate(section) if "Task failed with exception" in line]
    if not starts:
        return ""
    block: list[str] = []
    for line in section[starts[-1] + 1 :]:
        if TIMESTAMPED.match(line):
            break
        block.append(line)
    frames = [i for i, line in enumerate(block) if line[:1].isspace()]
    message = [line for line in block[(frames[-1] + 1) if frames else 0 :] if line.strip()]
    if not message:
        return ""
    head = re.sub(r"^[\w.]+\.(\w+(?:Error|Exception|Timeout\w*)): ", r"\1: ", message[0])
    rest = message[1:]
    lines = [head[:600]] + [f"    {line[:300]}" for line in rest[-tail:]]
    return "\n".join(lines)


# -- the child: dag.test() ---------------------------------------------------------------------------


def child_main(argv: list[str]) -> int:
    """``python -m benchflow.progress SPEC_PATH WHEN_ISO CONF_JSON RESULT_FILE``: set up, run the DAG once."""
    spec_path, when_iso, conf_json, result_file = argv
    from benchflow.airflow_setup import configure_airflow, ensure_pools
    from benchflow.paths import PROJECT_ROOT
    from benchflow.spec import load_spec

    spec = load_spec(Path(spec_path))
    configure_airflow()
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.db import upgradedb

    upgradedb()
    ensure_pools()
    bag = DagBag(dag_folder=str(PROJECT_ROOT / "dags" / "campaigns.py"))
    dag = bag.get_dag(spec.dag_id)
    if dag is None:
        Path(result_file).write_text(json.dumps({"error": f"DAG {spec.dag_id} not found: {bag.import_errors}"}))
        return 1
    from benchflow.warehouse import Warehouse

    Warehouse.from_airflow().migrate()
    when = datetime.fromisoformat(when_iso)
    dag_run = dag.test(run_after=when, logical_date=when, run_conf=json.loads(conf_json) if conf_json else None)
    state = str(getattr(dag_run, "state", "unknown")).split(".")[-1].lower()
    Path(result_file).write_text(json.dumps({"run_id": dag_run.run_id, "state": state}))
    return 0


# -- the parent ----------------------------------------------------------------------------------


class Stop(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run(
    spec: CampaignSpec, spec_path: Path, conf: str | None, verbose: bool = False, out: IO[str] | None = None
) -> int:
    """Run ``spec`` once through Airflow, quietly; returns the exit code of ``bench run``."""
    out = out or sys.stdout
    tty = out.isatty()
    when = datetime.now(UTC)
    run_id = f"manual__{when.isoformat()}"
    logs = log_path(spec.dag_id, when)
    result_file = logs.with_suffix(".result.json")
    print(f"bench run {spec.name}: {spec.dag_id} on host {spec.host}, run {run_id}", file=out)
    print(f"Airflow logs: {logs}" + ("" if verbose else "  (bench run -v shows them here)"), file=out)
    print(f"{_clock()}  setting up: Airflow's metadata DB, the host pools, the warehouse", file=out, flush=True)
    started = time.monotonic()
    log_handle = logs.open("ab")
    command = [
        sys.executable,
        "-m",
        "benchflow.progress",
        str(spec_path),
        when.isoformat(),
        conf or "",
        str(result_file),
    ]
    child = subprocess.Popen(command, stdout=log_handle, stderr=subprocess.STDOUT, start_new_session=True)
    log_handle.close()
    watch = Watch(spec.dag_id, run_id, logs, out, tty)
    stop: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        stop.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    engine = None
    echo_offset = 0
    try:
        while child.poll() is None and not stop:
            time.sleep(0.3)
            if verbose:
                echo_offset = _echo(logs, echo_offset, out, watch)
            if engine is None:
                try:
                    engine = metadata_engine()
                except Exception:  # no metadata DB configured yet: the child is still setting up
                    engine = None
            if engine is not None:
                watch.update(task_rows(engine, spec.dag_id, run_id)[1])
            watch.read_log()
            watch.progress()
        if stop:
            return _interrupted(spec, run_id, child, stop[0], watch, engine)
        if verbose:
            _echo(logs, echo_offset, out, watch)
        if engine is not None:
            watch.read_log()
            watch.update(task_rows(engine, spec.dag_id, run_id)[1])
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return _report(spec, run_id, result_file, logs, watch, time.monotonic() - started)


def _echo(logs: Path, offset: int, out: IO[str], watch: Watch) -> int:
    try:
        with logs.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except OSError:
        return offset
    cut = chunk.rfind(b"\n") + 1
    if cut:
        if watch.progress_shown and watch.tty:
            out.write("\r\033[K")
            watch.progress_shown = False
        out.write(chunk[:cut].decode(errors="replace"))
        out.flush()
    return offset + cut


def _report(spec: CampaignSpec, run_id: str, result_file: Path, logs: Path, watch: Watch, took: float) -> int:
    try:
        result = json.loads(result_file.read_text())
    except (OSError, ValueError):
        result = {}
    finally:
        result_file.unlink(missing_ok=True)
    state = result.get("state", "unknown")
    if "error" in result or not result:
        reason = result.get("error") or _last_error(logs) or "the run ended before it started"
        watch.say(f"\n{spec.dag_id}: could not run: {reason}\nAirflow logs: {logs}")
        return 1
    from benchflow.warehouse import Warehouse

    warehouse = Warehouse.from_airflow()
    kind, p = spec.result_kind, warehouse.p
    order = kind.order_by or ", ".join(kind.key)
    rows = warehouse.query(
        f"SELECT {kind.display} FROM {kind.table} WHERE dag_id = {p} AND run_id = {p} ORDER BY {order}",
        [spec.dag_id, run_id],
    )
    loaded = warehouse.query(
        f"SELECT status, rows_loaded, detail FROM runs WHERE dag_id = {p} AND run_id = {p}", [spec.dag_id, run_id]
    )
    watch.say(f"\n{spec.dag_id} run {run_id}: {state} in {took:.1f} s")
    failed = [t for t, v in watch.tasks.items() if v.state == "failed"]
    for task_id in failed:
        error = failure_of(logs, task_id) or "(no error line found; see the log)"
        watch.say(f"failed task: {task_id}: {error}")
    if len(loaded):
        first = loaded.iloc[0]
        detail = f": {first['detail']}" if first["detail"] else ""
        watch.say(f"warehouse status: {first['status']} ({first['rows_loaded']} rows){detail}")
    watch.say(rows.to_string(index=False) if len(rows) else "(no rows loaded)")
    watch.say(f"results: {warehouse.location} (bench sql, or the Benchmarks view of `make up`)")
    artifacts = var_dir() / "artifacts" / spec.dag_id / run_id
    if artifacts.exists():
        watch.say(f"artifacts: {artifacts}")
    watch.say(f"Airflow logs: {logs}")
    return 0 if state == "success" else 1


def _last_error(logs: Path) -> str:
    try:
        lines = logs.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if found := ERROR_LINE.search(line):
            return f"{found.group(1).split('.')[-1]}: {found.group(2)}"[:600]
    return ""


def _interrupted(
    spec: CampaignSpec, run_id: str, child: subprocess.Popen[bytes], signum: int, watch: Watch, engine: Any
) -> int:
    """Stop the child (its whole session), then run the teardowns whose setups had started, in order."""
    name = signal.Signals(signum).name
    watch.say(f"\n{_clock()}  {name}: stopping the run, its benchmark, and restoring the services")
    _end_group(child)
    states = dict((t, s) for t, s, _, _ in task_rows(engine, spec.dag_id, run_id)[1]) if engine is not None else {}
    problems = cleanup(spec, run_id, states, watch.say, watch.log_file)
    _mark_failed(engine, spec.dag_id, run_id)
    watch.say(f"run {run_id} stopped by {name}" + (f"; {len(problems)} clean-up step(s) failed" if problems else ""))
    watch.say(f"Airflow logs: {watch.log_file}")
    return 128 + signum


def _end_group(child: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            break
        try:
            child.wait(grace_s)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # whatever else is left in its session (a launch's shell)
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def cleanup(spec: CampaignSpec, run_id: str, states: dict[str, str | None], say: Any, log_file: Path) -> list[str]:
    """The run's teardowns whose setups had started, in task order, run here; returns what failed."""
    import logging

    from benchflow.factory import build_dag

    dag = build_dag(spec)
    handler = logging.FileHandler(log_file)
    root = logging.getLogger()
    root.addHandler(handler)
    order = _topological(dag)
    problems: list[str] = []
    context = {"dag": dag, "run_id": run_id, "params": dict(dag.params), "dag_run": None}
    try:
        for task in order:
            if not getattr(task, "is_teardown", False) or states.get(task.task_id) in ("success", "skipped"):
                continue
            setups = [t for t in task.upstream_list if getattr(t, "is_setup", False)]
            if setups and not any(states.get(t.task_id) in STARTED for t in setups):
                continue
            began = time.monotonic()
            try:
                task.execute(context)
            except Exception as exc:
                problems.append(task.task_id)
                say(f"{_clock()}  FAIL    {task.task_id:<28} clean-up failed: {exc}")
                continue
            say(f"{_clock()}  ok      {task.task_id:<28} clean-up        {time.monotonic() - began:6.1f} s")
    finally:
        root.removeHandler(handler)
        handler.close()
    return problems


def _topological(dag: Any) -> list[Any]:
    tasks = {t.task_id: t for t in dag.tasks}
    done: list[Any] = []
    seen: set[str] = set()

    def visit(task_id: str) -> None:
        if task_id in seen:
            return
        seen.add(task_id)
        for upstream in sorted(tasks[task_id].upstream_task_ids):
            visit(upstream)
        done.append(tasks[task_id])

    for task_id in tasks:
        visit(task_id)
    return done


def _mark_failed(engine: Any, dag_id: str, run_id: str) -> None:
    """The interrupted run and its unfinished tasks, failed in the metadata DB (nothing runs them any more)."""
    if engine is None:
        return
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    unfinished = "(state IS NULL OR state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'))"
    try:
        with engine.begin() as con:
            params = {"d": dag_id, "r": run_id}
            con.execute(
                text(f"UPDATE task_instance SET state = 'failed' WHERE dag_id = :d AND run_id = :r AND {unfinished}"),
                params,
            )
            con.execute(text("UPDATE dag_run SET state = 'failed' WHERE dag_id = :d AND run_id = :r"), params)
    except SQLAlchemyError:
        pass


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
