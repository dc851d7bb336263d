from __future__ import annotations

import pytest

from benchflow.hosts import HostError, get_host
from benchflow.hosts.local import LocalHost
from benchflow.manifest import MANIFEST_NAME, build_manifest, parse_manifest

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
