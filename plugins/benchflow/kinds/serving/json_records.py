"""JSON results as tools save them and as people paste them: one or more objects, one per line (JSONL) or
spread over lines (``indent=2``, or wrapped by a doc), with text above, between or after them, and
``Infinity``/``NaN`` as bare words. Every object that reads is a row; one that does not is a problem that
names its line (a record cut off mid-write at the end of the output: not counted as dropped data twice)."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from typing import Any

from benchflow.kinds.serving.common import finish, from_json, has_figures, json_column
from benchflow.parsing import Notes, ParsedRun

DETECT_CHARS = 64_000
_DECODER = json.JSONDecoder(strict=False)  # strict=False: a newline inside a string (a wrapped paste) reads


def objects(text: str, notes: Notes) -> list[tuple[int, dict[str, Any]]]:
    """``(line, object)`` for every JSON object that starts a line, in order; objects that follow one another
    on a line (a list written on one line: ``[{...}, {...}]``) are read too."""
    found: list[tuple[int, dict[str, Any]]] = []
    start, number, skip_to, size = 0, 0, 0, len(text)
    while start < size:
        cut = text.find("\n", start)
        stop = size if cut < 0 else cut
        number += 1
        line_start, start = start, stop + 1
        if line_start < skip_to:
            continue
        at = _next_object(text, line_start, stop)
        while at is not None:
            read = _read_object(text, at, number, cut < 0, notes)
            if read is None:
                break
            obj, end = read
            found.append((number, obj))
            skip_to = end
            at = _next_object(text, end, stop) if end < stop else None
    return found


def _next_object(text: str, at: int, stop: int) -> int | None:
    while at < stop and text[at] in " \t[,]":
        at += 1
    return at if at < stop and text[at] == "{" else None


def _read_object(text: str, at: int, number: int, last_line: bool, notes: Notes) -> tuple[dict[str, Any], int] | None:
    try:
        obj, end = _DECODER.raw_decode(text, at)
    except json.JSONDecodeError as exc:
        obj, end = _unwrapped(text, at)
        if obj is None:
            cut_off = last_line or exc.pos >= len(text.rstrip())
            what = "a record cut off at the end of the output" if cut_off else f"not a JSON object ({exc.msg})"
            notes.problem(number, f"{what}; dropped", dropped=True)
            return None
    if isinstance(obj, dict) and any("\n" in key for key in obj):  # a key wrapped by a doc: unwrap it
        obj, end = _unwrapped(text, at)
    return (obj, end) if isinstance(obj, dict) else None


def _unwrapped(text: str, at: int) -> tuple[Any, int]:
    """An object wrapped by a doc inside a number or a word: read again with the line breaks taken out,
    up to the first line that ends with ``}`` (at most 200 lines)."""
    end, count = at, 0
    while count < 200:
        cut = text.find("\n", end)
        stop = len(text) if cut < 0 else cut
        count += 1
        if text[end:stop].rstrip().endswith("}"):
            joined = text[at:stop].replace("\r", "").replace("\n", "")
            try:
                obj, _ = _DECODER.raw_decode(joined)
            except json.JSONDecodeError:
                obj = python_dict(joined)
            return (obj, stop) if obj is not None else (None, at)
        if cut < 0:
            return None, at
        end = stop + 1
    return None, at


# inf / nan / -inf as Python prints them in a dict: quoted so that a literal reads (number() reads them back)
_BARE_RE = re.compile(r"(?<=[:\[,(])(\s*)(-?inf|nan)(?=\s*[,\]})])")


def python_dict(text: str) -> dict[str, Any] | None:
    """A result dict as Python prints it (``print(result)``: single quotes, ``inf``, ``None``), else None."""
    if not text.lstrip().startswith("{'"):
        return None
    try:
        obj = ast.literal_eval(_BARE_RE.sub(r"\1'\2'", text.strip()))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def parser(name: str, config_of: Callable[[dict[str, Any]], Any]) -> Callable[..., ParsedRun]:
    def parse(text: str, marker: str = "ALL_DONE") -> ParsedRun:
        notes = Notes()
        rows = []
        found = objects(text, notes)
        for line, obj in found:
            if pytorch_metric(obj) is not None:
                continue  # read below, all of a file's metric records as one row
            row = from_json(obj, config_of(obj))
            if has_figures(row):  # else another JSON object (a config dump), not a result
                rows.append(row)
            elif any(json_column(key) is None and isinstance(value, int | float) for key, value in obj.items()):
                notes.warn(line, "a JSON object without any result key; not a row")
        rows += pytorch_rows([obj for _, obj in found if pytorch_metric(obj) is not None], config_of)
        if not rows and not notes.problems:
            notes.problem(None, "no JSON result object found", dropped=False)
        return notes.run(name, rows, bool(rows) and not notes.problems)

    return parse


def pytorch_metric(obj: dict[str, Any]) -> tuple[str, Any] | None:
    """``(name, value)`` of a record in vLLM's PyTorch benchmark format (``SAVE_TO_PYTORCH_BENCHMARK_FORMAT``:
    one record per latency statistic, ``{"metric": {"name": ..., "benchmark_values": [...]}}``), else None."""
    metric = obj.get("metric")
    if not isinstance(metric, dict) or not isinstance(metric.get("name"), str):
        return None
    values = metric.get("benchmark_values")
    return metric["name"], values[0] if isinstance(values, list) and values else None


def pytorch_rows(found: list[dict[str, Any]], config_of: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """One row per run from its metric records: each record's statistic, plus the run's other results
    (``metric.extra_info``) and its arguments (``benchmark.extra_info.args``). A statistic seen again starts the
    next run's row."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for obj in found:
        name, value = pytorch_metric(obj) or ("", None)
        if not rows or name in seen:
            rows.append(_pytorch_row(obj, config_of))
            seen = set()
        seen.add(name)
        column = json_column(name)
        if column is not None and isinstance(value, int | float) and not isinstance(value, bool):
            rows[-1][column] = value
    return [finish(row) for row in rows]


def _pytorch_row(obj: dict[str, Any], config_of: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    bench = obj.get("benchmark")
    info = bench.get("extra_info") if isinstance(bench, dict) else None
    args = info.get("args") if isinstance(info, dict) else None
    if isinstance(args, dict):
        merged.update(args)
    extra = obj["metric"].get("extra_info")
    if isinstance(extra, dict):
        merged.update(extra)
    return from_json(merged, config_of(merged))


def head(text: str) -> str:
    """The first :data:`DETECT_CHARS` characters (a bounded copy, for detection)."""
    return text[:DETECT_CHARS]


_OBJECT_LINE_RE = re.compile(r"^[ \t]*\[?[ \t]*\{", re.M)  # {"completed": ...   /     {   /   [{


_RESULT_KEYS = (
    '"output_throughput"',
    '"completed"',
    '"request_throughput"',
    '"total_input_tokens"',
    '"duration"',
    '"mean_ttft_ms"',
    '"median_ttft_ms"',
    '"benchmark_values"',
)
RESULT_KEYS = _RESULT_KEYS + tuple(key.replace('"', "'") for key in _RESULT_KEYS)  # also as Python prints a dict


def results(sample: str) -> bool:
    """Whether ``sample`` holds a JSON object of a serving result (one of its keys, even if a wrap cut others)."""
    return starts_object(sample) and any(key in sample for key in RESULT_KEYS)


def starts_object(sample: str) -> bool:
    """Whether a line of ``sample`` starts a JSON object (possibly under lines of text, or in an array)."""
    return _OBJECT_LINE_RE.search(sample) is not None


# Keys only vLLM's saved results have (json_keys.tsv): its total throughput, the run's model and burstiness, E2EL
# statistics, and the PyTorch benchmark format's metric records.
VLLM_KEYS = ('"total_token_throughput"', '"model_id"', '"burstiness"', '_e2el_ms"', '"benchmark_values"')


def vllm_keys(sample: str) -> bool:
    """Whether ``sample`` holds a key only vLLM saves (else the record is read as SGLang's)."""
    return any(key in sample for key in VLLM_KEYS)
