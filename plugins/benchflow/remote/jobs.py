"""Detached jobs on a host: pure builders of shell commands (string in, string out) paired with the parsers
of what they print.

The detached launch, the pid and the atomic exit-code file come from the SSH provider's
``utils/remote_job.py``; what it lacks for benchmarks is here: the done-marker check with pid
liveness and the newest progress line in one round trip, a log tail, and a kill that escalates from
TERM to KILL on the whole process group. Every group check and signal first asks whether the pid file's number is
still the job's (:func:`ours`): the leader's start time is written at launch, and a leader of that number that
started at another time is another process, whose group is never signalled.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from airflow.providers.ssh.utils.remote_job import RemoteJobPaths, build_posix_wrapper_command

from benchflow.remote.layout import leader_file, owner_file, started_file

LOG_TAIL_LINES = 20  # lines of a job's log shown when it failed (task errors, bench run)
READ_BYTES = 65536  # what one status check or log tail reads of a job's log on the host, from its end
LINE_BYTES = 1000  # what a status check or log tail keeps of one line: a line without newline is not copied whole
STREAM_LINE_BYTES = 4096  # what the wait's log stream keeps of one line


def launch_command(
    paths: RemoteJobPaths, command: str, cwd: str, env: Mapping[str, str] | None = None, run_id: str | None = None
) -> str:
    """Start ``command`` detached in ``cwd``; print the job's pid once its pid file exists. ``run_id`` (the exact
    Airflow run id) is written into the job's folder first, so that a later launch can tell whose job it finds."""
    # The job's leader (the wrapper's shell, $$) first records its own start time, while it is certainly alive:
    # what tells its pid file's number from a later process of the same number (:func:`ours`).
    leader = f"{{ {start_of('$$')}; }} > {shlex.quote(leader_file(paths))} 2>/dev/null || true; "
    # A subshell, so that the wrapper's log redirection covers all of a compound command and an
    # ``exit`` in it ends the command, not the wrapper (which must still write the exit code).
    wrapped = build_posix_wrapper_command(f"{leader}( cd {shlex.quote(cwd)} && {command} )", paths, dict(env or {}))
    pid = shlex.quote(paths.pid_file)
    # The launch time lives on the host, so a wait that resumes anywhere measures from the same instant.
    started = f"mkdir -p {shlex.quote(paths.job_dir)} && date +%s > {shlex.quote(started_file(paths))}\n"
    if run_id is not None:
        started += f"printf '%s\\n' {shlex.quote(run_id)} > {shlex.quote(owner_file(paths))}\n"
    # The provider's wrapper writes the pid asynchronously; wait for it so that every later check
    # (and a re-attach after a crash of the worker) can rely on it.
    return started + wrapped + f"for _ in $(seq 100); do test -s {pid} && break; sleep 0.05; done\ncat {pid}\n"


def owner_command(paths: RemoteJobPaths) -> str:
    """Print ``owner=`` and the run id in the job's folder (empty when no run id was written there)."""
    return f"printf 'owner='; head -c 4096 {shlex.quote(owner_file(paths))} 2>/dev/null || true"


def parse_owner(stdout: str) -> str:
    """The run id :func:`owner_command` printed ('' when none)."""
    if not stdout.startswith("owner="):
        raise ValueError(f"unexpected owner output: {stdout[:200]!r}")
    return stdout.removeprefix("owner=").removesuffix("\n")


def status_command(paths: RemoteJobPaths, marker: str) -> str:
    """One round trip: exit code, process group alive?, marker seen?, seconds since launch, the newest line that is
    not a library's noise (:data:`NOISE`).

    Liveness is read before the marker and the exit code: a job that writes the marker, or exits, between the
    reads is then seen alive (wait again) or with its exit code, never dead without them (a false "died").
    """
    q = shlex.quote
    return (
        f"log={q(paths.log_file)}; ec={q(paths.exit_code_file)}; pidf={q(paths.pid_file)}; "
        f"st={q(started_file(paths))}\n"
        'p=$(cat "$pidf" 2>/dev/null || true); alive=0\n'
        f"if {group_alive('$p', paths)}; then alive=1; fi\n"
        'code=$(cat "$ec" 2>/dev/null || true)\n'
        f'if grep -qxF -- {q(marker)} "$log" 2>/dev/null; then marker=1; else marker=0; fi\n'
        's=$(cat "$st" 2>/dev/null || true); elapsed=; [ -n "$s" ] && elapsed=$(( $(date +%s) - s ))\n'
        'printf "marker=%s exit=%s alive=%s pid=%s elapsed=%s\\n" "$marker" "$code" "$alive" "$p" "$elapsed"\n'
        f'tail -c {READ_BYTES} "$log" 2>/dev/null | grep -avE {q(NOISE)} | tail -n 1 | head -c {LINE_BYTES}; true\n'
    )


# Lines a library prints that say nothing of the benchmark's progress: Python warnings (and the source line under
# one), a client's import and platform chatter (vLLM's "Failed to import from vllm._C", "INFO 12-02 17:00:00 [...]
# Automatically detected platform cpu."), blank lines. The newest line that is none of these is the progress line.
NOISE = (
    r"^[[:space:]]*$|Warning: |^[[:space:]]*warnings\.warn\(|Failed to import|^(INFO|WARNING|DEBUG) [0-9]{2}-[0-9]{2} "
    r"|^\[?[0-9: ,.-]+\]? *(INFO|WARNING|DEBUG)[ :]"
)


def start_of(pid: str) -> str:
    """Shell: the start time of process ``pid`` (clock ticks since boot; the 22nd field of /proc/PID/stat, counted
    after the command name, which may hold spaces); empty where there is no such process or no /proc."""
    return f"sed 's/.*) //' \"/proc/{pid}/stat\" 2>/dev/null | cut -d' ' -f20"


def ours(paths: RemoteJobPaths) -> str:
    """Shell test: is process group ``$p`` still the job's? Yes while a process numbered ``$p`` started when the
    job's leader did, or while none does (the leader exited: its number stays the group's while any member of it
    lives, so a live group of that number is the job's orphans), or where no start time was recorded (no /proc).
    No: a process of that number started at another time leads another group, the number recycled."""
    recorded = f'"$(cat {shlex.quote(leader_file(paths))} 2>/dev/null)"'
    return f'{{ l={recorded}; [ -z "$l" ] || [ ! -r "/proc/$p/stat" ] || [ "$({start_of("$p")})" = "$l" ]; }}'


def group_alive(pgid: str, paths: RemoteJobPaths) -> str:
    """Shell test: does process group ``pgid`` (the job's, :func:`ours`) hold a process that is not a zombie?

    ``kill -0`` counts zombies as alive, and a killed job's processes can stay zombies for a while
    when their (re)parent is slow to reap them.
    """
    return (
        f'[ "{pgid}" -gt 1 ] 2>/dev/null && {ours(paths)} && ps -e -o pgid= -o stat= 2>/dev/null'
        f" | awk -v p=\"{pgid}\" '$1 == p && $2 !~ /^Z/ {{found = 1}} END {{exit !found}}'"
    )


@dataclass(frozen=True)
class JobStatus:
    marker: bool
    exit_code: int | None
    alive: bool
    pid: int | None
    elapsed_s: int | None
    last_line: str

    @property
    def started(self) -> bool:
        return self.pid is not None or self.exit_code is not None


def parse_status(stdout: str) -> JobStatus:
    """Read what :func:`status_command` printed."""
    first, _, rest = stdout.partition("\n")
    fields = dict(part.split("=", 1) for part in first.split() if "=" in part)
    if "marker" not in fields:
        raise ValueError(f"unexpected status output: {stdout[:200]!r}")
    code = fields.get("exit", "").strip()
    pid = fields.get("pid", "").strip()
    return JobStatus(
        marker=fields["marker"] == "1",
        exit_code=int(code) if code.lstrip("-").isdigit() else None,
        alive=fields.get("alive") == "1",
        pid=int(pid) if pid.isdigit() else None,
        elapsed_s=int(fields["elapsed"]) if fields.get("elapsed", "").isdigit() else None,
        last_line=rest.rstrip("\n").splitlines()[-1] if rest.strip() else "",
    )


def judge(status: JobStatus, marker: str, timeout_s: float, check: int, job_dir: str) -> tuple[str, str]:
    """What one check of a benchmark job means: ``(outcome, message)``, outcome one of ``done``,
    ``running``, ``missing``, ``dead`` or ``timeout``. The caller adds the log tail to ``dead`` and
    ``timeout`` and kills the process group on ``timeout``; the poke sensor and the trigger share this."""
    if status.marker:
        return "done", f"{marker} seen in the log"
    if not status.started:
        return "missing", f"no benchmark job in {job_dir}: was launch_benchmark run?"
    if status.exit_code is not None or not status.alive:
        how = f"exited with code {status.exit_code}" if status.exit_code is not None else "died"
        return "dead", f"benchmark {how} without writing {marker!r} (check {check})"
    if status.elapsed_s is not None and status.elapsed_s > timeout_s:
        return "timeout", f"benchmark ran past its timeout of {timeout_s:.0f} s; its process group was killed"
    return "running", ""


def progress_line(status: JobStatus, check: int) -> str:
    elapsed = "?" if status.elapsed_s is None else f"{status.elapsed_s}s"
    return f"progress [check {check}, {elapsed}, pid {status.pid}]: {status.last_line}"


def tail_command(path: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log, of its last :data:`READ_BYTES` bytes only, each cut at :data:`LINE_BYTES`
    (a benchmark that writes one endless line without a newline must not be copied whole into a task's error)."""
    return f"tail -c {READ_BYTES} {shlex.quote(path)} 2>/dev/null | tail -n {int(lines)} | cut -b 1-{LINE_BYTES}; true"


def wait_exit_command(paths: RemoteJobPaths, seconds: float) -> str:
    """Wait up to ``seconds`` for the job's process group to end by itself."""
    pidf = shlex.quote(paths.pid_file)
    steps = max(1, int(seconds / 0.2))
    return (
        f'p="$(cat {pidf} 2>/dev/null || true)"\n'
        f"for _ in $(seq {steps}); do {group_alive('$p', paths)} || break; sleep 0.2; done\ntrue\n"
    )


def kill_command(paths: RemoteJobPaths, grace_s: float = 5.0) -> str:
    """TERM the job's process group (the provider's kill, its single-pid fallback included, for a host without
    ``setsid``), then KILL whatever is left after a grace; each only while the group is still the job's."""
    pidf = shlex.quote(paths.pid_file)
    steps = max(1, int(grace_s / 0.1))
    return (
        f'p="$(cat {pidf} 2>/dev/null || true)"\n'
        f'if [ "$p" -gt 1 ] 2>/dev/null && {ours(paths)}; then\n'
        '  kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true\n'
        f"  for _ in $(seq {steps}); do {group_alive('$p', paths)} || break; sleep 0.1; done\n"
        f'  if {group_alive("$p", paths)}; then kill -KILL -- "-$p" 2>/dev/null || true; fi\n'
        "fi\ntrue\n"
    )


def parse_pid(stdout: str) -> int:
    """The pid that :func:`launch_command` prints last."""
    words = stdout.split()
    if not words or not words[-1].isdigit():
        raise ValueError(f"launch printed no pid: {stdout[-200:]!r}")
    return int(words[-1])


_HTTP_PROBE = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)"


def http_ok_command(python: str, url: str) -> str:
    """Exit 0 when ``url`` answers 2xx, checked on the host itself (servers listen on its loopback)."""
    return f"{shlex.quote(python)} -c {shlex.quote(_HTTP_PROBE)} {shlex.quote(url)}"


def benchmark_command(python: str, script: str, args: str, out: str, marker: str) -> str:
    """``python <script> <args> --out <out> --marker <marker>``: ``args`` already rendered and quoted
    (:func:`benchflow.remote.layout.render_args`), every other word quoted here."""
    q = shlex.quote
    return f"exec {q(python)} {q(script)} {args} --out {q(out)} --marker {q(marker)}"


def server_command(command: str, python: str, port: int, extra: str = "", numa_node: int | None = None) -> str:
    """A server's shell command from its spec: ``{python}`` and ``{port}`` filled in, ``extra`` (already quoted)
    appended, under ``numactl`` when it names a NUMA node. ``command`` is the campaign author's (trusted like DAG
    code); only ``python``, ``port`` and ``numa_node`` come from elsewhere, and each is quoted or an int."""
    rendered = command.replace("{python}", shlex.quote(python)).replace("{port}", str(int(port)))
    if extra:
        rendered = f"{rendered} {extra}"
    if numa_node is not None:
        node = int(numa_node)
        rendered = f"numactl --cpunodebind={node} --membind={node} {rendered}"
    return rendered


def follow_command(paths: RemoteJobPaths, from_line: int) -> str:
    """Stream a job's log from line ``from_line`` (1-based) as it grows; ends once the job's leader has exited
    (``--pid``), so no ``tail`` outlives its benchmark on the host. Each line is cut on the host at
    :data:`STREAM_LINE_BYTES` (``cut`` streams: a line without newline never sits whole in memory, here or there),
    line-buffered where ``stdbuf`` exists."""
    pid = f'"$(cat {shlex.quote(paths.pid_file)} 2>/dev/null || echo 1)"'
    cut = f"cut -b 1-{STREAM_LINE_BYTES}"
    return (
        f"buf=; command -v stdbuf >/dev/null 2>&1 && buf='stdbuf -oL'\n"
        f"tail -n +{int(from_line)} -F --pid={pid} {shlex.quote(paths.log_file)} 2>/dev/null | exec $buf {cut}"
    )
