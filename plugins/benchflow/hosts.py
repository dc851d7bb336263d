"""Where benchmark commands run. One interface, ``Host``: run a command, put a tree, get a file.

``local`` treats a workdir on this machine as the remote host; any other host id is an Airflow SSH
connection (:class:`SSHHost`, the provider's ``SSHHook`` and SFTP). Both run the same shell
commands, so a campaign behaves the same on either.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


_ABSOLUTE_PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")


def host_settings(host_id: str, extra: dict[str, object]) -> tuple[str, str]:
    """``workdir`` and ``python`` from a connection's extras, validated: they reach a shell."""
    workdir = str(extra.get("workdir") or "/tmp/benchflow")  # noqa: S108 - a default on the GPU host
    python = str(extra.get("python") or "/usr/bin/python3")
    for name, value in (("workdir", workdir), ("python", python)):
        if not _ABSOLUTE_PATH.match(value) or ".." in value.split("/"):
            raise HostError(f"connection {host_id!r}: extra {name!r} must be an absolute path, got {value!r}")
    return workdir.rstrip("/") or "/", python


class SSHHost(Host):
    """A GPU server behind an Airflow SSH connection (provider ``SSHHook``; files over SFTP).

    The connection must verify the server's host key: a pinned ``host_key`` extra, or the key in the
    worker's ``~/.ssh/known_hosts``. One that turns checking off is refused before anything connects.
    Extras ``workdir`` and ``python`` say where runs live and which interpreter runs payloads.
    """

    def __init__(self, conn_id: str):
        from airflow.providers.ssh.hooks.ssh import SSHHook
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        self.name = conn_id
        try:
            conn = BaseHook.get_connection(conn_id)
        except AirflowNotFoundException:
            raise HostError(f"host {conn_id!r}: no Airflow connection with that id (and it is not 'local')") from None
        if conn.conn_type != "ssh":
            raise HostError(f"host {conn_id!r}: connection type is {conn.conn_type!r}, expected 'ssh'")
        self.workdir, self.python = host_settings(conn_id, conn.extra_dejson)
        self.hook = SSHHook(ssh_conn_id=conn_id, conn_retry_attempts=1)
        if self.hook.no_host_key_check or self.hook.allow_host_key_change:
            raise HostError(
                f"host {conn_id!r}: the connection turns host-key checking off; pin the server's key in the "
                "extra 'host_key' (ssh-keyscan prints it) or add it to ~/.ssh/known_hosts"
            )
        self._client: Any = None
        self._sftp: Any = None
        self._dirs: set[str] = set()

    def _connect(self) -> Any:
        import paramiko

        client = self._client
        transport = client.get_transport() if client is not None else None
        if transport is not None and transport.is_active():
            return client
        self._sftp = None
        try:
            self._client = self.hook.get_conn()
        except paramiko.BadHostKeyException as exc:
            raise HostError(
                f"host {self.name!r}: the server's host key does not match the pinned one ({exc}); "
                "no command was run. If the server was reinstalled, verify and update the connection's host_key."
            ) from None
        except paramiko.SSHException as exc:
            if "known_hosts" in str(exc) or "host key" in str(exc).lower():
                raise HostError(
                    f"host {self.name!r}: the server's host key is not known ({exc}); no command was run. "
                    "Pin it in the connection's extra host_key."
                ) from None
            raise HostError(f"host {self.name!r}: cannot connect: {exc}") from exc
        except OSError as exc:
            raise HostError(f"host {self.name!r}: cannot connect: {exc}") from exc
        return self._client

    def _sftp_client(self) -> Any:
        client = self._connect()
        if self._sftp is None:
            self._sftp = client.open_sftp()
        return self._sftp

    def run(self, command: str, timeout: float) -> CommandResult:
        import shlex

        import paramiko

        # Start in the workdir, as LocalHost does, so service commands behave the same on both.
        command = f"cd {shlex.quote(self.workdir)} 2>/dev/null; {command}"
        try:
            rc, out, err = self.hook.exec_ssh_client_command(self._connect(), command, False, None, timeout)
        except paramiko.SSHException as exc:
            raise HostError(f"host {self.name!r}: command failed: {exc}") from exc
        except Exception as exc:  # the hook raises AirflowException on a command timeout
            if "timed out" in str(exc):
                raise HostError(f"command timed out after {timeout:.0f} s on host {self.name!r}") from exc
            raise
        return CommandResult(rc, out.decode(errors="replace"), err.decode(errors="replace"))

    def put_file(self, local: Path, remote: str) -> None:
        import shlex

        parent = remote.rsplit("/", 1)[0] or "/"
        if parent not in self._dirs:
            self.check(f"mkdir -p {shlex.quote(parent)}", 60, f"mkdir {parent}")
            self._dirs.add(parent)
        self._sftp_client().put(str(local), remote)

    def get_file(self, remote: str, local: Path) -> bool:
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._sftp_client().get(remote, str(local))
        except FileNotFoundError:
            Path(local).unlink(missing_ok=True)
            return False
        return True

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = self._sftp = None


def get_host(host_id: str) -> Host:
    """``local`` → :class:`LocalHost`; anything else is an Airflow SSH connection id."""
    if host_id == "local":
        return LocalHost()
    return SSHHost(host_id)
