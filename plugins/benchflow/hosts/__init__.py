"""Where benchmark commands run: ``local`` (this machine, a workdir standing in for the host's), an Airflow
SSH connection id, or ``edge:<queue>``: the machine of the Airflow Edge worker serving that queue, whose host
tasks run there (the campaign's DAG sends them to that queue) and reach it through the local transport. The
transports run the same shell commands, so a campaign behaves the same on any.
A new kind of host is one module here, with a :class:`Host` and its :class:`AsyncSession`, and, where its tasks run
elsewhere than the default workers, its :class:`~benchflow.hosts.edge.Routing` (:mod:`.edge`).
"""

from __future__ import annotations

from benchflow.hosts.base import RUN_HOST, AsyncSession, CommandResult, DeployReport, Host, HostError, HostUnusable
from benchflow.hosts.edge import Routing, edge_queue, routing
from benchflow.paths import var_dir

LOCAL = "local"


def get_host(host_id: str) -> Host:
    """``local`` → the local host; ``edge:<queue>`` → this machine (the Edge worker's, where the task runs) with
    a workdir of that queue's; anything else is an Airflow SSH connection id."""
    if host_id == LOCAL or edge_queue(host_id):
        from benchflow.hosts.local import LocalHost  # asyncio's subprocess machinery: only where a task runs

        queue = edge_queue(host_id)
        return LocalHost(var_dir() / "hosts" / f"edge-{queue}", name=host_id) if queue else LocalHost()
    from benchflow.hosts.ssh import SSHHost  # paramiko and the SSH provider: never at DAG parse

    return SSHHost(host_id)


__all__ = [
    "LOCAL",
    "RUN_HOST",
    "AsyncSession",
    "CommandResult",
    "DeployReport",
    "Host",
    "HostError",
    "HostUnusable",
    "Routing",
    "edge_queue",
    "get_host",
    "routing",
]
