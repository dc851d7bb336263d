"""A parser configured in the spec, for a tool that no built-in parser knows (in the spirit of ReFrame's
performance functions): named regular expressions, each with a unit and a ``value`` group.

    benchmark:
      parser: generic
      patterns:
        decode_tok_s: {regex: 'decode: (?P<value>[0-9.]+) tok/s', unit: tok/s}
        p99_latency:  {regex: 'p99 latency (?P<value>[0-9.]+) ms', unit: ms}

Every match is a row ``(seq, metric, value, unit, line)``, in the order of the output.
"""

from __future__ import annotations

import re
from typing import Any

from benchflow.parsing import Format, ParsedRun, ParseError

NAME = "patterns"


def compile_patterns(patterns: dict[str, dict[str, str]]) -> dict[str, tuple[re.Pattern[str], str]]:
    compiled = {}
    for name, pattern in patterns.items():
        try:
            regex = re.compile(pattern["regex"])
        except re.error as exc:
            raise ValueError(f"pattern {name!r}: not a regular expression: {exc}") from None
        if "value" not in regex.groupindex:
            raise ValueError(f"pattern {name!r}: needs a named group (?P<value>...)")
        compiled[name] = (regex, pattern.get("unit", ""))
    return compiled


def detect(text: str) -> bool:
    return False  # needs its patterns: only ever chosen by name


def parse(text: str, marker: str = "ALL_DONE", patterns: dict[str, dict[str, str]] | None = None) -> ParsedRun:
    if not patterns:
        raise ParseError("the generic parser needs patterns (benchmark.patterns in the spec)")
    compiled = compile_patterns(patterns)
    rows: list[dict[str, Any]] = []
    complete = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip() == marker:
            complete = True
            break
        for name, (regex, unit) in compiled.items():
            for match in regex.finditer(line):
                try:
                    value = float(match["value"])
                except ValueError:
                    raise ParseError(f"pattern {name!r} matched a value that is not a number", number, line) from None
                rows.append({"seq": len(rows), "metric": name, "value": value, "unit": unit, "line": number})
    return ParsedRun(NAME, rows, complete, {}, [])


FORMAT = Format(NAME, detect, parse)
