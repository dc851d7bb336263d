"""``bench search CAMPAIGN``: a config search on this machine, each probe a ``bench run`` of the campaign with the
round's configs and probe settings (one after another: the DAG ``bench_config_search`` runs a round's probes side
by side, one per host). The same steps as the DAG (:mod:`benchflow.config_search_steps`), the same rows in the
warehouse, then the answer: the ranking with each config's load per GPU as an interval, the Pareto front, what the
search spent against the full grid, and the winner as a config block."""

from __future__ import annotations

import json
import math
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any


def search(campaign: str, conf: dict[str, Any], out: IO[str] | None = None) -> int:
    from benchflow import config_search_steps as steps
    from benchflow.analysis.config_search import ConfigSearch
    from benchflow.spec import find_spec
    from benchflow.warehouse import Warehouse
    from benchtools import runner

    out = out or sys.stdout
    warehouse = Warehouse.from_airflow()
    spec, path = steps.campaign_spec(campaign), Path(find_spec(campaign)).resolve()
    run_id = runner.run_id_at(datetime.now(UTC))
    state = steps.start({"campaign": campaign, **conf}, warehouse)
    steps.save(ConfigSearch.from_json(state), warehouse, steps.DAG_ID, run_id)
    print(_opening(state, run_id), file=out, flush=True)
    while (planned := steps.plan(state, run_id))["probes"]:
        for probe in list(planned["probes"]):
            when = datetime.now(UTC)
            steps.rename_probe(planned, probe["trigger_run_id"], runner.run_id_at(when))
            print(f"probe: configs {', '.join(probe['conf']['configs'])}; {probe['conf']['search']}", file=out)
            runner.run(spec, path, json.dumps(probe["conf"]), out=out, when=when)
        state = steps.record(planned, warehouse, steps.DAG_ID, run_id)
        done = ConfigSearch.from_json(state)
        print(f"round {len(done.rounds)}: {done.summary(done.leader())}", file=out, flush=True)
    result = steps.finish(state, warehouse, steps.DAG_ID, run_id)
    for line in answer_lines(result):
        print(line, file=out)
    return 0 if result["best"] else 1


def _opening(state: dict[str, Any], run_id: str) -> str:
    meta, levels = state["meta"], state["levels"]
    steps = ", ".join(f"{v['prompts_per_probe']} prompts/probe at precision {v['precision']:g}" for v in levels)
    return (
        f"bench search {meta['campaign']}: {len(state['gpus'])} configs ({len(meta['excluded'])} excluded by the "
        f"space's constraints), {len(state['reused'])} reused; levels: {steps}; run {run_id}"
    )


def _number(value: Any, digits: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, digits)


def answer_lines(result: dict[str, Any]) -> list[str]:
    """The ranking, the Pareto front, the spend against the grid and the winner's config block, as printed."""
    lines = [f"config search: {result['summary']}", ""]
    header = ("rank", "config", "verdict", "GPUs", "load/GPU", "tok/s/GPU", "tok/s/user", "J/tok", "cost/Mtok")
    lines.append("  ".join(f"{h:<{w}}" for h, w in zip(header, WIDTHS, strict=True)))
    for rank, r in enumerate(result["ranking"], start=1):
        load = "-" if r["low"] is None else f"{r['low']:g}" + ("" if r["high"] == r["low"] else f"–{r['high']:g}")
        cells = (
            str(rank),
            r["config"],
            r["verdict"],
            str(r["gpus"]),
            load,
            _number(r.get("tokens_per_s_per_gpu")),
            _number(r.get("tokens_per_s_per_user")),
            _number(r.get("j_per_token")),
            _number(r.get("cost_per_mtok")),
        )
        lines.append("  ".join(f"{c:<{w}}" for c, w in zip(cells, WIDTHS, strict=True)))
        if r["error"]:
            lines.append(f"      failed: {r['error']}")
        elif r.get("bottleneck"):
            lines.append(f"      {r['bottleneck']}")
    grid = result.get("grid") or {}
    lines += [
        "",
        f"Pareto front (tokens/s per GPU against per user): {', '.join(result['pareto']) or 'none measured'}",
        f"spent: {result['probes']} probe runs, {result['search_probes']} load-search probes, {result['prompts']} "
        f"prompts; the full grid at the spec's settings: up to {grid.get('probes', '?')} probes, "
        f"{grid.get('prompts', '?')} prompts",
    ]
    if result.get("winner_yaml"):
        lines += ["", "the winner, as a config block for a nightly spec:", result["winner_yaml"].rstrip()]
    return lines


WIDTHS = (4, 22, 30, 4, 10, 10, 10, 8, 9)
