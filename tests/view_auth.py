"""Signing in to the Benchmarks view in tests, as the api-server does it: real api-server tokens judged by a real
auth manager, Airflow's SimpleAuthManager, except that users named ``no_dags…`` may not read DAGs (the role a FAB
or Keycloak deployment would give them); and the real api-server app for the tests that need it whole.

A test module imports the fixtures it uses: ``from tests.view_auth import api_server, auth  # noqa: F401``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

from benchtools.net import free_port

AUTH_MANAGER = f"{__name__}.NoDagsForSomeAuthManager"


class NoDagsForSomeAuthManager(SimpleAuthManager):
    """SimpleAuthManager, whose roles all read DAGs, plus users (``no_dags…``) who may not."""

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        if user.get_name().startswith("no_dags"):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)


@pytest.fixture(scope="module")
def auth(airflow_db):
    """The auth manager the api-server would have, and a function that signs a token for a user: its
    ``Authorization`` header (a browser takes the token from it as the ``_token`` cookie)."""
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW__CORE__AUTH_MANAGER", AUTH_MANAGER)
        patch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", uuid.uuid4().hex * 2)
        manager = create_auth_manager()
        assert isinstance(manager, NoDagsForSomeAuthManager)

        def token(name: str = "admin", role: str = "admin") -> dict[str, str]:
            return {"Authorization": f"Bearer {manager.generate_jwt(SimpleAuthManagerUser(username=name, role=role))}"}

        yield token


@pytest.fixture(scope="module")
def api_server(airflow_db, auth) -> Iterator[str]:
    """The real api-server app (Airflow's create_app, with this project's plugin) under uvicorn on a free port."""
    import uvicorn
    from airflow.api_fastapi.app import create_app

    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.config.port}"
    deadline = time.monotonic() + 120
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the api-server did not start"
        time.sleep(0.2)
    yield url
    server.should_exit = True
    thread.join(30)
