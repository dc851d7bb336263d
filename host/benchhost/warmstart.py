"""A client command line run in a fork of a process that imported the client once, instead of a new interpreter.

``python -m sglang.bench_serving …`` spends 5 to 7 s (more on a busy host) importing its module before it sends a
request; a sweep of 18 phases paid that 18 times, most of a small campaign's time. :class:`WarmStart` imports the
client's module once in this process (:meth:`WarmStart.prepare`), then runs each phase's command line in a
``fork()`` of it: the child runs the module as ``python -m`` would (``runpy.run_module(…, run_name="__main__")``,
``sys.argv`` from the command line), its stdout and stderr going to a pipe the caller reads line by line, its
exit status that of the command. The client's code, arguments, output and result files are the same; only its
interpreter's start is shared. The child stays in the caller's process group, so a teardown that ends the
benchmark's group ends it too.

Only ``python -m MODULE …`` command lines are warm-started; anything else (and every command when the module
does not import, or on a platform without ``fork``) runs as a new process, said once.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import runpy
import subprocess
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import IO, Any


class Forked:
    """A forked child running a module's command line: ``stdout`` (text, line by line) and ``wait()``, as the
    ``subprocess.Popen`` a new process would have been."""

    def __init__(self, pid: int, stdout: IO[str]):
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
            self.stdout.close()
        return self.returncode


class WarmStart:
    """Runs ``python -m MODULE …`` command lines in forks of this process once it imported ``MODULE`` (and
    ``extra`` modules the command reaches later: a CLI's subcommands)."""

    def __init__(self, extra: Mapping[str, Sequence[str]] | None = None):
        self.extra = dict(extra or {})
        self.ready: set[str] = set()
        self.refused: dict[str, str] = {}

    @staticmethod
    def module_of(command: Sequence[str]) -> str | None:
        """``MODULE`` of ``[python, "-m", MODULE, …]`` run by this interpreter; None for any other command."""
        if (
            len(command) >= 3
            and command[1] == "-m"
            and os.path.realpath(command[0]) == os.path.realpath(sys.executable)
        ):
            return command[2]
        return None

    def prepare(self, command: Sequence[str]) -> str:
        """Import the command's module here (its output discarded); a line saying how the client will start."""
        module = self.module_of(command)
        if module is None or not hasattr(os, "fork"):
            return "client: a new process for each phase"
        if module in self.ready:
            return f"client: {module} imported once, each phase a fork of it"
        try:
            with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                for name in (module, *self.extra.get(module, ())):
                    importlib.import_module(name)
        except BaseException as exc:
            self.refused[module] = repr(exc)[:300]
            return f"client: {module} not imported here ({self.refused[module]}); a new process for each phase"
        self.ready.add(module)
        return f"client: {module} imported once, each phase a fork of it"

    def start(self, command: Sequence[str], env: Mapping[str, str]) -> Any:
        """The running command: a :class:`Forked` child when its module was prepared, else a new process (both
        with ``stdout``, stderr merged into it, and ``wait()``)."""
        module = self.module_of(command)
        if module is None or module not in self.ready:
            return subprocess.Popen(
                list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(env)
            )
        return fork_module(module, list(command[3:]), env)


def fork_module(module: str, argv: list[str], env: Mapping[str, str]) -> Forked:
    """Fork; the child runs ``module`` as ``__main__`` with ``argv``, writing to the pipe the parent reads."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(module, argv, env, write_end)
    os.close(write_end)
    return Forked(pid, io.TextIOWrapper(io.FileIO(read_end, "r"), errors="replace"))


def _child(module: str, argv: list[str], env: Mapping[str, str], out: int) -> None:
    code = 1
    try:
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True, line_buffering=True)
        os.environ.clear()
        os.environ.update(env)
        code = _run(module, argv)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run(module: str, argv: list[str]) -> int:
    """``python -m module argv…`` in this process: its exit status."""
    spec = importlib.util.find_spec(module)
    sys.argv = [spec.origin if spec and spec.origin else module, *argv]
    sys.modules.pop(module, None)  # run afresh as __main__ (what it imports stays imported)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0
