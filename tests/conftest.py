"""Test environment: a private var/ directory and a real PostgreSQL database for Airflow's metadata.

Airflow reads its configuration when first imported, so this runs before any test module imports it.
The database is created on the PostgreSQL server at 127.0.0.1:5432 and dropped at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psutil
import pytest

from benchtools.stack import pg_admin

PROJECT_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
TEST_DB = f"benchflow_test_{os.getpid()}"
PG_URI = f"postgresql://postgres@127.0.0.1:5432/{TEST_DB}"
VAR = Path(tempfile.mkdtemp(prefix="benchflow-test-"))

os.environ.update(
    {
        "BENCH_VAR_DIR": str(VAR),
        "AIRFLOW_HOME": str(VAR / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAG_IGNORE_FILE_SYNTAX": "regexp",  # see benchtools.airflow_env
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://postgres@127.0.0.1:5432/{TEST_DB}",
        "GX_ANALYTICS_ENABLED": "false",
    }
)
os.environ.pop("AIRFLOW_CONN_BENCH_WAREHOUSE", None)


def pytest_sessionstart(session: pytest.Session) -> None:
    pg_admin(f'DROP DATABASE IF EXISTS "{TEST_DB}"')
    pg_admin(f'CREATE DATABASE "{TEST_DB}"')


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    pg_admin(f'DROP DATABASE IF EXISTS "{TEST_DB}" WITH (FORCE)')
    shutil.rmtree(VAR, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """Airflow's metadata tables in the test database."""
    from airflow.utils.db import upgradedb

    upgradedb()


@pytest.fixture
def var_dir() -> Path:
    return VAR


@pytest.fixture(scope="session")
def sshd():
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
