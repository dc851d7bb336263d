"""The deferrable wait for a benchmark's done marker, run by the triggerer.

One connection to the host for the whole wait: over it the log is streamed (``tail -F``), so the
marker is seen as soon as it is written, and every ``check_interval`` one status command reads the
exit code, the process group's liveness and the elapsed time. A dropped connection is reopened with
backoff; the stream resumes after the last line it delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from benchflow.hosts import HostUnusable, get_host
from benchflow.remote import jobs, layout

if TYPE_CHECKING:
    from airflow.providers.ssh.utils.remote_job import RemoteJobPaths

    from benchflow.hosts import AsyncSession

LOG_TAIL_LINES = jobs.LOG_TAIL_LINES
MAX_BACKOFF_S = 8.0
LOGGED_LINES_CAP = 2000  # log lines copied into the task log; past this they are only counted


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
        rundir: str,
        marker: str,
        timeout_s: float,
        check_interval: float,
        unreachable_grace_s: float = 600.0,
        job: str = "bench",
    ):
        super().__init__()
        self.host_id, self.rundir, self.job = host_id, rundir, job
        self.marker, self.timeout_s, self.check_interval = marker, timeout_s, check_interval
        self.unreachable_grace_s = unreachable_grace_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "host_id": self.host_id,
                "rundir": self.rundir,
                "marker": self.marker,
                "timeout_s": self.timeout_s,
                "check_interval": self.check_interval,
                "unreachable_grace_s": self.unreachable_grace_s,
                "job": self.job,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        paths = layout.job_paths(self.rundir, self.job)
        started = time.monotonic()
        self.lines_seen = 0
        self.checks = 0
        attempt = 0
        errors = _connection_errors()
        while True:
            shell: AsyncSession | None = None
            try:
                # The connection is read (and its host-key policy checked) off the event loop, before connecting.
                host = await asyncio.to_thread(get_host, self.host_id)
                shell = await host.open_session()
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
                    delay = min(MAX_BACKOFF_S, 0.5 * 2**attempt) * random.uniform(0.5, 1.0)  # noqa: S311 - jitter
                    self.log.warning(
                        "connection to %s lost (%r); reconnecting in %.1f s (attempt %d)",
                        self.host_id,
                        exc,
                        delay,
                        attempt,
                    )
                    await asyncio.sleep(delay)
                    continue
            finally:
                if shell is not None:
                    await shell.close()
            event.update(checks=self.checks, lines=self.lines_seen)
            yield TriggerEvent(event)
            return

    async def _watch(self, shell: AsyncSession, paths: RemoteJobPaths) -> dict[str, Any]:
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        async def pump() -> None:
            follow = jobs.follow_command(paths, self.lines_seen + 1)
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
                        if self.lines_seen <= LOGGED_LINES_CAP:
                            self.log.info("log: %s", line[:1000])
                        elif self.lines_seen % 10000 == 0:
                            self.log.info(
                                "log: %d lines so far (only the first %d are shown)", self.lines_seen, LOGGED_LINES_CAP
                            )
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

    async def _check(self, shell: AsyncSession, paths: RemoteJobPaths) -> dict[str, Any] | None:
        _, out = await shell.run(jobs.status_command(paths, self.marker), timeout=60)
        status = jobs.parse_status(out)
        self.checks += 1
        self.log.info("%s", jobs.progress_line(status, self.checks))
        outcome, message = jobs.judge(status, self.marker, self.timeout_s, self.checks, paths.job_dir)
        if outcome == "running":
            return None
        if outcome in ("dead", "timeout"):
            _, tail = await shell.run(jobs.tail_command(paths.log_file, LOG_TAIL_LINES), timeout=60)
            message = f"{message}; last {LOG_TAIL_LINES} log lines:\n{tail}"
        if outcome == "timeout":
            await shell.run(jobs.kill_command(paths), timeout=60)
        return {"status": {"done": "done", "timeout": "timeout"}.get(outcome, "failed"), "message": message}
