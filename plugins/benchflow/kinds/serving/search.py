"""The spec's ``benchmark.search`` section of a serving campaign: a load search instead of fixed levels.

```yaml
benchmark:
  search:
    over: concurrency            # or request_rate
    range: [1, 256]              # its top at most prompts_per_probe (a probe never has more in flight)
    slo: {p99_ttft_ms: 2000, p99_tpot_ms: 80, max_failed_fraction: 0.01}  # without it: 1 % by default
    precision: 0.1               # stop when the bracket is within 10 %
    prompts_per_probe: 400       # checked against the percentile the SLO names
    repeats: 3                   # the most per load; fewer when the first ones already decide
    budget: {probes: 30, seconds: 3600}
    confidence: 0.95             # optional: of each bound
```

One source of truth for the statistics: the rules that refuse a probe too small for its percentile are the
host core's (:mod:`benchhost.loadsearch`, stdlib only, which decides on the host).
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from benchhost import loadsearch

CONFIDENCE: float = loadsearch.CONFIDENCE


def min_requests(percentile: float, confidence: float = CONFIDENCE) -> int:
    """The smallest probe that can decide a bound on ``percentile`` (0–1): P99 at 95 % needs 299."""
    return int(loadsearch.min_requests(percentile, confidence))


def undersized(slo: dict[str, float], prompts: int, confidence: float = CONFIDENCE) -> list[str]:
    """Why a probe of ``prompts`` requests cannot decide ``slo`` (one readable reason per objective)."""
    return [str(reason) for reason in loadsearch.undersized(slo, prompts, confidence)]


def _slo_key(key: str) -> str:
    loadsearch.parse_objective(key, 1.0 if key != loadsearch.FAILED_KEY else 0.5)  # the key's syntax alone
    return key


SloKey = Annotated[str, AfterValidator(_slo_key)]
Number = StrictInt | StrictFloat


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchBudget(_Section):
    """What one config's search may spend; out of it, the search stops ``budget`` with its bracket."""

    probes: int = Field(default=30, ge=1, description="the most probes, repeats included")
    seconds: float = Field(default=3600, gt=0, description="the most seconds of probing (a probe started in time ends)")


class SearchSpec(_Section):
    """A load search: the highest load whose probes meet the SLO, with the lowest that did not."""

    over: Literal["concurrency", "request_rate"] = Field(description="the load searched: clients or requests/s")
    range: tuple[Number, Number] = Field(description="[low, high]: where growth starts, and the most it tries")
    confidence: float = Field(default=CONFIDENCE, gt=0.5, lt=1, description="of each bound a verdict rests on")
    slo: dict[SloKey, Number] = Field(
        min_length=1, description="p<percentile>_<ttft|tpot|itl|e2e>_ms limits (ms) and max_failed_fraction"
    )
    precision: float = Field(default=0.1, gt=0, lt=1, description="stop when (fail - pass) / pass is within it")
    prompts_per_probe: int = Field(default=400, ge=1, description="requests per probe")
    repeats: int = Field(default=3, ge=1, le=10, description="the most probes at one load while undecided")
    budget: SearchBudget = Field(default_factory=SearchBudget)

    @field_validator("range")
    @classmethod
    def _ordered(cls, value: tuple[float, float], info: ValidationInfo) -> tuple[float, float]:
        low, high = value
        if not 0 < low < high:
            raise ValueError(f"needs 0 < low < high, got [{low}, {high}]")
        if info.data.get("over") == "concurrency":
            if low != int(low) or high != int(high):
                raise ValueError(f"a concurrency range is whole numbers, got [{low}, {high}]")
            return int(low), int(high)
        return value

    @field_validator("slo")
    @classmethod
    def _limits(cls, value: dict[str, float]) -> dict[str, float]:
        loadsearch.parse_slo(value)  # each limit: a positive number of ms, or a fraction in [0, 1)
        return value

    @field_validator("prompts_per_probe")
    @classmethod
    def _decides(cls, value: int, info: ValidationInfo) -> int:
        """A probe too small for the percentile it is judged on could never pass: refused here, not found
        out on the GPU."""
        slo, confidence = info.data.get("slo"), info.data.get("confidence")
        if slo and confidence and (reasons := undersized(slo, value, confidence)):
            raise ValueError("; ".join(reasons))
        return value

    @model_validator(mode="after")
    def _reachable(self) -> SearchSpec:
        if reason := loadsearch.unreachable(self.over, self.range[1], self.prompts_per_probe):
            raise ValueError(f"range: {reason}")
        return self

    def argument(self) -> str:
        """The section as ``sweep.py --search`` takes it: compact JSON."""
        return json.dumps(self.model_dump(mode="json"), separators=(",", ":"))

    def most_probes(self) -> int:
        """The most probes the search can spend: its budget, or fewer when a binary search needs fewer
        (``repeats`` × the distinct loads growth and bisection can visit)."""
        low, high = self.range
        bound = loadsearch.load_bound(low, high, self.precision, self.over == "concurrency")
        return min(self.budget.probes, self.repeats * int(bound))
