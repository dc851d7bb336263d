"""SLO load search: the most load a server carries within its latency SLO, decided on confidence bounds.

Stdlib only: it runs on the GPU host inside the sweep driver (``sweep.py --search``), and the library imports
this same file by path to validate specs (``benchflow.kinds.serving.search``), so the rules that refuse an
undersized probe are the rules that judge it.

* **Bounds on a percentile** (distribution-free, order statistics): of ``n`` sorted values ``x_(1) ≤ … ≤ x_(n)``
  and the p-quantile ``q_p``, ``P(q_p ≤ x_(k)) ≥ P(Bin(n, p) ≤ k − 1)`` and ``P(x_(j) ≤ q_p) ≥ P(Bin(n, p) ≥ j)``
  for any distribution (ties included). The upper bound is ``x_(k)`` for the smallest ``k`` whose probability
  reaches the confidence, the lower bound ``x_(j)`` for the largest such ``j``; there is none when even
  ``x_(n)`` (``x_(1)``) falls short: a P99 upper bound at 95 % needs ``1 − 0.99^n ≥ 0.95``, n ≥ 299.
* **Bounds on the failed fraction**: one-sided Clopper–Pearson (exact binomial) bounds, each at the confidence.
* **A probe's verdict**: ``pass`` when every SLO's upper bound is within its limit, ``fail`` when some SLO's
  lower bound is beyond it, else ``undecided``. Each check holds at the confidence on its own (with m checks,
  a pass is right with probability ≥ 1 − m·(1 − confidence)).
* **The search**: :class:`Search`, a pure state machine: grow from the range's low end (doubling) until a load
  fails, then bisect the bracket [highest pass, lowest fail] until it is within the precision.
  :func:`run_search` drives it with a probe function (the real client in ``sweep.py``, a model in the tests).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

CONFIDENCE = 0.95
METRICS = ("ttft", "tpot", "itl", "e2e")
OVER = ("concurrency", "request_rate")
FAILED_KEY = "max_failed_fraction"
# An SLO that does not bound the failed requests still may not pass a server that fails them: latency percentiles
# are over the completed requests only, so one that fails fast would look quick.
DEFAULT_MAX_FAILED = 0.01
DEFAULT_FAILED_KEY = f"{FAILED_KEY} (default)"
SLO_KEY_RE = re.compile(r"^p(?P<p>\d+(?:\.\d+)?)_(?P<metric>[a-z0-9]+)_ms$")
VerdictName = Literal["pass", "fail", "undecided"]
Reason = Literal["converged", "budget", "range"]


# ---------------------------------------------------------------- binomial probabilities


def _cdf_walk(n: int, p: float) -> Iterator[float]:
    """``P(Bin(n, p) ≤ k)`` for ``k = 0, 1, …, n``, lazily: each term's log from the last one's
    (``log C(n, i+1) = log C(n, i) + log(n − i) − log(i + 1)``) and summed in log space, so that a caller stops
    where its answer is (near the mean) and a million requests cost no more than the terms it reads."""
    if p <= 0.0 or p >= 1.0:
        hit = 0 if p <= 0.0 else n
        yield from (0.0 if k < hit else 1.0 for k in range(n + 1))
        return
    log_p, log_q = math.log(p), math.log1p(-p)
    term, acc = n * log_q, -math.inf
    for i in range(n + 1):
        acc = _log_add(acc, term)
        yield min(1.0, math.exp(acc))
        if i < n:
            term += math.log(n - i) - math.log(i + 1) + log_p - log_q


def _log_add(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    high, low = (a, b) if a >= b else (b, a)
    return high + math.log1p(math.exp(low - high))


def binomial_cdfs(n: int, p: float, upto: int | None = None) -> list[float]:
    """``P(Bin(n, p) ≤ k)`` for ``k = 0..upto`` (default ``n``), summed in log space."""
    upto = n if upto is None else min(upto, n)
    return list(itertools.islice(_cdf_walk(n, p), upto + 1))


def binomial_cdf(k: int, n: int, p: float) -> float:
    """``P(Bin(n, p) ≤ k)``."""
    if k < 0:
        return 0.0
    return 1.0 if k >= n else binomial_cdfs(n, p, k)[-1]


def _last_at_most(n: int, p: float, level: float) -> int | None:
    """The largest ``k < n`` with ``P(Bin(n, p) ≤ k) ≤ level`` (None: not even k = 0); walks up from 0."""
    last = None
    for k, cdf in enumerate(_cdf_walk(n, p)):
        if k >= n or cdf > level:
            return last
        last = k
    return last


def _first_at_least(n: int, p: float, level: float) -> int | None:
    """The smallest ``k < n`` with ``P(Bin(n, p) ≤ k) ≥ level`` (None: none below n); walks up from 0."""
    for k, cdf in enumerate(_cdf_walk(n, p)):
        if k >= n:
            return None
        if cdf >= level:
            return k
    return None


# ---------------------------------------------------------------- bounds
# Each walk starts from the side of the rarer outcome (``P(Bin(n, p) ≤ k) = 1 − P(Bin(n, 1 − p) ≤ n − k − 1)``),
# so it reads about n·min(p, 1 − p) terms, never all n.


def upper_rank(n: int, p: float, confidence: float = CONFIDENCE) -> int | None:
    """The smallest 1-based rank ``k`` with ``P(q_p ≤ x_(k)) ≥ confidence``; None when ``n`` is too small."""
    if p <= 0.5:
        k = _first_at_least(n, p, confidence)  # P(Bin(n, p) ≤ k − 1) ≥ confidence
        return None if k is None else k + 1
    m = _last_at_most(n, 1.0 - p, 1.0 - confidence)  # the same, as P(Bin(n, 1 − p) ≤ n − k) ≤ 1 − confidence
    return None if m is None else n - m


def lower_rank(n: int, p: float, confidence: float = CONFIDENCE) -> int | None:
    """The largest 1-based rank ``j`` with ``P(x_(j) ≤ q_p) ≥ confidence``; None when ``n`` is too small."""
    if p <= 0.5:
        i = _last_at_most(n, p, 1.0 - confidence)  # P(Bin(n, p) ≤ j − 1) ≤ 1 − confidence
        return None if i is None else i + 1
    m = _first_at_least(n, 1.0 - p, confidence)  # the same, as P(Bin(n, 1 − p) ≤ n − j) ≥ confidence
    return None if m is None else n - m


@dataclass(frozen=True)
class Bounds:
    """A statistic's point estimate and its one-sided bounds (None: the data cannot bound it that way)."""

    n: int
    estimate: float | None
    lower: float | None
    upper: float | None


def quantile_bounds(values: Iterable[float], p: float, confidence: float = CONFIDENCE) -> Bounds:
    """The p-quantile of ``values`` (nearest rank) with its order-statistic bounds, each at ``confidence``."""
    data = sorted(values)
    n = len(data)
    if n == 0:
        return Bounds(0, None, None, None)
    up, low = upper_rank(n, p, confidence), lower_rank(n, p, confidence)
    estimate = data[max(1, math.ceil(p * n)) - 1]
    return Bounds(n, estimate, data[low - 1] if low else None, data[up - 1] if up else None)


def _solve(f: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """The ``x`` in [lo, hi] where the decreasing ``f`` crosses ``target``, by bisection to 1e-12."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if f(mid) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


def proportion_bounds(k: int, n: int, confidence: float = CONFIDENCE) -> Bounds:
    """``k`` of ``n`` (the failed requests): one-sided Clopper–Pearson bounds, each at ``confidence``:
    ``P(Bin(n, upper) ≤ k) = 1 − confidence`` and ``P(Bin(n, lower) ≥ k) = 1 − confidence``."""
    if n == 0:
        return Bounds(0, None, None, None)
    alpha = 1.0 - confidence
    upper = 1.0 if k >= n else _solve(lambda q: binomial_cdf(k, n, q), alpha, k / n, 1.0)
    lower = 0.0 if k <= 0 else _solve(lambda q: binomial_cdf(k - 1, n, q), 1.0 - alpha, 0.0, k / n)
    return Bounds(n, k / n, lower, upper)


def min_requests(percentile: float, confidence: float = CONFIDENCE) -> int:
    """The smallest probe that can decide a bound on the ``percentile`` (0–1) both ways: below it no order
    statistic is an upper (or lower) bound at ``confidence``, so the probe could never pass (or fail)."""
    if not 0.0 < percentile < 1.0 or not 0.5 < confidence < 1.0:
        raise ValueError(f"need 0 < percentile < 1 and 0.5 < confidence < 1, got {percentile}, {confidence}")
    tail = min(percentile, 1.0 - percentile)  # the rarer side: 1 − p^n ≥ conf for the upper bound of a high p
    n = max(1, math.floor(math.log(1.0 - confidence) / math.log(1.0 - tail)) - 1)
    while not (upper_rank(n, percentile, confidence) and lower_rank(n, percentile, confidence)):
        n += 1
    return n


# ---------------------------------------------------------------- SLOs and a probe's verdict


@dataclass(frozen=True)
class Objective:
    """One SLO entry: ``p99_ttft_ms: 2000`` is (0.99, "ttft", 2000); ``max_failed_fraction`` has no metric."""

    key: str
    limit: float
    percentile: float | None = None
    metric: str | None = None


def parse_objective(key: str, limit: float) -> Objective:
    """``p<number>_<metric>_ms`` (metric one of :data:`METRICS`, 0 < number < 100) or ``max_failed_fraction``."""
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not math.isfinite(limit):
        raise ValueError(f"SLO {key}: the limit must be a finite number, got {limit!r}")
    if key == FAILED_KEY:
        if not 0.0 <= limit < 1.0:
            raise ValueError(f"SLO {key}: a fraction in [0, 1), got {limit}")
        return Objective(key, float(limit))
    match = SLO_KEY_RE.match(key)
    if match is None or match["metric"] not in METRICS:
        raise ValueError(f"SLO {key!r}: expected p<percentile>_<{'|'.join(METRICS)}>_ms or {FAILED_KEY}")
    percentile = float(match["p"]) / 100.0
    if not 0.0 < percentile < 1.0:
        raise ValueError(f"SLO {key}: the percentile must be between 0 and 100 (exclusive)")
    if limit <= 0:
        raise ValueError(f"SLO {key}: the limit must be positive (ms), got {limit}")
    return Objective(key, float(limit), percentile, match["metric"])


def parse_slo(slo: Mapping[str, float]) -> list[Objective]:
    if not slo:
        raise ValueError("the SLO names no objective")
    return [parse_objective(key, limit) for key, limit in slo.items()]


def undersized(slo: Mapping[str, float], prompts: int, confidence: float = CONFIDENCE) -> list[str]:
    """Why a probe of ``prompts`` requests cannot decide this SLO (empty: it can). The failed fraction
    needs as many requests as its percentile ``1 − limit`` would: with none failed, the upper bound is
    ``1 − (1 − confidence)^(1/n)``."""
    reasons = []
    for objective in parse_slo(slo):
        tail = objective.percentile if objective.percentile is not None else 1.0 - objective.limit
        if objective.percentile is None and objective.limit == 0.0:
            reasons.append(f"{objective.key}: 0 can never be shown with any probe size; allow a fraction > 0")
            continue
        needed = min_requests(tail, confidence)
        if prompts < needed:
            what = f"a P{_pct(tail)} bound" if objective.percentile is not None else f"a bound at {objective.limit}"
            reasons.append(
                f"{objective.key}: {what} at {_pct(confidence)} % confidence needs at least {needed} requests "
                f"per probe, prompts_per_probe is {prompts}"
            )
    return reasons


def unreachable(over: str, high: float, prompts: int) -> str | None:
    """Why a probe could not deliver the top of the range (None: it can). A probe is ``--num-prompts P
    --max-concurrency L``: with P < L the client never has L requests in flight, so passing it says nothing
    about L, and the answer may never be a load no probe put on the server."""
    if over == "concurrency" and high > prompts:
        return (
            f"the range's top ({high:g}) is above prompts_per_probe ({prompts}): a probe of {prompts} requests "
            f"never has more than {prompts} in flight, so it cannot measure that load; lower the top or raise "
            "prompts_per_probe"
        )
    return None


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.10g}"


LATENCY_FIELDS = ("ttft_ms", "e2e_ms", "mean_itl_ms")


def completed(row: Mapping[str, Any]) -> bool:
    """A request that succeeded with times that read: ``ok``, the tokens the workload fixed where its row says
    (``expected_tokens``), and each latency it gives a finite number ≥ 0. A NaN or negative time from a client is a
    failed request (counted in the failed fraction), never a success whose value would break the order
    statistics; so is a request some client called ok with fewer tokens than asked (a stream cut short)."""
    if not row.get("ok"):
        return False
    expected, got = row.get("expected_tokens"), row.get("output_tokens")
    if isinstance(expected, int) and expected > 0 and not (isinstance(got, int) and got >= expected):
        return False  # a client called it ok with fewer tokens than the workload fixed: a cut stream
    for key in LATENCY_FIELDS:
        value = row.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            return False
    return True


def request_value(row: Mapping[str, Any], metric: str) -> float | None:
    """A request's value of ``metric`` in ms (the sweep's ``requests.jsonl`` row), None when it has none:
    TPOT = (e2e − ttft) / (output tokens − 1); ITL is the request's mean gap (the gaps of one request are not
    independent samples, so the bound is over requests, not over gaps)."""
    if not completed(row):
        return None
    if metric == "tpot":
        e2e, ttft, tokens = row.get("e2e_ms"), row.get("ttft_ms"), row.get("output_tokens") or 0
        return (e2e - ttft) / (tokens - 1) if e2e is not None and ttft is not None and tokens > 1 else None
    value = row.get({"ttft": "ttft_ms", "e2e": "e2e_ms", "itl": "mean_itl_ms"}[metric])
    return float(value) if value is not None else None


@dataclass(frozen=True)
class Check:
    """One objective judged on a probe: its bounds and what they decide."""

    key: str
    limit: float
    n: int
    estimate: float | None
    lower: float | None
    upper: float | None
    verdict: VerdictName


@dataclass(frozen=True)
class Verdict:
    verdict: VerdictName
    requests: int
    failed: int
    checks: tuple[Check, ...]

    def text(self) -> str:
        return f"{self.verdict} ({self.requests} requests, {self.failed} failed; {checks_text(self.checks)})"


def checks_text(checks: Iterable[Check]) -> str:
    """``p99_tpot_ms 21.3…24.9 vs 30: pass; …``: each check's lower…upper bound against its limit."""

    def number(v: float | None) -> str:
        return "none" if v is None else f"{v:.4g}"

    return "; ".join(f"{c.key} {number(c.lower)}…{number(c.upper)} vs {c.limit:g}: {c.verdict}" for c in checks)


def _decide(bounds: Bounds, limit: float) -> VerdictName:
    if bounds.upper is not None and bounds.upper <= limit:
        return "pass"
    if bounds.lower is not None and bounds.lower > limit:
        return "fail"
    return "undecided"


def _default_failed(bounds: Bounds) -> VerdictName:
    """The failed fraction when the SLO does not bound it: fail once its lower bound is over
    :data:`DEFAULT_MAX_FAILED`, undecided while the fraction seen is over it, else no obstacle to a pass (a probe
    too small to bound it at that level still passes when none failed)."""
    if bounds.lower is not None and bounds.lower > DEFAULT_MAX_FAILED:
        return "fail"
    if bounds.estimate is not None and bounds.estimate > DEFAULT_MAX_FAILED:
        return "undecided"
    return "pass"


def judge_probe(
    requests: Sequence[Mapping[str, Any]], slo: Mapping[str, float], confidence: float = CONFIDENCE
) -> Verdict:
    """The probe's verdict from its per-request rows. Percentiles are over the completed requests (as the
    clients report them); failed requests count in the failed fraction, judged when the SLO bounds it."""
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"the confidence must be in (0.5, 1), got {confidence}")  # else the bounds may cross
    failed = sum(1 for row in requests if not completed(row))
    checks = []
    objectives = parse_slo(slo)
    if all(o.metric is not None for o in objectives):  # no failed-fraction objective: the default one
        bounds = proportion_bounds(failed, len(requests), confidence)
        checks.append(Check(DEFAULT_FAILED_KEY, DEFAULT_MAX_FAILED, **asdict(bounds), verdict=_default_failed(bounds)))
    for objective in objectives:
        if objective.metric is None:
            bounds = proportion_bounds(failed, len(requests), confidence)
        else:
            values = [v for row in requests if (v := request_value(row, objective.metric)) is not None]
            bounds = quantile_bounds(values, objective.percentile or 0.5, confidence)
        checks.append(Check(objective.key, objective.limit, **asdict(bounds), verdict=_decide(bounds, objective.limit)))
    verdicts = {c.verdict for c in checks}
    verdict: VerdictName = "fail" if "fail" in verdicts else "pass" if verdicts == {"pass"} else "undecided"
    return Verdict(verdict, len(requests), failed, tuple(checks))


def good_requests(requests: Iterable[Mapping[str, Any]], slo: Mapping[str, float]) -> int:
    """Requests that completed and met every latency limit of the SLO on their own (goodput's numerator)."""
    limits = [(o.metric, o.limit) for o in parse_slo(slo) if o.metric is not None]

    def good(row: Mapping[str, Any]) -> bool:
        values = [(request_value(row, metric), limit) for metric, limit in limits]
        return completed(row) and all(v is None or v <= limit for v, limit in values)

    return sum(1 for row in requests if good(row))


# ---------------------------------------------------------------- the search


@dataclass(frozen=True)
class Budget:
    """The most probes (repeats included) and seconds of probing a search may spend; None: unlimited."""

    probes: int | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class Probe:
    load: float
    repeat: int  # 1.. at the same load; a load is probed again only while its pooled verdict is undecided


@dataclass
class Search:
    """Where the next probe goes, from the verdicts so far: a pure state machine (no clock, no I/O).

    Growth: from ``low``, doubling (clipped to ``high``) while probes pass; the top passing stops ``range``,
    and so does the bottom failing. Bisection: the midpoint of [highest pass, lowest fail] until
    ``(fail − pass) / pass ≤ precision`` (concurrency: or a step of 1, below which it does not bisect) stops
    ``converged``. An ``undecided`` load is probed again, up to ``repeats`` times (the caller pools the
    repeats' requests); still undecided, it bounds the bracket from above like a fail (only a load shown
    to pass is ever the answer) and keeps its verdict. Out of budget before a probe: ``budget``."""

    over: str
    low: float
    high: float
    precision: float = 0.1
    repeats: int = 3
    budget: Budget = field(default_factory=Budget)
    pass_load: float | None = field(default=None, init=False)
    fail_load: float | None = field(default=None, init=False)
    fail_verdict: VerdictName | None = field(default=None, init=False)
    probes: int = field(default=0, init=False)
    seconds: float = field(default=0.0, init=False)
    reason: Reason | None = field(default=None, init=False)
    _next: Probe | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.over not in OVER:
            raise ValueError(f"over must be one of {OVER}, got {self.over!r}")
        if not 0 < self.low < self.high:
            raise ValueError(f"the range needs 0 < low < high, got [{self.low}, {self.high}]")
        if self.integer and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError("a concurrency range is whole numbers")
        if not 0 < self.precision < 1 or self.repeats < 1:
            raise ValueError("need 0 < precision < 1 and repeats >= 1")
        self._next = Probe(self._load(self.low), 1)

    @property
    def integer(self) -> bool:
        return self.over == "concurrency"

    def _load(self, value: float) -> float:
        """Whole concurrencies; rates to 6 significant digits, as the client is told them."""
        return int(value) if self.integer else float(f"{value:.6g}")

    def next_probe(self) -> Probe | None:
        """The probe to run next, or None once stopped (``reason`` says why)."""
        if self.reason is not None:
            return None
        spent = self.budget
        if (spent.probes is not None and self.probes >= spent.probes) or (
            spent.seconds is not None and self.seconds >= spent.seconds
        ):
            self.reason = "budget"
            return None
        return self._next

    def record(self, load: float, verdict: VerdictName, seconds: float = 0.0) -> None:
        """The pooled verdict at ``load`` after the probe :meth:`next_probe` gave, and that probe's seconds."""
        probe = self._next
        if probe is None or self.reason is not None or load != probe.load:
            raise ValueError(f"no probe at {load} is pending")
        self.probes += 1
        self.seconds += seconds
        if verdict == "undecided" and probe.repeat < self.repeats:
            self._next = Probe(probe.load, probe.repeat + 1)
            return
        if verdict == "pass":
            self.pass_load = load if self.pass_load is None else max(self.pass_load, load)
        elif self.fail_load is None or load < self.fail_load:
            self.fail_load, self.fail_verdict = load, verdict
        self._next = self._after(load)

    def _after(self, load: float) -> Probe | None:
        """The next load once ``load`` is decided, or None with the stopping reason set."""
        if self.fail_load is None:  # still growing
            if load >= self.high:
                self.reason = "range"
                return None
            grown = max(load + 1, round(load * 2)) if self.integer else load * 2
            return Probe(self._load(min(grown, self.high)), 1)
        if self.pass_load is None:
            self.reason = "range"  # the range's low end does not meet the SLO
            return None
        if self.converged():
            self.reason = "converged"
            return None
        total = self.pass_load + self.fail_load
        mid = self._load(total // 2 if self.integer else total / 2)
        if mid in (self.pass_load, self.fail_load):  # a rate bracket narrower than 6 significant digits
            self.reason = "converged"
            return None
        return Probe(mid, 1)

    def converged(self) -> bool:
        if self.pass_load is None or self.fail_load is None:
            return False
        width = self.fail_load - self.pass_load
        return width <= self.precision * self.pass_load or (self.integer and width <= 1)


def load_bound(low: float, high: float, precision: float, integer: bool) -> int:
    """The most distinct loads a search of [low, high] probes: ``ceil(log2(high / low)) + 1`` while growing
    (low, 2·low, …, high), then ``ceil(log2(1 / precision))`` bisections: growth leaves a bracket no wider
    than its pass (ratio ≤ 2) and each bisection halves it; whole-number midpoints can cost one more.
    With repeats, the probes are at most ``repeats`` times this."""
    growth = math.ceil(math.log2(high / low) - 1e-9) + 1
    bisect = math.ceil(math.log2(1.0 / precision) - 1e-9) + (1 if integer else 0)
    return growth + bisect


@dataclass(frozen=True)
class ProbeData:
    """What one probe measured: its per-request rows, the client's benchmark duration (goodput's
    denominator), the wall seconds the probe cost (the budget's) and when it started (Unix time: where
    telemetry samples of the probe begin)."""

    requests: list[dict[str, Any]]
    duration_s: float
    seconds: float
    error: str = ""  # why the probe produced no data (the client failed), when it did not
    started_at: float | None = None


@dataclass(frozen=True)
class Step:
    """One probe of the trail; ``verdict``, ``checks`` and ``goodput_rps`` are of the load's pooled repeats."""

    load: float
    repeat: int
    verdict: VerdictName
    requests: int
    pooled: int
    failed: int
    seconds: float
    duration_s: float
    goodput_rps: float | None
    checks: tuple[Check, ...]
    error: str = ""
    started_at: float | None = None

    def text(self) -> str:
        error = f"; {self.error}" if self.error else ""
        return (
            f"{self.verdict} ({self.pooled} requests pooled, {self.failed} failed; {checks_text(self.checks)}{error})"
        )


@dataclass(frozen=True)
class SearchResult:
    """The bracket, never a single number: ``pass_load`` (the answer: the highest load shown to pass, None
    when none did) and ``fail_load`` (the lowest that failed or stayed undecided, None when none did)."""

    over: str
    reason: Reason
    pass_load: float | None
    fail_load: float | None
    fail_verdict: VerdictName | None
    probes: int
    loads: int
    seconds: float
    goodput_rps: float | None
    trail: tuple[Step, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        answer = "none passed" if self.pass_load is None else f"highest pass {self.pass_load:g}"
        above = "none failed" if self.fail_load is None else f"lowest {self.fail_verdict} {self.fail_load:g}"
        goodput = "" if self.goodput_rps is None else f"; goodput there {self.goodput_rps:.4g} req/s"
        return (
            f"over {self.over}: {self.reason}; {answer}, {above}; {self.probes} probes at {self.loads} "
            f"loads in {self.seconds:.0f} s{goodput}"
        )


ProbeFunction = Callable[[float, int], ProbeData]


def run_search(
    search: Search,
    probe: ProbeFunction,
    slo: Mapping[str, float],
    confidence: float = CONFIDENCE,
    report: Callable[[Step], None] | None = None,
) -> SearchResult:
    """Drive ``search`` with ``probe(load, repeat)`` until it stops. Repeats at one load are pooled: they
    sample the same server at the same load, so together they narrow the bounds that one probe left too wide
    (a pooled decision looks at the data up to ``repeats`` times: each look errs with at most 1 − confidence)."""
    pools: dict[float, tuple[list[dict[str, Any]], float]] = {}
    trail: list[Step] = []
    while (next_probe := search.next_probe()) is not None:
        load, repeat = next_probe.load, next_probe.repeat
        data = probe(load, repeat)
        rows, duration = pools.get(load, ([], 0.0))
        rows, duration = rows + list(data.requests), duration + data.duration_s
        pools[load] = (rows, duration)
        verdict = judge_probe(rows, slo, confidence)
        goodput = good_requests(rows, slo) / duration if duration > 0 else None
        step = Step(
            load,
            repeat,
            verdict.verdict,
            len(data.requests),
            len(rows),
            verdict.failed,
            data.seconds,
            data.duration_s,
            goodput,
            verdict.checks,
            data.error,
            data.started_at,
        )
        trail.append(step)
        if report is not None:
            report(step)
        search.record(load, verdict.verdict, step.seconds)
    assert search.reason is not None
    answer = [s for s in trail if s.load == search.pass_load]
    return SearchResult(
        search.over,
        search.reason,
        search.pass_load,
        search.fail_load,
        search.fail_verdict,
        search.probes,
        len(pools),
        search.seconds,
        answer[-1].goodput_rps if answer else None,
        tuple(trail),
    )


@dataclass(frozen=True)
class Plan:
    """The spec's ``benchmark.search`` section as the sweep driver receives it (``--search '<json>'``)."""

    over: str
    low: float
    high: float
    slo: dict[str, float]
    precision: float = 0.1
    prompts_per_probe: int = 400
    repeats: int = 3
    budget: Budget = field(default_factory=Budget)
    confidence: float = CONFIDENCE

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Plan:
        """Read and check the section; ValueError names what is wrong (the library's model checks it
        earlier, with the spec's file and line; this is the host's own guard)."""
        low, high = spec["range"]
        budget = spec.get("budget") or {}
        plan = cls(
            over=spec["over"],
            low=low,
            high=high,
            slo=dict(spec["slo"]),
            precision=spec.get("precision", 0.1),
            prompts_per_probe=spec.get("prompts_per_probe", 400),
            repeats=spec.get("repeats", 3),
            budget=Budget(budget.get("probes"), budget.get("seconds")),
            confidence=spec.get("confidence", CONFIDENCE),
        )
        plan.search()  # range, over, precision, repeats
        if reasons := undersized(plan.slo, plan.prompts_per_probe, plan.confidence):
            raise ValueError("; ".join(reasons))
        if reason := unreachable(plan.over, plan.high, plan.prompts_per_probe):
            raise ValueError(reason)
        return plan

    def search(self) -> Search:
        return Search(self.over, self.low, self.high, self.precision, self.repeats, self.budget)

    def to_dict(self) -> dict[str, Any]:
        """The section as the spec writes it."""
        fields = asdict(self)
        low, high = fields.pop("low"), fields.pop("high")
        return {"over": fields.pop("over"), "range": [low, high], **fields}
