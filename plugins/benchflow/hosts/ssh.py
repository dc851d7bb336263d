"""An SSH host: an Airflow SSH connection, through the provider's ``SSHHook`` (commands, SFTP) for
operators and its ``SSHHookAsync`` for the triggerer. One host-key policy, checked before any connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shlex
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from benchflow.hosts.base import AsyncSession, CommandResult, Host, HostError, HostUnusable

_ABSOLUTE_PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")


def host_settings(host_id: str, extra: dict[str, object]) -> tuple[str, str]:
    """``workdir`` and ``python`` from a connection's extras, validated: they reach a shell."""
    workdir = str(extra.get("workdir") or "/tmp/benchflow")  # noqa: S108 - a default on the GPU host
    python = str(extra.get("python") or "/usr/bin/python3")
    for name, value in (("workdir", workdir), ("python", python)):
        if not _ABSOLUTE_PATH.match(value) or ".." in value.split("/"):
            raise HostUnusable(f"connection {host_id!r}: extra {name!r} must be an absolute path, got {value!r}")
    return workdir.rstrip("/") or "/", python


def check_host_key_policy(conn_id: str, extra: dict[str, Any]) -> None:
    """Refuse, before anything connects, a connection that turns host-key checking off."""
    for flag in ("no_host_key_check", "allow_host_key_change"):
        if str(extra.get(flag, "false")).lower() == "true":
            raise HostUnusable(
                f"host {conn_id!r}: the connection turns host-key checking off ({flag}); pin the server's key in "
                "the extra 'host_key' (ssh-keyscan prints it) or add it to ~/.ssh/known_hosts. Nothing was run."
            )


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
            raise HostUnusable(f"host {conn_id!r}: no Airflow connection with that id (nor is it 'local')") from None
        if conn.conn_type != "ssh":
            raise HostUnusable(f"host {conn_id!r}: connection type is {conn.conn_type!r}, expected 'ssh'")
        check_host_key_policy(conn_id, conn.extra_dejson)
        self.workdir, self.python = host_settings(conn_id, conn.extra_dejson)
        self.hook = SSHHook(ssh_conn_id=conn_id, conn_retry_attempts=1)
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
        if rc == -1:  # paramiko's "no exit status": the channel closed mid-command, its output is partial
            raise HostError(f"host {self.name!r}: the connection closed before the command finished")
        return CommandResult(rc, out.decode(errors="replace"), err.decode(errors="replace"))

    def put_file(self, local: Path, remote: str) -> None:
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

    async def open_session(self) -> AsyncSession:
        return await SSHSession.connect(self.name)


class SSHSession(AsyncSession):
    """One asyncssh connection opened by the SSH provider's ``SSHHookAsync``."""

    def __init__(self, conn: Any):
        self.conn = conn

    @classmethod
    async def connect(cls, conn_id: str) -> SSHSession:
        import asyncssh
        from airflow.providers.ssh.hooks.ssh import SSHHookAsync

        asyncssh.set_log_level(logging.WARNING)  # one INFO line per channel would drown the progress lines
        hook = SSHHookAsync(ssh_conn_id=conn_id)
        try:
            conn = await hook.get_conn()
        except (asyncssh.HostKeyNotVerifiable, asyncssh.PermissionDenied) as exc:
            raise HostUnusable(f"host {conn_id!r}: {exc.reason}; no command was run") from None
        return cls(conn)

    async def run(self, command: str, timeout: float) -> tuple[int, str]:
        result = await self.conn.run(command, timeout=timeout, check=False)
        if result.exit_status is None:
            # The channel closed before the command said how it ended (sshd stopped, the network cut): what it
            # printed is partial, so this is a lost connection to reconnect from, never an (empty) answer.
            raise ConnectionResetError("the connection closed before the command finished")
        return result.exit_status, str(result.stdout or "")

    async def lines(self, command: str) -> AsyncIterator[str]:
        proc = await self.conn.create_process(command)
        try:
            async for line in proc.stdout:
                yield str(line).rstrip("\n")
        finally:
            proc.close()

    async def close(self) -> None:
        self.conn.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.conn.wait_closed(), 5)
