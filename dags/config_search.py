"""The config search DAG (Airflow): which config of a campaign's config space holds the most load per GPU within
its SLO.

Triggered with ``{campaign}`` (a serving campaign whose spec has ``space:`` and a load search). Round 1 measures every
config with cheap probes; each later round measures again, finer, only the configs whose load per GPU may still be
the best. The steps are the search engine's (:mod:`benchflow.searches.dag`); the strategy is
:mod:`benchflow.searches.config_campaign`.
"""

from __future__ import annotations

from benchflow.searches.dag import search_dag

dag = search_dag("config")
