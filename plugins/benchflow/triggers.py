"""The deferrable wait for a benchmark's done marker, run by the triggerer.

One connection to the host for the whole wait: over it the log is streamed (``tail -F``), so the
marker is seen as soon as it is written, and every ``check_interval`` one status command reads the
exit code, the process group's liveness and the elapsed time. A dropped connection is reopened with
backoff; the stream resumes after the last line it delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from benchflow import remote

LOG_TAIL_LINES = 20
MAX_BACKOFF_S = 8.0


class HostUnusable(Exception):
    """A failure that reconnecting cannot mend (an unverified host key, refused credentials)."""


class AsyncShell(ABC):
    """Commands on a host from the triggerer's event loop."""

    @abstractmethod
    async def run(self, command: str, timeout: float) -> tuple[int, str]:
        """Run a command; return its exit status and stdout."""

    @abstractmethod
    def lines(self, command: str) -> AsyncIterator[str]:
        """Yield a long-running command's stdout line by line; ends when the command or connection does."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection."""


class LocalShell(AsyncShell):
    def __init__(self, workdir: str):
        self.workdir = workdir

    async def run(self, command: str, timeout: float) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=self.workdir,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            raise
        return proc.returncode or 0, out.decode(errors="replace")

    async def lines(self, command: str) -> AsyncIterator[str]:
        # Its own session, so that killing it ends every process holding the pipe (else wait() hangs).
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=self.workdir, start_new_session=True,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.stdout is not None
        try:
            async for raw in proc.stdout:
                yield raw.decode(errors="replace").rstrip("\n")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


class SSHShell(AsyncShell):
    """One asyncssh connection opened by the SSH provider's ``SSHHookAsync``."""

    def __init__(self, conn: Any):
        self.conn = conn

    @classmethod
    async def connect(cls, conn_id: str) -> SSHShell:
        import asyncssh
        from airflow.providers.ssh.hooks.ssh import SSHHookAsync

        asyncssh.set_log_level(logging.WARNING)  # one INFO line per channel would drown the progress lines
        hook = SSHHookAsync(ssh_conn_id=conn_id)
        try:
            conn = await hook.get_conn()
        except (asyncssh.HostKeyNotVerifiable, asyncssh.PermissionDenied) as exc:
            raise HostUnusable(f"host {conn_id!r}: {exc.reason}; no command was run") from None
        if hook.known_hosts == "none":
            conn.close()
            raise HostUnusable(f"host {conn_id!r}: the connection turns host-key checking off; pin host_key")
        return cls(conn)

    async def run(self, command: str, timeout: float) -> tuple[int, str]:
        result = await self.conn.run(command, timeout=timeout, check=False)
        return result.exit_status or 0, str(result.stdout or "")

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


async def open_shell(host_id: str, workdir: str) -> AsyncShell:
    if host_id == "local":
        return LocalShell(workdir)
    return await SSHShell.connect(host_id)


def _connection_errors() -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (OSError, TimeoutError, ConnectionError, EOFError)
    try:
        import asyncssh
    except ImportError:
        return errors
    return (*errors, asyncssh.Error)


class DoneMarkerTrigger(BaseTrigger):
    """Fires once: ``done`` (marker seen), ``failed`` (ended without marker, or host unusable) or
    ``timeout`` (past ``timeout_s`` since launch; the process group has been killed)."""

    def __init__(
        self,
        host_id: str,
        workdir: str,
        rundir: str,
        marker: str,
        timeout_s: float,
        check_interval: float,
        unreachable_grace_s: float = 600.0,
        job: str = "bench",
    ):
        super().__init__()
        self.host_id, self.workdir, self.rundir, self.job = host_id, workdir, rundir, job
        self.marker, self.timeout_s, self.check_interval = marker, timeout_s, check_interval
        self.unreachable_grace_s = unreachable_grace_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "host_id": self.host_id, "workdir": self.workdir, "rundir": self.rundir, "marker": self.marker,
                "timeout_s": self.timeout_s, "check_interval": self.check_interval,
                "unreachable_grace_s": self.unreachable_grace_s, "job": self.job,
            },
        )  # fmt: skip

    async def run(self) -> AsyncIterator[TriggerEvent]:
        paths = remote.job_paths(self.rundir, self.job)
        started = time.monotonic()
        self.lines_seen = 0
        self.checks = 0
        attempt = 0
        errors = _connection_errors()
        while True:
            shell: AsyncShell | None = None
            try:
                shell = await open_shell(self.host_id, self.workdir)
                if attempt:
                    self.log.info("reconnected to %s after %d attempt(s)", self.host_id, attempt)
                attempt = 0
                event = await self._watch(shell, paths)
            except HostUnusable as exc:
                event = {"status": "failed", "message": str(exc)}
            except errors as exc:
                attempt += 1
                if time.monotonic() - started > self.timeout_s + self.unreachable_grace_s:
                    event = {
                        "status": "failed",
                        "message": f"host {self.host_id!r} unreachable past the benchmark's timeout ({exc!r}); "
                        "the benchmark may still be running there",
                    }
                else:
                    delay = min(MAX_BACKOFF_S, 0.5 * 2**attempt)
                    self.log.warning(
                        "connection to %s lost (%r); reconnecting in %.1f s (attempt %d)", self.host_id, exc, delay,
                        attempt,
                    )  # fmt: skip
                    await asyncio.sleep(delay)
                    continue
            finally:
                if shell is not None:
                    await shell.close()
            event.update(checks=self.checks, lines=self.lines_seen)
            yield TriggerEvent(event)
            return

    async def _watch(self, shell: AsyncShell, paths: Any) -> dict[str, Any]:
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        async def pump() -> None:
            # --pid: tail ends once the job's leader has exited, so no tail outlives its benchmark on the host.
            pid = f'"$(cat {shlex.quote(paths.pid_file)} 2>/dev/null || echo 1)"'
            follow = f"exec tail -n +{self.lines_seen + 1} -F --pid={pid} {shlex.quote(paths.log_file)} 2>/dev/null"
            try:
                async for line in shell.lines(follow):
                    await queue.put(line)
            finally:
                await queue.put(None)

        reader = asyncio.create_task(pump())
        try:
            next_check = time.monotonic()
            while True:
                wait = next_check - time.monotonic()
                if wait > 0:
                    try:
                        line = await asyncio.wait_for(queue.get(), wait)
                    except TimeoutError:
                        line = ""
                    else:
                        if line is None:  # the job ended, or the connection did: a check tells which
                            self.log.info("log stream ended after %d lines; checking now", self.lines_seen)
                            next_check = time.monotonic()
                            continue
                        self.lines_seen += 1
                        self.log.info("log: %s", line)
                        if line.strip() == self.marker:
                            return {"status": "done", "message": f"{self.marker} seen in the log"}
                        continue
                next_check = time.monotonic() + self.check_interval
                event = await self._check(shell, paths)
                if event is not None:
                    return event
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader

    async def _check(self, shell: AsyncShell, paths: Any) -> dict[str, Any] | None:
        _, out = await shell.run(remote.status_command(paths, self.marker), timeout=60)
        status = remote.parse_status(out)
        self.checks += 1
        self.log.info("%s", remote.progress_line(status, self.checks))
        outcome, message = remote.judge(status, self.marker, self.timeout_s, self.checks, paths.job_dir)
        if outcome == "running":
            return None
        if outcome in ("dead", "timeout"):
            _, tail = await shell.run(remote.tail_command(paths.log_file, LOG_TAIL_LINES), timeout=60)
            message = f"{message}; last {LOG_TAIL_LINES} log lines:\n{tail}"
        if outcome == "timeout":
            await shell.run(remote.kill_command(paths), timeout=60)
        return {"status": {"done": "done", "timeout": "timeout"}.get(outcome, "failed"), "message": message}
