"""SGLang ``bench_serving --output-file``: one JSON object per run (``Infinity`` allowed)."""

from __future__ import annotations

import json

from benchflow.kinds.serving.common import from_json
from benchflow.parsing import Format, ParsedRun, ParseError


def detect(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0]
    return first.startswith("{") and '"output_throughput"' in first and '"total_token_throughput"' not in first


def parse(text: str, marker: str = "ALL_DONE") -> ParsedRun:
    rows, warnings = [], []
    lines = text.splitlines()
    for number_, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if number_ == len(lines) and not text.endswith("\n"):
                warnings.append(f"line {number_}: dropped a record cut off mid-write")
                continue
            raise ParseError(f"not a JSON object ({exc.msg})", number_, line) from None
        if not isinstance(obj, dict):
            raise ParseError("not a JSON object", number_, line)
        rows.append(from_json(obj, obj.get("tag") or obj.get("config")))
    return ParsedRun("sglang_jsonl", rows, True, {}, warnings)


FORMAT = Format("sglang_jsonl", detect, parse)
