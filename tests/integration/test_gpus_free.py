"""The GPU-free check after stop_services, on a real shell with an ``nvidia-smi`` stand-in on the PATH."""

from __future__ import annotations

import os
import textwrap

import pytest
from airflow.sdk.exceptions import AirflowFailException

from benchflow.operators import GpusFreeSensor
from benchflow.remote import gpus

pytestmark = pytest.mark.integration


def stand_in(tmp_path, monkeypatch, used: str, procs: str) -> None:
    """An nvidia-smi that prints what the real one prints for these queries (csv, noheader, nounits)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        case "$*" in
          *--query-gpu=index,memory.used*) printf '{used}' ;;
          *--query-compute-apps*) printf '{procs}' ;;
        esac
        """)
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def sensor(wait_s: float = 0.0) -> GpusFreeSensor:
    return GpusFreeSensor(task_id="gpus_free", host_id="local", max_used_mib=1024, wait_s=wait_s)


def test_free_gpus_pass(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, "0, 3\\n1, 512\\n", "")
    assert sensor().poke({}) is True


def test_busy_gpus_wait_then_fail_naming_the_holders(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, "0, 70000\\n1, 2\\n", "4242, python3 -m sglang.launch_server, 69990\\n")
    waiting = sensor(wait_s=3600)
    assert waiting.poke({}) is False  # within its wait: not yet
    with pytest.raises(AirflowFailException) as failed:
        sensor(wait_s=-1).poke({})
    message = str(failed.value)
    assert "GPU 0: 70000 MiB in use (limit 1024)" in message and "GPU 1" not in message
    assert "process 4242 (python3 -m sglang.launch_server) holds 69990 MiB" in message


def test_a_host_without_gpus_skips_and_says_so(monkeypatch, capfd):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi anywhere
    assert sensor().poke({}) is True
    assert "has no GPUs (no nvidia-smi): nothing to wait for" in "".join(capfd.readouterr())


def test_unreadable_values_are_skipped_not_fatal():
    state = gpus.parse_state("gpu=0, [N/A]\ngpu=1, 10\nproc=12, x, [N/A]\n")
    assert state.used_mib == {1: 10.0} and state.processes == [] and state.busy(1024) == []
