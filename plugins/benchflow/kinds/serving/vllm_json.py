"""vLLM ``--save-result``: one JSON object per run."""

from __future__ import annotations

import json

from benchflow.kinds.serving.common import from_json
from benchflow.parsing import Format, ParsedRun, ParseError


def detect(text: str) -> bool:
    stripped = text.lstrip()
    return stripped.startswith("{") and '"total_token_throughput"' in stripped[:20000]


def parse(text: str, marker: str = "ALL_DONE") -> ParsedRun:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"not a JSON document ({exc.msg})", exc.lineno) from None
    if not isinstance(obj, dict):
        raise ParseError("not a JSON object", 1)
    return ParsedRun("vllm_json", [from_json(obj, obj.get("label") or obj.get("model_id"))], True, {}, [])


FORMAT = Format("vllm_json", detect, parse)
