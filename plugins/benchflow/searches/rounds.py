"""What every search's state keeps of its rounds, whatever its algorithm: the keys probed in each round, those still
outstanding, the probe runs spent, when it started, why it stopped, the keys that failed. Pure: the strategies'
state classes (:mod:`.bisection`, :mod:`.configs`, :mod:`.tiles`) add their own fields and their rules."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(kw_only=True)
class Rounds:
    failed: dict[str, str] = field(default_factory=dict)
    rounds: list[list[str]] = field(default_factory=list)
    outstanding: list[str] = field(default_factory=list)
    probes: int = 0
    started_at: float | None = None
    stopped: str = ""

    def _now(self, now: float | None) -> float:
        """A new round may be planned only once the last one is recorded; the search's clock starts at the first."""
        if self.outstanding:
            raise RuntimeError(f"record every probe of the round first: {self.outstanding} outstanding")
        now = time.time() if now is None else now
        if self.started_at is None:
            self.started_at = now
        return now

    def _elapsed(self, now: float) -> float:
        return now - (self.started_at if self.started_at is not None else now)

    def _begin(self, keys: Sequence[str]) -> None:
        """A round of these keys, each one probe run."""
        self.rounds.append(list(keys))
        self.outstanding = list(keys)
        self.probes += len(keys)

    def _end(self, key: str) -> None:
        """A probe of the round is recorded."""
        if key not in self.outstanding:
            raise ValueError(f"{key}: not probed in this round (outstanding: {self.outstanding})")
        self.outstanding.remove(key)

    def retract(self, key: str) -> None:
        """Take back a probe that never ran (its host was down): it costs nothing and is planned again."""
        self.outstanding.remove(key)
        self.probes -= 1
        self.rounds[-1].remove(key)
        if not self.rounds[-1]:
            self.rounds.pop()
