"""Which payload commit made a case slower: a k-ary search over the commits between a good and a bad one.

Pure: no Airflow, no warehouse. The search engine (:mod:`benchflow.searches.engine`) drives :class:`Bisection` as a
state machine, one round at a time (``next_round()`` → run the probes, ``record()`` each → ``next_round()`` …;
``result()`` at the end), and carries it between steps as the small JSON dict of ``to_json()``.

* **Confirm** (round 1): ``good`` and ``bad`` are measured with repeats; unless bad is worse beyond noise
  (the 95 % interval of bad/good lies wholly on the worse side of 1) and by at least ``min_change``, the
  bisection ends ``not_reproduced`` with that comparison as its evidence.
* **Classify** a probe against both ends (:func:`classify`), each with Welch's t on the logs
  (:func:`benchflow.analysis.stats.compare`): ``same_as_bad`` when, seen from each end, its 95 % interval lies wholly
  past the geometric midpoint of good and bad towards bad; ``same_as_good`` when both lie wholly on good's
  side of it; otherwise ``unknown`` (too few repeats to tell, or a probe halfway). An unknown commit is
  probed again (``repeats`` more values) until it has ``max_samples``; then it is skipped, like
  ``git bisect skip``.
* **Narrow**: with ``parallel`` = k hosts, each round probes k commits that split the suspect range
  (last good, first bad] into k+1 equal parts, unknown commits first, known ones never. The search ends when
  the first bad commit's parent is known good, or when the budget (probe runs, rounds, seconds) is spent,
  with the narrowest range reached. Without unknowns it takes 1 + ⌈log_{k+1} N⌉ rounds for N commits.

Measurements from earlier runs (same payload commit, same GPU model, valid rows) enter with :meth:`seed` and
are used like probes without costing any.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from benchflow.analysis.stats import CONFIDENCE, Comparison, compare
from benchflow.searches.rounds import Rounds

Better = Literal["higher", "lower"]
Verdict = Literal["same_as_good", "same_as_bad", "unknown"]
Status = Literal["running", "not_reproduced", "found", "range", "failed"]
TEST = "Welch t on log values, 95 % interval"
STATE_VERSION = 3


@dataclass(frozen=True)
class Ratio:
    """``b / a`` of the means with its interval and Welch's p; ``n_a``, ``n_b`` values on each side."""

    ratio: float
    low: float
    high: float
    p_value: float
    n_a: int
    n_b: int

    @classmethod
    def of(cls, comparison: Comparison) -> Ratio:
        c = comparison
        return cls(c.ratio, c.ratio_low, c.ratio_high, c.p_value, c.a.n, c.b.n)

    def worse(self, better: Better) -> bool:
        """The whole interval lies on the worse side of 1."""
        return self.low > 1 if better == "lower" else self.high < 1

    def improved(self, better: Better) -> bool:
        """The whole interval lies on the better side of 1."""
        return self.high < 1 if better == "lower" else self.low > 1

    def text(self) -> str:
        spread = f"95 % CI {self.low:.3f}–{self.high:.3f}, p={self.p_value:.2g}"
        return f"{self.ratio:.3f} ({spread}, n={self.n_a}/{self.n_b})"


@dataclass(frozen=True)
class ProbeVerdict:
    """A probe against both ends: ``vs_good`` is probe/good, ``vs_bad`` probe/bad (None: too few values)."""

    verdict: Verdict
    vs_good: Ratio | None
    vs_bad: Ratio | None
    n: int
    reason: str
    test: str = TEST


@dataclass(frozen=True)
class Confirmation:
    """Whether bad is worse than good beyond noise and by ``min_change``; ``ratio`` is bad/good."""

    reproduced: bool
    ratio: Ratio | None
    reason: str
    test: str = TEST


@dataclass(frozen=True)
class Budget:
    """Limits of one bisection: probe runs (confirm's two included), rounds (confirm's included), seconds."""

    probes: int = 40
    rounds: int = 12
    seconds: float = 6 * 3600.0


def _values(samples: Sequence[float]) -> list[float]:
    return [float(v) for v in samples if v is not None and math.isfinite(float(v)) and float(v) > 0]


def side_of(ratio: Ratio, threshold: float, better: Better) -> int:
    """+1 when the whole interval lies on the worse side of ``threshold``, -1 on the better side, 0 when it
    contains it."""
    if ratio.low > threshold:
        return 1 if better == "lower" else -1
    if ratio.high < threshold:
        return -1 if better == "lower" else 1
    return 0


def classify(
    probe: Sequence[float],
    good: Sequence[float],
    bad: Sequence[float],
    better: Better,
    confidence: float = CONFIDENCE,
) -> ProbeVerdict:
    """Which end a probe is nearer, beyond noise: the midpoint rule.

    With R = bad/good and its geometric midpoint √R, ``same_as_bad`` when probe/good's interval lies wholly
    beyond √R on the worse side and probe/bad's wholly beyond 1/√R on the worse side (from each end, the
    probe is past the midpoint towards bad); ``same_as_good`` when both lie wholly on the better side; else
    ``unknown``: an interval contains the midpoint (too few repeats, or the probe is halfway). Deciding
    against the midpoint, not against 1, keeps a margin of half the regression: an end whose few repeats
    came out a little high or low does not turn every probe into an unknown. Needs 2 values on every side.
    """
    probe, good, bad = _values(probe), _values(good), _values(bad)
    if min(len(probe), len(good), len(bad)) < 2:
        return ProbeVerdict("unknown", None, None, len(probe), "fewer than 2 values on a side: more repeats")
    vs_good = Ratio.of(compare(good, probe, better, confidence))
    vs_bad = Ratio.of(compare(bad, probe, better, confidence))
    ends = compare(good, bad, better, confidence).ratio
    midpoint = math.sqrt(ends)
    if side_of(Ratio(ends, ends, ends, 0.0, 0, 0), 1.0, better) != 1:
        return ProbeVerdict("unknown", vs_good, vs_bad, len(probe), "bad is not worse than good: no midpoint")
    sides = (side_of(vs_good, midpoint, better), side_of(vs_bad, 1 / midpoint, better))
    if sides == (1, 1):
        return ProbeVerdict("same_as_bad", vs_good, vs_bad, len(probe), "past the midpoint towards bad")
    if sides == (-1, -1):
        return ProbeVerdict("same_as_good", vs_good, vs_bad, len(probe), "short of the midpoint, on good's side")
    return ProbeVerdict("unknown", vs_good, vs_bad, len(probe), "an interval contains the midpoint: more repeats")


def confirm(
    good: Sequence[float],
    bad: Sequence[float],
    better: Better,
    min_change: float = 0.05,
    confidence: float = CONFIDENCE,
) -> Confirmation:
    """Reproduced when bad/good's interval lies wholly on the worse side of 1 and the change is at least
    ``min_change`` (the regression check's rule); otherwise the comparison is the evidence why not."""
    good, bad = _values(good), _values(bad)
    if len(good) < 2 or len(bad) < 2:
        return Confirmation(False, None, f"too few values to compare: {len(good)} good, {len(bad)} bad (2 needed)")
    comparison = compare(good, bad, better, confidence)
    ratio = Ratio.of(comparison)
    change = (ratio.ratio - 1) if better == "lower" else (1 - ratio.ratio)
    if not ratio.worse(better):
        return Confirmation(False, ratio, "not reproduced: " + comparison.verdict("bad"))
    if change < min_change:
        return Confirmation(
            False, ratio, f"not reproduced: bad is worse by {100 * change:.1f} %, under {100 * min_change:.0f} %"
        )
    return Confirmation(True, ratio, "reproduced: " + comparison.verdict("bad"))


def split_points(positions: Sequence[int], lo: int, hi: int, slots: int) -> list[int]:
    """Up to ``slots`` of ``positions`` (inside (lo, hi)) that cut (lo, hi] into slots+1 equal parts: the
    candidate nearest each cut, never one twice."""
    free = sorted(p for p in positions if lo < p < hi)
    if len(free) <= slots:
        return free
    picks: list[int] = []
    for j in range(1, slots + 1):
        target = lo + (hi - lo) * j // (slots + 1)
        best = min((p for p in free if p not in picks), key=lambda p: (abs(p - target), p))
        picks.append(best)
    return sorted(picks)


@dataclass
class Bisection(Rounds):
    """The search's whole state; every field is JSON-able (``to_json``/``from_json``).

    Positions: 0 is ``good``, i is ``commits[i - 1]``; ``commits[-1]`` is ``bad`` (as
    :func:`benchflow.payloads.commits_between` returns them)."""

    good: str
    commits: list[str]
    better: Better
    repeats: int = 5
    max_samples: int = 15
    parallel: int = 1
    min_change: float = 0.05
    budget: Budget = field(default_factory=Budget)
    samples: dict[str, list[float]] = field(default_factory=dict)
    reused: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.commits or self.good in self.commits or len(set(self.commits)) != len(self.commits):
            raise ValueError("commits must be the distinct commits after good, bad last")
        if self.repeats < 2 or self.max_samples < self.repeats or self.parallel < 1:
            raise ValueError("repeats >= 2, max_samples >= repeats and parallel >= 1 are needed")
        if self.better not in ("higher", "lower"):
            raise ValueError(f"better is 'higher' or 'lower', not {self.better!r}")
        self._position = {sha: i for i, sha in enumerate([self.good, *self.commits])}
        self._verdicts: dict[tuple[str, int, int, int], ProbeVerdict] = {}  # values only grow: counts key them
        self._confirmations: dict[tuple[int, int], Confirmation] = {}

    @property
    def bad(self) -> str:
        return self.commits[-1]

    def sha(self, position: int) -> str:
        return self.good if position == 0 else self.commits[position - 1]

    # -- feeding it --------------------------------------------------------------------------------------

    def seed(self, sha: str, samples: Sequence[float], source: str) -> None:
        """Values measured by an earlier run (``source`` names it); used like a probe's, costing none. Never for
        the two ends: whether the regression reproduces is measured by the bisection itself, at one time."""
        if sha not in self._position or sha in self.outstanding:
            raise ValueError(f"{sha}: not a commit of this bisection, or being probed")
        if sha in (self.good, self.bad):
            raise ValueError(f"{sha}: an end of the bisection, measured by its confirm step, never reused")
        values = _values(samples)
        if values:
            self.samples.setdefault(sha, []).extend(values)
            self.reused[sha] = source

    def record(self, sha: str, samples: Sequence[float]) -> None:
        """A probe's values; none (the run failed or its rows were invalid) skips the commit."""
        self._end(sha)
        values = _values(samples)
        if values:
            self.samples.setdefault(sha, []).extend(values)
        else:
            self.failed[sha] = "the probe gave no valid values"
            if sha in (self.good, self.bad):
                end = "good" if sha == self.good else "bad"
                self.stopped = f"could not measure {end} ({sha[:12]}): the probe gave no valid values"

    # -- what is known -----------------------------------------------------------------------------------

    def confirmation(self) -> Confirmation | None:
        """None until both ends have been measured."""
        ends = (self.good, self.bad)
        if any(e in self.outstanding for e in ends) or any(len(self.samples.get(e, [])) < 2 for e in ends):
            return None
        key = (len(self.samples[self.good]), len(self.samples[self.bad]))
        if key not in self._confirmations:
            good, bad = self.samples[self.good], self.samples[self.bad]
            self._confirmations[key] = confirm(good, bad, self.better, self.min_change)
        return self._confirmations[key]

    def verdict(self, sha: str) -> ProbeVerdict | None:
        """A commit's verdict from all its values so far (None: never measured)."""
        if sha == self.good or sha == self.bad:
            kind: Verdict = "same_as_good" if sha == self.good else "same_as_bad"
            return ProbeVerdict(kind, None, None, len(self.samples.get(sha, [])), "an end of the bisection")
        if sha not in self.samples:
            return None
        good, bad = self.samples.get(self.good, []), self.samples.get(self.bad, [])
        key = (sha, len(self.samples[sha]), len(good), len(bad))
        if key not in self._verdicts:
            self._verdicts[key] = classify(self.samples[sha], good, bad, self.better)
        return self._verdicts[key]

    def _state(self, position: int) -> str:
        """good, bad, pending (unknown: more repeats), skipped (unknown at the limit, or failed), untested."""
        sha = self.sha(position)
        if sha in self.failed:
            return "skipped"
        found = self.verdict(sha)
        if found is None:
            return "untested"
        if found.verdict == "unknown":
            return "pending" if len(self.samples[sha]) < self.max_samples else "skipped"
        return "good" if found.verdict == "same_as_good" else "bad"

    def suspect_range(self) -> tuple[int, int]:
        """(last known good, first known bad) positions: the first bad commit lies in (lo, hi]."""
        states = {p: self._state(p) for p in range(1, len(self.commits))}
        hi = min([p for p, s in states.items() if s == "bad"] + [len(self.commits)])
        lo = max([p for p, s in states.items() if s == "good" and p < hi] + [0])
        return lo, hi

    # -- the rounds --------------------------------------------------------------------------------------

    def status(self) -> Status:
        if self.good in self.failed or self.bad in self.failed:
            return "failed"
        confirmation = self.confirmation()
        if confirmation is None:
            return "failed" if self.stopped and not self.outstanding else "running"
        if not confirmation.reproduced:
            return "not_reproduced"
        lo, hi = self.suspect_range()
        if hi == lo + 1:
            return "found"
        if self.outstanding or (not self.stopped and self._candidates(lo, hi)):
            return "running"
        return "range"

    def _candidates(self, lo: int, hi: int) -> list[int]:
        return [p for p in range(lo + 1, hi) if self._state(p) in ("pending", "untested")]

    def next_round(self, now: float | None = None) -> list[str]:
        """The commits to probe now (each with ``repeats`` repeats); [] when the bisection is over."""
        now = self._now(now)
        if self.status() != "running":
            return []
        left = self.budget.probes - self.probes
        spent = [
            (len(self.rounds) >= self.budget.rounds, f"rounds: {self.budget.rounds} used"),
            (left <= 0, f"probes: {self.budget.probes} used"),
            (self._elapsed(now) >= self.budget.seconds, f"seconds: {self.budget.seconds:.0f} s passed"),
        ]
        for over, why in spent:
            if over:
                self.stopped = f"budget spent ({why})"
                return []
        picks = self._plan(left)
        if not picks:  # confirm needs both ends and the budget cannot pay for them
            self.stopped = "budget spent (probes: too few left for the confirm step)"
            return []
        self._begin(picks)
        return picks

    def _plan(self, left: int) -> list[str]:
        """Confirm first (both ends, in one round); then unknowns again, then the k-ary cuts."""
        if self.confirmation() is None:
            ends = [e for e in (self.good, self.bad) if len(self.samples.get(e, [])) < 2]
            return ends if len(ends) <= left else []
        lo, hi = self.suspect_range()
        slots = min(self.parallel, left)
        pending = [p for p in range(lo + 1, hi) if self._state(p) == "pending"][:slots]
        untested = [p for p in range(lo + 1, hi) if self._state(p) == "untested"]
        cuts = split_points(untested, lo, hi, slots - len(pending))
        return [self.sha(p) for p in sorted(pending + cuts)]

    # -- the answer --------------------------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        """Status, the first bad commit with its ratio against its parent (or the narrowest range), the
        confirm step's evidence, the probe chain and what was spent; JSON-able."""
        status = self.status()
        confirmation = self.confirmation()
        out: dict[str, Any] = {
            "status": status,
            "confirmation": asdict(confirmation) if confirmation else None,
            "probes": self.probes,
            "reused": len(self.reused),
            "rounds": len(self.rounds),
            "stopped": self.stopped,
            "chain": self.chain(),
            "notes": self._notes(),
        }
        if confirmation is not None and confirmation.reproduced:
            lo, hi = self.suspect_range()
            suspects = self.commits[lo:hi]
            out["range"] = {"good": self.sha(lo), "bad": self.sha(hi), "suspects": suspects}
            out["summary"] = f"the first bad commit is one of {len(suspects)}, after {self.sha(lo)[:12]}"
        else:
            out["summary"] = confirmation.reason if confirmation else f"{status}: {self.stopped or 'confirming'}"
        if status == "running" and self.outstanding:
            what = "confirming good and bad" if confirmation is None else f"round {len(self.rounds)}"
            out["summary"] = f"running: {what}, {len(self.outstanding)} probe run(s) under way"
        if status == "found":
            parent, first = self.sha(lo), self.sha(hi)
            ratio = Ratio.of(compare(self.samples[parent], self.samples[first], self.better))
            out.update(first_bad=first, parent=parent, vs_parent=asdict(ratio), test=TEST)
            out["summary"] = f"{first[:12]} is the first bad commit: {ratio.text()} against {parent[:12]}"
        return out

    def chain(self) -> list[dict[str, Any]]:
        """Every measured or failed commit, oldest first: verdict, ratios with intervals, where it came from."""
        chain = []
        for position, sha in enumerate([self.good, *self.commits]):
            if sha not in self.samples and sha not in self.failed:
                continue
            found = self.verdict(sha) if sha not in self.failed else None
            chain.append(
                {
                    "sha": sha,
                    "position": position,
                    "n": len(self.samples.get(sha, [])),
                    "verdict": found.verdict if found else "unknown",
                    "reason": self.failed.get(sha) or (found.reason if found else ""),
                    "vs_good": asdict(found.vs_good) if found and found.vs_good else None,
                    "vs_bad": asdict(found.vs_bad) if found and found.vs_bad else None,
                    "reused_from": self.reused.get(sha),
                    "rounds": [i + 1 for i, shas in enumerate(self.rounds) if sha in shas],
                }
            )
        return chain

    def _notes(self) -> list[str]:
        if self.confirmation() is None:
            return []
        lo, hi = self.suspect_range()
        late_goods = [self.sha(p) for p in range(hi + 1, len(self.commits)) if self._state(p) == "good"]
        notes = [f"{sha[:12]} measured like good after the first bad commit (not monotone)" for sha in late_goods]
        skipped = [self.sha(p) for p in range(lo + 1, hi) if self._state(p) == "skipped"]
        return notes + [f"{sha[:12]} skipped: {self.failed.get(sha, 'unknown at the repeat limit')}" for sha in skipped]

    # -- XCom --------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The state as a small JSON-able dict (commits, values, rounds; verdicts are recomputed)."""
        state = {name: getattr(self, name) for name in self.__dataclass_fields__}
        state["budget"] = asdict(self.budget)
        return {"version": STATE_VERSION, **state}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Bisection:
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"bisection state version {data.get('version')!r}, expected {STATE_VERSION}")
        fields = {k: v for k, v in data.items() if k != "version"}
        fields["budget"] = Budget(**fields["budget"])
        return cls(**fields)
