"""Triggers through Airflow's own REST API, in process (its FastAPI app with this project's plugin, the test's
PostgreSQL metadata DB, the campaign DAGs synced to it as the dag-processor does): a conf with NaN or Infinity
anywhere is refused with 400 naming where, a 400 never echoes a huge value whole, a good conf becomes a run."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.integration
CAMPAIGNS = PROJECT_ROOT / "include" / "campaigns"
FLOATS = """\
kind: kernel
payload: moe
schedule: null
benchmark:
  script: bench_moe.py
  args:
    m_list: [1, 2]
    alpha: 0.5
"""


@pytest.fixture(scope="module")
def api(airflow_db, tmp_path_factory):
    from fastapi.testclient import TestClient

    folder = tmp_path_factory.mktemp("campaigns")
    (folder / "guard_floats.yaml").write_text(FLOATS)
    shutil.copy(CAMPAIGNS / "serving_local.yaml", folder / "guard_serving.yaml")
    saved = {k: os.environ.get(k) for k in ("BENCH_CAMPAIGNS_DIR", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS")}
    os.environ["BENCH_CAMPAIGNS_DIR"] = str(folder)
    os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = "True"  # every request is an admin's
    try:
        from airflow.api_fastapi.app import create_app
        from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
        from airflow.models.dagbundle import DagBundleModel
        from airflow.utils.session import create_session

        bag = DagBag(dag_folder=str(PROJECT_ROOT / "dags" / "campaigns.py"))
        assert {"bench_guard_floats", "bench_guard_serving"} <= set(bag.dags), bag.import_errors
        with create_session() as session:
            if session.get(DagBundleModel, "dags-folder") is None:
                session.add(DagBundleModel(name="dags-folder"))
        sync_bag_to_db(bag, "dags-folder", None)
        with TestClient(create_app("core")) as client:
            yield client
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def trigger(api, dag_id: str, conf_json: str):
    body = '{"logical_date": null, "conf": ' + conf_json + "}"
    return api.post(f"/api/v2/dags/{dag_id}/dagRuns", content=body, headers={"content-type": "application/json"})


def test_the_plugin_guards_the_trigger_endpoint(api):
    assert "TriggerGuard" in [m.cls.__name__ for m in api.app.user_middleware]


@pytest.mark.parametrize(
    ("dag_id", "conf", "where"),
    [
        ("bench_guard_floats", '{"alpha": NaN}', "conf.alpha"),
        ("bench_guard_floats", '{"m_list": [1, Infinity]}', "conf.m_list[1]"),
        ("bench_guard_serving", '{"extra": {"deep": [1, -Infinity]}}', "conf.extra.deep[1]"),
    ],
)
def test_nan_or_infinity_anywhere_is_refused_naming_where(api, dag_id, conf, where):
    answer = trigger(api, dag_id, conf)
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith(f"{where}: NaN and Infinity are not numbers a run can take")


def test_a_400_never_echoes_a_huge_value_whole(api):
    levels = "[" + ", ".join(str(i) for i in range(1, 100_001)) + "]"
    answer = trigger(api, "bench_guard_serving", '{"concurrency": ' + levels + "}")
    assert answer.status_code == 400
    detail = answer.json()["detail"]
    assert detail.startswith("Invalid input for param concurrency: [1, 2, 3")
    assert "is too long" in detail and len(answer.content) < 5000, len(answer.content)


def test_a_good_conf_becomes_a_run(api):
    answer = trigger(api, "bench_guard_floats", '{"alpha": 0.25}')
    assert answer.status_code == 200, answer.text
    assert answer.json()["conf"] == {"alpha": 0.25}


def test_a_body_too_big_or_nested_too_deep_never_reaches_airflow_whole(api):
    """A 5 MiB conf is refused (413) before it is buffered any further; a conf nested 100,000 deep (too deep for
    Python's JSON reader) gets an answer, not a crash of the middleware."""
    big = trigger(api, "bench_guard_floats", '{"alpha": "' + "x" * (5 * 2**20) + '"}')
    assert big.status_code == 413 and "at most 4 MiB" in big.json()["detail"]
    deep = trigger(api, "bench_guard_floats", "[" * 100_000 + "]" * 100_000)
    assert deep.status_code in (400, 422), deep.text[:300]
