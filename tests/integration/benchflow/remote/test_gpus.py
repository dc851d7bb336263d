"""The GPU-free check after stop_services, on a real shell with an ``nvidia-smi`` stand-in on the PATH."""

from __future__ import annotations

import os
import textwrap

import pytest
from airflow.sdk.exceptions import AirflowFailException

from benchflow.operators import GpusFreeSensor
from benchflow.remote import gpus

pytestmark = pytest.mark.integration


def stand_in(tmp_path, monkeypatch, used: str, procs: str, code: int = 0) -> None:
    """An nvidia-smi that prints what the real one prints for these queries (csv, noheader, nounits), and exits
    with ``code``."""
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
        exit {code}
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


def test_a_gpu_that_does_not_report_its_memory_is_not_judged_its_process_still_counts():
    state = gpus.parse_state("gpu=0, [N/A]\ngpu=1, 10\ngpu_rc=0\nproc=12, x, [N/A]\nproc=\nproc_rc=0\n")
    assert state.used_mib == {1: 10.0} and [p.pid for p in state.processes] == [12]
    assert state.busy(1024) == ["process 12 (x) holds GPU memory (amount not reported)"]
    assert gpus.parse_state("gpu=0, 3\ngpu=\ngpu_rc=0\nproc=\nproc_rc=0\n").busy(1024) == []


DRIVER_DOWN = "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.\\n"


@pytest.mark.parametrize(
    ("used", "procs", "code", "expected"),
    [
        (DRIVER_DOWN, DRIVER_DOWN, 9, "nvidia-smi --query-gpu exited with code 9"),
        ("", "", 255, "nvidia-smi --query-gpu exited with code 255"),
        ("0, 3\\n", "", 6, "nvidia-smi --query-gpu exited with code 6"),  # readable lines, but it failed
        ("Segmentation fault\\n", "", 0, "unreadable line(s): gpu: Segmentation fault"),
        ("0, 3, 7, 9\\n", "", 0, "unreadable line(s): gpu: 0, 3, 7, 9"),
        ("", "", 0, "nvidia-smi listed no GPU"),
    ],
    ids=["driver-down", "silent-failure", "exit-code-only", "garbage", "wrong-columns", "no-gpu-listed"],
)
def test_a_failing_nvidia_smi_never_counts_as_free(tmp_path, monkeypatch, used, procs, code, expected):
    stand_in(tmp_path, monkeypatch, used, procs, code)
    assert sensor(wait_s=3600).poke({}) is False  # within its wait: not free, so it waits
    with pytest.raises(AirflowFailException) as failed:
        sensor(wait_s=-1).poke({})
    assert expected in str(failed.value), str(failed.value)
