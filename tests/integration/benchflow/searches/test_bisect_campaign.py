"""What a bisection may take from earlier runs instead of probing: only what a probe would have measured (the same
spec, the same conf but for the case's selection, enough repeats, a steady run), never the two ends, and every run
passed over named with why. The warehouse is real DuckDB; the payload a generated git repository."""

from __future__ import annotations

import random
import textwrap
from datetime import timedelta

import pytest

from benchflow.kinds.kernel import KIND as KERNEL
from benchflow.params import ConfError
from benchflow.records import RunRecord
from benchflow.searches import engine
from benchflow.searches.bisection import Bisection
from benchflow.spec import load_spec
from benchflow.warehouse import Warehouse
from tests.integration.benchflow.nightly.test_regressions import H200, TONIGHT
from tests.payload_repo import make_payload_repo

pytestmark = pytest.mark.integration

REPEATS = 5
CONF = {"campaign": "toy_reuse", "case": "m=64", "metric": "us_per_token", "good": "c1", "bad": "main"}


@pytest.fixture
def campaign(tmp_path, monkeypatch):
    repo = make_payload_repo(tmp_path / "toy.git")
    folder = tmp_path / "campaigns"
    folder.mkdir()
    spec_text = f"""\
        description: the toy kernel of a generated git repository
        kind: kernel
        host: local
        payload: {{repo: {repo.path}, ref: main, path: kernels/toy}}
        schedule: null
        benchmark:
          script: bench_toy.py
          args: {{m_list: [1, 64], iters: 1, clock: model}}
        """
    (folder / "toy_reuse.yaml").write_text(textwrap.dedent(spec_text))
    monkeypatch.setenv("BENCH_CAMPAIGNS_DIR", str(folder))
    monkeypatch.setenv("BENCH_VAR_DIR", str(tmp_path))
    warehouse = Warehouse.at(tmp_path / "warehouse.duckdb")
    warehouse.migrate()
    return repo, load_spec(folder / "toy_reuse.yaml"), warehouse


def load_run(warehouse, spec, name: str, sha: str, values: list[float], conf=None, spec_hash=None, hours=0) -> str:
    when = TONIGHT - timedelta(hours=hours)
    run = RunRecord(
        dag_id="bench_toy_reuse",
        run_id=f"manual__{name}",
        campaign="toy_reuse",
        host="local",
        spec_hash=spec_hash or spec.spec_hash(),
        status="ok",
        started_at=when,
        logical_date=when,
        run_type="manual",
        host_facts=H200,
        conf=conf if conf is not None else {"payload_ref": sha, "m_list": [64] * len(values)},
        payload_commit=sha,
        payload_ref=sha,
    )
    rows = [
        {"m": 64, "repeat": i + 1, "ms_per_call": v * 64e-3, "tok_per_s": 1e6 / v, "us_per_token": v, "note": ""}
        for i, v in enumerate(values)
    ]
    warehouse.load(run, KERNEL, rows)
    return run.run_id


def steady(level: float, n: int = REPEATS, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, 0.01)) for _ in range(n)]


def test_only_runs_that_measured_the_same_thing_are_reused_and_never_the_ends(campaign):
    repo, spec, warehouse = campaign
    c = repo.commit
    kept = load_run(warehouse, spec, "nightly-c8", c(8), steady(100.0), hours=5)
    load_run(warehouse, spec, "scaled-c6", c(6), steady(300.0), conf={"payload_ref": c(6), "scale": 3.0}, hours=4)
    load_run(warehouse, spec, "short-c4", c(4), steady(100.0, n=3), hours=3)
    load_run(warehouse, spec, "drift-c12", c(12), [100.0, 120.0, 400.0, 900.0, 1000.0], hours=2)
    load_run(warehouse, spec, "old-spec-c13", c(13), steady(120.0), spec_hash="0" * 64, hours=1)
    load_run(warehouse, spec, "good-end", c(1), steady(100.0), hours=1)
    load_run(warehouse, spec, "bad-end", c(16), steady(40.0))  # an end that would answer "not reproduced"

    search = engine.start("bisect", {**CONF, "repeats": REPEATS}, warehouse)
    bisection = Bisection.from_json(search.state)
    assert bisection.reused == {c(8): kept} and search.runs[c(8)] == [kept]
    skipped = "\n".join(search.facts["not_reused"])
    assert f"manual__scaled-c6 ({c(6)[:12]}): its conf measured something else (scale)" in skipped
    assert f"manual__short-c4 ({c(4)[:12]}): 3 values, fewer than the 5 repeats asked for" in skipped
    assert f"manual__drift-c12 ({c(12)[:12]}): its values vary" in skipped and "validity.repeat_cv_max" in skipped
    assert f"manual__old-spec-c13 ({c(13)[:12]}): the campaign's spec has changed since" in skipped
    assert "end" not in skipped  # the ends are not even looked up: the confirm step measures them
    assert bisection.next_round(now=0.0) == [c(1), c(16)]

    # Ten repeats asked for: the five values of commit 8 are too few now, so nothing is reused.
    again = engine.start("bisect", {**CONF, "repeats": 10, "max_samples": 15}, warehouse)
    assert Bisection.from_json(again.state).reused == {}
    assert f"manual__nightly-c8 ({c(8)[:12]}): 5 values, fewer" in "\n".join(again.facts["not_reused"])


@pytest.mark.parametrize("override", [{"payload_ref": "c3"}, {"host": "other"}, {"m_list": [1]}])
def test_a_probe_conf_that_sets_the_commit_host_or_case_is_refused_at_start(campaign, override):
    _, _, warehouse = campaign
    with pytest.raises(ConfError, match=r"conf.probe_conf: may not set .*the bisection sets them itself"):
        engine.start("bisect", {**CONF, "repeats": REPEATS, "probe_conf": override}, warehouse)
