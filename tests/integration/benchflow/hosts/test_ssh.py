"""The SSH host against a real sshd on loopback: commands, SFTP deploy and fetch, host-key refusal."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from benchflow.hosts import HostError, HostUnusable, get_host
from benchflow.hosts.ssh import SSHHost, SSHSession
from benchflow.remote import layout, preflight

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(sshd, monkeypatch):
    """Define the connection ``probe`` with overrides of the server's own settings."""

    def define(**extra_overrides):
        connection = sshd.connection()
        connection["extra"].update(extra_overrides)
        connection["extra"] = {k: v for k, v in connection["extra"].items() if v is not None}
        monkeypatch.setenv("AIRFLOW_CONN_PROBE", json.dumps(connection))
        return "probe"

    return define


def other_host_key(tmp_path) -> str:
    key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return " ".join(key.with_suffix(".pub").read_text().split()[:2])


def test_runs_commands_and_reports_exit_codes(sshd):
    host = get_host("gpu_loopback")
    assert isinstance(host, SSHHost)
    result = host.run("echo out; echo err >&2; exit 3", 30)
    assert (result.rc, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert host.run("pwd", 30).stdout.strip() == str(sshd.workdir)  # commands start in the connection's workdir


def test_deploy_over_sftp_sends_only_changed_files_and_fetch_gets_them_back(sshd, tmp_path):
    host = get_host("gpu_loopback")
    payload = tmp_path / "payload"
    payload.mkdir()
    (payload / "a.py").write_text("a\n")
    (payload / "b.py").write_text("b\n")
    target = f"{host.workdir}/deploy-test/payload"
    assert sorted(host.put_tree(payload, target).copied) == ["a.py", "b.py"]
    assert host.put_tree(payload, target).copied == []
    (payload / "b.py").write_text("b2\n")
    assert host.put_tree(payload, target).copied == ["b.py"]
    assert host.get_file(f"{target}/b.py", tmp_path / "back" / "b.py")
    assert (tmp_path / "back" / "b.py").read_text() == "b2\n"
    assert host.get_file(f"{target}/missing", tmp_path / "back" / "missing") is False


def test_changed_host_key_is_refused_before_any_command(conn, sshd, tmp_path):
    marker = sshd.workdir / "should-not-exist"
    host = get_host(conn(host_key=other_host_key(tmp_path)))
    with pytest.raises(HostError, match=r"host key does not match the pinned one.*no command was run"):
        host.run(f"touch {marker}", 30)
    assert not marker.exists()


def test_unknown_host_key_is_refused(conn, sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # an empty ~/.ssh: the server's key is known nowhere
    host = get_host(conn(host_key=None))
    with pytest.raises(HostError, match=r"host key is not known.*Pin it"):
        host.run("true", 30)


@pytest.mark.parametrize("flag", ["no_host_key_check", "allow_host_key_change"])
def test_connection_that_disables_checking_is_refused_before_connecting(conn, flag, monkeypatch):
    import paramiko

    def no_connection(*args, **kwargs):
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(paramiko.SSHClient, "connect", no_connection)
    with pytest.raises(HostUnusable, match="turns host-key checking off"):
        SSHHost(conn(host_key=None, **{flag: "true"}))


def test_the_trigger_refuses_an_unverified_host_before_connecting(conn, monkeypatch):
    """The deferred wait applies the same policy as the operators, before asyncssh connects."""
    import asyncssh

    from benchflow.triggers import DoneMarkerTrigger

    async def no_connection(*args, **kwargs):
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(asyncssh, "connect", no_connection)
    trigger = DoneMarkerTrigger(
        host_id=conn(host_key=None, no_host_key_check="true"),
        rundir="/tmp/x",
        marker="ALL_DONE",
        timeout_s=30,
        check_interval=1,
    )

    async def first_event():
        async for event in trigger.run():
            return event.payload

    event = asyncio.run(first_event())
    assert event["status"] == "failed" and "turns host-key checking off" in event["message"]


def test_async_shell_refuses_a_changed_host_key(conn, tmp_path):
    with pytest.raises(HostUnusable, match="no command was run"):
        asyncio.run(SSHSession.connect(conn(host_key=other_host_key(tmp_path))))


def test_a_command_cut_off_by_a_stopped_server_is_a_lost_connection_not_an_answer(sshd):
    """sshd stops mid-command (a reboot, a network cut): the wait must reconnect, so the partial (here empty)
    output may never come back as if the command had printed it."""
    from benchflow.triggers import _connection_errors

    started = sshd.workdir / "cut.started"
    started.unlink(missing_ok=True)

    async def cut_off() -> None:
        session = await SSHSession.connect("gpu_loopback")
        try:
            command = asyncio.ensure_future(session.run(f"touch {started}; sleep 30; echo late", timeout=60))
            while not started.exists():
                await asyncio.sleep(0.05)
            sshd.stop()
            await command
        finally:
            await session.close()

    try:
        with pytest.raises(_connection_errors()):
            asyncio.run(cut_off())
    finally:
        if sshd.proc is None:
            sshd.start()


@pytest.mark.parametrize("bad", ["relative/dir", "/srv/$(id)", "/srv/../etc", "/srv/a;b"])
def test_workdir_must_be_a_plain_absolute_path(conn, bad):
    with pytest.raises(HostUnusable, match="extra 'workdir' must be an absolute path"):
        SSHHost(conn(workdir=bad))


def test_hostile_argument_values_reach_the_host_as_data(sshd):
    host = get_host("gpu_loopback")
    evil = "; rm -rf ~ $(touch pwned) `touch pwned2`\\n'\""
    result = host.check(f"cd {host.workdir} && printf '%s\\n' {layout.render_args({'x': evil})}", 30, "printf")
    assert result.stdout.splitlines() == ["--x", evil]
    assert not any((sshd.workdir / name).exists() for name in ("pwned", "pwned2"))


def test_preflight_over_ssh(sshd):
    host = get_host("gpu_loopback")
    command = preflight.facts_command(host.python, host.workdir)
    facts = preflight.parse_facts(host.check(command, 120, "preflight").stdout)
    assert facts["gpu"] == "none" and facts["torch"].startswith("2.")
    from benchflow.paths import host_python

    assert host.python == host_python()  # the connection's extra, the host environment's python
