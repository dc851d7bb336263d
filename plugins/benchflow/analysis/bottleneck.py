"""What a run's bottleneck verdicts (``phase_bottlenecks``, drawn by each kind's rules: :mod:`benchflow.kinds.rules`)
say in a line, as ``bench run``, the campaign page and the comparison say them. Each verdict row names its kind, whose
declarations tell how its phases are laid out: its ``group`` (serving: a config) and its load axis
(:meth:`~benchflow.kinds.ResultKind.axis`: concurrency or request rate, a kernel's M)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchflow import kinds
from benchflow.kinds.rules import NO_EVIDENCE


def headlines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per kind of the rows: one line per group (a serving config's verdict at its highest load, the repeats' most
    common one), or, for a kind without groups, one per verdict with the cases that have it (a kernel sweep's M)."""
    out: list[str] = []
    for name in _unique(rows, "kind"):
        kind = kinds.get(str(name))
        mine = [r for r in rows if r.get("kind") == name]
        if kind.group is not None:
            out += [
                _group_line(kind, g, [r for r in mine if r.get(kind.group) == g]) for g in _unique(mine, kind.group)
            ]
        else:
            out += _verdict_lines(kind, mine)
    return out


def same_limiter(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> str | None:
    """The verdict both sides give at their highest load (each side's most common one, as :func:`headlines`
    says it), e.g. ``decode-bound``; None when they differ, a side has none, or it is "not enough evidence"."""
    tops = [_common(_at_top(rows)[1]) for rows in (a, b)]
    return tops[0] if tops[0] is not None and tops[0] == tops[1] and tops[0] != NO_EVIDENCE else None


def _unique(rows: Sequence[Mapping[str, Any]], column: str) -> list[Any]:
    seen: list[Any] = []
    for row in rows:
        if row.get(column) not in seen:
            seen.append(row.get(column))
    return seen


def _at_top(rows: Sequence[Mapping[str, Any]]) -> tuple[str, list[Mapping[str, Any]], float | None]:
    """The rows' load axis (by their kind), the rows at its highest level, and that level (None: no level)."""
    named = [r for r in rows if r.get("kind")]
    if not named:
        return "", list(rows), None
    kind = kinds.get(str(named[0]["kind"]))
    axis = kind.axis(kind.frame([dict(r) for r in rows]))
    loads = [float(r[axis]) for r in rows if _finite(r.get(axis))]
    if not loads:
        return axis, list(rows), None
    return axis, [r for r in rows if _finite(r.get(axis)) and float(r[axis]) == max(loads)], max(loads)


def _finite(value: Any) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and value == value and abs(value) != float("inf")
    )


def _common(rows: Sequence[Mapping[str, Any]]) -> str | None:
    verdicts = [str(r.get("verdict")) for r in rows]
    return max(set(verdicts), key=verdicts.count) if verdicts else None


def _group_line(kind: kinds.ResultKind, group: Any, rows: Sequence[Mapping[str, Any]]) -> str:
    """``bottleneck pd at concurrency 8 (3 of 3 repeats): decode-bound: decode holds 94 % ...``."""
    axis, top, level = _at_top(rows)
    common = _common(top)
    said = next(str(r.get("says")) for r in top if str(r.get("verdict")) == common)
    at = f" at {axis.replace('_', ' ')} {level:g}" if level is not None else ""
    count = sum(str(r.get("verdict")) == common for r in top)
    return f"bottleneck {group}{at} ({count} of {len(top)} repeats): {said}"


def _verdict_lines(kind: kinds.ResultKind, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """``bottleneck: memory-bound at m=1, 2, 4``: each verdict with the cases (the point's values) that have it."""
    axis = kind.axis(kind.frame([dict(r) for r in rows]))
    by_verdict: dict[str, list[str]] = {}
    for row in rows:
        by_verdict.setdefault(str(row.get("verdict")), []).append(_level(row.get(axis)))
    return [f"bottleneck: {verdict} at {axis}={', '.join(levels)}" for verdict, levels in by_verdict.items()]


def _level(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else f"{value}"
