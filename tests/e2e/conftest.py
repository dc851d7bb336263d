"""Helpers for whole-DAG tests: a campaigns folder of the test's own specs, and one run of a DAG."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, PROJECT_ROOT, VAR

PAYLOADS = {
    "moe": PROJECT_ROOT / "kernels" / "moe",
    "serving": PROJECT_ROOT / "kernels" / "serving",
    "fault": FIXTURES / "payloads" / "fault",
}


@pytest.fixture(autouse=True)
def fresh_services_log() -> None:
    """Each test reads the services log its own runs wrote: the local host's workdir is its test process's (one
    per xdist worker), and whichever module that worker ran before may have left lines there (a run that reads no
    log, or a test that failed before reading it), so what a test found used to depend on how the tests were
    handed out."""
    (VAR / "hosts" / "local" / "services.log").unlink(missing_ok=True)


@contextmanager
def campaign_dags(root: Path, specs: dict[str, str]) -> Iterator[Any]:
    """Write ``specs`` (name → YAML) into ``root``, point the DAG folder at them and at the test payloads,
    and yield the DagBag that ``dags/campaigns.py`` builds from them."""
    (root / "specs").mkdir(parents=True)
    for name, text in specs.items():
        (root / "specs" / f"{name}.yaml").write_text(text)
    for name, source in PAYLOADS.items():
        shutil.copytree(source, root / "kernels" / name)
    saved = {k: os.environ.get(k) for k in ("BENCH_CAMPAIGNS_DIR", "BENCH_KERNELS_DIR")}
    os.environ["BENCH_CAMPAIGNS_DIR"] = str(root / "specs")
    os.environ["BENCH_KERNELS_DIR"] = str(root / "kernels")
    try:
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=str(PROJECT_ROOT / "dags" / "campaigns.py"))
        assert bag.import_errors == {}
        assert {f"bench_{name}" for name in specs} <= set(bag.dags)
        yield bag
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_dag(bag: Any, name: str, conf: dict[str, Any] | None = None) -> tuple[str, str, dict[str, str]]:
    """Run ``bench_<name>`` with ``dag.test()``; return its run id, state and every task's state."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    dag_run = bag.get_dag(f"bench_{name}").test(run_conf=conf)
    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=f"bench_{name}", run_id=dag_run.run_id).all()
        return dag_run.run_id, str(dag_run.state), {ti.task_id: str(ti.state) for ti in tis}


SERVER_PORT = re.compile(r"\b30[01]\d\d\b")  # the fixed server ports (30000-30199) that specs here are written with


def on_free_ports(*specs: str) -> list[str]:
    """The specs with every server port (``30100``, the router's ``--prefill http://…:30101 30104``) replaced by a
    port free now, the same port for the same number across them: a test's servers never meet another test
    process's, nor a server an aborted run left behind."""
    from benchtools.net import free_port

    ports: dict[str, str] = {}

    def fresh(match: re.Match[str]) -> str:
        if match[0] not in ports:
            port = str(free_port())
            while port in ports.values():  # a port free now is not reserved: the next call may return it again
                port = str(free_port())
            ports[match[0]] = port
        return ports[match[0]]

    return [SERVER_PORT.sub(fresh, spec) for spec in specs]
