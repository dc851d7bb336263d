"""Searches over campaign runs: one engine (:mod:`.engine`: rounds of probe runs on the campaign's pool, their
results, the answer rules, the state saved after every step), one DAG builder (:mod:`.dag`), the listener that
unpauses a search's campaign and ends its probe runs when it fails (:mod:`.listener`), and the strategies, each a
pure algorithm (:mod:`.bisection`, :mod:`.configs`) with its campaign side (:mod:`.bisect_campaign`,
:mod:`.config_campaign`)."""
