"""Test environment: a private var/ directory and a real PostgreSQL database for Airflow's metadata, per test
process (``make test`` runs the suite in parallel processes, pytest-xdist: each has its own).

Airflow reads its configuration when first imported, so this runs before any test module imports it. The
database is a copy of a migrated template on the PostgreSQL server at 127.0.0.1:5432
(:func:`benchtools.metadata_db.migrated_template`, made once per server and Airflow version) and dropped at
the end.

Tiers, by what a test starts (``pyproject.toml`` declares them; ``make check`` runs the first two):
``unit`` (nothing), ``integration`` (real processes, sshd, databases; no Airflow DAG run), ``e2e`` (a campaign
DAG through ``dag.test()`` or ``bench run``), ``stack`` (Airflow's components as processes). Every test has a
timeout (``timeout`` in ``pyproject.toml``, raised per test where a real run needs it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
TEST_DB = f"benchflow_test_{os.getpid()}"
PG_URI = f"postgresql://postgres@127.0.0.1:5432/{TEST_DB}"
VAR = Path(tempfile.mkdtemp(prefix="benchflow-test-"))
TIERS = ("unit", "integration", "e2e", "stack")
E2E_TIMEOUT_S = 600  # an e2e test's timeout unless it sets its own (pyproject's 300 s for the others)

os.environ.update(
    {
        "BENCH_VAR_DIR": str(VAR),
        "AIRFLOW_HOME": str(VAR / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAG_IGNORE_FILE_SYNTAX": "regexp",  # see benchflow.paths
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://postgres@127.0.0.1:5432/{TEST_DB}",
        "GX_ANALYTICS_ENABLED": "false",
    }
)
os.environ.pop("AIRFLOW_CONN_BENCH_WAREHOUSE", None)


def pytest_sessionstart(session: pytest.Session) -> None:
    if getattr(session.config, "workerinput", None) is None and session.config.getoption("numprocesses", None):
        return  # the controller of parallel workers runs no test
    from benchflow.warehouse.hooks import create_postgres_database, drop_postgres_database
    from benchtools.metadata_db import migrated_template

    drop_postgres_database(TEST_DB)
    create_postgres_database(TEST_DB, template=migrated_template())


EXIT_GRACE_S = 120  # what a test process may take to clean up and exit once its tests are over


def exit_watchdog(status: int) -> None:
    """No test process outlives its session: a cleanup that blocks, or a thread left blocked (an executor's, a
    client's) holding the interpreter's exit, would hold the whole run under xdist until CI's own limit. Past
    EXIT_GRACE_S every thread's stack goes to stderr and the process exits with the session's status."""
    import faulthandler
    import sys
    import threading

    def stuck() -> None:
        sys.stderr.write(f"\nthis test process did not exit {EXIT_GRACE_S} s after its tests; its threads:\n")
        faulthandler.dump_traceback(all_threads=True)
        os._exit(status)

    timer = threading.Timer(EXIT_GRACE_S, stuck)
    timer.daemon = True
    timer.start()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    import sys

    from benchflow.warehouse.hooks import drop_postgres_database

    exit_watchdog(int(exitstatus))
    if "airflow.settings" in sys.modules:  # this process's pooled connections go first, not at exit
        sys.modules["airflow.settings"].dispose_orm()
    drop_postgres_database(TEST_DB)
    shutil.rmtree(VAR, ignore_errors=True)


TIMEOUT_TIMER = pytest.StashKey[threading.Timer]()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's thread method, made to say what it did: its own timer writes the stacks through the terminal
    writer, which an xdist worker never shows, and then ``os._exit``s the worker, so a test past its timeout read
    "node down: Not properly terminated" with no traceback, as a killed worker does. This timer writes the test's
    name, its captured output, the worker's live child processes and every thread's stack to the process's real
    stderr (which the run's log shows), ends those child processes, then exits the same way."""
    if settings.method != "thread" or not settings.timeout or settings.timeout <= 0:
        return None
    timer = threading.Timer(settings.timeout, timed_out, (item, float(settings.timeout)))
    timer.name = f"test timeout {item.nodeid}"
    timer.daemon = True
    item.stash[TIMEOUT_TIMER] = timer
    timer.start()
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool | None:
    timer = item.stash.get(TIMEOUT_TIMER, None)
    if timer is None:
        return None
    timer.cancel()
    timer.join()
    return True


def timed_out(item: pytest.Item, timeout: float) -> None:
    """The end of a test past its timeout: what it was doing, on the real stderr; then this process exits."""
    import faulthandler

    out = err = ""
    capman = item.config.pluginmanager.getplugin("capturemanager")
    try:
        capman.suspend_global_capture(item)  # stderr is the process's own again
        out, err = capman.read_global_capture()
    except Exception as exc:  # the stacks matter more than the captured output
        err = f"(captured output unreadable: {exc!r})"
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    children = psutil.Process().children(recursive=True)
    with os.fdopen(os.dup(2), "w") as stream:
        stream.write(f"\n{'+' * 30} TIMEOUT {'+' * 30}\n{item.nodeid} ran past its timeout of {timeout:.0f} s ")
        stream.write(f"(worker {worker}, pid {os.getpid()}); this process exits\n")
        for name, text in (("stdout", out), ("stderr", err)):
            if text:
                stream.write(f"--- captured {name} (last 4000 characters) ---\n{text[-4000:]}\n")
        stream.write("--- live child processes ---\n")
        for child in children:
            with contextlib.suppress(psutil.Error):
                stream.write(f"{child.pid} {child.status()} {' '.join(child.cmdline())[:300]}\n")
        stream.write("--- threads ---\n")
        stream.flush()
        faulthandler.dump_traceback(file=stream, all_threads=True)
        stream.write(f"{'+' * 30} TIMEOUT {'+' * 30}\n")
    for child in children:  # psutil checks each is the process it saw (no recycled pid is signalled)
        with contextlib.suppress(psutil.Error):
            child.kill()
    os._exit(1)


def tier_of(item: pytest.Item) -> str:
    tiers = [m.name for m in item.iter_markers() if m.name in TIERS]
    if len(tiers) != 1:
        raise pytest.UsageError(f"{item.nodeid}: one tier marker of {TIERS} expected, found {tiers}")
    return tiers[0]


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test belongs to exactly one tier (its module's ``pytestmark``): selection by marker then selects
    every test, and a test without a tier is an error, not a test that no run selects."""
    tier_of(item)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The groups that take longest are handed out first (stack, e2e, integration, unit), so that no long one
    starts last; the order within a tier stays the files'."""
    order = {tier: n for n, tier in enumerate(("stack", "e2e", "integration", "unit"))}
    items.sort(key=lambda item: order[tier_of(item)])
    for item in items:  # a whole campaign on a busy machine: the timeout catches a hang, not a slow machine
        if tier_of(item) == "e2e" and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))


OWN_STACK = ("tests/stack/test_bench_up.py",)  # stack-tier modules that start their own stack (bench up)


def group_of(nodeid: str) -> str:
    """What one worker runs as a unit: the stack tier's modules on the shared Celery stack (tests/stack/conftest.py:
    one stack for all of them), each other module that starts something (its module fixtures run once), each unit
    test on its own (wherever a worker is free)."""
    path = nodeid.split("::")[0]
    if path.startswith("tests/stack/") and path not in OWN_STACK:
        return "stack"
    if path.startswith(("tests/unit/", "kernels/")):
        return nodeid
    return path


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist's scope scheduling over :func:`group_of` (its ``loadgroup`` reads markers through a node
    attribute pytest 9 no longer has), in the order :func:`pytest_collection_modifyitems` gave: by default it
    hands out the groups with the most tests first, which put the stack group (a dozen long tests) behind every
    module of many short ones, starting more than two minutes into the run."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    """Wall time of the run and the time each tier's tests took (summed over the workers): drift shows in
    every CI log."""
    reports = [r for key in ("passed", "failed", "error") for r in terminalreporter.stats.get(key, [])]
    per_tier: dict[str, float] = {}
    for report in reports:
        tier = next((k for k in getattr(report, "keywords", {}) if k in TIERS), "other")
        per_tier[tier] = per_tier.get(tier, 0.0) + getattr(report, "duration", 0.0)
    if not per_tier:
        return
    started = getattr(getattr(terminalreporter, "_session_start", None), "time", None)
    wall = time.time() - started if isinstance(started, float) else float("nan")
    tiers = ", ".join(f"{tier} {seconds:.0f} s" for tier, seconds in sorted(per_tier.items()))
    terminalreporter.write_sep("=", f"suite wall time {wall:.0f} s; test time per tier: {tiers}")


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """Airflow's metadata tables in this process's test database (a copy of the migrated template): the
    fixture says a test needs them; the check is cheap, and migrates should the template be behind."""
    from airflow.utils.db import check_migrations, upgradedb

    try:
        check_migrations(timeout=0)
    except TimeoutError:
        upgradedb()


@pytest.fixture
def var_dir() -> Path:
    return VAR


@pytest.fixture(scope="session")
def sshd() -> Iterator[object]:
    """A real sshd on a loopback port, and the Airflow connection ``gpu_loopback`` that pins its key."""
    from benchtools.loopback_sshd import LoopbackSSHD

    server = LoopbackSSHD(VAR / "sshd").start()
    name, value = server.connection_env("gpu_loopback")
    os.environ[name] = value
    yield server
    os.environ.pop(name, None)
    server.stop()


def live_group_members(pgid: int) -> list[int]:
    """Processes of a process group that are not zombies (``kill -0`` would count those too)."""
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.info["pid"]) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.info["pid"])
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def wait_for(predicate, timeout: float, what: str, every: float = 0.1) -> None:
    """Until ``predicate()`` holds; fails naming ``what`` after ``timeout`` seconds. Tests wait on conditions,
    never for a fixed time."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
