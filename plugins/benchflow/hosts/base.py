"""The one interface to a benchmark host: synchronous calls for operators (run a command, put a tree, get a
file) and an asynchronous session for the triggerer (run a command, stream a command's lines)."""

from __future__ import annotations

import os
import shlex
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from benchflow.paths import var_dir
from benchflow.payloads.manifest import MANIFEST_NAME, build_manifest, format_manifest, manifest_sha256, parse_manifest

RUN_HOST = "{{ params.host }}"  # a host task's host in a campaign with several hosts: the one its run picked
# The shortest interval of a sensor that waits in reschedule mode, whatever a spec asks: Airflow 3.3's scheduler
# fails a rescheduled task as "killed externally" when the executor's report that its last check ended comes after
# the task was scheduled for its next one. Celery reports a scheduler loop (about a second) later, so checks 2 s
# apart lost runs on a loaded machine (a probe waiting for its host's lease failed, and its bisection with it); 5 s
# leaves it five loops. The Edge executor reports through the database, later still: its hosts wait 15 s
# (benchflow.hosts.edge.RESCHEDULE_S).
RESCHEDULE_MIN_S = 5.0


class HostError(RuntimeError):
    """A command or transfer on a host failed; the message says which host and what."""


class HostUnusable(HostError):
    """A failure that reconnecting cannot mend (an unverified host key, refused credentials)."""


@dataclass(frozen=True)
class CommandResult:
    rc: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class DeployReport:
    payload_sha256: str
    files: int
    copied: list[str]


class Host(ABC):
    """A machine that runs benchmarks. ``workdir`` and ``python`` are paths on that machine."""

    name: str
    workdir: str
    python: str

    @abstractmethod
    def run(self, command: str, timeout: float) -> CommandResult:
        """Run a POSIX shell command; never raises on a non-zero exit (see :meth:`check`)."""

    @abstractmethod
    def put_file(self, local: Path, remote: str) -> None:
        """Copy one file, creating its parent directories."""

    @abstractmethod
    def get_file(self, remote: str, local: Path) -> bool:
        """Copy one file here; False when it does not exist on the host."""

    def check(self, command: str, timeout: float, what: str) -> CommandResult:
        result = self.run(command, timeout)
        if result.rc != 0:
            detail = (result.stderr or result.stdout).strip()[-2000:]
            raise HostError(f"{what} failed on host {self.name!r} (exit {result.rc}): {detail}")
        return result

    @abstractmethod
    async def open_session(self) -> AsyncSession:
        """A session for the triggerer's event loop (one connection on an SSH host)."""

    def put_tree(self, local_dir: Path, remote_dir: str, timeout: float = 600) -> DeployReport:
        """Copy a tree, sending only files whose sha256 differs from the host's manifest."""
        local = build_manifest(local_dir)
        quoted = shlex.quote(f"{remote_dir}/{MANIFEST_NAME}")
        remote = parse_manifest(self.run(f"cat {quoted} 2>/dev/null || true", timeout).stdout)
        copied = [rel for rel, sha in local.items() if remote.get(rel) != sha]
        for rel in copied:
            self.put_file(Path(local_dir) / rel, f"{remote_dir}/{rel}")
        if copied or remote != local:
            tmp = Path(var_dir()) / "tmp"
            tmp.mkdir(parents=True, exist_ok=True)
            manifest_file = tmp / f"{os.getpid()}-{MANIFEST_NAME}"
            manifest_file.write_text(format_manifest(local))
            self.put_file(manifest_file, f"{remote_dir}/{MANIFEST_NAME}")
            manifest_file.unlink()
        return DeployReport(manifest_sha256(local), len(local), copied)


class AsyncSession(ABC):
    """Commands on a host from the triggerer's event loop."""

    @abstractmethod
    async def run(self, command: str, timeout: float) -> tuple[int, str]:
        """Run a command; return its exit status and stdout."""

    @abstractmethod
    def lines(self, command: str) -> AsyncIterator[str]:
        """Yield a long-running command's stdout line by line; ends when the command or connection does."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection."""
