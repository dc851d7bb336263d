"""A parser configured in the spec, for a tool that no built-in parser knows (in the spirit of ReFrame's
performance functions): named regular expressions, each with a unit, a ``value`` group and, optionally, what
ties each value to its case (a batch size, M, a config):

    kind: generic
    benchmark:
      patterns:
        # the case in the same line: a (?P<key>...) group
        time_us: {regex: 'Batch size: (?P<key>\\d+), Kernel time: (?P<value>[0-9.]+) us', unit: us}
        # the case on an earlier line: ``key`` is a regex with a (?P<key>...) group, the nearest line above
        kernel_us: {regex: '^Kernel time: (?P<value>[0-9.]+) us', unit: us, key: '^Batch size: (?P<key>\\d+)'}
        # or the name of another pattern: its latest value is the case
        tflops: {regex: 'TFLOP/s: (?P<value>[0-9.]+)', key: m}
        m: {regex: '^M=(?P<value>\\d+)'}

Every match is a row ``(seq, metric, value, unit, line, case_key)``, in the order of the output; ``case_key``
is the key text (a whole number written without ``.0``: ``506.0`` → ``506``), None without a key. ``NaN``,
``nan``, ``inf``, ``-inf`` and ``Infinity`` read alike. A value that is not a number is a problem naming its
line (the match is dropped, the rest are kept).
"""

from __future__ import annotations

import re
from typing import Any

from benchflow.parsing import Format, Notes, ParsedRun, ParseError, lines, to_float

NAME = "patterns"
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # a key that names another pattern


class Compiled:
    """One pattern, compiled: its regex, unit, and how its case is found (own group, key regex or name)."""

    def __init__(
        self, name: str, regex: re.Pattern[str], unit: str, key_regex: re.Pattern[str] | None, key_name: str | None
    ):
        self.name, self.regex, self.unit = name, regex, unit
        self.key_regex, self.key_name = key_regex, key_name
        self.own_key = "key" in regex.groupindex


def compile_key(name: str, key: str) -> re.Pattern[str] | None:
    """A ``key`` that is a regex (with a ``(?P<key>...)`` group); None when it names another pattern."""
    if IDENT_RE.match(key):
        return None
    try:
        regex = re.compile(key)
    except re.error as exc:
        raise ValueError(f"pattern {name!r}: key is not a regular expression: {exc}") from None
    if "key" not in regex.groupindex:
        raise ValueError(f"pattern {name!r}: key needs a named group (?P<key>...) or the name of another pattern")
    return regex


def compile_patterns(patterns: dict[str, dict[str, Any]]) -> dict[str, Compiled]:
    compiled = {}
    for name, pattern in patterns.items():
        try:
            regex = re.compile(pattern["regex"])
        except re.error as exc:
            raise ValueError(f"pattern {name!r}: not a regular expression: {exc}") from None
        if "value" not in regex.groupindex:
            raise ValueError(f"pattern {name!r}: needs a named group (?P<value>...)")
        key = pattern.get("key") or None
        key_regex = compile_key(name, key) if key else None
        key_name = key if key and key_regex is None else None
        if key_name is not None and key_name not in patterns:
            raise ValueError(f"pattern {name!r}: key {key_name!r} is no other pattern (known: {', '.join(patterns)})")
        if key_name == name:
            raise ValueError(f"pattern {name!r}: key names the pattern itself")
        compiled[name] = Compiled(name, regex, pattern.get("unit", "") or "", key_regex, key_name)
    return compiled


def key_text(text: str) -> str:
    """A case key as text: a whole number without its ``.0`` (``506.0`` → ``506``), else stripped."""
    text = text.strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() and abs(number) < 1e15 else text


def detect(text: str) -> bool:
    return False  # needs its patterns: only ever chosen by name


def parse(text: str, marker: str = "ALL_DONE", patterns: dict[str, dict[str, Any]] | None = None) -> ParsedRun:
    if not patterns:
        raise ParseError("the generic parser needs patterns (benchmark.patterns in the spec)")
    try:
        compiled = compile_patterns(patterns)
    except ValueError as exc:
        raise ParseError(str(exc)) from None
    key_regexes = {p.name: p.key_regex for p in compiled.values() if p.key_regex is not None}
    key_patterns = {p.key_name: compiled[p.key_name].regex for p in compiled.values() if p.key_name is not None}
    latest: dict[str, str] = {}  # pattern name → its key regex's latest key, or a named pattern's latest value
    notes = Notes()
    rows: list[dict[str, Any]] = []
    complete = False
    for number, line in lines(text):
        if line.strip() == marker:
            complete = True
            break
        for name, key_regex in key_regexes.items():  # a key line above the values it keys
            if found := key_regex.search(line):
                latest[f"re:{name}"] = key_text(found["key"])
        for name, regex in key_patterns.items():  # a pattern other patterns name as their key
            if (found := regex.search(line)) and found["value"] is not None:
                latest[name] = key_text(found["value"])
        for pattern in compiled.values():
            for match in pattern.regex.finditer(line):
                try:
                    value = to_float(match["value"])
                except (ValueError, TypeError):
                    notes.problem(
                        number,
                        f"pattern {pattern.name!r} matched a value that is not a number: {str(match['value'])[:60]!r}",
                        dropped=True,
                    )
                    continue
                if pattern.own_key and match["key"] is not None:
                    case: str | None = key_text(match["key"])
                elif pattern.key_regex is not None:
                    case = latest.get(f"re:{pattern.name}")
                elif pattern.key_name is not None:
                    case = latest.get(pattern.key_name)
                else:
                    case = None
                rows.append(
                    {
                        "seq": len(rows),
                        "metric": pattern.name,
                        "value": value,
                        "unit": pattern.unit,
                        "line": number,
                        "case_key": case,
                    }
                )
    return notes.run(NAME, rows, complete)


FORMAT = Format(NAME, detect, parse)
