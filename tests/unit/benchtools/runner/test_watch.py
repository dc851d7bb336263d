"""What ``bench run`` names as a failed task's error, read from the log dag.test writes (issue 20: "no error line
found" for busy GPUs, a progress-bar line for a timeout)."""

from __future__ import annotations

import pytest

from benchtools.runner.watch import failure_of, progress_text

pytestmark = pytest.mark.unit
START = "2026-12-01T23:47:30.1Z [info     ] [DAG TEST] starting task_id={task} map_index=-1 [airflow.sdk] loc=x\n"
FAILED = "2026-12-01T23:47:31.2Z [error    ] Task failed with exception     [task] loc=task_runner.py:1639\n"
FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/venv/airflow/sdk/execution_time/task_runner.py", line 1579, in _run_task_and_map_outcome\n'
    "    result = _execute_task(context=context, ti=ti, log=log)\n"
    "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/work/plugins/benchflow/operators.py", line 171, in poke\n'
    "    raise AirflowFailException(\n"
)
AFTER = "2026-12-01T23:47:31.3Z [info     ] ::group::Post Execute          [task] loc=task_runner.py:1640\n"


def log(tmp_path, task: str, exception: str) -> str:
    path = tmp_path / "run.log"
    path.write_text(START.format(task=task) + FAILED + FRAMES + exception + "\n" + AFTER)
    return failure_of(path, task)


def test_a_message_whose_lines_are_indented_is_read_whole(tmp_path):
    message = log(
        tmp_path,
        "gpus_free",
        "airflow.sdk.exceptions.AirflowFailException: GPUs of host 'gpu1' still busy 300 s after the services "
        "stopped:\n  GPU 0: 70000 MiB in use (limit 1024)\n  process 4242 (python3) holds 69990 MiB",
    )
    assert message.startswith("AirflowFailException: GPUs of host 'gpu1' still busy 300 s"), message
    assert "GPU 0: 70000 MiB in use (limit 1024)" in message and "process 4242" in message


def test_a_timeout_names_itself_with_the_logs_last_error_and_tail(tmp_path):
    bars = [f"   {i}%|##   | {i}/100 [00:{i:02d}<01:00]" for i in range(30)]
    tail = ["Traceback (most recent call last):", '  File "client.py", line 3', "ValueError: bad prompt", *bars]
    message = log(
        tmp_path,
        "wait_done",
        "airflow.sdk.exceptions.AirflowFailException: benchmark ran past its timeout of 3600 s; its process group "
        "was killed; last 20 log lines:\n" + "\n".join(tail),
    )
    first, *rest = message.splitlines()
    assert first.startswith("AirflowFailException: benchmark ran past its timeout of 3600 s"), message
    assert rest[0] == "    ... ValueError: bad prompt" and len(rest) == 7, message


def test_a_chained_exception_names_the_last_one(tmp_path):
    message = log(
        tmp_path,
        "preflight",
        "paramiko.ssh_exception.SSHException: channel closed\n\n"
        "The above exception was the direct cause of the following exception:\n\n"
        + FRAMES
        + "benchflow.hosts.base.HostError: host 'gpu1': command failed: channel closed",
    )
    assert message == "HostError: host 'gpu1': command failed: channel closed", message


def test_the_progress_shown_is_the_bars_last_frame_never_a_warning():
    assert progress_text("\r  0%|     | 0/10\r 50%|##   | 5/10\r") == "50%|##   | 5/10"
    assert progress_text("/srv/bench.py:12: FutureWarning: `x` is deprecated") == ""
    assert progress_text("  warnings.warn(") == ""
    assert progress_text("WARNING 12-01 10:00:00 [utils.py:12] slow tokenizer") == ""
    assert progress_text("32 3.171 10092 99.09") == "32 3.171 10092 99.09"
