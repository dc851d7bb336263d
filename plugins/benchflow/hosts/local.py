"""``local``: this machine, with a workdir standing in for the remote host's."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from benchflow.hosts.base import AsyncSession, CommandResult, Host, HostError
from benchflow.paths import host_python, var_dir

STREAM_LIMIT = 1 << 16  # bytes of one line the stream reader holds (the host cuts lines shorter)
REAP_TIMEOUT_S = 30.0  # what a killed process group's leader gets to be reaped


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
        # Its own session, so that killing its group ends every process holding the pipe. A plain Popen, not
        # asyncio's: asyncio's child watcher reaps the process the moment it exits, after which its group id may
        # be another's, and no group may be signalled then (see signal_group).
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=self.workdir,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=STREAM_LIMIT)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), proc.stdout)
        try:
            async for raw in reader:
                yield raw.decode(errors="replace").rstrip("\n")
        finally:
            signal_group(proc, signal.SIGKILL)
            transport.close()  # unread output no longer matters: the killed processes are reaped whatever it holds
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.wait, REAP_TIMEOUT_S)


def signal_group(proc: subprocess.Popen[Any], sig: int) -> bool:
    """Send ``sig`` to the process group that ``proc`` leads (started with ``start_new_session``), only while
    ``proc`` is unreaped: a process that is alive or a zombie holds its pid, so its group id cannot be reused; once
    reaped, the same number may already be another job's group (pids recycle within minutes where ``pid_max`` is
    32,768). ``proc.returncode`` is set only by this process's own ``wait``/``poll``, so None means unreaped.
    Returns whether a signal was sent."""
    if proc.returncode is not None:
        return False
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # the group is gone and the leader was reaped elsewhere: nothing of it to signal
        return False
    return True


def end_session(proc: subprocess.Popen[Any], timeout: float = REAP_TIMEOUT_S) -> int | None:
    """KILL the group ``proc`` leads, wait for its leader to die without reaping it (so the group id stays its
    own), KILL what was forked in the meantime, then reap. Returns the exit code (None if it would not die)."""
    if not signal_group(proc, signal.SIGKILL):
        return proc.returncode
    deadline = time.monotonic() + timeout
    with contextlib.suppress(ChildProcessError):
        while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
    signal_group(proc, signal.SIGKILL)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
