"""Which config: successive halving over a config space, by the load search's answer per GPU. Pure: no Airflow, no
warehouse; the search engine (:mod:`benchflow.searches.engine`, with :mod:`benchflow.searches.config_campaign`) feeds
it probe results and stores what it says.

A config is measured by one load search (a probe run of the campaign with that config), whose answer is a bracket:
the highest load within the SLO (``pass``) and the lowest above it that was not (``fail``). The most the config holds
lies in ``[pass, fail)`` (``[pass, fail - 1]`` for concurrency, an integer), so the objective, load per GPU, is an
interval: the bracket over the config's GPUs. A bracket censored at an end of the range is an open interval, never
an exact figure: ``≥ top`` when the range's high end passed (no more was asked: it may hold far more), ``< bottom``
when even its low end failed (it holds none of the range). Only a config that held a load can be best; when none did,
the answer says so and names none.

The rounds spend where the answer is decided. Round 1 measures every config at the cheapest level (few prompts per
probe, a coarse precision, one repeat). Each later round measures again, one level finer, only the configs whose
interval still reaches the leader's (the config with the highest lower bound): the others are ``worse`` and cost
nothing more. The search ends when the leader is alone and measured at the finest level (the spec's own settings),
when nothing that overlaps can be measured finer, or when the budget (probes, seconds) is spent. A config whose probe
failed (a server that crashed or never became ready, a search that gave no answer) is ``failed``, with the error,
and never silently dropped.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from benchflow.searches.rounds import Rounds

Verdict = Literal["best", "not distinguishable from best", "worse", "held none of the range", "failed", "not measured"]


@dataclass(frozen=True)
class Level:
    """A round's probe settings: the load search's prompts per probe, precision and repeats."""

    prompts_per_probe: int
    precision: float
    repeats: int

    def settings(self) -> dict[str, Any]:
        return asdict(self)


def levels(prompts: int, precision: float, repeats: int, fewest_prompts: int, count: int = 3) -> list[Level]:
    """``count`` levels from cheap to the spec's own settings (the last): each level before halves the prompts
    (never below ``fewest_prompts``, what the SLO's percentile needs), doubles the precision (at most 0.5) and
    measures once."""
    out = [Level(prompts, precision, repeats)]
    for _ in range(count - 1):
        last = out[0]
        cheaper = Level(max(fewest_prompts, last.prompts_per_probe // 2), min(0.5, last.precision * 2), 1)
        if cheaper == last:
            break
        out.insert(0, cheaper)
    return out


@dataclass
class Measure:
    """One load search of a config: its bracket, what it cost, and where it came from."""

    level: int
    pass_load: float | None
    fail_load: float | None
    probes: int
    prompts: int
    run_id: str
    reason: str = ""
    figures: dict[str, Any] = field(default_factory=dict)  # at the pass load: throughput, TPOT, energy, verdict


@dataclass(frozen=True)
class Interval:
    """Load per GPU: ``[low, high]``; ``high`` is infinite when the range's top passed (``≥ low``), and ``held`` is
    False when even the range's bottom failed (``< high``)."""

    low: float
    high: float
    held: bool = True

    @property
    def open_above(self) -> bool:
        return math.isinf(self.high)

    def text(self) -> str:
        if not self.held:
            return f"< {self.high:g}"
        if self.open_above:
            return f"≥ {self.low:g}"
        return f"{self.low:g}" if self.low == self.high else f"{self.low:g}–{self.high:g}"


@dataclass
class ConfigSearch(Rounds):
    """The search's state (JSON-able with :meth:`to_json`): the configs with their GPUs, the levels, the range
    the load search covers, the budget, and every measure, failure and round so far."""

    gpus: dict[str, int]
    levels: list[Level]
    low: float
    high: float
    integer: bool = True
    max_probes: int = 200  # probe runs of single configs, reused ones not counted
    max_seconds: float = 6 * 3600.0
    measures: dict[str, list[Measure]] = field(default_factory=dict)
    reused: dict[str, str] = field(default_factory=dict)

    # -- what is known -----------------------------------------------------------------------------------

    def latest(self, name: str) -> Measure | None:
        found = self.measures.get(name) or []
        return max(found, key=lambda m: m.level) if found else None

    def interval(self, name: str) -> Interval | None:
        """The config's load per GPU, from its finest measure (None: not measured)."""
        measure = self.latest(name)
        if measure is None:
            return None
        step, gpus = (1.0 if self.integer else 0.0), self.gpus[name]
        if measure.pass_load is None:  # even the low end failed: below the range, by how much is unknown
            return Interval(0.0, self.low / gpus, held=False)
        if measure.fail_load is None:  # the high end passed: no more was asked, it may hold far more
            return Interval(measure.pass_load / gpus, math.inf)
        low, high = measure.pass_load, max(measure.pass_load, measure.fail_load - step)
        return Interval(low / gpus, high / gpus)

    def leader(self) -> str | None:
        """The config with the highest lower bound among those that held a load (None: none did)."""
        known = {n: i for n in self.gpus if n not in self.failed and (i := self.interval(n)) is not None and i.held}
        if not known:
            return None
        return max(known, key=lambda n: (known[n].low, known[n].high, -list(self.gpus).index(n)))

    def contenders(self) -> list[str]:
        """The measured configs whose interval reaches the leader's lower bound (the leader among them)."""
        lead = self.leader()
        if lead is None:
            return []
        floor = self.interval(lead).low  # type: ignore[union-attr]
        return [n for n in self.gpus if n not in self.failed and (i := self.interval(n)) and i.high >= floor]

    def verdict(self, name: str) -> Verdict:
        if name in self.failed:
            return "failed"
        interval = self.interval(name)
        if interval is None:
            return "not measured"
        if name == self.leader():
            return "best"
        if name in self.contenders():
            return "not distinguishable from best"
        return "worse" if self.leader() is not None else "held none of the range"

    def status(self) -> str:
        """running | done | none (every config measured, none held a load of the range) | budget (spent before the
        answer was decided) | failed (no config measured)."""
        if self.outstanding:
            return "running"
        measured = [n for n in self.gpus if n not in self.failed and self.interval(n) is not None]
        if len(measured) + len(self.failed) < len(self.gpus) and not self.stopped:
            return "running"
        if not measured:
            return "failed"
        if self.stopped:
            return "budget" if self.leader() else "none"
        if self._refinable():
            return "running"
        return "done" if self.leader() else "none"

    def _refinable(self) -> list[str]:
        """Contenders not yet measured at the finest level; with no leader (no config held a load), every measured
        config not yet at the finest level: a cheap probe's failure is confirmed before the answer says none held."""
        last = len(self.levels) - 1
        if self.leader() is None:
            candidates = [n for n in self.gpus if n not in self.failed and self.interval(n) is not None]
        else:
            candidates = self.contenders()
        return [n for n in candidates if self.latest(n).level < last]  # type: ignore[union-attr]

    def _refinements(self) -> list[tuple[str, int]]:
        """The contenders one level finer; a leader alone goes straight to the finest level (nothing is left to
        tell apart: only its own figure is refined)."""
        last, refinable = len(self.levels) - 1, self._refinable()
        if self.leader() is None or self.contenders() == refinable == [self.leader()]:
            return [(n, last) for n in refinable]
        return [(n, self.latest(n).level + 1) for n in refinable]  # type: ignore[union-attr]

    # -- the rounds ----------------------------------------------------------------------------------------

    def next_round(self, now: float | None = None) -> list[tuple[str, int]]:
        """The (config, level) pairs to measure now; [] when the search is over (see :meth:`status`)."""
        now = self._now(now)
        if self.status() != "running":
            return []
        unmeasured = [n for n in self.gpus if n not in self.failed and self.interval(n) is None]
        picks = [(n, 0) for n in unmeasured] or self._refinements()
        left = self.max_probes - self.probes
        if self._elapsed(now) >= self.max_seconds:
            self.stopped = f"budget spent (seconds: {self.max_seconds:.0f} s passed)"
            return []
        if left < len(picks):
            picks = picks[: max(left, 0)]
            if not picks:
                self.stopped = f"budget spent (probes: {self.max_probes} used)"
                return []
        self._begin([n for n, _ in picks])
        return picks

    def record(self, name: str, measure: Measure | None, error: str = "") -> None:
        """A probe's measure; None: it failed, and ``error`` says how."""
        self._end(name)
        if measure is None:
            self.failed[name] = error or "the probe gave no answer"
        else:
            self.measures.setdefault(name, []).append(measure)

    def seed(self, name: str, measure: Measure, source: str) -> None:
        """A measure an earlier probe made of the same config, payload and GPU model: used like a probe's, free."""
        self.measures.setdefault(name, []).append(measure)
        self.reused[name] = source

    # -- the answer ----------------------------------------------------------------------------------------

    def ranking(self) -> list[dict[str, Any]]:
        """Every config, best first: its verdict, interval, GPUs, levels measured and the figures at its pass load."""
        rows = []
        for name in self.gpus:
            interval, measure = self.interval(name), self.latest(name)
            rows.append(
                {
                    "config": name,
                    "verdict": self.verdict(name),
                    "gpus": self.gpus[name],
                    "low": interval.low if interval else None,
                    "high": interval.high if interval and not interval.open_above else None,
                    "load": interval.text() if interval else None,
                    "open_above": bool(interval and interval.open_above),
                    "pass_load": measure.pass_load if measure else None,
                    "fail_load": measure.fail_load if measure else None,
                    "level": measure.level if measure else None,
                    "probes": sum(m.probes for m in self.measures.get(name, [])),
                    "prompts": sum(m.prompts for m in self.measures.get(name, [])),
                    "runs": [m.run_id for m in self.measures.get(name, [])],
                    "rounds": [i + 1 for i, names in enumerate(self.rounds) if name in names],
                    "error": self.failed.get(name, ""),
                    "reused_from": self.reused.get(name),
                    **(measure.figures if measure else {}),
                }
            )
        order = {
            "best": 0,
            "not distinguishable from best": 1,
            "worse": 2,
            "held none of the range": 3,
            "not measured": 4,
            "failed": 5,
        }
        return sorted(rows, key=lambda r: (order[r["verdict"]], -(r["low"] if r["low"] is not None else -1)))

    def result(self) -> dict[str, Any]:
        ranking = self.ranking()
        lead = self.leader()
        return {
            "status": self.status(),
            "best": lead,
            "tied": [r["config"] for r in ranking if r["verdict"] == "not distinguishable from best"],
            "ranking": ranking,
            "pareto": pareto(ranking),
            "rounds": len(self.rounds),
            "probes": self.probes,
            "search_probes": sum(r["probes"] for r in ranking),
            "prompts": sum(r["prompts"] for r in ranking),
            "reused": len(self.reused),
            "stopped": self.stopped,
            "summary": self.summary(lead),
        }

    def summary(self, lead: str | None) -> str:
        status = self.status()
        if lead is None:
            measured = [n for n in self.gpus if n not in self.failed and self.interval(n) is not None]
            if not measured:
                return f"{status}: no config was measured ({len(self.failed)} failed)"
            text = (
                f"no config holds the SLO within the range: {len(measured)} measured, none held its lowest load "
                f"({self.low:g}), {len(self.failed)} failed"
            )
            return text + (f"; {self.stopped}" if self.stopped else "") + ("" if status == "none" else f" ({status})")
        interval = self.interval(lead)
        assert interval is not None
        tied = [n for n in self.contenders() if n != lead]
        gpus = self.gpus[lead]
        text = f"best {lead}: {interval.text()} load per GPU ({gpus} GPU{'s' if gpus > 1 else ''})"
        if interval.open_above:
            text += " (it held the range's top: at least that)"
        if tied:
            shown = [f"{n} ({self.interval(n).text()})" for n in tied]  # type: ignore[union-attr]
            text += f"; not distinguishable from it: {', '.join(shown)}"
        worse = sum(self.verdict(n) == "worse" for n in self.gpus)
        rounds = f"{len(self.rounds)} round{'' if len(self.rounds) == 1 else 's'}"
        text += f"; {worse} worse, {len(self.failed)} failed; {rounds}, {self.probes} probe runs"
        validity = self.latest(lead).figures.get("validity")  # type: ignore[union-attr]
        if validity not in (None, "ok"):  # the ranking stands; its figures were measured beside other load
            text += "; the best one's rows were not all judged ok (noisy, throttled or contended): not a valid figure"
        return text + (f"; {self.stopped}" if self.stopped else "") + ("" if status == "done" else f" ({status})")

    # -- JSON ------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConfigSearch:
        data = {k: v for k, v in data.items() if k != "meta"}
        data["levels"] = [Level(**level) for level in data["levels"]]
        data["measures"] = {n: [Measure(**m) for m in ms] for n, ms in data["measures"].items()}
        return cls(**data)


def pareto(ranking: list[dict[str, Any]]) -> list[str]:
    """The configs no other beats on both throughput per GPU and per-user speed (tokens/s per user), each measured
    at its own pass load; configs without both figures are left out."""
    points = [
        (r["config"], r["tokens_per_s_per_gpu"], r["tokens_per_s_per_user"])
        for r in ranking
        if r.get("tokens_per_s_per_gpu") is not None and r.get("tokens_per_s_per_user") is not None
    ]
    return [
        name for name, x, y in points if not any((x2 >= x and y2 >= y) and (x2 > x or y2 > y) for _, x2, y2 in points)
    ]
