"""A serving campaign's load search end to end over loopback SSH: the tiny server with a known capacity (a batch
limit of 6 sequences per 100 ms step, so TPOT is 100 ms up to concurrency 6 and 200 ms from 7; the SLO's 150 ms
is 50 ms from both: load only slows a step, so a load above the capacity fails whatever else the machine runs,
and one within it passes unless every token comes 50 ms late), the real SGLang client driven by the sweep driver
on the host, the search's answer and every probe in the warehouse, and no parse note from the search's own lines;
on the host, the probes the search made (doubling, then bisecting), each a phase of the log, and the client's own
per-request data on both sides of the answer."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest

from benchflow import kinds
from benchflow.kinds import parse_text
from benchflow.kinds.serving.search import loadsearch
from benchflow.remote import layout
from benchflow.spec import SpecError, load_spec
from benchflow.warehouse import Warehouse, queries
from benchtools.runner.outcome import search_answer
from tests.e2e.conftest import campaign_dags, on_free_ports, run_dag

pytestmark = pytest.mark.e2e

PROMPTS = 30  # the fewest a P90 (29) and a failed fraction of 0.1 are decided on: a slower step, no slower test
SLO = {"p90_tpot_ms": 150, "max_failed_fraction": 0.1}
SEARCH = {
    "over": "concurrency",
    "range": [2, 16],
    "slo": SLO,
    "precision": 0.1,
    "prompts_per_probe": PROMPTS,
    "repeats": 2,
    "budget": {"probes": 14, "seconds": 900},
}
CAPACITY = 6  # the server decodes at most 6 sequences per step: the highest concurrency within 150 ms TPOT
SPEC = textwrap.dedent(
    f"""\
    description: load search over loopback SSH, the tiny server with a known capacity
    kind: serving
    host: gpu_loopback
    payload: serving
    requires: [moe]
    schedule: null
    configs:
      - name: single
        servers:
          - name: engine
            command: "{{python}} server.py --layers 1 --hidden 32 --max-batch {CAPACITY} --step-ms 100 --port {{port}}"
            port: 30120
    benchmark:
      script: sweep.py
      search: {json.dumps(SEARCH)}
      args: {{client: sglang, input_len: 16, output_len: 8}}
    timeouts: {{server_ready: 120, benchmark: 1200, poke_interval: 2}}
    """
)


@pytest.fixture(scope="module")
def bag(tmp_path_factory, airflow_db, sshd):
    with campaign_dags(tmp_path_factory.mktemp("search"), {"search_ssh": on_free_ports(SPEC)[0]}) as dags:
        yield dags


def test_the_search_finds_the_servers_capacity_within_its_precision_and_budget(bag, sshd):
    run_id, state, tasks = run_dag(bag, "search_ssh")
    assert state == "success", tasks
    warehouse = Warehouse.from_airflow()
    (found,) = warehouse.query("SELECT * FROM serving_search WHERE run_id = ?", [run_id]).to_dict("records")
    assert (found["config"], found["over"], found["reason"]) == ("single", "concurrency", "converged")
    assert found["pass_load"] == CAPACITY and found["fail_load"] == CAPACITY + 1, found
    (detail,) = warehouse.query("SELECT detail FROM runs WHERE run_id = ?", [run_id])["detail"]
    assert "search" not in detail, detail  # the driver's verdict lines are not read as figures
    # within the bound a binary search implies: growth to the first failure, then halving the bracket
    bound = loadsearch.load_bound(2, 16, 0.1, True)
    assert found["loads"] <= bound and found["probes"] <= 2 * bound
    assert json.loads(found["slo"]) == SLO and found["goodput_rps"] > 0
    # what bench run prints of it, read back as bench run reads it (validity from the probes' rows)
    (answer,) = queries.search_results(
        warehouse, kinds.side_table(kinds.get("serving"), kinds.LOAD_SEARCH), "bench_search_ssh", run_id
    ).to_dict("records")
    line = search_answer(answer)
    assert line.startswith(
        f"load search single: highest concurrency within the SLO (max_failed_fraction 0.1, p90_tpot_ms 150) "
        f"{CAPACITY}, lowest failing {CAPACITY + 1}; goodput "
    ), line
    assert f"stopped: converged after {found['probes']} probes" in line, line
    validity = set(warehouse.query("SELECT validity FROM serving_results WHERE run_id = ?", [run_id])["validity"])
    if validity == {"ok"}:  # a probe measured beside a busy CPU is contended, and the answer says so
        assert line.endswith("validity ok"), line
    else:
        assert "validity NOT OK: a probe was " in line and "not a valid figure" in line, (line, validity)
    trail = json.loads(found["trail"])
    assert len(trail) == found["probes"]
    probes = warehouse.query(
        "SELECT concurrency, repeat, num_prompts, completed, p99_tpot_ms FROM serving_results WHERE run_id = ? "
        "ORDER BY concurrency, repeat",
        [run_id],
    )
    assert sorted(zip(probes["concurrency"], probes["repeat"], strict=True)) == sorted(
        (int(step["load"]), step["repeat"]) for step in trail
    )  # every probe is a phase row, as a fixed sweep's phases are
    assert set(probes["num_prompts"]) == {PROMPTS}
    at_answer = [step for step in trail if step["load"] == CAPACITY]
    assert at_answer and all(step["verdict"] == "pass" for step in at_answer[-1:])
    assert not any(math.isnan(v) for v in probes["p99_tpot_ms"])

    # What the driver left on the host: the record, every probe as a phase of the log, the client's requests.
    rundir = Path(layout.run_dir(str(sshd.workdir), "bench_search_ssh", run_id))
    (record,) = [json.loads(line) for line in (rundir / "search.jsonl").read_text().splitlines()]
    loads = list(dict.fromkeys(step["load"] for step in record["trail"]))
    assert loads == [2, 4, 8, 6, 7]  # doubling until 8 fails, then bisecting [4, 8]
    assert record["loads"] == len(loads) and len(loads) <= record["probes"] <= SEARCH["repeats"] * len(loads)
    for step in record["trail"]:
        tpot = step["checks"][0]
        assert tpot["key"] == "p90_tpot_ms" and tpot["n"] == step["pooled"]
        assert step["verdict"] in ("pass" if step["load"] <= CAPACITY else "fail", "undecided")
    starts = [step["started_at"] for step in record["trail"]]  # where the telemetry of each probe begins
    assert all(starts) and starts == sorted(starts)
    answer = [s for s in record["trail"] if s["load"] == CAPACITY][-1]
    assert record["goodput_rps"] == answer["goodput_rps"] == found["goodput_rps"]
    log = Path(layout.job_paths(str(rundir), "bench_single").log_file).read_text()  # the config's benchmark job
    assert f"search single -> over concurrency: converged; highest pass {CAPACITY}, lowest fail {CAPACITY + 1}" in log
    parsed = parse_text(log)
    assert parsed.complete and parsed.warnings == [] and not parsed.dropped
    keys = [(r["config"], r["concurrency"], r["repeat"]) for r in parsed.rows]
    assert keys == [("single", s["load"], s["repeat"]) for s in record["trail"]]
    requests = [json.loads(line) for line in (rundir / "requests.jsonl").read_text().splitlines()]
    assert len(requests) == PROMPTS * record["probes"] and all(r["ok"] for r in requests)

    def p90_tpot(load: int) -> loadsearch.Bounds:  # every repeat at the load, pooled as the search pools them
        values = [loadsearch.request_value(r, "tpot") for r in requests if r["concurrency"] == load]
        return loadsearch.quantile_bounds([v for v in values if v is not None], 0.9)

    assert p90_tpot(CAPACITY).upper <= SLO["p90_tpot_ms"] < p90_tpot(CAPACITY + 1).lower  # the client's own data


def test_a_probe_too_small_for_its_percentile_is_refused_with_file_line_and_field(tmp_path):
    spec = tmp_path / "search_small.yaml"
    spec.write_text(SPEC.replace(f'"prompts_per_probe": {PROMPTS}', '"prompts_per_probe": 20'))
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    (line,) = caught.value.lines()
    assert line.startswith(f"{spec}:15: benchmark.search.prompts_per_probe: ") and "P90" in line, line


def test_a_search_over_request_rate_goes_to_the_driver_as_it_is(tmp_path):
    """Rows are keyed by request rate too now (tests/integration/kernels/test_workloads.py runs such a search): the spec
    is taken, and the driver gets the search over rates."""
    spec = tmp_path / "search_rate.yaml"
    rate = {**SEARCH, "over": "request_rate", "range": [1.0, 64.0]}
    spec.write_text(SPEC.replace(json.dumps(SEARCH), json.dumps(rate)))
    loaded = load_spec(spec)
    args = loaded.benchmark.config_args(loaded.configs[0])
    assert json.loads(args["search"])["over"] == "request_rate" and json.loads(args["search"])["range"] == [1.0, 64.0]
