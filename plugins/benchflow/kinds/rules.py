"""The bottleneck rule engine: which part limits a phase, by a kind's rules (data: its ``bottleneck.yaml``, with
thresholds) over the signals the kind gives for the phase (a flat mapping: ``client_core_pct``, ``decode.share``,
``pct_roofline`` ...). It knows no kind: each kind declares its rules file (``ResultKind.rules``) and its signals.

A rules file has ``thresholds`` (name: number) and ``rules``, tried in order. A condition is ``SIGNAL OP VALUE``: SIGNAL
a name the kind gives (a role's figures are ``ROLE.NAME``), OP one of >= > <= <, VALUE a number or a threshold's
name. A rule with ``for_each`` is tried once per role, ``@`` standing for it. ``when`` must all hold, each with its
signal present; ``unless`` conditions are checked only where their signal is present, and one that holds stops the
rule and counts as signals that disagree. ``says`` is the verdict's line, formatted with the signals.

:func:`judge` returns a :class:`Verdict`: the first rule whose conditions all hold names the limiter, with its
line and the evidence (every signal with its value); when none holds, "not enough evidence", saying which
signals were missing and which disagreed. Pure: no I/O beyond reading a rules file once.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

NO_EVIDENCE = "not enough evidence"
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}
_CONDITION = re.compile(r"^\s*([A-Za-z_@][A-Za-z0-9_.@]*)\s*(>=|<=|>|<)\s*([A-Za-z0-9_.+-]+)\s*$")
_FIELD = re.compile(r"\{([A-Za-z_@][A-Za-z0-9_.@]*)(?::([^}]*))?\}")


@dataclass(frozen=True)
class Rule:
    verdict: str
    when: tuple[str, ...]
    says: str
    unless: tuple[str, ...] = ()
    for_each: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rules:
    thresholds: Mapping[str, float]
    rules: tuple[Rule, ...]

    def with_thresholds(self, overrides: Mapping[str, float] | None) -> Rules:
        """These rules with some thresholds changed (a spec's ``bottleneck:``); an unknown name is refused."""
        if not overrides:
            return self
        if unknown := sorted(set(overrides) - set(self.thresholds)):
            raise ValueError(f"unknown bottleneck thresholds {unknown} (known: {', '.join(sorted(self.thresholds))})")
        return Rules({**self.thresholds, **overrides}, self.rules)


@dataclass(frozen=True)
class Verdict:
    verdict: str  # e.g. decode-bound, kv-bound, client-bound, not enough evidence
    limiter: str | None  # the role or part named (decode, client, router ...); None without a verdict
    says: str  # the verdict's line, with its figures
    evidence: dict[str, Any] = field(default_factory=dict)  # every signal given, with its value

    def columns(self) -> dict[str, Any]:
        """The verdict's columns of a ``phase_bottlenecks`` row (its evidence as JSON)."""
        evidence = json.dumps(self.evidence, sort_keys=True, default=str)
        return {"verdict": self.verdict, "limiter": self.limiter, "says": self.says, "evidence": evidence}


def _read(path: Path) -> Rules:
    import yaml

    data = yaml.safe_load(path.read_text())
    thresholds = {str(k): float(v) for k, v in (data.get("thresholds") or {}).items()}
    rules = tuple(
        Rule(
            verdict=str(r["verdict"]),
            when=tuple(r.get("when") or ()),
            says=str(r.get("says") or r["verdict"]),
            unless=tuple(r.get("unless") or ()),
            for_each=tuple(r.get("for_each") or ()),
        )
        for r in data.get("rules") or ()
    )
    for rule in rules:
        for text in (*rule.when, *rule.unless):
            _parse(text, thresholds)
    return Rules(thresholds, rules)


@cache
def read_rules(path: Path) -> Rules:
    """The rules and thresholds of a kind's rules file, each condition checked as it is read."""
    return _read(path)


def _parse(text: str, thresholds: Mapping[str, float]) -> tuple[str, Callable[[float, float], bool], float]:
    match = _CONDITION.match(text)
    if match is None:
        raise ValueError(f"bottleneck rule condition {text!r}: expected 'SIGNAL OP VALUE'")
    signal, op, value = match.groups()
    if value in thresholds:
        return signal, _OPS[op], thresholds[value]
    try:
        return signal, _OPS[op], float(value)
    except ValueError:
        raise ValueError(f"bottleneck rule condition {text!r}: {value!r} is neither a number nor a threshold") from None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value == value else None


def _holds(text: str, signals: Mapping[str, Any], thresholds: Mapping[str, float]) -> bool | None:
    """True/False, or None when the signal is missing."""
    signal, op, limit = _parse(text, thresholds)
    value = _number(signals.get(signal))
    return None if value is None else op(value, limit)


def say(template: str, signals: Mapping[str, Any]) -> str:
    """``template`` with ``{signal:spec}`` fields filled (signal names may hold dots); a missing one is ``?``."""

    def fill(match: re.Match[str]) -> str:
        value = signals.get(match.group(1))
        if value is None:
            return "?"
        try:
            return format(value, match.group(2) or "")
        except (TypeError, ValueError):
            return str(value)

    return _FIELD.sub(fill, template)


def _expand(rule: Rule) -> list[tuple[str | None, Rule]]:
    if not rule.for_each:
        return [(None, rule)]
    out: list[tuple[str | None, Rule]] = []
    for role in rule.for_each:

        def sub(text: str, role: str = role) -> str:
            return text.replace("@", role)

        out.append(
            (role, Rule(sub(rule.verdict), tuple(map(sub, rule.when)), sub(rule.says), tuple(map(sub, rule.unless))))
        )
    return out


def judge(signals: Mapping[str, Any], given: Rules, context: str = "") -> Verdict:
    """The first rule that holds over ``signals``, else "not enough evidence" with what was missing or disagreed.
    ``context`` (the figures per role, say) is appended to the verdict's line."""
    missing: list[str] = []
    disagree: list[str] = []
    for rule in given.rules:
        for role, concrete in _expand(rule):
            held = [_holds(c, signals, given.thresholds) for c in concrete.when]
            if None in held:
                missing += [c.split()[0] for c, h in zip(concrete.when, held, strict=True) if h is None]
                continue
            if not all(held):
                continue
            against = [c for c in concrete.unless if _holds(c, signals, given.thresholds)]
            if against:
                disagree.append(f"{concrete.verdict} but {', '.join(against)}")
                continue
            line = say(concrete.says, signals)
            limiter = None if concrete.verdict == NO_EVIDENCE else role or concrete.verdict.split("-")[0]
            return Verdict(concrete.verdict, limiter, _join(line, context), dict(signals))
    why = f"signals disagree ({'; '.join(disagree)})" if disagree else _missing(missing, signals)
    return Verdict(NO_EVIDENCE, None, _join(f"{NO_EVIDENCE}: {why}", context), dict(signals))


def _missing(missing: Sequence[str], signals: Mapping[str, Any]) -> str:
    if not signals or all(v is None for v in signals.values()):
        return "no figures for the phase"
    if signals.get("note"):
        return str(signals["note"])
    roles = {name.split(".")[0] for name in signals if "." in name}  # the parts the phase has (its server roles)
    names = sorted(n for n in set(missing) if "." not in n or n.split(".")[0] in roles)  # not another layout's
    return "no rule holds" + (f" (missing: {', '.join(names[:8])})" if names else "")


def _join(line: str, context: str) -> str:
    return f"{line}; {context}" if context else line
