"""Where a run lives on its host, and how values become command-line words."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from airflow.providers.ssh.utils.remote_job import RemoteJobPaths

from benchflow.artifacts import dag_key, run_key


def run_dir(workdir: str, dag_id: str, run_id: str) -> str:
    """``<host workdir>/<dag_id>/<run key>``: everything one run leaves on the host."""
    if not workdir.startswith("/"):
        raise ValueError(f"host workdir must be absolute, got {workdir!r}")
    return f"{workdir.rstrip('/')}/{dag_key(dag_id)}/{run_key(run_id)}"


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


def started_file(paths: RemoteJobPaths) -> str:
    return f"{paths.job_dir}/started_at"


def leader_file(paths: RemoteJobPaths) -> str:
    """The start time of the job's leader (``/proc/PID/stat``'s 22nd field), written at launch: a pid file's number
    is the job's only while the process of that number started then (pids recycle)."""
    return f"{paths.job_dir}/leader_start"


def owner_file(paths: RemoteJobPaths) -> str:
    """The exact run id of the run that launched a job (written at launch, read before re-attaching)."""
    return f"{paths.job_dir}/run_id"


def lease_owner(dag_id: str, run_id: str) -> str:
    """Who holds a host's lease during a run: ``<dag_id>/<run key>``."""
    return f"{dag_key(dag_id)}/{run_key(run_id)}"


def server_job(config: str, server: str) -> str:
    """The job name of a serving config's server (or router) in the run directory."""
    return f"server_{config}_{server}"
