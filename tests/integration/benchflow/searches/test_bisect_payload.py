"""Both halves together, without Airflow: the bisection of the generated repository, every probe a commit
materialised from git, deployed to a local host with its manifest and its script run there ``repeats``
times, the rows read by the kernel parser. The script's model clock (work at a fixed cost, 3 % seeded noise)
keeps the answer independent of how busy this machine is."""

from __future__ import annotations

import json
import shlex

import pytest

from benchflow.hosts.local import LocalHost
from benchflow.kinds.kernel import table
from benchflow.payloads import commits_between, materialised, resolve
from benchflow.searches.bisection import Bisection
from tests.payload_repo import make_payload_repo

pytestmark = pytest.mark.integration

REPEATS = 5


@pytest.mark.parametrize("hosts", [1, 2])
def test_bisection_of_the_generated_repository_names_commit_11(tmp_path, hosts):
    repo = make_payload_repo(tmp_path / "toy.git")
    source, good = str(repo.path), resolve(str(repo.path), "c1")
    commits = commits_between(source, good, "main")
    host = LocalHost(workdir=tmp_path / "host")
    runs = []

    def probe(sha: str) -> list[float]:
        """One probe: deploy the commit's payload, run the case m=64 ``REPEATS`` times, us/token of each."""
        target = f"{host.workdir}/probe-{len(runs)}/payload"
        with materialised(source, sha, repo.subdir) as tree:
            host.put_tree(tree.path, target)
        values = []
        for repeat in range(REPEATS):
            seed = len(runs) * 100 + repeat
            command = f"cd {shlex.quote(target)} && {shlex.quote(host.python)} bench_toy.py --m-list 64 --iters 3"
            out = host.check(f"{command} --clock model --noise 0.03 --seed {seed}", 60, "probe").stdout
            parsed = table.parse(out)
            assert parsed.complete and parsed.rows[0]["note"] == f"commit={repo.number(sha)}"
            values.append(float(parsed.rows[0]["us_per_token"]))
        runs.append(sha)
        return values

    state = Bisection(good=good, commits=commits, better="lower", repeats=REPEATS, parallel=hosts).to_json()
    while True:
        bisection = Bisection.from_json(json.loads(json.dumps(state)))
        picks = bisection.next_round()
        if not picks:
            break
        for sha in picks:
            bisection.record(sha, probe(sha))
        state = bisection.to_json()
    result = bisection.result()
    assert result["status"] == "found" and repo.number(result["first_bad"]) == 11
    assert repo.number(result["parent"]) == 10 and 1.1 < result["vs_parent"]["ratio"] < 1.3
    assert result["rounds"] == (5 if hosts == 1 else 4) and len(runs) == result["probes"]
