"""The Benchmarks view: a FastAPI app that the Airflow plugin ``benchflow_ui_plugin`` mounts on the api-server at
``/benchmarks`` (and the UI shows under its "Benchmarks" navigation entry).

Per campaign: the latest valid run's table, the trend of every trend metric night over night with regressions
circled, the headline metric of each configuration at each level of the kind's last key (serving: configs at
each concurrency; kernel: tok/s against M), and a link from every point to its DAG run. Kind-generic: it reads
each kind's ``table``, ``display``, ``trend``, ``headline``, ``wide_view`` and ``key``. It reads the warehouse
read-only (the published DuckDB snapshot, or PostgreSQL through a read-only session) and never migrates or
writes it, for users signed in to Airflow. Pages are HTML rendered here (every value through ``html.escape``);
charts are Plotly figures (:mod:`benchflow.ui.charts`, which says why Plotly) drawn by the plotly.js bundle of the
installed ``plotly`` package, which this app serves at ``static/plotly.min.js``: nothing is fetched from elsewhere.
"""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import FileResponse, HTMLResponse, Response

from benchflow.ui import charts, pages


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
app.add_middleware(GZipMiddleware, minimum_size=2048)  # plotly.min.js: 4.8 MB, 1.5 MB on the wire


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


ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="currentColor" '
    'stroke-width="2"><path d="M3 3v18h18"/><path d="M7 15l4-4 3 3 6-7"/></svg>'
)


@app.get("/icon.svg")
def icon() -> Response:
    return Response(ICON, media_type="image/svg+xml")


@app.get("/static/plotly.min.js")
def plotly_js() -> FileResponse:
    """The plotly.js of the installed ``plotly`` package (a library, no data: served without a session), cached
    for a day and revalidated by its ETag."""
    return FileResponse(
        charts.plotly_js(), media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400"}
    )


@app.get("/health")
def health() -> dict[str, Any]:
    return {"status": "ok"}


__all__ = ["app"]
