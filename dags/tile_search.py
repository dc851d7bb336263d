"""The tile search DAG (Airflow): which tile of the fused-MoE kernel makes one token count M fastest on a campaign's
GPU (what ``kernels/moe/tune.py`` does by hand, as campaign runs).

Triggered with ``{campaign, case}`` (a kernel campaign whose benchmark takes a ``tile`` argument; ``tiles`` lists the
candidates). Round 1 measures every tile; each later round measures again only the tiles that the values cannot yet
tell apart from the best. The steps are the search engine's (:mod:`benchflow.searches.dag`); the strategy is
:mod:`benchflow.searches.tiles`.
"""

from __future__ import annotations

from benchflow.searches.dag import search_dag

dag = search_dag("tiles")
