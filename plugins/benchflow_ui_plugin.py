"""The Airflow plugin of the Benchmarks view: :mod:`benchflow.ui`'s FastAPI app on the api-server at
``/benchmarks`` and a "Benchmarks" entry in the UI's navigation that shows it, and the guard of the trigger
endpoint (:mod:`benchflow.ui.guard`: NaN and Infinity refused in a run's conf, error answers cut short). Imports
only FastAPI here; pandas and the warehouse are imported by the handlers. It also registers
:mod:`benchflow.hosts.pools`, which creates a run's missing host pool when the scheduler starts the run, and
:mod:`benchflow.searches.listener`, which unpauses the campaign a starting search probes and ends its probe
runs when the search fails."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from benchflow.hosts import pools as pool_listener
from benchflow.searches import listener as search_listener
from benchflow.ui import app
from benchflow.ui.guard import TriggerGuard


class BenchflowUIPlugin(AirflowPlugin):
    name = "benchflow_ui"
    listeners = [pool_listener, search_listener]  # noqa: RUF012
    fastapi_apps = [{"app": app, "url_prefix": "/benchmarks", "name": "Benchmarks"}]  # noqa: RUF012
    fastapi_root_middlewares = [{"middleware": TriggerGuard, "name": "benchflow trigger guard"}]  # noqa: RUF012
    external_views = [  # noqa: RUF012
        {
            "name": "Benchmarks",
            "href": "/benchmarks/",
            "url_route": "benchmarks",
            "destination": "nav",
            "nav_top_level": True,
            "icon": "/benchmarks/icon.svg",
        }
    ]
