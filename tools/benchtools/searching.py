"""``bench search CAMPAIGN`` and ``bench bisect CAMPAIGN …``: a search on this machine, each probe a ``bench run`` of
the campaign (one after another: the search DAGs run a round's probes side by side, one per host). The same engine
steps as the DAGs (:mod:`benchflow.searches.engine`), the same rows in the warehouse, then the strategy's answer.
Exits 0 when the search answered, 1 when it did not (no config held the SLO, the search failed or ran out)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any


def search(strategy: str, conf: dict[str, Any], out: IO[str] | None = None) -> int:
    from benchflow.searches import engine
    from benchflow.spec import find_spec
    from benchflow.warehouse import Warehouse
    from benchtools import runner

    out = out or sys.stdout
    kind = engine.strategy(strategy)
    warehouse = Warehouse.from_airflow()
    state = engine.start(strategy, conf, warehouse)
    spec, path = engine.campaign_spec(state.campaign), Path(find_spec(state.campaign)).resolve()
    run_id = runner.run_id_at(datetime.now(UTC))
    engine.save(state, warehouse, kind.dag_id, run_id)
    print(kind.opening(state, run_id), file=out, flush=True)  # type: ignore[attr-defined]
    while (state := engine.plan(state, run_id)).probes:
        for probe in state.probes:
            when = datetime.now(UTC)
            made = runner.run_id_at(when)  # bench run names its run: the probe's id is the one it made
            for key in probe.keys:
                state.runs[key] = [made if r == probe.run_id else r for r in state.runs[key]]
            probe.run_id = made
            print(f"probe: {', '.join(k[:12] for k in probe.keys)}; conf {json.dumps(probe.conf)}", file=out)
            runner.run(spec, path, json.dumps(probe.conf), out=out, when=when)
        engine.record(state, warehouse, kind.dag_id, run_id)
        print(f"round {state.round}: {kind.round_line(kind.load(state))}", file=out, flush=True)
    state, result = engine.finish([state], warehouse, kind.dag_id, run_id)
    for line in kind.lines(result):
        print(line, file=out)
    return 0 if kind.answered(result) and not state.ended else 1  # type: ignore[attr-defined]
