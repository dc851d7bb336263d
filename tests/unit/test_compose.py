"""docker-compose.yaml cannot start here (no Docker engine); check it statically."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from benchflow.spec import load_all
from benchtools.stack import EDGE_EXECUTOR
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.unit

AIRFLOW = (
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-worker",
    "airflow-triggerer",
    "airflow-init",
)


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((PROJECT_ROOT / "docker-compose.yaml").read_text())


def test_services_of_the_airflow_stack_and_the_simulated_gpu_host(compose):
    assert {"postgres", "redis", "gpu-sim", *AIRFLOW} <= set(compose["services"])
    commands = {name: compose["services"][name].get("command") for name in AIRFLOW}
    assert commands["airflow-apiserver"] == "api-server" and commands["airflow-worker"] == "celery worker"
    assert commands["airflow-dag-processor"] == "dag-processor" and commands["airflow-triggerer"] == "triggerer"


def test_celery_and_edge_executors_with_postgres_and_redis(compose):
    for name in AIRFLOW:
        env = compose["services"][name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == f"CeleryExecutor,{EDGE_EXECUTOR}"
        assert env["AIRFLOW__EDGE__API_ENABLED"] == "true"
        assert env["AIRFLOW__EDGE__API_URL"] == "http://airflow-apiserver:8080/edge_worker/v1/rpcapi"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].split("@")[1].startswith("postgres/")
        assert (
            env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
            and "@redis:6379" in env["AIRFLOW__CELERY__BROKER_URL"]
        )


def test_an_edge_worker_to_try_edge_hosts_polls_the_api_server_with_the_shared_secret(compose):
    worker = compose["services"]["airflow-edge-worker"]
    assert worker["profiles"] == ["edge"]  # started on request: docker compose --profile edge up -d
    assert worker["command"].startswith("edge worker --queues ") and worker["command"].endswith("--concurrency 1")
    assert (
        worker["environment"]["BENCH_VAR_DIR"] != compose["services"]["airflow-worker"]["environment"]["BENCH_VAR_DIR"]
    )
    for name in (*AIRFLOW, "airflow-edge-worker"):  # one key and one secret for all, from .env (make compose-env)
        env = compose["services"][name]["environment"]
        assert env["AIRFLOW__CORE__FERNET_KEY"] == "${AIRFLOW__CORE__FERNET_KEY:?run make compose-env first}"
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == "${AIRFLOW__API_AUTH__JWT_SECRET:?run make compose-env first}"


def test_project_folders_are_mounted(compose):
    for name in AIRFLOW:
        mounts = {m.split(":")[0]: m.split(":")[1] for m in compose["services"][name]["volumes"]}
        assert {"./dags", "./plugins", "./include", "./kernels", "./var"} <= set(mounts)
        env = compose["services"][name]["environment"]
        assert mounts["./dags"] == env["AIRFLOW__CORE__DAGS_FOLDER"]
        assert mounts["./include"] + "/campaigns" == env["BENCH_CAMPAIGNS_DIR"]
        assert mounts["./kernels"] == env["BENCH_KERNELS_DIR"]


def test_every_env_var_the_code_reads_is_set(compose):
    # the runtime library (what the containers run); the tools' settings (bench up's BENCH_UP_*) are their own
    sources = list((PROJECT_ROOT / "plugins" / "benchflow").rglob("*.py"))
    sources.append(PROJECT_ROOT / "dags" / "campaigns.py")
    code = "\n".join(p.read_text() for p in sources)
    read = set(re.findall(r"environ(?:\.get)?\(\s*[\"']([A-Z][A-Z0-9_]+)[\"']", code))
    read |= set(re.findall(r"environ\[[\"']([A-Z][A-Z0-9_]+)[\"']\]", code))
    assert "BENCH_VAR_DIR" in read, "the scan found none of the variables it should"
    read -= {"AIRFLOW_HOME"}  # set by the official image
    env = compose["services"]["airflow-worker"]["environment"]
    assert read <= set(env), read - set(env)


def test_the_init_service_migrates_and_creates_the_host_pools(compose):
    script = "\n".join(compose["services"]["airflow-init"]["command"])
    lines = [line.strip() for line in script.splitlines()]
    assert lines.index("airflow db migrate") < lines.index("bench pools")
    assert "set -e" in lines
    for name in AIRFLOW[:-1]:  # everything waits for it
        assert compose["services"][name]["depends_on"]["airflow-init"]["condition"] == (
            "service_completed_successfully"
        )


def test_gpu_loopback_points_at_the_simulated_host_with_a_pinned_key(compose):
    env = compose["services"]["airflow-worker"]["environment"]
    raw = env["AIRFLOW_CONN_GPU_LOOPBACK"]
    assert "${GPU_SIM_HOST_KEY:?" in raw  # compose refuses to start without the pinned key
    conn = json.loads(re.sub(r"\$\{GPU_SIM_HOST_KEY:\?[^}]*\}", "ssh-ed25519 AAAAtest", raw))
    assert conn["conn_type"] == "ssh" and conn["host"] == "gpu-sim"
    extra = conn["extra"]
    assert extra["host_key"] == "ssh-ed25519 AAAAtest"
    assert not {"no_host_key_check", "allow_host_key_change"} & set(extra)
    assert extra["key_file"] == "/run/secrets/gpu_sim_client_key"
    assert "gpu_sim_client_key" in compose["services"]["airflow-worker"]["secrets"]
    sim = compose["services"]["gpu-sim"]
    assert sim["build"]["dockerfile"] == "Dockerfile.gpu-sim"
    assert {"gpu_sim_host_key", "gpu_sim_authorized_keys"} <= set(sim["secrets"])
    for secret in compose["secrets"].values():  # keys come from ./secrets/, which git ignores
        assert secret["file"].startswith("./secrets/")
    ignored = (PROJECT_ROOT / ".gitignore").read_text().splitlines()
    assert {"secrets/", ".env"} <= set(ignored)
    sshd = (PROJECT_ROOT / "include" / "gpu-sim" / "sshd_config").read_text()
    assert "PasswordAuthentication no" in sshd and "HostKey /run/secrets/gpu_sim_host_key" in sshd


def test_every_specs_host_has_a_connection_or_an_example(compose):
    env = compose["services"]["airflow-worker"]["environment"]
    example = (PROJECT_ROOT / ".env.example").read_text()
    for spec in load_all()[0]:
        if spec.host == "local":
            continue
        variable = f"AIRFLOW_CONN_{spec.host.upper()}"
        assert variable in env or re.search(rf"^# {variable}=", example, re.M), (spec.name, variable)


def _pins(text: str) -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", text, re.M)
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in pins}


def test_images_install_exactly_requirements_txt():
    dockerfile = (PROJECT_ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir -r /opt/bench/requirements.txt -c /opt/bench/constraints.txt" in dockerfile
    assert "COPY requirements.txt constraints.txt /opt/bench/" in dockerfile
    requirements = _pins((PROJECT_ROOT / "requirements.txt").read_text())
    base = re.search(r"FROM apache/airflow:([\d.]+)-python3\.11", dockerfile)
    assert base and base.group(1) == requirements["apache-airflow"]
    assert "apache-airflow-providers-celery" in requirements  # the compose file's executor
    constraints = _pins((PROJECT_ROOT / "constraints.txt").read_text())
    for name, version in requirements.items():  # the constraints cannot pull a pin elsewhere
        assert constraints.get(name) == version, name
    sim = (PROJECT_ROOT / "Dockerfile.gpu-sim").read_text()
    assert "grep -E '^(torch|triton)==' /opt/bench/requirements.txt" in sim  # the host runs the same pins


def test_no_secret_in_the_file():
    text = (PROJECT_ROOT / "docker-compose.yaml").read_text()
    assert not re.search(r"PASSWORD:\s*-?\s*[\"']?(?!airflow\b)\w{6,}", text)
    assert "PRIVATE KEY" not in text and not re.search(r"ssh-ed25519 AAAA[A-Za-z0-9+/]{20,}", text)
