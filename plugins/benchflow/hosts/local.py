"""``local``: this machine, with a workdir standing in for the remote host's."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

from benchflow.hosts.base import AsyncSession, CommandResult, Host, HostError
from benchflow.paths import host_python, var_dir

DRAIN_TIMEOUT_S = 10.0


class LocalHost(Host):
    """This machine, with a workdir standing in for the remote host's."""

    def __init__(self, workdir: Path | None = None, python: str | None = None, name: str = "local"):
        self.name = name
        self.workdir = str(Path(workdir or var_dir() / "hosts" / "local").resolve())
        self.python = python or host_python()
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

    async def open_session(self) -> AsyncSession:
        return LocalSession(self.workdir)


class LocalSession(AsyncSession):
    def __init__(self, workdir: str):
        self.workdir = workdir

    async def run(self, command: str, timeout: float) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=self.workdir,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            raise
        return proc.returncode or 0, out.decode(errors="replace")

    async def lines(self, command: str) -> AsyncIterator[str]:
        # Its own session, so that killing it ends every process holding the pipe.
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=self.workdir,
            start_new_session=True,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        try:
            async for raw in proc.stdout:
                yield raw.decode(errors="replace").rstrip("\n")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            # Drain what the reader left in the pipe: the process is not reaped (and wait() never returns)
            # while unread output holds its pipe open, e.g. megabytes of log after an early marker.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(_drain(proc.stdout), DRAIN_TIMEOUT_S)
            await proc.wait()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(1 << 16):
        pass
