"""Where benchmark commands run: ``local`` (this machine, a workdir standing in for the host's), an Airflow
SSH connection id, or ``edge:<queue>``: the machine of the Airflow Edge worker serving that queue, whose host
tasks run there (the campaign's DAG sends them to that queue) and reach it through the local transport. The
transports run the same shell commands, so a campaign behaves the same on any.
A new kind of host is one module here, with a :class:`Host` and its :class:`AsyncSession`.
"""

from __future__ import annotations

from benchflow.hosts.base import AsyncSession, CommandResult, DeployReport, Host, HostError, HostUnusable

LOCAL = "local"
EDGE_PREFIX = "edge:"
EDGE_EXECUTOR = "EdgeExecutor"  # Airflow's name for the Edge provider's executor (its class's name)
RUN_HOST = "{{ params.host }}"  # a host task's host in a campaign with several hosts: the one its run picked


def edge_queue(host_id: str) -> str | None:
    """The Edge worker queue of an ``edge:<queue>`` host; None for any other host."""
    return host_id.removeprefix(EDGE_PREFIX) if host_id.startswith(EDGE_PREFIX) else None


def get_host(host_id: str) -> Host:
    """``local`` → the local host; ``edge:<queue>`` → this machine (the Edge worker's, where the task runs) with
    a workdir of that queue's; anything else is an Airflow SSH connection id."""
    if host_id == LOCAL or edge_queue(host_id):
        from benchflow.hosts.local import LocalHost
        from benchflow.paths import var_dir

        queue = edge_queue(host_id)
        return LocalHost(var_dir() / "hosts" / f"edge-{queue}", name=host_id) if queue else LocalHost()
    from benchflow.hosts.ssh import SSHHost

    return SSHHost(host_id)


__all__ = [
    "EDGE_EXECUTOR",
    "EDGE_PREFIX",
    "LOCAL",
    "RUN_HOST",
    "AsyncSession",
    "CommandResult",
    "DeployReport",
    "Host",
    "HostError",
    "HostUnusable",
    "edge_queue",
    "get_host",
]
