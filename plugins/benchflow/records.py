"""What one run produced, as the pipeline hands it on and the warehouse stores it: the run's record, the
validation's outcome, the regression findings. Plain dataclasses, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

RUN_STATUSES = ("ok", "incomplete", "failed", "invalid")


@dataclass
class RunRecord:
    dag_id: str
    run_id: str
    campaign: str
    host: str
    spec_hash: str
    status: str
    payload_sha256: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    rows_loaded: int = 0
    host_facts: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    logical_date: datetime | None = None
    run_type: str | None = None
    conf: dict[str, Any] = field(default_factory=dict)
    git_sha: str | None = None
    payload_commit: str | None = None  # the git commit a git payload was shipped from
    payload_ref: str | None = None

    def gpu(self) -> tuple[str, int, str | None]:
        """(model, count, driver) from the preflight facts; ('none', 0, None) on a CPU host."""
        first = str(self.host_facts.get("gpu", "none")).split("; ")[0]
        if first in ("", "none"):
            return "none", 0, None
        parts = [p.strip() for p in first.split(",")]
        return parts[0], int(self.host_facts.get("gpu_count", 1)), parts[1] if len(parts) > 1 else None

    def __post_init__(self) -> None:
        if self.status not in RUN_STATUSES:
            raise ValueError(f"run status {self.status!r} is not one of {RUN_STATUSES}")


@dataclass
class Validation:
    """What the validate step found, as load stores it."""

    suite: str
    success: bool
    evaluated: int
    failures: list[str]
    rows_checked: int
    row_reasons: dict[int, list[str]] = field(default_factory=dict)

    def summary(self) -> str:
        if self.success:
            return f"GX suite {self.suite!r}: all {self.evaluated} expectations passed on {self.rows_checked} rows"
        lines = [f"GX suite {self.suite!r}: {len(self.failures)} of {self.evaluated} expectations failed:"]
        return "\n".join(lines + [f"  - {item}" for item in self.failures])


@dataclass
class Finding:
    """A metric of a case worse than its baseline beyond noise (judged by the analysis package's regression check)."""

    case_key: str
    metric: str
    value: float
    baseline_mean: float
    baseline_std: float
    baseline_runs: int
    relative_change: float
    z_score: float
    direction: str
    ci_low: float | None = None  # 95 % interval of value / baseline, when tonight had repeats
    ci_high: float | None = None
    p_value: float | None = None
    test: str = "z"  # 'welch-log' (tonight's repeats against the baseline's) or 'z' (one value a night)
