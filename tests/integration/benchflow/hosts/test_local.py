from __future__ import annotations

import pytest

from benchflow.hosts import HostError, get_host
from benchflow.hosts.local import LocalHost
from benchflow.payloads.manifest import MANIFEST_NAME, build_manifest, parse_manifest

pytestmark = pytest.mark.integration


@pytest.fixture
def payload(tmp_path):
    root = tmp_path / "payload"
    (root / "sub").mkdir(parents=True)
    (root / "a.py").write_text("print('a')\n")
    (root / "sub" / "b.txt").write_text("b\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    return root


def test_deploy_copies_once_then_only_changes(tmp_path, payload):
    host = LocalHost(workdir=tmp_path / "host")
    target = f"{host.workdir}/run/payload"
    first = host.put_tree(payload, target)
    assert sorted(first.copied) == ["a.py", "sub/b.txt"] and first.files == 2
    manifest = parse_manifest((tmp_path / "host/run/payload" / MANIFEST_NAME).read_text())
    assert manifest == build_manifest(payload)
    assert not (tmp_path / "host/run/payload/__pycache__").exists()

    again = host.put_tree(payload, target)
    assert again.copied == [] and again.payload_sha256 == first.payload_sha256

    (payload / "sub" / "b.txt").write_text("changed\n")
    third = host.put_tree(payload, target)
    assert third.copied == ["sub/b.txt"] and third.payload_sha256 != first.payload_sha256
    assert (tmp_path / "host/run/payload/sub/b.txt").read_text() == "changed\n"


def test_manifest_is_sha256sum_compatible(tmp_path, payload):
    host = LocalHost(workdir=tmp_path / "host")
    host.put_tree(payload, f"{host.workdir}/p")
    result = host.run(f"cd {host.workdir}/p && sha256sum -c {MANIFEST_NAME}", 30)
    assert result.rc == 0 and "a.py: OK" in result.stdout


def test_get_file_reports_missing(tmp_path):
    host = LocalHost(workdir=tmp_path / "host")
    assert host.get_file(f"{host.workdir}/nope", tmp_path / "x") is False


def test_check_raises_with_host_and_output(tmp_path):
    host = LocalHost(workdir=tmp_path / "host")
    with pytest.raises(HostError, match=r"probe failed on host 'local' \(exit 4\): boom"):
        host.check("echo boom >&2; exit 4", 10, "probe")


def test_unknown_host_is_refused_clearly():
    with pytest.raises(HostError, match="'no_such_host': no Airflow connection with that id"):
        get_host("no_such_host")


def test_a_stream_closed_early_ends_its_whole_process_group_and_reaps_it(tmp_path):
    """The local host's log stream: a reader that stops after a few lines leaves nothing of the command running."""
    import asyncio

    from tests.conftest import live_group_members, wait_for

    async def first_lines() -> tuple[list[str], int]:
        session = await LocalHost(workdir=tmp_path).open_session()
        command = "echo $$ > leader; (while :; do echo child; sleep 0.01; done) & while :; do echo x; done"
        stream = session.lines(command)
        seen = [line async for line in _take(stream, 3)]
        await stream.aclose()
        return seen, int((tmp_path / "leader").read_text())

    seen, leader = asyncio.run(first_lines())
    assert len(seen) == 3  # every process of the group was sent SIGKILL: each dies once a busy machine schedules it
    wait_for(lambda: live_group_members(leader) == [], 60, "the stream's processes to die")


def test_a_stream_of_a_command_that_ends_reads_every_line():
    import asyncio

    async def every_line() -> list[str]:
        session = await LocalHost().open_session()
        return [line async for line in session.lines("seq 1 2000")]

    assert asyncio.run(every_line()) == [str(n) for n in range(1, 2001)]


def test_no_process_group_is_signalled_once_its_leader_was_reaped():
    """A reaped leader's number may be another's group by now: ``signal_group`` then sends nothing, and
    ``end_session`` ends a live group (its leader and the child it forked) and reaps it."""
    import subprocess

    from benchflow.hosts.local import end_session, signal_group
    from tests.conftest import live_group_members, wait_for

    done = subprocess.Popen(["true"], start_new_session=True)
    done.wait()
    assert signal_group(done, 9) is False

    busy = subprocess.Popen(["bash", "-c", "sleep 300 & sleep 300"], start_new_session=True)
    assert end_session(busy) == -9
    # the leader is reaped; its child was sent SIGKILL too, and dies once a busy machine schedules it
    wait_for(lambda: live_group_members(busy.pid) == [], 60, "the killed group's other process to die")
    assert signal_group(busy, 9) is False


async def _take(stream, count):
    async for line in stream:
        yield line
        count -= 1
        if count == 0:
            return
