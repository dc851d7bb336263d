"""Pure builders of the shell commands run on a benchmark host: string in, string out.

The detached launch, the pid and the atomic exit-code file come from the SSH provider's
``utils/remote_job.py``; what it lacks for benchmarks is here: the done-marker check with pid
liveness and the newest progress line in one round trip, a log tail, and a kill that escalates from
TERM to KILL on the whole process group.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from airflow.providers.ssh.utils.remote_job import (
    RemoteJobPaths,
    build_posix_kill_command,
    build_posix_wrapper_command,
)

_RUN_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def run_key(run_id: str) -> str:
    """A path-safe name for an Airflow run id (``manual__2026-11-29T21:14:22+00:00`` has ':' and '+')."""
    key = _RUN_KEY_UNSAFE.sub("_", run_id).strip(".")
    if not key:
        raise ValueError(f"run id {run_id!r} has no usable characters")
    return key


def run_dir(workdir: str, dag_id: str, run_id: str) -> str:
    """``<host workdir>/<dag_id>/<run key>``: everything one run leaves on the host."""
    if not workdir.startswith("/"):
        raise ValueError(f"host workdir must be absolute, got {workdir!r}")
    return f"{workdir.rstrip('/')}/{run_key(dag_id)}/{run_key(run_id)}"


def job_paths(rundir: str, name: str = "bench") -> RemoteJobPaths:
    """Log, pid and exit-code files of one detached job inside a run directory."""
    return RemoteJobPaths(job_id=name, remote_os="posix", base_dir=rundir)


def render_args(args: Mapping[str, object]) -> str:
    """``{"m_list": [1, 2], "dtype": "bf16"}`` → ``--m-list 1,2 --dtype bf16``; every value quoted."""
    words: list[str] = []
    for key, value in args.items():
        if not re.fullmatch(r"[a-z][a-z0-9_]*", key):
            raise ValueError(f"argument name {key!r} is not an identifier")
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                words.append(flag)
            continue
        if isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        words += [flag, shlex.quote(str(value))]
    return " ".join(words)


def launch_command(paths: RemoteJobPaths, command: str, cwd: str, env: Mapping[str, str] | None = None) -> str:
    """Start ``command`` detached in ``cwd``; print the job's pid once its pid file exists."""
    # A subshell, so that the wrapper's log redirection covers all of a compound command and an
    # ``exit`` in it ends the command, not the wrapper (which must still write the exit code).
    wrapped = build_posix_wrapper_command(f"( cd {shlex.quote(cwd)} && {command} )", paths, dict(env or {}))
    pid = shlex.quote(paths.pid_file)
    # The launch time lives on the host, so a wait that resumes anywhere measures from the same instant.
    started = f"mkdir -p {shlex.quote(paths.job_dir)} && date +%s > {shlex.quote(started_file(paths))}\n"
    # The provider's wrapper writes the pid asynchronously; wait for it so that every later check
    # (and a re-attach after a crash of the worker) can rely on it.
    return started + wrapped + f"for _ in $(seq 100); do test -s {pid} && break; sleep 0.05; done\ncat {pid}\n"


def status_command(paths: RemoteJobPaths, marker: str) -> str:
    """One round trip: exit code, process group alive?, marker seen?, seconds since launch, newest line.

    Liveness is read before the marker: a job that writes the marker and exits between the two reads
    is then seen alive-without-marker (wait again), never dead-without-marker (a false failure).
    """
    q = shlex.quote
    return (
        f"log={q(paths.log_file)}; ec={q(paths.exit_code_file)}; pidf={q(paths.pid_file)}; "
        f"st={q(started_file(paths))}\n"
        'code=$(cat "$ec" 2>/dev/null || true); p=$(cat "$pidf" 2>/dev/null || true); alive=0\n'
        f"if {group_alive('$p')}; then alive=1; fi\n"
        f"if grep -qxF -- {q(marker)} \"$log\" 2>/dev/null; then marker=1; else marker=0; fi\n"
        's=$(cat "$st" 2>/dev/null || true); elapsed=; [ -n "$s" ] && elapsed=$(( $(date +%s) - s ))\n'
        'printf "marker=%s exit=%s alive=%s pid=%s elapsed=%s\\n" "$marker" "$code" "$alive" "$p" "$elapsed"\n'
        'tail -n 1 "$log" 2>/dev/null || true\n'
    )


def group_alive(pgid: str) -> str:
    """Shell test: does process group ``pgid`` hold a process that is not a zombie?

    ``kill -0`` counts zombies as alive, and a killed job's processes can stay zombies for a while
    when their (re)parent is slow to reap them.
    """
    return (
        f'[ "{pgid}" -gt 1 ] 2>/dev/null && ps -e -o pgid= -o stat= 2>/dev/null'
        f" | awk -v p=\"{pgid}\" '$1 == p && $2 !~ /^Z/ {{found = 1}} END {{exit !found}}'"
    )


def started_file(paths: RemoteJobPaths) -> str:
    return f"{paths.job_dir}/started_at"


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


def tail_command(path: str, lines: int = 20) -> str:
    return f"tail -n {int(lines)} {shlex.quote(path)} 2>/dev/null || true"


def wait_exit_command(paths: RemoteJobPaths, seconds: float) -> str:
    """Wait up to ``seconds`` for the job's process group to end by itself."""
    pidf = shlex.quote(paths.pid_file)
    steps = max(1, int(seconds / 0.2))
    return (
        f'p="$(cat {pidf} 2>/dev/null || true)"\n'
        f'for _ in $(seq {steps}); do {group_alive("$p")} || break; sleep 0.2; done\ntrue\n'
    )


def kill_command(paths: RemoteJobPaths, grace_s: float = 5.0) -> str:
    """TERM the job's process group (provider's command), then KILL whatever is left after a grace."""
    pidf = shlex.quote(paths.pid_file)
    steps = max(1, int(grace_s / 0.1))
    return (
        build_posix_kill_command(paths.pid_file)
        + f'\np="$(cat {pidf} 2>/dev/null || true)"\n'
        'if [ "$p" -gt 1 ] 2>/dev/null; then\n'
        f'  for _ in $(seq {steps}); do {group_alive("$p")} || break; sleep 0.1; done\n'
        '  kill -KILL -- "-$p" 2>/dev/null || true\n'
        "fi\ntrue\n"
    )


def preflight_command(python: str, workdir: str) -> str:
    """Host facts as ``key=value`` lines; exits non-zero when the payload's runtime is missing."""
    py, wd = shlex.quote(python), shlex.quote(workdir)
    return (
        f"mkdir -p {wd}\n"
        'printf "hostname=%s\\n" "$(hostname)"\n'
        'printf "os=%s\\n" "$(uname -srm)"\n'
        f'printf "disk_free_gb=%s\\n" "$(df -Pk {wd} | awk \'NR==2{{print int($4/1048576)}}\')"\n'
        "if command -v nvidia-smi >/dev/null 2>&1; then\n"
        "  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader"
        ' | sed "s/^/gpu=/"\n'
        'else echo "gpu=none"; fi\n'
        f"{py} -c 'import sys, torch; print(\"python=\" + sys.version.split()[0]);"
        ' print("torch=" + torch.__version__); print("cuda=" + str(torch.version.cuda))\'\n'
    )


def parse_facts(stdout: str) -> dict[str, str]:
    """``key=value`` lines to a dict; repeated keys (one ``gpu`` line per GPU) are joined with '; '."""
    facts: dict[str, str] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[a-z_]+", key):
            facts[key] = f"{facts[key]}; {value.strip()}" if key in facts else value.strip()
    gpus = [g for g in facts.get("gpu", "none").split("; ") if g and g != "none"]
    facts["gpu_count"] = str(len(gpus))
    return facts


LEASE_FILE = ".bench-host-lease"


def lease_acquire_command(workdir: str, owner: str, ttl_s: float) -> str:
    """Take the host's lease for ``owner`` (``<dag_id>/<run key>``), or report who holds it.

    Prints ``acquired <owner> <expires>`` or ``held <holder> <expires>``. The lease is a file in the
    host's workdir, read and written under ``flock``, so two campaigns racing for it cannot both win.
    It is re-entrant (a retry of the holder renews it) and expires ``ttl_s`` after it was taken, so a
    campaign whose teardown never ran cannot keep the host forever.
    """
    if not re.fullmatch(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+", owner):
        raise ValueError(f"lease owner {owner!r} must be <dag_id>/<run key>")
    wd = shlex.quote(workdir)
    lease = shlex.quote(f"{workdir.rstrip('/')}/{LEASE_FILE}")
    return (
        f"mkdir -p {wd} && exec 9>>{lease}.lock && flock -w 30 9 || exit 75\n"
        f"now=$(date +%s); holder=; expires=0\n"
        f"read -r holder expires < {lease} 2>/dev/null || true\n"
        f'if [ -z "$holder" ] || [ "$holder" = {shlex.quote(owner)} ] || [ "${{expires:-0}}" -lt "$now" ]; then\n'
        f"  printf '%s %s\\n' {shlex.quote(owner)} $((now + {int(ttl_s)})) > {lease}.new && mv -f {lease}.new {lease}\n"
        f"  printf 'acquired %s\\n' \"$(cat {lease})\"\n"
        f"else printf 'held %s %s\\n' \"$holder\" \"$expires\"; fi\n"
    )


def lease_release_command(workdir: str, owner: str) -> str:
    """Give the lease back if ``owner`` holds it; prints ``released``, ``not held`` or ``held <holder> ...``."""
    lease = shlex.quote(f"{workdir.rstrip('/')}/{LEASE_FILE}")
    return (
        f"exec 9>>{lease}.lock && flock -w 30 9 || exit 75\n"
        f"holder=; expires=0; read -r holder expires < {lease} 2>/dev/null || true\n"
        f'if [ "$holder" = {shlex.quote(owner)} ]; then rm -f {lease}; echo released\n'
        f'elif [ -z "$holder" ]; then echo "not held"\n'
        f'else printf \'held %s %s\\n\' "$holder" "$expires"; fi\n'
    )


def lease_owner(dag_id: str, run_id: str) -> str:
    return f"{run_key(dag_id)}/{run_key(run_id)}"
