"""The engine every search over campaign runs shares: a bisection, a config search, a tile search.

A search is a loop of rounds: its strategy (a pure class, the algorithm alone) says what to measure next; the engine
turns that into probe runs of the campaign's own DAG on the campaign's pool (one per host at a time, so each holds its
host's lease with the campaign's timeouts and teardowns, like any campaign run), reads what they loaded, hands it back
to the strategy, and stores the search as it stands after every step. The same steps serve the Airflow DAG
(:mod:`benchflow.searches.dag`) and ``bench search`` / ``bench bisect`` on this machine.

The answer rules live here, once, for every strategy:

* **ended, never stuck**: a search whose DAG run was cancelled ends ``cancelled``; one whose probe runs ended before
  they were recorded (``bench down``, a worker lost) ends ``failed: probe runs ended``; each with what it knew.
* **a host that is down is not probed**: before each round the pool's hosts are tried; a probe never goes to a host
  that does not answer, and a probe whose run failed because its host went down is measured again elsewhere. The
  answer names every host found down, with why.
* **no answer is claimed that was not measured**: each strategy states its answer as an interval (open where the
  measure was censored at a range's end) and names no best when nothing met its criterion; the CLI then exits 1.
"""

from __future__ import annotations

import hashlib
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from benchflow.hosts import LOCAL, edge_queue, get_host
from benchflow.params import HOST, ConfError, check_fields
from benchflow.spec import SpecError, campaigns_dir, find_spec, load_checked

if TYPE_CHECKING:
    from benchflow.spec import CampaignSpec
    from benchflow.warehouse import Warehouse

CANCELLED_KEY = "cancelled"  # the XCom the listener writes on a search run's start task when the run fails
POKE_S = 5.0  # how often a probe's wait looks at its campaign run
ENDED_PROBES = "failed: probe runs ended"
HOST_CHECK_S = 20.0


class Algorithm(Protocol):
    """What the engine asks of a strategy's state (:class:`benchflow.searches.bisection.Bisection`, …)."""

    outstanding: list[str]
    rounds: list[list[str]]
    probes: int
    started_at: float | None

    def status(self) -> str: ...
    def result(self) -> dict[str, Any]: ...
    def retract(self, key: str) -> None: ...
    def to_json(self) -> dict[str, Any]: ...


@dataclass
class Probe:
    """One probe run: a run of the campaign's DAG on one host, measuring ``keys`` (commits, configs, tiles)."""

    run_id: str
    host: str | None
    keys: list[str]
    conf: dict[str, Any]
    level: int = 0

    def trigger(self, campaign_dag_id: str) -> dict[str, Any]:
        """The kwargs of one mapped ``TriggerDagRunOperator``."""
        return {"trigger_dag_id": campaign_dag_id, "trigger_run_id": self.run_id, "conf": self.conf}


@dataclass
class Search:
    """A search as it stands, handed from step to step (JSON in XCom): the campaign, the strategy's own state,
    the probe runs of the round under way, every probe run of each key, and the hosts found down."""

    strategy: str
    campaign: str
    campaign_dag_id: str
    hosts: list[str]
    conf: dict[str, Any]
    state: dict[str, Any]
    facts: dict[str, Any] = field(default_factory=dict)  # what the strategy found at start (its own fields)
    runs: dict[str, list[str]] = field(default_factory=dict)
    probes: list[Probe] = field(default_factory=list)
    down: dict[str, str] = field(default_factory=dict)
    round: int = 0
    ended: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Search:
        data = dict(data)
        data["probes"] = [Probe(**p) for p in data.get("probes", [])]
        return cls(**data)


class Strategy(Protocol):
    """A search's campaign side: its conf, what a probe run of a key is, how its results are read and stored."""

    name: ClassVar[str]
    dag_id: ClassVar[str]
    run_prefix: ClassVar[str]
    max_rounds: ClassVar[int]
    params: ClassVar[dict[str, tuple[Any, dict[str, Any]]]]
    doc: ClassVar[str]

    def check_spec(self, spec: CampaignSpec) -> str: ...
    def begin(self, conf: dict[str, Any], spec: CampaignSpec, warehouse: Warehouse | None) -> Search: ...
    def load(self, search: Search) -> Algorithm: ...
    def next_round(self, algo: Algorithm, now: float, slots: int) -> list[tuple[str, int]]: ...
    def probe_confs(
        self, search: Search, spec: CampaignSpec, picks: list[tuple[str, int]], hosts: list[str]
    ) -> list[Probe]: ...
    def read(
        self, search: Search, algo: Algorithm, spec: CampaignSpec, probe: Probe, warehouse: Warehouse
    ) -> dict[str, Any]: ...
    def take(self, algo: Algorithm, key: str, found: Any) -> None: ...
    def answer(self, search: Search, algo: Algorithm) -> dict[str, Any]: ...
    def keys(self, result: dict[str, Any]) -> list[dict[str, Any]]: ...
    def write(self, warehouse: Warehouse, dag_id: str, run_id: str, search: Search, result: dict[str, Any]) -> None: ...
    def lines(self, result: dict[str, Any]) -> list[str]: ...
    def round_line(self, algo: Algorithm) -> str: ...


@dataclass(frozen=True)
class Declared:
    """What a strategy declares once: its name, its DAG's id, its probe runs' prefix, the rounds its DAG has, its
    conf's fields, its DAG's tags and its state's class (the pure algorithm, with ``from_json``)."""

    name: str
    dag_id: str
    run_prefix: str
    max_rounds: int
    params: dict[str, tuple[Any, dict[str, Any]]]
    tags: tuple[str, ...]
    state: Any


class StrategyBase:
    """What every strategy's class shares: its declaration as class attributes (its module's docstring is its DAG's
    doc) and the loading of its state."""

    name: ClassVar[str]
    dag_id: ClassVar[str]
    run_prefix: ClassVar[str]
    max_rounds: ClassVar[int]
    params: ClassVar[dict[str, tuple[Any, dict[str, Any]]]]
    tags: ClassVar[tuple[str, ...]]
    doc: ClassVar[str]
    state_class: ClassVar[Any]

    def __init_subclass__(cls, declared: Declared | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if declared is not None:
            cls.name, cls.dag_id, cls.run_prefix = declared.name, declared.dag_id, declared.run_prefix
            cls.max_rounds, cls.params, cls.tags = declared.max_rounds, declared.params, declared.tags
            cls.state_class, cls.doc = declared.state, sys.modules[cls.__module__].__doc__ or ""

    ranked_by: ClassVar[tuple[str, str, str]] = ("", "", "")  # a ranking's key, count and figure columns

    def load(self, search: Search) -> Any:
        return self.state_class.from_json(search.state)

    def new_search(self, spec: CampaignSpec, conf: dict[str, Any], facts: dict[str, Any]) -> Search:
        """A search of this strategy over the campaign ``spec`` (its state is set once it is seeded)."""
        return Search(self.name, spec.name, spec.dag_id, spec.host_ids, conf, state={}, facts=facts)

    def keys(self, result: dict[str, Any]) -> list[dict[str, Any]]:
        """The answer's ranking as the rows of ``search_keys``: each key, its verdict, count and figure."""
        key, n, value = self.ranked_by
        return [
            {"key": r[key], "verdict": r["verdict"], "n": r[n], "value": r[value], "low": r["low"], "high": r["high"],
             "detail": r}
            for r in result["ranking"]
        ]  # fmt: skip

    def write(self, warehouse: Warehouse, dag_id: str, run_id: str, search: Search, result: dict[str, Any]) -> None:
        """A strategy's own tables beside ``searches`` and ``search_keys`` (which the engine writes): none here."""


def campaign_param(description: str) -> tuple[Any, dict[str, Any]]:
    """The ``campaign`` field of a search's conf (required)."""
    schema = {"type": "string", "pattern": r"^[a-z][a-z0-9_]{0,62}$", "title": "Campaign", "description": description}
    return "", schema


MAX_HOURS_PARAM: tuple[Any, dict[str, Any]] = (
    6.0,
    {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 168,
        "title": "Time budget",
        "description": "No new round starts after this. Unit: hours.",
    },
)


STRATEGIES: dict[str, Strategy] = {}  # filled as each strategy's module is imported (benchflow.searches does)


def register(kind: Any) -> None:
    """Make a strategy known by its name (its module calls this once, as it is imported). ``Any``: each strategy's
    methods take its own state class where :class:`Strategy` says :class:`Algorithm`."""
    STRATEGIES[kind.name] = kind


def strategy(name: str) -> Strategy:
    """The strategy named ``bisect``, ``config`` or ``tiles``."""
    if name not in STRATEGIES:
        raise ValueError(f"no search strategy {name!r} (known: {', '.join(sorted(STRATEGIES))})")
    return STRATEGIES[name]


# -- the campaign -------------------------------------------------------------------------------------------


def campaign_spec(name: str, check: Callable[[CampaignSpec], str] | None = None) -> CampaignSpec:
    """The campaign ``name``'s spec (its file alone is read); :class:`ConfError` names the field when it cannot be
    searched: no such campaign, an invalid spec, or what ``check`` says."""

    try:
        path = find_spec(name)
    except SpecError:
        known = ", ".join(sorted(p.stem for p in campaigns_dir().glob("*.yaml")))
        raise ConfError("campaign", f"no campaign {name!r} (known: {known})") from None
    try:
        spec = load_checked(path)
    except SpecError as exc:
        raise ConfError("campaign", f"the spec of {name!r} is invalid: {exc}") from None
    why = check(spec) if check is not None else ""
    if why:
        raise ConfError("campaign", why)
    return spec


def run_id_for(prefix: str, search_run_id: str, round_number: int, suffix: str) -> str:
    """A probe's campaign run id: readable, and the same on a retry of the same round."""
    tag = hashlib.sha256(search_run_id.encode()).hexdigest()[:8]
    return f"{prefix}_{tag}_r{round_number}_{re.sub(r'[^A-Za-z0-9_.-]', '_', suffix)}"


def run_tag(prefix: str, search_run_id: str) -> str:
    """What every probe run id of one search starts with."""
    return f"{prefix}_{hashlib.sha256(search_run_id.encode()).hexdigest()[:8]}_"


# -- the hosts ---------------------------------------------------------------------------------------------


def host_down(host_id: str) -> str:
    """Why a host of a pool does not answer ("" when it does). ``local`` and Edge hosts are this machine or a
    worker's: only an SSH host is tried (a command that does nothing, over a fresh connection)."""

    if host_id == LOCAL or edge_queue(host_id):
        return ""
    try:
        get_host(host_id).check("true", HOST_CHECK_S, "answer")
    except Exception as exc:  # any failure to reach it: its words are the answer's
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return ""


def live_hosts(search: Search, check: Callable[[str], str] = host_down) -> list[str]:
    """The pool's hosts that answer now; the others are named in ``search.down`` with why."""
    if len(search.hosts) < 2:
        return list(search.hosts)
    live = []
    for host in search.hosts:
        why = check(host)
        if why:
            search.down[host] = why
        else:
            search.down.pop(host, None)
            live.append(host)
    return live


# -- the steps ---------------------------------------------------------------------------------------------


def start(name: str, conf: dict[str, Any], warehouse: Warehouse | None = None) -> Search:
    """Check the conf (each error names its field), find the campaign, seed what earlier runs measured."""

    kind = strategy(name)
    checked = check_fields(dict(conf), kind.params, f"a {kind.name} search")
    spec = campaign_spec(checked["campaign"], kind.check_spec)
    return kind.begin(checked, spec, warehouse)


def plan(
    search: Search, search_run_id: str, now: float | None = None, check: Callable[[str], str] = host_down
) -> Search:
    """The next round's probe runs in ``search.probes`` (none: the search is over, or no host answers)."""
    kind = strategy(search.strategy)
    algo = kind.load(search)
    search.probes = []
    if algo.outstanding:
        raise RuntimeError(f"record every probe of the round first: {algo.outstanding} outstanding")
    hosts = live_hosts(search, check)
    if not hosts:
        search.ended = "failed: no host of the pool answers (" + "; ".join(f"{h}: {w}" for h, w in search.down.items())
        search.ended += ")"
        return search
    picks = kind.next_round(algo, time.time() if now is None else now, len(hosts))
    if not picks:
        search.state = algo.to_json()
        return search
    spec = campaign_spec(search.campaign)
    search.round = len(algo.rounds)
    search.probes = kind.probe_confs(search, spec, picks, hosts)
    for probe in search.probes:  # the strategy put each on a live host; one probe per host runs at a time
        probe.run_id = run_id_for(kind.run_prefix, search_run_id, search.round, probe.run_id)
        if len(search.hosts) > 1 and probe.host is not None:  # one campaign run per host: the host in its id
            probe.conf = {**probe.conf, HOST: probe.host}
            probe.run_id = f"{probe.run_id}_{re.sub(r'[^A-Za-z0-9_]', '_', probe.host)}"
        else:
            probe.host = None
        for key in probe.keys:
            search.runs.setdefault(key, []).append(probe.run_id)
    search.state = algo.to_json()
    return search


def record(
    search: Search, warehouse: Warehouse, dag_id: str, run_id: str, check: Callable[[str], str] = host_down
) -> dict[str, Any]:
    """Each probe run's results into the strategy; a probe whose host went down is taken back, to be measured on
    another host. Then the search's rows; the answer as it stands."""
    kind = strategy(search.strategy)
    algo = kind.load(search)
    spec = campaign_spec(search.campaign)
    for probe in search.probes:
        found = kind.read(search, algo, spec, probe, warehouse)  # per key: what it measured, or why nothing
        loaded = any(not isinstance(v, str) for v in found.values())
        if not loaded and probe.host and (why := check(probe.host)):
            search.down[probe.host] = why  # it failed because its host is down: measured again on another
            for key in probe.keys:
                algo.retract(key)
            continue
        for key in probe.keys:
            kind.take(algo, key, found.get(key, f"run {probe.run_id} gave no result for {key}"))
    search.probes = []
    search.state = algo.to_json()
    return save(search, warehouse, dag_id, run_id)


def finish(
    searches: list[Search], warehouse: Warehouse, dag_id: str, run_id: str, cancelled: str = "", now: float = 0.0
) -> tuple[Search, dict[str, Any]]:
    """The answer, from the latest state of the search: a search whose run was cancelled, or whose last round's
    probe runs ended before they were recorded, says so with what it knew; its probe runs are ended elsewhere
    (:mod:`benchflow.searches.listener`)."""
    # the latest step's state: the highest round, a recorded round before its plan, a later step among equals (a plan
    # that found nothing left to probe knows why: the budget it spent)
    search = max(enumerate(searches), key=lambda item: (item[1].round, not item[1].probes, item[0]))[1]
    kind = strategy(search.strategy)
    algo = kind.load(search)
    if cancelled:
        search.ended = f"cancelled: {cancelled}"
    elif search.probes:
        ended = ", ".join(p.run_id for p in search.probes)
        search.ended = search.ended or f"{ENDED_PROBES} before they were recorded (round {search.round}: {ended})"
    elif not search.ended and algo.status() == "running":  # no plan said why it stopped: ask the strategy now
        if kind.next_round(algo, now or time.time(), 1):
            search.ended = f"failed: the DAG's {kind.max_rounds} rounds ran out before the search was over"
        else:
            search.state = algo.to_json()  # what it stopped at (a budget spent), in its own words
    return search, save(search, warehouse, dag_id, run_id)


def save(search: Search, warehouse: Warehouse | None, dag_id: str, run_id: str) -> dict[str, Any]:
    """The search's rows as it stands: the Benchmarks view shows it from its start, probe runs under way."""
    kind = strategy(search.strategy)
    algo = kind.load(search)
    result = kind.answer(search, algo)
    if search.down:
        named = "; ".join(f"host {h} was down ({w})" for h, w in search.down.items())
        result["hosts_down"] = dict(search.down)
        result["summary"] = f"{result['summary']}; {named}"
    if search.ended:
        result["status"] = search.ended.split(":")[0]
        result["ended"] = search.ended
        result["summary"] = f"{search.ended}; what it knew: {result['summary']}"
        result["winner_yaml"] = None
    if warehouse is not None:
        from benchflow.warehouse import search_writes  # the warehouse: a task's, never loaded at DAG parse

        keys = kind.keys(result)
        search_writes.save_search(warehouse, dag_id, run_id, search, result, started_at(algo), keys)
        kind.write(warehouse, dag_id, run_id, search, result)
    return result


def started_at(algo: Algorithm) -> datetime | None:
    return datetime.fromtimestamp(algo.started_at, UTC) if algo.started_at else None
