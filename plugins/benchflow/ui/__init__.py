"""The Benchmarks view: a FastAPI app that the Airflow plugin ``benchflow_ui_plugin`` mounts on the api-server at
``/benchmarks`` (and the UI shows under its "Benchmarks" navigation entry).

The index lists every campaign spec (with or without runs) and every campaign the warehouse has runs of. Per
campaign: the latest valid run's table and verdict (regressed, fine against N baseline nights, or not judged and
why), the trend of every trend metric night over night with regressions marked, the headline metric of each
configuration at each level of the kind's last key (serving: configs at each concurrency; kernel: tok/s against
M), the load search and the GPU telemetry of the run, and a link from every point to its DAG run. Kind-generic:
it reads each kind's declarations. It reads the warehouse read-only (the published DuckDB snapshot, or
PostgreSQL through a read-only session) and never migrates or writes it.

Who sees it: users signed in to Airflow (without a session, the login page) whom Airflow's auth manager lets read
DAGs (the permission the DAG views need: 403 otherwise); a campaign's page also needs read access to its DAG's
runs, and the index lists only campaigns whose DAG the user may read. Every page is bounded: at most
``pages.MAX_ROWS`` rows per table (the page says "showing N of M"), the newest ``queries.TREND_RUNS`` runs and
the first ``queries.TREND_CASES`` cases on a trend chart (the page says so past that), and
``BENCH_VIEW_TIMEOUT_S`` (default 20 s) per page: the warehouse is read in the view's own four threads, never on
the api-server's event loop or its shared thread pool, with the same limit as the session's statement timeout on
PostgreSQL; a warehouse that does not answer in time gets a 503 page, and when every thread and
queue place is held the next request gets its 503 at once, so a hung warehouse never holds up the
api-server's health, REST API or UI. Pages are HTML rendered here (every value through ``html.escape``); charts
are Plotly figures (:mod:`benchflow.ui.charts`, which says why Plotly) drawn by the plotly.js bundle of the
installed ``plotly`` package, which this app serves at ``static/plotly.min.js``: nothing is fetched from
elsewhere. Error pages name no server path and echo no long value.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html import escape
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from benchflow.ui import charts, compare_pages, pages, search_pages

WORKERS = 4  # threads that read the warehouse for the view: a hung warehouse holds these, nothing else
QUEUED = 8  # requests that may wait for a thread (within their time); past that, a 503 at once
MAX_NAME = 200  # characters of a campaign name in a URL (spec names are identifiers, far shorter)


def timeout_s() -> float:
    """Seconds a page may take (``BENCH_VIEW_TIMEOUT_S``, default 20)."""
    try:
        value = float(os.environ.get("BENCH_VIEW_TIMEOUT_S", "20"))
    except ValueError:
        return 20.0
    return value if 0 < value <= 600 else 20.0


_pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="benchmarks-view")
_slots = threading.BoundedSemaphore(WORKERS + QUEUED)


class SignIn(Exception):
    """No (or an expired) session: the browser goes to Airflow's login page."""


@dataclass
class Viewer:
    """The signed-in user, and what Airflow's auth manager lets them read."""

    user: Any

    def may_read(self, dag_id: str | None = None, runs: bool = False) -> bool:
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

        return bool(
            get_auth_manager().is_authorized_dag(
                method="GET",
                user=self.user,
                access_entity=DagAccessEntity.RUN if runs else None,
                details=DagDetails(id=dag_id) if dag_id else None,
            )
        )


async def signed_in(request: Request) -> Viewer:
    """Only for users signed in to Airflow: the api-server's JWT, from ``Authorization: Bearer`` or the UI's
    session cookie (the view is an iframe of the UI, same origin, so the browser sends it). A browser without a
    session, or whose session cookie is expired or not valid, goes to the login page; a bad bearer token gets
    Airflow's 401/403."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.core_api.security import resolve_user_from_token

    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return Viewer(await resolve_user_from_token(header[7:]))  # raises 401/403 for a bad or expired token
    token = request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    if not token:
        raise SignIn()
    try:
        return Viewer(await resolve_user_from_token(token))
    except HTTPException as exc:  # expired, or signed with another key (a restarted stack): sign in again
        raise SignIn() from exc


SignedIn = Annotated[Viewer, Depends(signed_in)]
app = FastAPI(title="benchflow: Benchmarks", docs_url=None, redoc_url=None, openapi_url=None)
app.add_middleware(GZipMiddleware, minimum_size=2048)  # plotly.min.js: 4.8 MB, 1.5 MB on the wire


@app.exception_handler(SignIn)
async def _to_login(request: Request, exc: SignIn) -> Response:
    try:
        from airflow.api_fastapi.app import get_auth_manager

        login = get_auth_manager().get_url_login(next_url=request.url.path)
    except Exception:  # no auth manager in this process: the page says where to go
        return _page("Benchmarks", '<p class="bad">Sign in to Airflow first.</p>', status=401)
    return RedirectResponse(login, status_code=303)


@app.exception_handler(RequestValidationError)
async def _bad_request(request: Request, exc: RequestValidationError) -> Response:
    """A 400 that names what was wrong, never the value whole."""
    problems = []
    for error in exc.errors()[:5]:
        where = ".".join(str(part) for part in error.get("loc", ()))
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return _page("Benchmarks", f'<p class="bad">Bad request: {escape(pages.clip("; ".join(problems)))}</p>', 400)


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(pages.document(title, body), status_code=status)


async def _render(work: Callable[[], HTMLResponse], title: str) -> HTMLResponse:
    """Run ``work`` (which reads the warehouse) in the view's threads within the page's time; a 503 page when
    the warehouse fails or is too slow, and at once when every thread and queue place is held by earlier
    requests. A page that timed out before its thread started never runs."""
    if not _slots.acquire(blocking=False):
        return _page(title, pages.busy(), status=503)
    try:
        job = _pool.submit(work)
    except BaseException:
        _slots.release()
        raise
    job.add_done_callback(lambda _: _slots.release())  # finished, failed or cancelled
    limit = timeout_s()
    try:
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(job)), timeout=limit)
    except TimeoutError:
        job.cancel()  # still queued: it never runs (a running one ends at the statement timeout)
        return _page(title, pages.too_slow(limit), status=503)
    except HTTPException:
        raise
    except Exception as exc:  # no warehouse yet, a backend down: say so on the page, never a 500 traceback
        return _page(title, pages.problem(exc), status=503)


def _warehouse() -> Any:
    return pages.open_warehouse(statement_timeout_s=timeout_s())


@app.get("/", response_class=HTMLResponse)
async def index(viewer: SignedIn) -> HTMLResponse:
    def work() -> HTMLResponse:
        if not viewer.may_read():
            return _page("Benchmarks", pages.forbidden("read DAGs"), status=403)
        return _page("Benchmarks", pages.index(_warehouse(), may_read=viewer.may_read))

    return await _render(work, "Benchmarks")


@app.get("/campaign/{campaign:path}", response_class=HTMLResponse)
async def campaign(campaign: str, viewer: SignedIn) -> HTMLResponse:
    if len(campaign) > MAX_NAME:
        body = f'<p class="bad">A campaign name has at most {MAX_NAME} characters; this one has {len(campaign)}.</p>'
        return _page("Benchmarks", body, status=400)

    def work() -> HTMLResponse:
        dag_id = pages.dag_id_of(campaign)
        if not viewer.may_read(dag_id, runs=True):
            return _page(campaign, pages.forbidden(f"read the runs of {dag_id}"), status=403)
        try:
            body = pages.campaign(_warehouse(), campaign)
        except KeyError:
            return _page(
                campaign,
                f"<p>No campaign <b>{escape(pages.clip(campaign))}</b>: no spec and no run in the warehouse. "
                '<a href="../">All campaigns</a></p>',
                status=404,
            )
        return _page(f"{campaign}: Benchmarks", body)

    return await _render(work, campaign)


@app.get("/compare", response_class=HTMLResponse)
async def comparison(
    viewer: SignedIn,
    side: Annotated[list[str] | None, Query(max_length=MAX_NAME)] = None,
    baseline: Annotated[str | None, Query(max_length=MAX_NAME)] = None,
    across_datasets: bool = False,
) -> HTMLResponse:
    """Configs of any campaigns side by side (:mod:`benchflow.ui.compare_pages`); the user must be able to read
    the runs of every side's DAG. Sides measured on different datasets are refused unless ``across_datasets``."""
    sides = side or []

    def work() -> HTMLResponse:
        for text in sides:
            dag_id = pages.dag_id_of(text.split(":")[0].split("@")[0])
            if not viewer.may_read(dag_id, runs=True):
                return _page("Comparison", pages.forbidden(f"read the runs of {dag_id}"), status=403)
        warehouse = _warehouse()
        try:
            body = compare_pages.page(
                warehouse, sides, baseline, pages.campaigns(warehouse), pages.specs()[0], across_datasets
            )
        except compare_pages.Refused as exc:
            back = '<p class="muted"><a href="./">All campaigns</a></p>'
            return _page("Comparison", f'{back}<p class="bad">{escape(pages.clip(str(exc)))}</p>', status=400)
        return _page("Comparison: Benchmarks", body)

    return await _render(work, "Comparison")


@app.get("/bisections")
@app.get("/config-searches")
async def strategy_listing(request: Request) -> RedirectResponse:
    """The lists each strategy had before the one list: to it (links people kept still work)."""
    return RedirectResponse(request.url_for("all_searches"), status_code=308)


@app.get("/bisection/{dag_id}/{run_id:path}")
@app.get("/config-search/{dag_id}/{run_id:path}")
async def strategy_page(request: Request, dag_id: str, run_id: str) -> RedirectResponse:
    """The pages each strategy had before the one page kit: to the search's page."""
    return RedirectResponse(request.url_for("search", dag_id=dag_id, run_id=run_id), status_code=308)


@app.get("/searches", response_class=HTMLResponse)
async def all_searches(viewer: SignedIn) -> HTMLResponse:
    """Every search of every strategy whose DAG's runs the viewer may read."""

    def work() -> HTMLResponse:
        body = '<p class="muted"><a href="./">All campaigns</a></p><h1>Searches</h1>'
        readable = lambda dag_id: viewer.may_read(dag_id, runs=True)  # noqa: E731
        return _page("Searches", body + search_pages.listing(_warehouse(), readable))

    return await _render(work, "Searches")


@app.get("/search/{dag_id}/{run_id:path}", response_class=HTMLResponse)
async def search(dag_id: str, run_id: str, viewer: SignedIn) -> HTMLResponse:
    """One search, whatever its strategy (:mod:`benchflow.ui.search_pages`)."""
    if len(dag_id) > MAX_NAME or len(run_id) > MAX_NAME:
        return _page("Searches", f"<p>No search <b>{escape(pages.clip(run_id))}</b>.</p>", status=400)

    def work() -> HTMLResponse:
        if not viewer.may_read(dag_id, runs=True):
            return _page(run_id, pages.forbidden(f"read the runs of {dag_id}"), status=403)
        try:
            body = search_pages.detail(_warehouse(), dag_id, run_id)
        except KeyError:
            return _page(run_id, f"<p>No search <b>{escape(pages.clip(run_id))}</b> in the warehouse.</p>", 404)
        return _page(f"search {run_id}: Benchmarks", body)

    return await _render(work, run_id)


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


__all__ = ["Viewer", "app", "signed_in"]
