"""Payloads from git, on a generated repository (real git, real files, the real payload script)."""

from __future__ import annotations

import os
import statistics
import subprocess
from pathlib import Path

import pytest

from benchflow import payloads
from benchflow.hosts.local import LocalHost
from benchflow.kinds.kernel import table
from benchflow.paths import host_python
from benchflow.payloads import PayloadError, commits_between, materialise, resolve
from benchflow.payloads.manifest import MANIFEST_NAME, build_manifest, parse_manifest
from tests.payload_repo import PayloadRepo, commit_all, git, make_payload_repo

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> PayloadRepo:
    return make_payload_repo(tmp_path_factory.mktemp("git") / "toy.git")


def checkout(repo: PayloadRepo, sha: str, where: Path) -> Path:
    """A plain ``git clone`` + ``git checkout`` of ``sha``: what an engineer would deploy by hand."""
    git(where.parent, "clone", "-q", "--no-checkout", str(repo.path), where.name)
    git(where, "checkout", "-q", sha)
    return where


def test_resolve_branch_tag_and_shas(repo):
    head = repo.commit(16)
    assert resolve(str(repo.path), "main") == head
    assert resolve(str(repo.path), "c11") == repo.commit(11)
    assert resolve(str(repo.path), repo.commit(3)[:10]) == repo.commit(3)
    assert resolve(str(repo.path), repo.commit(3)) == repo.commit(3)
    assert resolve(str(repo.path), "main~5") == repo.commit(11)


def test_resolve_errors_name_the_repository_and_the_ref(repo):
    with pytest.raises(PayloadError, match=rf"{repo.path}: ref 'nope' names no commit"):
        resolve(str(repo.path), "nope")
    for hostile in ("--output=/tmp/x", "c1..c5", "main:kernels", "a b", "-h"):
        with pytest.raises(PayloadError, match="is not a branch, tag or commit"):
            resolve(str(repo.path), hostile)
    with pytest.raises(PayloadError, match="no such repository"):
        resolve(str(repo.path) + "-missing", "main")


def test_commits_between_is_first_parent_history_oldest_first(repo):
    commits = commits_between(str(repo.path), "c1", "main")
    assert commits == repo.shas[1:]
    assert commits_between(str(repo.path), repo.commit(10), repo.commit(12)) == [repo.commit(11), repo.commit(12)]
    with pytest.raises(PayloadError, match=r"good 'c12' \(.{12}\) is not an ancestor of bad 'c3'"):
        commits_between(str(repo.path), "c12", "c3")
    with pytest.raises(PayloadError, match="are the same commit"):
        commits_between(str(repo.path), "c4", repo.commit(4))


def test_merges_count_once_on_the_first_parent_line(tmp_path):
    made = make_payload_repo(tmp_path / "merged", commits=3)
    git(made.path, "checkout", "-q", "-b", "side", "c3")
    (made.path / "side.txt").write_text("x\n")
    side = commit_all(made.path, "side work", 40)
    git(made.path, "checkout", "-q", "main")
    (made.path / "main.txt").write_text("y\n")
    mainline = commit_all(made.path, "main work", 41)
    git(made.path, "merge", "-q", "--no-ff", "-m", "merge side", "side", date="2026-01-03T00:00:00Z")
    merge = git(made.path, "rev-parse", "HEAD")
    assert commits_between(str(made.path), "c3", "main") == [mainline, merge]
    with pytest.raises(PayloadError, match="not on its first-parent line"):
        commits_between(str(made.path), side, "main")


def test_commits_between_a_path_leaves_out_commits_that_do_not_change_it(tmp_path):
    made = make_payload_repo(tmp_path / "docs", commits=6, slow_from=4, docs_only=(3, 5))
    assert commits_between(str(made.path), "c1", "c6") == made.shas[1:]
    assert commits_between(str(made.path), "c1", "c6", path=made.subdir) == [made.commit(n) for n in (2, 4, 6)]


def test_materialised_tree_has_the_manifest_of_a_checkout(repo, tmp_path):
    sha = repo.commit(11)
    clone = checkout(repo, sha, tmp_path / "clone")
    sub = materialise(str(repo.path), sha, repo.subdir, tmp_path / "sub")
    assert build_manifest(sub.path) == build_manifest(clone / repo.subdir)
    assert sub.commit == sha and sub.files == 2 and sub.tree == git(repo.path, "rev-parse", f"{sha}:{repo.subdir}")
    whole = materialise(str(repo.path), sha, "", tmp_path / "whole")
    in_clone = {rel: h for rel, h in build_manifest(clone).items() if not rel.startswith(".git/")}
    assert build_manifest(whole.path) == in_clone and "README.md" in in_clone
    assert (sub.path / "work.py").read_text().endswith("COMMIT = 11\nWORK = 1.2\n")


def test_materialise_keeps_the_executable_bit_and_refuses_what_it_cannot_ship(tmp_path):
    made = make_payload_repo(tmp_path / "modes", commits=1)
    script = made.path / made.subdir / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    executable = commit_all(made.path, "an executable", 30)
    tree = materialise(str(made.path), executable, made.subdir, tmp_path / "x")
    assert os.access(tree.path / "run.sh", os.X_OK) and not os.access(tree.path / "work.py", os.X_OK)
    (made.path / made.subdir / "link").symlink_to("/etc/passwd")
    linked = commit_all(made.path, "a symlink", 31)
    with pytest.raises(PayloadError, match="kernels/toy/link is a symlink; a payload holds plain files only"):
        materialise(str(made.path), linked, "", tmp_path / "y")
    with pytest.raises(PayloadError, match="not empty"):
        materialise(str(made.path), executable, made.subdir, tmp_path / "x")
    with pytest.raises(PayloadError, match="full commit sha"):
        materialise(str(made.path), "main", made.subdir, tmp_path / "z")
    with pytest.raises(PayloadError, match="no folder 'kernels/none' at that commit"):
        materialise(str(made.path), executable, "kernels/none", tmp_path / "z")
    with pytest.raises(PayloadError, match="not a relative folder"):
        materialise(str(made.path), executable, "../etc", tmp_path / "z")


def test_deploys_of_two_commits_send_only_what_changed(repo, tmp_path):
    host = LocalHost(workdir=tmp_path / "host")
    target = f"{host.workdir}/run/payload"
    with payloads.materialised(str(repo.path), repo.commit(10), repo.subdir) as first:
        report = host.put_tree(first.path, target)
        assert sorted(report.copied) == ["bench_toy.py", "work.py"]
    assert not first.path.exists()  # the temporary tree is gone after the deploy
    with payloads.materialised(str(repo.path), repo.commit(11), repo.subdir) as second:
        report = host.put_tree(second.path, target)
        assert report.copied == ["work.py"]
        assert parse_manifest((Path(target) / MANIFEST_NAME).read_text()) == build_manifest(second.path)
    assert host.run(f"cd {target} && sha256sum -c {MANIFEST_NAME}", 30).rc == 0


def test_a_url_is_fetched_into_the_cache(repo, var_dir):
    url = f"file://{repo.path}"
    assert resolve(url, "c7") == repo.commit(7)
    assert commits_between(url, "c14", "c16") == [repo.commit(15), repo.commit(16)]
    clone = payloads.git_dir(url, fetch=False)
    assert clone.parent == var_dir / "git-cache" and (clone / "benchflow-source").read_text() == url + "\n"
    git(repo.path, "branch", "-f", "moving", "c2")
    assert resolve(url, "moving") == repo.commit(2)  # a branch is fetched again: it may have moved
    git(repo.path, "branch", "-f", "moving", "c9")
    assert resolve(url, "moving") == repo.commit(9)


def test_a_commit_on_no_branch_is_fetched_by_its_sha(tmp_path):
    made = make_payload_repo(tmp_path / "dangling", commits=2)
    (made.path / "extra.txt").write_text("x\n")
    orphan = commit_all(made.path, "later reset away", 30)
    git(made.path, "reset", "-q", "--hard", "c2")
    url = f"file://{made.path}"
    assert resolve(url, "main") == made.commit(2)
    assert resolve(url, orphan) == orphan
    with pytest.raises(PayloadError, match=rf"{url}: fetch commit f{{40}} failed .*not our ref"):
        resolve(url, "f" * 40)


def test_the_cache_is_bounded(tmp_path, var_dir):
    cache = var_dir / "git-cache"
    for i in range(payloads.CACHE_MAX_REPOS + 2):
        made = make_payload_repo(tmp_path / f"r{i}", commits=1)
        resolve(f"file://{made.path}", "main")
        assert len(list(cache.glob("*.git"))) <= payloads.CACHE_MAX_REPOS
    newest = [p.name for p in cache.glob("*.git")]
    assert payloads.git_dir(f"file://{made.path}", fetch=False).name in newest


HOSTILE_URLS = [
    "ext::sh -c touch% {flag}",
    "--upload-pack=touch {flag}",
    "-oProxyCommand=touch {flag}",
    "ssh://-oProxyCommand=touch%20{flag}/repo",
    "ssh://host/-repo",
    "fd::17",
    "git://example.org/repo.git",
    "http://example.org/repo.git",
    "https://user:secret@example.org/repo.git",
    "https://token@example.org/repo.git",
    "file://remote.example.org/srv/repo.git",
    "file:///srv/../etc",
    "relative/path",
    "/srv/git/../../etc",
    "/srv/git/repo\nmain",
    "-x:repo",
    "host:-repo",
]


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_hostile_urls_are_refused_before_git_runs(url, tmp_path):
    flag = tmp_path / "pwned"
    with pytest.raises(PayloadError, match="payload repository"):
        resolve(url.format(flag=flag), "main")
    assert not flag.exists()


def test_allowed_sources():
    for url in (
        "/srv/git/moe.git",
        "file:///srv/git/moe.git",
        "https://git.example.org/kernels/moe.git",
        "ssh://bench@git.example.org:2222/kernels/moe.git",
        "git@git.example.org:kernels/moe.git",
        "ssh://git@[::1]:2222/kernels/moe.git",  # an IPv6 host: its '::' is no transport helper
        "https://[2001:db8::7]/kernels/moe.git",
    ):
        assert payloads.validate_source(url) == url
    for helper in ("ext::sh -c evil", "fd::7", "git-remote-x::whatever"):
        with pytest.raises(PayloadError, match="transport helpers"):
            payloads.validate_source(helper)
    spec = payloads.GitPayload(repo="/srv/git/moe.git", ref="main", path="kernels/moe")
    assert spec.path == "kernels/moe"
    with pytest.raises(PayloadError, match="is not a relative folder"):
        payloads.GitPayload(repo="/srv/git/moe.git", ref="main", path="/etc")


def test_git_itself_refuses_the_ext_transport(tmp_path):
    """Belt and braces: even a URL that got past the check cannot make git run a command."""
    flag = tmp_path / "pwned"
    with pytest.raises(PayloadError, match="transport 'ext' not allowed"):
        payloads._git(tmp_path, ["ls-remote", f"ext::sh -c touch% {flag}"], source="test", what="ls-remote")
    assert not flag.exists()


def run_payload(tree: Path, *args: str) -> str:
    result = subprocess.run(
        [host_python(), "bench_toy.py", *args], cwd=tree, capture_output=True, text=True, timeout=120, check=True
    )
    return result.stdout


def test_the_generated_payload_is_a_kernel_sweep_and_commit_11_is_20_percent_slower(repo, tmp_path):
    """The real script of commits 10 and 11, alternated: its CPU time per token (ms of the process's CPU
    time, which other load on this machine moves less than wall time) is 1.2x from commit 11 on. Judged by the
    median of 8 paired ratios (a co-tenant's burst spoils a pair, not the median); a busy machine gets up to
    three tries."""
    trees = {n: materialise(str(repo.path), repo.commit(n), repo.subdir, tmp_path / f"c{n}").path for n in (10, 11)}
    out = tmp_path / "results.jsonl"
    parsed = table.parse(run_payload(trees[11], "--m-list", "1,4", "--iters", "3", "--out", str(out)))
    assert parsed.complete and not parsed.dropped and [r["m"] for r in parsed.rows] == [1, 4]
    assert parsed.rows[0]["note"] == "commit=11" and parsed.meta["Payload"] == "commit=11 work=1.2"
    assert len(out.read_text().splitlines()) == 2
    for _ in range(3):
        values: dict[int, list[float]] = {10: [], 11: []}
        for order in ((10, 11), (11, 10)) * 4:
            for n in order:
                text = run_payload(trees[n], "--m-list", "64", "--iters", "9", "--clock", "cpu")
                values[n].append(float(table.parse(text).rows[0]["p10_ms"]))
        ratio = statistics.median(b / a for a, b in zip(values[10], values[11], strict=True))
        if 1.08 < ratio < 1.35:
            return
    pytest.fail(f"commit 11 / commit 10 CPU time: median ratio {ratio:.3f}, values {values}")
