"""The Benchmarks view: a FastAPI app that the Airflow plugin ``benchflow_ui_plugin`` mounts on the api-server at
``/benchmarks`` (and the UI shows under its "Benchmarks" navigation entry).

Per campaign: the latest valid run's table, the trend of every trend metric night over night with regressions
circled, the headline metric of each configuration at each level of the kind's last key (serving: configs at
each concurrency; kernel: tok/s against M), and a link from every point to its DAG run. Kind-generic: it reads
each kind's ``table``, ``display``, ``trend``, ``headline``, ``wide_view`` and ``key``. It reads the warehouse
read-only (the published DuckDB snapshot, or PostgreSQL through a read-only session) and never migrates or
writes it, for users signed in to Airflow. Pages are HTML rendered here (every value through ``html.escape``)
with inline SVG charts: no JavaScript, nothing fetched from elsewhere.
"""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from benchflow.ui import bisections, pages


async def signed_in(request: Request) -> None:
    """Only for users signed in to Airflow: the api-server's JWT, from ``Authorization: Bearer`` or the UI's
    session cookie (the view is an iframe of the UI, same origin, so the browser sends it)."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.core_api.security import resolve_user_from_token

    header = request.headers.get("authorization", "")
    token = header[7:] if header.lower().startswith("bearer ") else request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    if not token:
        raise HTTPException(401, "sign in to Airflow first")
    await resolve_user_from_token(token)  # raises 401/403 for a bad or expired token


app = FastAPI(title="benchflow: Benchmarks", docs_url=None, redoc_url=None, openapi_url=None)


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(pages.document(title, body), status_code=status)


@app.get("/", response_class=HTMLResponse, dependencies=[Depends(signed_in)])
def index() -> HTMLResponse:
    try:
        warehouse = pages.open_warehouse()
        body = pages.index(warehouse)
    except Exception as exc:  # no warehouse yet, a backend down: say so on the page, never a 500 traceback
        return _page("Benchmarks", pages.problem(exc), status=503)
    return _page("Benchmarks", body)


@app.get("/campaign/{campaign:path}", response_class=HTMLResponse, dependencies=[Depends(signed_in)])
def campaign(campaign: str) -> HTMLResponse:
    try:
        warehouse = pages.open_warehouse()
        body = pages.campaign(warehouse, campaign)
    except KeyError:
        return _page(
            campaign,
            f"<p>No valid run of campaign <b>{escape(campaign)}</b> in the warehouse. "
            '<a href="../">All campaigns</a></p>',
            status=404,
        )
    except Exception as exc:
        return _page(campaign, pages.problem(exc), status=503)
    return _page(f"{campaign}: Benchmarks", body)


@app.get("/bisections", response_class=HTMLResponse, dependencies=[Depends(signed_in)])
def all_bisections() -> HTMLResponse:
    try:
        body = '<p class="muted"><a href="./">All campaigns</a></p><h1>Bisections</h1>'
        body += bisections.listing(pages.open_warehouse())
    except Exception as exc:
        return _page("Bisections", pages.problem(exc), status=503)
    return _page("Bisections", body)


@app.get("/bisection/{dag_id}/{run_id:path}", response_class=HTMLResponse, dependencies=[Depends(signed_in)])
def bisection(dag_id: str, run_id: str) -> HTMLResponse:
    try:
        body = bisections.detail(pages.open_warehouse(), dag_id, run_id)
    except KeyError:
        return _page(run_id, f"<p>No bisection <b>{escape(run_id)}</b> in the warehouse.</p>", status=404)
    except Exception as exc:
        return _page(run_id, pages.problem(exc), status=503)
    return _page(f"bisection {run_id}: Benchmarks", body)


ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="currentColor" '
    'stroke-width="2"><path d="M3 3v18h18"/><path d="M7 15l4-4 3 3 6-7"/></svg>'
)


@app.get("/icon.svg")
def icon() -> Response:
    return Response(ICON, media_type="image/svg+xml")


@app.get("/health")
def health() -> dict[str, Any]:
    return {"status": "ok"}


__all__ = ["app"]
