"""vLLM ``--save-result``: one JSON object per run (``indent`` or not), also pasted with text above it
(see :mod:`.records`)."""

from __future__ import annotations

from benchflow.kinds.serving import json_records as records
from benchflow.parsing import Format

NAME = "vllm_json"


def detect(text: str) -> bool:
    sample = records.head(text)
    return records.results(sample) and records.vllm_keys(sample)


parse = records.parser(NAME, lambda obj: obj.get("label") or obj.get("model_id"))

FORMAT = Format(NAME, detect, parse)
