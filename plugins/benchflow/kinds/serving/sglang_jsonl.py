"""SGLang ``bench_serving --output-file``: one JSON object per run (``Infinity`` allowed), also pasted with
text above it or wrapped (see :mod:`.records`)."""

from __future__ import annotations

from benchflow.kinds.serving import json_records as records
from benchflow.parsing import Format

NAME = "sglang_jsonl"


def detect(text: str) -> bool:
    sample = records.head(text)
    return records.results(sample) and not records.vllm_keys(sample)


parse = records.parser(NAME, lambda obj: obj.get("tag") or obj.get("config"))

FORMAT = Format(NAME, detect, parse)
