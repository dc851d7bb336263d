"""Where benchmark commands run: ``local`` (this machine, a workdir standing in for the host's) or an Airflow
SSH connection id. Both transports run the same shell commands, so a campaign behaves the same on either.
A new kind of host is one module here, with a :class:`Host` and its :class:`AsyncSession`.
"""

from __future__ import annotations

from benchflow.hosts.base import AsyncSession, CommandResult, DeployReport, Host, HostError, HostUnusable

LOCAL = "local"


def get_host(host_id: str) -> Host:
    """``local`` → the local host; anything else is an Airflow SSH connection id."""
    if host_id == LOCAL:
        from benchflow.hosts.local import LocalHost

        return LocalHost()
    from benchflow.hosts.ssh import SSHHost

    return SSHHost(host_id)


__all__ = ["LOCAL", "AsyncSession", "CommandResult", "DeployReport", "Host", "HostError", "HostUnusable", "get_host"]
