"""Searches over campaign runs: one engine (:mod:`.engine`: rounds of probe runs on the campaign's pool, their
results, the answer rules, the state saved after every step), one DAG builder (:mod:`.dag`), the listener that
unpauses a search's campaign and ends its probe runs when it fails (:mod:`.listener`), and the strategies, each a
pure algorithm (:mod:`.bisection`, :mod:`.configs`) with its campaign side (:mod:`.bisect_campaign`,
:mod:`.config_campaign`), or both in one file (:mod:`.tiles`, the MoE kernel's tile tuning)."""

from __future__ import annotations

# each strategy registers itself with the engine as it is imported: importing any part of the package knows them all
from benchflow.searches import bisect_campaign, config_campaign, tiles
from benchflow.searches.engine import strategy

__all__ = ["bisect_campaign", "config_campaign", "strategy", "tiles"]
