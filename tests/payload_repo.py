"""A generated git repository of a tiny benchmark payload, for the bisection tests (and to try one by hand):

    .venv/bin/python -m tests.payload_repo /tmp/toy-repo     # prints the commits

``commits`` commits on ``main``, numbered from 1, each tagged ``c<n>``; ``kernels/toy/`` holds the payload
(``bench_toy.py`` from tests/fixtures/payloads/toy, and ``work.py`` with ``COMMIT = n`` and its ``WORK``),
``README.md`` is outside it. From commit ``slow_from`` on, ``WORK`` is ``slowdown`` (the loop does 20 % more
work); a commit in ``docs_only`` changes only the README, so the payload folder stays its parent's. Dates and
authors are fixed: the same arguments give the same commit shas.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).parent / "fixtures" / "payloads" / "toy" / "bench_toy.py"
SUBDIR = "kernels/toy"
SPEC_REPO_FILES = Path(__file__).parents[1] / "include" / "spec-repo"


@dataclass(frozen=True)
class PayloadRepo:
    path: Path
    shas: list[str]  # shas[n - 1] is commit n
    slow_from: int
    subdir: str = SUBDIR
    script: str = "bench_toy.py"

    def commit(self, n: int) -> str:
        return self.shas[n - 1]

    def number(self, sha: str) -> int:
        return self.shas.index(sha) + 1


def git(repo: Path, *args: str, date: str = "2026-01-01T00:00:00Z") -> str:
    """git with a fixed identity, date and no user or system config: shas do not depend on the machine."""
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Bench Fixture",
        "GIT_AUTHOR_EMAIL": "fixture@benchflow.invalid",
        "GIT_COMMITTER_NAME": "Bench Fixture",
        "GIT_COMMITTER_EMAIL": "fixture@benchflow.invalid",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
    }
    result = subprocess.run(
        ["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return result.stdout.strip()


def commit_all(repo: Path, message: str, day: int) -> str:
    date = f"2026-01-{1 + day // 24:02d}T{day % 24:02d}:00:00Z"
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, date=date)
    return git(repo, "rev-parse", "HEAD")


def make_payload_repo(
    path: Path,
    commits: int = 16,
    slow_from: int = 11,
    slowdown: float = 1.2,
    docs_only: tuple[int, ...] = (),
) -> PayloadRepo:
    """Create the repository at ``path`` (a new folder)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    payload = path / SUBDIR
    payload.mkdir(parents=True)
    shutil.copyfile(SCRIPT, payload / SCRIPT.name)
    shas = []
    for n in range(1, commits + 1):
        (path / "README.md").write_text(f"toy payload repository, revision {n}\n")
        if n not in docs_only or n == 1:
            work = slowdown if n >= slow_from else 1.0
            (payload / "work.py").write_text(f'"""Set by tests/payload_repo.py."""\n\nCOMMIT = {n}\nWORK = {work}\n')
        what = "README only" if n in docs_only else f"WORK = {slowdown if n >= slow_from else 1.0}"
        shas.append(commit_all(path, f"commit {n}: {what}", n))
        git(path, "tag", f"c{n}")
    return PayloadRepo(path, shas, slow_from)


def make_spec_repo(path: Path, specs: dict[str, str]) -> str:
    """A repository of campaign specs (name → YAML) at ``path`` with the DAG files a spec repository carries
    (``include/spec-repo/``), in one commit on ``main``: its sha."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for source in SPEC_REPO_FILES.glob("*.py"):
        shutil.copyfile(source, path / source.name)
    for name, text in specs.items():
        (path / f"{name}.yaml").write_text(text)
    return commit_all(path, "campaign specs", 0)


if __name__ == "__main__":
    made = make_payload_repo(Path(sys.argv[1]))
    for number, sha in enumerate(made.shas, 1):
        print(number, sha)
