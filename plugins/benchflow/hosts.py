"""Where benchmark commands run. One interface, ``Host``: run a command, put a tree, get a file.

``local`` treats a workdir on this machine as the remote host; it runs the same shell commands an
SSH host would, so a campaign behaves the same on both.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from benchflow.manifest import MANIFEST_NAME, build_manifest, format_manifest, manifest_sha256, parse_manifest
from benchflow.paths import var_dir


class HostError(RuntimeError):
    """A command or transfer on a host failed; the message says which host and what."""


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

    def put_tree(self, local_dir: Path, remote_dir: str, timeout: float = 600) -> DeployReport:
        """Copy a tree, sending only files whose sha256 differs from the host's manifest."""
        import shlex

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


class LocalHost(Host):
    """This machine, with a workdir standing in for the remote host's."""

    def __init__(self, workdir: Path | None = None, python: str | None = None):
        self.name = "local"
        self.workdir = str(Path(workdir or var_dir() / "hosts" / "local").resolve())
        self.python = python or sys.executable
        Path(self.workdir).mkdir(parents=True, exist_ok=True)

    def run(self, command: str, timeout: float) -> CommandResult:
        try:
            proc = subprocess.run(
                ["bash", "-c", command],
                cwd=self.workdir,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise HostError(f"command timed out after {timeout:.0f} s on host 'local'") from exc
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)

    def put_file(self, local: Path, remote: str) -> None:
        target = Path(remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(local, target)

    def get_file(self, remote: str, local: Path) -> bool:
        source = Path(remote)
        if not source.is_file():
            return False
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, local)
        return True


def get_host(host_id: str) -> Host:
    """``local`` → :class:`LocalHost`; anything else is an Airflow SSH connection id."""
    if host_id == "local":
        return LocalHost()
    raise HostError(
        f"host {host_id!r}: SSH hosts are not available yet in this release; use host 'local'"
    )
