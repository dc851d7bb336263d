"""The bisect DAG (Airflow): which payload commit made a campaign's case slower.

Triggered with ``{campaign, case, metric, good, bad}`` (the Benchmarks view offers it on every regression,
pre-filled). Round 1 confirms (good and bad measured; unless bad is worse beyond noise it ends ``not reproduced``
with that evidence); each later round probes the commits that split the suspect range, one probe run per host of the
campaign's pool at a time. The steps are the search engine's (:mod:`benchflow.searches.dag`); the strategy is
:mod:`benchflow.searches.bisect_campaign`.
"""

from __future__ import annotations

from benchflow.searches.dag import search_dag

dag = search_dag("bisect")
