"""JSON results as tools save them and as people paste them: one or more objects, one per line (JSONL) or
spread over lines (``indent=2``, or wrapped by a doc), with text above, between or after them, and
``Infinity``/``NaN`` as bare words. Every object that reads is a row; one that does not is a problem that
names its line (a record cut off mid-write at the end of the output: not counted as dropped data twice)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from benchflow.kinds.serving.common import from_json
from benchflow.parsing import Notes, ParsedRun

DETECT_CHARS = 64_000
_DECODER = json.JSONDecoder(strict=False)  # strict=False: a newline inside a string (a wrapped paste) reads


def objects(text: str, notes: Notes) -> list[tuple[int, dict[str, Any]]]:
    """``(line, object)`` for every JSON object that starts a line, in order."""
    found: list[tuple[int, dict[str, Any]]] = []
    start, number, skip_to, size = 0, 0, 0, len(text)
    while start < size:
        cut = text.find("\n", start)
        stop = size if cut < 0 else cut
        number += 1
        line_start, start = start, stop + 1
        if line_start < skip_to:
            continue
        at = line_start
        while at < stop and text[at] in " \t[,":
            at += 1
        if at >= stop or text[at] != "{":
            continue
        try:
            obj, end = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            obj, end = _unwrapped(text, at)
            if obj is None:
                cut_off = cut < 0 or exc.pos >= len(text.rstrip())
                what = "a record cut off at the end of the output" if cut_off else f"not a JSON object ({exc.msg})"
                notes.problem(number, f"{what}; dropped", dropped=True)
                continue
        if isinstance(obj, dict) and any("\n" in key for key in obj):  # a key wrapped by a doc: unwrap it
            obj, end = _unwrapped(text, at)
        if isinstance(obj, dict):
            found.append((number, obj))
            skip_to = end
    return found


def _unwrapped(text: str, at: int) -> tuple[Any, int]:
    """An object wrapped by a doc inside a number or a word: read again with the line breaks taken out,
    up to the first line that ends with ``}`` (at most 200 lines)."""
    end, count = at, 0
    while count < 200:
        cut = text.find("\n", end)
        stop = len(text) if cut < 0 else cut
        count += 1
        if text[end:stop].rstrip().endswith("}"):
            try:
                obj, _ = _DECODER.raw_decode(text[at:stop].replace("\r", "").replace("\n", ""))
            except json.JSONDecodeError:
                return None, at
            return obj, stop
        if cut < 0:
            return None, at
        end = stop + 1
    return None, at


def parser(name: str, config_of: Callable[[dict[str, Any]], Any]) -> Callable[..., ParsedRun]:
    def parse(text: str, marker: str = "ALL_DONE") -> ParsedRun:
        notes = Notes()
        rows = []
        for _, obj in objects(text, notes):
            if not any(key in obj for key in ("output_throughput", "completed", "request_throughput")):
                continue  # another JSON object (a config dump), not a result
            rows.append(from_json(obj, config_of(obj)))
        if not rows and not notes.problems:
            notes.problem(None, "no JSON result object found", dropped=False)
        return notes.run(name, rows, bool(rows) and not notes.problems)

    return parse


def head(text: str) -> str:
    """The first :data:`DETECT_CHARS` characters (a bounded copy, for detection)."""
    return text[:DETECT_CHARS]


_OBJECT_LINE_RE = re.compile(r"^[ \t]*\[?[ \t]*\{", re.M)  # {"completed": ...   /     {   /   [{


RESULT_KEYS = (
    '"output_throughput"',
    '"completed"',
    '"request_throughput"',
    '"total_input_tokens"',
    '"duration"',
    '"mean_ttft_ms"',
    '"median_ttft_ms"',
)


def results(sample: str) -> bool:
    """Whether ``sample`` holds a JSON object of a serving result (one of its keys, even if a wrap cut others)."""
    return starts_object(sample) and any(key in sample for key in RESULT_KEYS)


def starts_object(sample: str) -> bool:
    """Whether a line of ``sample`` starts a JSON object (possibly under lines of text, or in an array)."""
    return _OBJECT_LINE_RE.search(sample) is not None
