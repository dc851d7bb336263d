"""What one run produced, as the pipeline hands it on and the warehouse stores it: the run's record, the
validation's outcome, the regression findings. Plain dataclasses, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

SERVER_ERROR_KEY = "server_error"  # servers_ready's XCom when a server died: the parse step names it in the detail

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
    rows_ok: int | None = None  # of rows_loaded, those judged ok (validity); None: not counted
    host_facts: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    logical_date: datetime | None = None
    run_type: str | None = None
    conf: dict[str, Any] = field(default_factory=dict)
    git_sha: str | None = None
    payload_commit: str | None = None  # the git commit a git payload was shipped from
    payload_ref: str | None = None
    spec_bundle: str | None = None  # the DAG bundle the spec was read through (a git bundle: spec_commit is its commit)
    spec_commit: str | None = None

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


VERDICTS = ("regressed", "fine", "not judged", "suspected drift")


@dataclass
class Verdict:
    """What the regression check concluded about one run, in one of four states: ``regressed`` (findings
    against ``baseline_runs`` baseline nights), ``fine`` (judged against ``baseline_runs`` nights, nothing found),
    ``suspected drift`` (nothing found tonight, but a change point of a case's nightly series in the worse direction
    among the recent nights: ``reason`` says since when) or ``not judged`` (no baseline to judge against, and
    ``reason`` says why: a manual run, "2 of 5 nights", invalid rows). Never "no regression" for a run that was not
    judged."""

    state: str
    baseline_runs: int = 0
    reason: str = ""
    findings: list[Finding] = field(default_factory=list)
    unjudged_cases: int = 0  # (case, metric)s of a judged run whose own history was too short (or repeats too few)
    # (case_key, metric, benchflow.nightly.changepoints.ChangePoint) over each case's nightly series, tonight's
    # included; "suspected drift" when one in the worse direction is recent and tonight's own check found nothing
    change_points: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.state not in VERDICTS:
            raise ValueError(f"verdict {self.state!r} is not one of {VERDICTS}")

    @classmethod
    def not_judged(cls, reason: str) -> Verdict:
        return cls("not judged", reason=reason)

    @property
    def detail(self) -> str:
        """What ``runs.verdict_detail`` stores: why not judged, or which cases were left out."""
        if self.state in ("not judged", "suspected drift"):
            return self.reason
        if not self.unjudged_cases:
            return ""
        return f"{self.unjudged_cases} case metric(s) without enough history not judged"

    def text(self) -> str:
        return verdict_text(self.state, self.detail, self.baseline_runs, len(self.findings))


def verdict_text(state: Any, detail: Any, baseline_runs: Any, regressions: Any) -> str:
    """One line for a run's verdict as ``runs`` stores it (the view, ``bench run``, the task logs): a null
    state (a run loaded before verdicts were recorded, or whose check never ran) reads "not judged" too."""

    def count(value: Any) -> int:
        try:
            return int(value) if value is not None and value == value else 0
        except (TypeError, ValueError):
            return 0

    state = state if isinstance(state, str) and state in VERDICTS else None
    detail = detail if isinstance(detail, str) and detail else ""
    nights = count(baseline_runs)
    against = f"against {nights} baseline night{'s' if nights != 1 else ''}"
    note = f"; {detail}" if detail else ""
    if state == "regressed":
        return f"{count(regressions)} regression(s) {against}{note}"
    if state == "fine":
        return f"no regression {against}{note}"
    if state == "suspected drift":
        return f"no regression tonight {against}, but {detail or 'a suspected drift'}"
    return f"not judged ({detail or 'no verdict recorded'})"
