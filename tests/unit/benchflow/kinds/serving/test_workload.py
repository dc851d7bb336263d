"""A serving spec's ``benchmark.dataset`` and request-rate sweeps: what is refused (a hub dataset, a field of
another dataset, a host file without its sha256, a path out of include/datasets/), what the sweep driver is
given, and the phase headers of a rate sweep as the log parser reads them."""

from __future__ import annotations

import hashlib
import json

import pytest
from pydantic import ValidationError

from benchflow import kinds
from benchflow.kinds.serving.workload import Dataset, row_values

SERVING = kinds.get("serving")

pytestmark = pytest.mark.unit


@pytest.fixture
def datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_DATASETS_DIR", str(tmp_path))
    (tmp_path / "chat.json").write_text(json.dumps([{"conversations": []}]))
    return tmp_path


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"name": "hf"}, "Nothing is downloaded during a run"),
        ({"name": "burstgpt"}, "save the conversations as a ShareGPT-format JSON file"),
        ({"name": "sharegpt", "file": "https://example.com/sg.json"}, "nothing is downloaded"),
        ({"name": "sharegpt", "file": "../secrets.json"}, "a file name in include/datasets/"),
        ({"name": "sharegpt", "file": "missing.json"}, "no such file"),
        ({"name": "sharegpt", "host_path": "/data/sg.json"}, "host_path needs sha256"),
        ({"name": "sharegpt", "host_path": "/data/sg.json; rm -rf /", "sha256": "0" * 64}, "an absolute path"),
        ({"name": "sharegpt"}, "names one of file (shipped) or host_path"),
        ({"name": "random", "groups": 4}, "groups: not a field of a random dataset"),
        ({"name": "shared-prefix", "file": "chat.json"}, "file: not a field of a shared-prefix dataset"),
        ({"name": "sharegpt", "file": "chat.json", "sha256": "a" * 64}, "sha256 does not match"),
    ],
)
def test_a_dataset_that_cannot_be_sent_is_refused_saying_why(datasets, given, says):
    with pytest.raises(ValidationError) as raised:
        Dataset.model_validate(given)
    assert says in str(raised.value)


def test_a_shipped_file_goes_to_the_driver_with_its_sha256_and_every_row_records_it(datasets):
    sha = hashlib.sha256((datasets / "chat.json").read_bytes()).hexdigest()
    shipped = Dataset.model_validate({"name": "sharegpt", "file": "chat.json"})
    assert json.loads(shipped.argument()) == {"name": "sharegpt", "path": "datasets/chat.json", "sha256": sha}
    assert shipped.shipped() == [(datasets / "chat.json").resolve()]
    assert row_values(shipped) == {"dataset": "sharegpt:chat.json", "dataset_sha256": sha}
    on_host = Dataset.model_validate({"name": "sharegpt", "host_path": "/data/sg.json", "sha256": "b" * 64})
    assert json.loads(on_host.argument())["path"] == "/data/sg.json" and on_host.shipped() == []
    prefix = Dataset.model_validate(
        {"name": "shared-prefix", "groups": 8, "system_prompt_len": 512, "question_len": 64}
    )
    assert row_values(prefix) == {"dataset": "shared-prefix:8x512+64", "dataset_sha256": None}
    assert row_values(None) == {"dataset": "random"}


def test_rate_sweep_headers_key_rows_by_rate_with_or_without_a_cap():
    block = "============ Serving Benchmark Result ============\nSuccessful requests: 8\n" + (
        "Benchmark duration (s): 2.00\nTotal generated tokens: 32\nOutput token throughput (tok/s): 16.00\n"
        "Mean TTFT (ms): 5.0\n" + "=" * 50 + "\n"
    )
    text = f"===== pd request_rate=4 (n=8) =====\n{block}===== pd request_rate=0.5 concurrency=64 (n=8) =====\n{block}"
    rows = kinds.parse_text(text + "ALL_DONE\n", "serving", None).rows
    assert [(r["config"], r["request_rate"], r["concurrency"], r["num_prompts"]) for r in rows] == [
        ("pd", 4.0, None, 8),
        ("pd", 0.5, 64, 8),
    ]
