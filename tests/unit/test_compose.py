"""docker-compose.yaml cannot start here (no Docker engine); check it statically."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((PROJECT_ROOT / "docker-compose.yaml").read_text())


def test_services_of_the_airflow_stack(compose):
    expected = {"postgres", "redis", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                "airflow-worker", "airflow-triggerer", "airflow-init"}  # fmt: skip
    assert expected <= set(compose["services"])


def test_celery_executor_with_postgres_and_redis(compose):
    env = compose["services"]["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
    assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")


def test_project_folders_are_mounted(compose):
    mounts = {m.split(":")[0] for m in compose["services"]["airflow-worker"]["volumes"]}
    assert {"./dags", "./plugins", "./include", "./kernels"} <= mounts


def test_every_bench_env_var_the_code_reads_is_set(compose):
    code = "\n".join(p.read_text() for p in (PROJECT_ROOT / "plugins" / "benchflow").rglob("*.py"))
    read = set(re.findall(r"environ(?:\.get)?\(\s*\"(BENCH_[A-Z_]+)\"", code))
    assert read, "the scan found no BENCH_* variables at all"
    env = compose["services"]["airflow-worker"]["environment"]
    assert read <= set(env), read - set(env)


def test_image_installs_exactly_requirements_txt():
    dockerfile = (PROJECT_ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir -r /opt/bench/requirements.txt -c /opt/bench/constraints.txt" in dockerfile
    base = re.search(r"FROM apache/airflow:([\d.]+)", dockerfile)
    pinned = re.search(r"^apache-airflow==([\d.]+)$", (PROJECT_ROOT / "requirements.txt").read_text(), re.M)
    assert base and pinned and base.group(1) == pinned.group(1)


def test_no_secret_in_the_file():
    text = (PROJECT_ROOT / "docker-compose.yaml").read_text()
    assert not re.search(r"PASSWORD:\s*-?\s*[\"']?(?!airflow\b)\w{6,}", text)
