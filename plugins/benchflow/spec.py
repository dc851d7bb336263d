"""Campaign specs: YAML files in ``include/campaigns/``, validated before anything runs.

A bad spec raises :class:`SpecError`, whose message names the file, the line and the field, e.g.
``include/campaigns/x.yaml:14: benchmark.args.m_list: Input should be a valid integer``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from benchflow import kinds
from benchflow.hosts import edge_queue
from benchflow.kinds.options import BenchmarkOptions
from benchflow.params import check_defaults
from benchflow.paths import campaigns_dir, kernels_dir
from benchflow.payloads import GitPayload
from benchflow.space import ConfigSpace, show
from benchhost.telemetry.validity import Limits

if TYPE_CHECKING:
    from benchflow.kinds import ResultKind


@dataclass(frozen=True)
class SpecLimits:
    """How big one spec may be, all in one place (docs/campaigns.md lists them). Generous: the largest spec shipped is
    under 4 KB with three configs. Past them a spec is refused by file and line, before its DAG is built, so no
    spec can hold up the DAG file's import (Airflow's 30 s ``dagbag_import_timeout``) for every other campaign."""

    bytes: int = 256 * 1024  # the file
    nodes: int = 50_000  # YAML mappings, lists and values in the document
    depth: int = 32  # how deeply they nest
    configs: int = 64  # serving configs (each one is a task group of six tasks)
    servers: int = 32  # servers of one config
    services: int = 32
    arg_items: int = 4096  # values of one list in benchmark.args
    seconds: float = 10.0  # to read, check and build one spec's DAG (BENCH_SPEC_SECONDS overrides, for tests)

    def build_seconds(self) -> float:
        import os

        return float(os.environ.get("BENCH_SPEC_SECONDS") or self.seconds)


LIMITS = SpecLimits()
DAG_PREFIX = "bench_"  # a campaign's DAG id is this and the spec's name (its file's stem)


# An identifier that is safe as a DAG id part, a path component and a shell word.
Ident = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,62}$")]
# "local", an Airflow connection id, or "edge:<queue>" (the Edge worker that serves that queue).
HostId = Annotated[str, StringConstraints(pattern=r"^(?:edge:)?[A-Za-z][A-Za-z0-9_.-]{0,99}$")]


# A path inside the payload: no absolute paths, no "..", no shell metacharacters.
def _no_parent(value: str) -> str:
    if ".." in value.split("/"):
        raise ValueError("must not contain '..'")
    return value


PayloadPath = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}$"), AfterValidator(_no_parent)
]
# One line of printable text (no control characters, so nothing can smuggle a newline into a shell).
Line = Annotated[str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f]*$", max_length=400)]
Scalar = int | float | bool | Line
ArgValue = Scalar | Annotated[list[Scalar], Field(max_length=LIMITS.arg_items)]


DEADLINE_PATTERN = r"^(?:(?:[01]\d|2[0-3]):[0-5]\d|[1-9]\d{0,4}[smh])$"
SCHEDULE_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@yearly")


def daily_time(schedule: str | None) -> timedelta | None:
    """The time of day a schedule that fires once a day fires at (UTC), else None (croniter reads the presets)."""
    if schedule is None:
        return None
    from croniter import croniter

    fires = croniter(schedule, datetime(2026, 1, 5, tzinfo=UTC))
    times = [fires.get_next(datetime) for _ in range(8)]
    if any(b - a != timedelta(days=1) for a, b in itertools.pairwise(times)):
        return None
    return timedelta(hours=times[0].hour, minutes=times[0].minute)


def host_pool(host: str) -> str:
    return f"bench_host_{host}"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GitPayloadSpec(_Model):
    """``payload: {repo, ref, path}``: the payload is the folder ``path`` of the repository at ``ref`` (a run may
    override the ref with its ``payload_ref`` param; the commit it resolved to is recorded)."""

    repo: Annotated[str, StringConstraints(min_length=1, max_length=2048)] = Field(
        description="an absolute path on the Airflow side, or an https://, ssh://, file:// or user@host:path URL"
    )
    ref: Annotated[str, StringConstraints(min_length=1, max_length=256)] = Field(
        default="main", description="branch, tag or commit"
    )
    path: Annotated[str, StringConstraints(max_length=400)] = Field(default="", description="the payload's folder")

    @model_validator(mode="after")
    def _checked(self) -> GitPayloadSpec:
        GitPayload(self.repo, self.ref, self.path)  # PayloadError is a ValueError: it names the repo and field
        return self


class Service(_Model):
    """A service on the host that holds the GPUs and must be stopped for the benchmark, then restored.

    ``stop`` and ``start`` are shell commands written by the campaign's author (trusted like DAG code);
    they never receive values from a trigger form.
    """

    name: Ident
    stop: Line
    start: Line


class Server(_Model):
    """An inference server (or a router) launched detached before a serving sweep.

    ``command`` is written by the campaign's author (trusted like DAG code) and runs in the payload
    directory; ``{python}`` stands for the host's interpreter and ``{port}`` for ``port``.
    """

    name: Ident
    command: Line
    port: int = Field(ge=1, le=65535)
    health_path: Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9/_.-]*$")] = "/health"
    gpus: Annotated[str, StringConstraints(pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*$")] | None = Field(
        default=None, description="CUDA_VISIBLE_DEVICES, e.g. '0-3' or '4,5,6,7'"
    )
    numa_node: int | None = Field(default=None, ge=0, le=63, description="numactl --cpunodebind/--membind")
    role: Literal["prefill", "decode", "single", "router"] | None = Field(
        default=None,
        description="what the server does in its config; default: router for the router, prefill/decode when the "
        "name or the command says so (--disaggregation-mode, --role), else single",
    )
    metrics: bool = Field(default=True, description="read the server's Prometheus endpoint during the run")
    metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="the endpoint's port; default: the server's port, or a router's --prometheus-port (else 29000)",
    )
    metrics_path: Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9/_.-]*$")] = "/metrics"

    def env(self) -> dict[str, str]:
        devices = self.visible_devices()
        return {"CUDA_VISIBLE_DEVICES": devices} if devices else {}

    def visible_devices(self) -> str | None:
        if self.gpus is None:
            return None
        ids: list[str] = []
        for part in self.gpus.split(","):
            low, _, high = part.partition("-")
            ids += [str(i) for i in range(int(low), int(high or low) + 1)]
        return ",".join(ids)


class ServingConfig(_Model):
    """One configuration of a serving comparison: its servers, an optional router in front of them."""

    name: Ident
    servers: list[Server] = Field(min_length=1, max_length=LIMITS.servers)
    router: Server | None = None

    @model_validator(mode="after")
    def _distinct(self) -> ServingConfig:
        members = [*self.servers, *([self.router] if self.router else [])]
        for attribute in ("name", "port"):
            values = [getattr(m, attribute) for m in members]
            if len(values) != len(set(values)):
                raise ValueError(f"servers and router need distinct {attribute}s, got {values}")
        return self

    @property
    def endpoint(self) -> Server:
        """Where the benchmark client sends requests: the router, else the only server."""
        return self.router or self.servers[0]

    def roles(self) -> dict[str, str]:
        """Server name → its role (prefill | decode | single | router): the spec's ``role``, else what the name
        or the command says (``--disaggregation-mode prefill``, ``--role decode``, a server named prefill)."""
        out: dict[str, str] = {self.router.name: self.router.role or "router"} if self.router else {}
        for server in self.servers:
            words = f"{server.name} {server.command}".replace("=", " ").split()
            said = [r for r in ("prefill", "decode") if r == server.name or _flag_says(words, r)]
            out[server.name] = server.role or (said[0] if len(said) == 1 else "single")
        return out

    def metrics_urls(self) -> dict[str, str]:
        """Server name → the Prometheus URL the metrics sampler reads on the host (servers with ``metrics``)."""
        out = {}
        for member in [*self.servers, *([self.router] if self.router else [])]:
            if member.metrics:
                out[member.name] = (
                    f"http://127.0.0.1:{_metrics_port(member, member is self.router)}{member.metrics_path}"
                )
        return out


class ServingSpace(ConfigSpace):
    """A config space whose configs are checked as any config of a spec (:class:`ServingConfig`)."""

    _configs: list[ServingConfig] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _as_configs(self) -> ServingSpace:
        expansion = self.expand()
        for data in expansion.configs:
            try:
                self._configs.append(ServingConfig.model_validate(data))
            except ValidationError as exc:
                error = exc.errors()[0]
                where = ".".join(map(str, error["loc"]))
                values = show(expansion.values[data["name"]])
                raise ValueError(f"servers: config {data['name']} ({values}): {where}: {error['msg']}") from None
        return self

    def configs(self) -> list[ServingConfig]:
        return list(self._configs)


def _flag_says(words: list[str], role: str) -> bool:
    """Whether a command line names ``role`` as a server's mode (``--disaggregation-mode R``, ``--role R``)."""
    return any(w in ("--disaggregation-mode", "--role") and n == role for w, n in itertools.pairwise(words))


ROUTER_METRICS_PORT = 29000  # sglang-router's --prometheus-port default


def _metrics_port(member: Server, router: bool) -> int:
    if member.metrics_port is not None:
        return member.metrics_port
    if not router:
        return member.port
    words = member.command.replace("=", " ").split()
    given = [n for w, n in itertools.pairwise(words) if w == "--prometheus-port" and n.isdigit()]
    return int(given[0]) if given else ROUTER_METRICS_PORT


class Benchmark(BenchmarkOptions):
    """The fields of a spec's ``benchmark`` section that every kind has; each kind adds its own (its
    ``options`` model: the generic kind's ``patterns``, serving's ``repeats`` and ``warmup``), and
    :func:`benchmark_model` combines them. What the kind's fields mean to a run (its parser's keywords, its
    suite's parameters ...) are the options model's methods, nothing by default."""

    script: PayloadPath = Field(description="script inside the payload, run with the host's python")
    args: dict[Ident, ArgValue] = Field(default_factory=dict, description="rendered as --key value")
    marker: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:=-]{1,64}$")] = "ALL_DONE"
    format: Ident | None = Field(default=None, description="output format of the kind (default: its first)")
    output: PayloadPath = Field(default="results.jsonl", description="JSONL the script writes (--out)")
    deferrable: bool = Field(
        default=True, description="wait in the triggerer (no worker slot); false: poke from a worker slot"
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "parser" in data:
            old = str(data["parser"])
            kind = next((k.name for k in kinds.all_kinds() if old in k.former_names), None)
            hint = f"write 'kind: {kind}' at the top level" if kind else "name the kind at the top level"
            raise ValueError(f"'benchmark.parser' is renamed: {hint} (and 'benchmark.format' only to pick a format)")
        return data


def _default_kind() -> str:
    return kinds.default().name


@cache
def benchmark_model(kind: str) -> type[Benchmark]:
    """The ``benchmark`` section of a spec of ``kind``: the common fields and the kind's own."""

    options = kinds.get(kind).options
    bases: Any = (Benchmark, options)
    model: type[Benchmark] = create_model(f"{kind.capitalize()}Benchmark", __base__=bases, __module__=__name__)
    return model


def _benchmark_of_kind(value: Any, kind_name: str | None) -> Benchmark:
    """Validate a ``benchmark`` section as its kind has it; its argument defaults must fit their trigger-form
    fields (or the DAG could not be built). Field errors keep their place (``benchmark.repeats``)."""

    if isinstance(value, Benchmark):
        return value
    if kind_name not in kinds.names():  # the kind itself is reported; nothing more to say about its fields
        return Benchmark.model_construct(**(value if isinstance(value, dict) else {}))
    bench = benchmark_model(kind_name).model_validate(value)
    try:
        kind = kinds.get(kind_name)
        check_defaults(dict(bench.args), kind.form, kind.paired)
    except ValueError as exc:
        error = {"type": "value_error", "loc": ("args",), "input": dict(bench.args), "ctx": {"error": exc}}
        raise ValidationError.from_exception_data("Benchmark", [error]) from None  # type: ignore[list-item]
    return bench


class Timeouts(_Model):
    """Seconds. Every stage has a bound: nothing waits forever on a host."""

    preflight: float = Field(default=120, gt=0)
    services: float = Field(default=300, gt=0)
    deploy: float = Field(default=600, gt=0)
    server_launch: float = Field(default=300, gt=0, description="starting or stopping a config's servers")
    server_ready: float = Field(default=900, gt=0)
    launch: float = Field(default=120, gt=0, description="starting or stopping the benchmark job")
    benchmark: float = Field(default=3600, gt=0)
    fetch: float = Field(default=600, gt=0, description="copying logs and results into the artifact store")
    poke_interval: float = Field(default=5, gt=0, le=300)
    host_wait: float = Field(default=6 * 3600, gt=0, description="how long to queue for a host another run holds")
    host_poke_interval: float = Field(default=30, gt=0, le=600, description="how often a queued run asks again")

    def lease_seconds(self, configs: int) -> float:
        """Upper bound on how long a run holds its host: every stage at its timeout, plus slack."""
        per_config = 2 * self.launch + self.benchmark + (2 * self.server_launch + self.server_ready if configs else 0)
        return self.preflight + 2 * self.services + self.deploy + max(1, configs) * per_config + self.fetch + 600


class GpusFree(_Model):
    """When the host's GPUs count as free, checked after the services stop and before anything is deployed."""

    max_used_mib: float = Field(default=1024, ge=0, description="memory in use per GPU at most")
    wait: float = Field(default=300, gt=0, description="seconds to wait for them, then fail naming the holders")
    poke_interval: float = Field(default=5, gt=0, le=300)


class Telemetry(_Model):
    """The GPU sampler that runs beside the benchmark and the servers (NVML when the host's Python has
    ``nvidia-ml-py``, else ``nvidia-smi -lms``; none on a host without GPUs)."""

    enabled: bool = Field(default=True, description="sample the GPUs during the run")
    period_ms: int = Field(default=200, ge=10, le=60_000, description="sampling period")
    max_mib: int = Field(default=256, ge=1, le=65_536, description="the samples file's size bound; past it, no more")

    @property
    def max_bytes(self) -> int:
        return self.max_mib * 2**20


class Validity(_Model):
    """When a result is not ``ok``: the limits of the rules of :mod:`benchhost.telemetry.validity` (data, with its
    defaults); rows that are noisy, throttled or contended are stored but never a baseline."""

    spread_max: float = Field(default=1.5, gt=1, description="p90 / p10 of a row's timed calls")
    repeat_cv_max: float = Field(default=0.10, gt=0, description="stdev / mean of throughput across repeats")
    max_wait_share: float = Field(default=0.10, gt=0, le=1, description="the benchmark's CPU run-queue wait share")
    max_steal_pct: float = Field(default=5.0, ge=0, le=100, description="CPU steal over a phase, %")
    max_others_busy_pct: float | None = Field(default=None, ge=0, le=100, description="others' CPU use, %; null: off")

    def limits(self) -> Any:
        return Limits(**self.model_dump())


class RegressionLimits(_Model):
    """When a metric counts as regressed (see :mod:`benchflow.nightly.regressions`)."""

    lookback: int = Field(default=14, ge=2, le=365, description="previous valid scheduled runs in the baseline")
    min_runs: int = Field(default=5, ge=2, description="no verdict with a shorter history")
    z_threshold: float = Field(default=2.5, gt=0)
    min_change: float = Field(default=0.05, ge=0, lt=1, description="relative, e.g. 0.05 = 5%")


class AutoBisect(_Model):
    """A regression or change point found at a night's end starts ``bench_bisect`` between the commits around it,
    once per commit range, within this budget (the bisect DAG's own ``max_probes`` and ``max_hours``)."""

    max_probes: int = Field(default=8, ge=2, le=64, description="probe runs of one bisection at most")
    max_hours: float = Field(default=6, gt=0, le=72, description="hours of one bisection at most")
    per_night: int = Field(default=1, ge=1, le=8, description="bisections one night may start (largest change first)")


class Decide(_Model):
    """After a night that regressed or drifted, a person decides in Airflow (a human-in-the-loop task): accept the
    new level as the baseline, bisect, or ignore, with a reason. Unanswered within ``within_hours``: ``default``."""

    within_hours: float = Field(default=20, gt=0, le=168, description="how long the decision waits")
    default: Literal["accept", "bisect", "ignore"] = Field(default="ignore", description="taken when nobody answers")


class Regressions(RegressionLimits):
    decide: Decide | None = Field(default=None, description="a person's decision after a regression; null: off")
    bisect: AutoBisect | None = Field(
        default=None, description="bisect a regression automatically (a payload from git only); null: off"
    )
    by_gpu: dict[Annotated[str, StringConstraints(max_length=100)], RegressionLimits] = Field(
        default_factory=dict, description="overrides keyed by GPU model, as nvidia-smi names it"
    )
    notify: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")] | None = Field(
        default=None, description="module:function called with (dag_id, run_id, findings)"
    )

    def for_gpu(self, model: str) -> RegressionLimits:
        return self.by_gpu.get(model, self)


# campaign names whose DAG id another DAG of this project already has
RESERVED_NAMES = {
    "report": "the report DAG (dags/reports.py)",
    "bisect": "the bisect DAG (dags/bisect.py)",
    "config_search": "the config search DAG (dags/config_search.py)",
}


class CampaignSpec(_Model):
    name: Ident
    description: Line = ""
    kind: Ident = Field(default_factory=lambda: _default_kind(), description="result kind (benchflow/kinds/)")
    host: HostId = "local"
    hosts: list[HostId] = Field(
        default_factory=list,
        description="the campaign's host pool: a run may go to any of them (its host param; default: host)",
        max_length=64,
    )
    payload: Ident | GitPayloadSpec
    requires: list[Ident] = Field(default_factory=list, description="other payloads deployed inside this one")
    schedule: Line | None = Field(default="@daily", description="cron or preset (default nightly); null: manual only")
    tags: list[Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")]] = Field(default_factory=list)
    deadline: Annotated[str, StringConstraints(pattern=DEADLINE_PATTERN)] | None = Field(
        default=None,
        description='when a run must be done: "07:00" (UTC, a daily schedule\'s runs) or "90m" after it was queued; '
        "a missed one calls regressions.notify with what is still running",
    )
    retries: int = Field(default=0, ge=0, le=10)
    services: list[Service] = Field(default_factory=list, max_length=LIMITS.services)
    configs: list[ServingConfig] = Field(
        default_factory=list, max_length=LIMITS.configs, description="configs of servers, run one after another"
    )
    space: ServingSpace | None = Field(
        default=None, description="a config space (benchflow/space.py) that makes the configs: for a config search"
    )
    benchmark: Benchmark
    timeouts: Timeouts = Field(default_factory=Timeouts)
    gpus_free: GpusFree = Field(default_factory=GpusFree)
    regressions: Regressions = Field(default_factory=Regressions)
    telemetry: Telemetry = Field(default_factory=Telemetry)
    validity: Validity = Field(default_factory=Validity)
    bottleneck: dict[str, float] = Field(
        default_factory=dict,
        description="thresholds of its kind's bottleneck rules (benchflow/kinds/<kind>/bottleneck.yaml) it changes",
    )

    @field_validator("bottleneck")
    @classmethod
    def _known_thresholds(cls, value: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        if (kind := info.data.get("kind")) in kinds.names():
            kinds.get(kind).bottleneck_rules(value)  # an unknown name is refused, naming the kind's known ones
        return value

    @field_validator("benchmark", mode="wrap")
    @classmethod
    def _benchmark_of_its_kind(cls, value: Any, handler: Any, info: ValidationInfo) -> Benchmark:
        return _benchmark_of_kind(value, info.data.get("kind"))

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in kinds.names():
            raise ValueError(f"no result kind {value!r} (known: {', '.join(kinds.names())})")
        return value

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_NAMES:
            raise ValueError(f"{value!r} is reserved: its DAG id bench_{value} belongs to {RESERVED_NAMES[value]}")
        return value

    @model_validator(mode="after")
    def _kind_fits(self) -> CampaignSpec:
        if self.space is not None:
            if self.configs:
                raise ValueError("give configs or a space that makes them, not both")
            object.__setattr__(self, "configs", self.space.configs())  # frozen: set once, while validating
        kind = self.result_kind
        if self.benchmark.format is not None and self.benchmark.format not in kind.format_names:
            raise ValueError(
                f"kind {kind.name!r} has no format {self.benchmark.format!r} (known: {', '.join(kind.format_names)})"
            )
        if kind.servers == "required" and not self.configs:
            raise ValueError(f"a {kind.name} campaign needs at least one entry in configs (its servers)")
        if kind.servers == "forbidden" and self.configs:
            raise ValueError(f"configs (servers) do not belong to a {kind.name} campaign")
        names = [c.name for c in self.configs]
        if len(names) != len(set(names)):
            raise ValueError(f"config names must be distinct, got {names}")
        return self

    @field_validator("payload")
    @classmethod
    def _payload_exists(cls, value: str | GitPayloadSpec, info: ValidationInfo) -> str | GitPayloadSpec:
        if isinstance(value, GitPayloadSpec):
            return value
        root = Path((info.context or {}).get("kernels_dir") or kernels_dir())
        if not (root / value).is_dir():
            raise ValueError(f"no payload directory kernels/{value}/")
        return value

    @field_validator("requires")
    @classmethod
    def _requirements_exist(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for name in value:
            cls._payload_exists(name, info)
        return value

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        if value is None or value in SCHEDULE_PRESETS:
            return value
        from croniter import croniter

        if len(value.split()) != 5 or not croniter.is_valid(value):
            raise ValueError(f"not a 5-field cron expression or one of {', '.join(SCHEDULE_PRESETS)}: {value!r}")
        return value

    def deadline_after(self) -> tuple[str, timedelta] | None:
        """The deadline as Airflow's deadline alert takes it: ("queued", how long after a run was queued) or
        ("logical", how long after a daily run's logical date the clock time comes)."""
        if self.deadline is None:
            return None
        if ":" not in self.deadline:
            unit = {"s": 1, "m": 60, "h": 3600}[self.deadline[-1]]
            return "queued", timedelta(seconds=int(self.deadline[:-1]) * unit)
        hours, minutes = (int(part) for part in self.deadline.split(":"))
        fire = daily_time(self.schedule)
        if fire is None:
            raise ValueError(
                f"deadline {self.deadline!r} is a clock time: it needs a daily schedule, not {self.schedule!r}"
            )
        after = timedelta(hours=hours, minutes=minutes) - fire
        return "logical", after if after > timedelta(0) else after + timedelta(days=1)

    @property
    def result_kind(self) -> ResultKind:
        return kinds.get(self.kind)

    @property
    def dag_id(self) -> str:
        return DAG_PREFIX + self.name

    def lease_seconds(self) -> float:
        """How long a run may hold its host: every stage at its timeout, the GPU wait included."""
        return self.timeouts.lease_seconds(len(self.configs)) + self.gpus_free.wait

    def metrics_urls(self) -> list[str]:
        """The distinct Prometheus URLs of every config's servers and router, in spec order (configs run one after
        the other and may reuse a port: the sampler reads each URL once, the pipeline tells them apart by time)."""
        urls: list[str] = []
        for config in self.configs:
            urls += [u for u in config.metrics_urls().values() if u not in urls]
        return urls

    @model_validator(mode="after")
    def _host_in_pool(self) -> CampaignSpec:
        if self.hosts and self.host not in self.hosts:
            raise ValueError(f"host {self.host!r} is not one of hosts {self.hosts}")
        if len(set(self.hosts)) != len(self.hosts):
            raise ValueError(f"hosts must be distinct, got {self.hosts}")
        edges = [h for h in self.host_ids if edge_queue(h)]
        if edges and len(edges) != len(self.host_ids):
            raise ValueError(
                f"hosts {self.hosts}: Edge hosts (edge:<queue>) and other hosts cannot share a campaign (its host "
                "tasks run on one executor: the Edge workers', or the workers that reach hosts by SSH)"
            )
        return self

    @model_validator(mode="after")
    def _nightly_loop(self) -> CampaignSpec:
        if self.deadline is not None:
            self.deadline_after()  # a clock time without a daily schedule is refused here, naming the field
        decide = self.regressions.decide
        if decide is not None and decide.default == "bisect" and self.git_payload is None:
            raise ValueError("regressions.decide.default: bisect needs a payload from git (payload: {repo, ref})")
        if self.regressions.bisect is not None and self.git_payload is None:
            raise ValueError("regressions.bisect needs a payload from git (payload: {repo, ref}): it bisects commits")
        return self

    @property
    def host_ids(self) -> list[str]:
        """The hosts a run may go to: ``hosts``, or the one ``host``."""
        return list(self.hosts) or [self.host]

    @property
    def git_payload(self) -> GitPayloadSpec | None:
        return self.payload if isinstance(self.payload, GitPayloadSpec) else None

    @property
    def payload_name(self) -> str:
        """The payload folder's name under kernels/, or the repository's path and ref."""
        git = self.git_payload
        return f"{git.repo}@{git.ref}:{git.path or '/'}" if git else str(self.payload)

    @property
    def pool(self) -> str:
        """The host's Airflow pool (one slot): every task that touches the host runs in it. A campaign with
        several hosts runs in a pool of its own with a slot per host (each run still leases its host)."""
        return host_pool(self.host) if len(self.host_ids) == 1 else f"bench_hosts_{self.name}"

    @property
    def pool_slots(self) -> int:
        return len(self.host_ids)

    def spec_hash(self) -> str:
        """sha256 of the validated spec, so a result row can be traced to the exact configuration."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str
    line: int | None


class SpecError(ValueError):
    """A campaign spec that cannot be used; ``str()`` lists every problem by file, line and field."""

    def __init__(self, path: Path, errors: list[FieldError]):
        self.path = path
        self.errors = errors
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        name = _display(self.path)
        return [f"{name}:{e.line or '?'}: {e.field or '<top>'}: {e.message}" for e in self.errors]


def load_spec(path: Path, payloads: Path | None = None) -> CampaignSpec:
    """Read and validate one spec file; every problem is a :class:`SpecError` naming file, line and field."""
    path = Path(path)
    if path.suffix not in SPEC_SUFFIXES:
        raise SpecError(path, [_suffix_error(path)])
    root, data = _read_yaml(path)
    if not isinstance(data, dict):
        raise SpecError(path, [FieldError("", "a spec is a mapping of fields", 1)])
    if "name" in data and data["name"] != path.stem:
        raise SpecError(path, [FieldError("name", f"must match the file name {path.stem!r}", _line(root, ("name",)))])
    data.setdefault("name", path.stem)
    try:
        return CampaignSpec.model_validate(data, context={"kernels_dir": payloads})
    except ValidationError as exc:
        found = exc.errors()
        errors = [
            FieldError(_dotted(tuple(e["loc"])), _message(e, data), _line(root, tuple(e["loc"])))
            for e in found[:SHOWN_ERRORS]
        ]
        raise SpecError(path, errors + _more(len(found))) from None


SHOWN_ERRORS = 20  # a spec's problems listed one by one; the rest are counted (20,000 unknown keys read as one line)


def _more(found: int) -> list[FieldError]:
    """The line that counts what is past :data:`SHOWN_ERRORS` (none when nothing is)."""
    if found <= SHOWN_ERRORS:
        return []
    return [
        FieldError(
            "",
            f"and {found - SHOWN_ERRORS} more problems of the same kinds (the first {SHOWN_ERRORS} are listed)",
            None,
        )
    ]


def _message(error: Any, data: dict[str, Any]) -> str:
    """pydantic's message, but an unknown field says so, and one of another kind's benchmark section says whose."""
    if error["type"] != "extra_forbidden":
        return str(error["msg"])
    loc = tuple(error["loc"])
    if len(loc) == 2 and loc[0] == "benchmark":
        from benchflow import kinds  # the kinds import this module: at call time, no circle

        owners = [k.name for k in kinds.all_kinds() if loc[1] in k.options.model_fields]
        if owners:
            kind = data.get("kind") or _default_kind()
            return f"unknown field for kind {kind!r}: it belongs to kind {' or '.join(map(repr, owners))}"
    return "unknown field"


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: about 10x faster
_STR_TAG = "tag:yaml.org,2002:str"


def _read_yaml(path: Path) -> tuple[Any, Any]:
    """The document's node tree (for line numbers) and its data, from one pass of the parser; refused first when
    the file is not one this project may read (a link out of its folder, not a plain file, too big), and before
    anything is built from it when its tree is too big or uses YAML aliases (``*name``: one line of them can
    stand for a billion values)."""
    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(path, [FieldError("", f"not UTF-8 text (byte {exc.start})", line)]) from None
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        problems = _key_problems(root, path, text)
        if problems:
            raise SpecError(path, problems)
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        # the parser's own words, never the line it quotes: the file may not be a spec at all
        said = "; ".join(str(part) for part in (getattr(exc, "context", None), getattr(exc, "problem", None)) if part)
        message = f"not valid YAML: {_short(said or type(exc).__name__, 200)}"
        raise SpecError(path, [FieldError("", message, mark.line + 1 if mark else None)]) from None
    finally:
        loader.dispose()
    return root, data


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, at most :data:`LIMITS` ``.bytes``; a symbolic link that leads out of the spec's folder,
    and anything but a plain file (a FIFO would block the DAG import), are refused without reading a byte."""
    import os
    import stat

    folder = Path(os.path.abspath(path)).parent.resolve()
    try:
        target = Path(path).resolve(strict=True)
        info = target.stat()
    except (OSError, RuntimeError) as exc:
        raise SpecError(path, [FieldError("", f"cannot read: {getattr(exc, 'strerror', None) or exc}", None)]) from None
    if not target.is_relative_to(folder):
        where = "a symbolic link to a file outside the campaigns folder"
        raise SpecError(path, [FieldError("", f"is {where}: not read (copy the spec into the folder)", None)])
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(path, [FieldError("", "is not a regular file: not read", None)])
    too_big = f"a spec may have {LIMITS.bytes} bytes at most"
    if info.st_size > LIMITS.bytes:
        raise SpecError(path, [FieldError("", f"is {info.st_size} bytes: {too_big}", None)])
    try:
        with open(target, "rb") as handle:
            raw = handle.read(LIMITS.bytes + 1)
    except OSError as exc:
        raise SpecError(path, [FieldError("", f"cannot read: {exc.strerror}", None)]) from exc
    if len(raw) > LIMITS.bytes:
        raise SpecError(path, [FieldError("", f"is over {LIMITS.bytes} bytes: {too_big}", None)])
    return raw


def _key_problems(root: Any, path: Path, text: str) -> list[FieldError]:
    """Keys YAML would silently mangle: a repeated key (the last one wins) or a key read as a boolean,
    number or null (``on:``, ``off:``, ``yes:``), each with its line. Walked without recursion and without
    following an alias twice: an alias is refused (with the line of the first), so is a tree past the limits."""
    problems: list[FieldError] = []
    seen_nodes: set[int] = set()
    stack: list[tuple[Any, str, int]] = [(root, "", 1)] if root is not None else []
    while stack:
        node, where, depth = stack.pop()
        if id(node) in seen_nodes:
            raise SpecError(path, [_alias_error(text, where)])
        seen_nodes.add(id(node))
        if len(seen_nodes) > LIMITS.nodes:
            message = f"more than {LIMITS.nodes} YAML values: a spec may have that many at most"
            raise SpecError(path, [FieldError(where, message, node.start_mark.line + 1)])
        if depth > LIMITS.depth and not isinstance(node, yaml.ScalarNode):
            message = f"nested more than {LIMITS.depth} levels deep: a spec may nest that deep at most"
            raise SpecError(path, [FieldError(where, message, node.start_mark.line + 1)])
        children: list[tuple[Any, str, int]] = []
        if isinstance(node, yaml.MappingNode):
            names: set[str] = set()
            for key, value in node.value:
                name = _shown(str(key.value))
                field = f"{where}.{name}" if where else name
                if key.tag != _STR_TAG:
                    problems.append(
                        FieldError(
                            field,
                            f"key {name!r} is read by YAML as a {key.tag.rsplit(':', 1)[-1]}; quote it: '{name}'",
                            key.start_mark.line + 1,
                        )
                    )
                elif key.value in names:
                    problems.append(
                        FieldError(field, "duplicate key (YAML would keep only the last)", key.start_mark.line + 1)
                    )
                names.add(str(key.value))
                children += [(key, field, depth + 1), (value, field, depth + 1)]
        elif isinstance(node, yaml.SequenceNode):
            children = [(item, f"{where}.{index}", depth + 1) for index, item in enumerate(node.value)]
        stack.extend(reversed(children))
    problems.sort(key=lambda p: p.line or 0)
    return problems[:SHOWN_ERRORS] + _more(len(problems))


def _alias_error(text: str, where: str) -> FieldError:
    """The first alias of the document, by its line (its node in the tree has only the anchor's)."""
    line = None
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent) and event.start_mark is not None:
                line = event.start_mark.line + 1
                break
    except yaml.YAMLError:
        pass
    message = "YAML aliases (*name) are not allowed in a campaign spec: write the value out in full"
    return FieldError(where, message, line)


def _shown(key: str) -> str:
    """A key as an error may print it: a name, or only its length (an unknown key may be a line of any file)."""
    if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", key):
        return key
    return f"<a key of {len(key)} characters>"


def _short(value: Any, limit: int = 120) -> str:
    """``repr`` of a value, cut to ``limit`` characters (an error message never echoes a huge value whole)."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}… ({len(text)} characters)"


class RejectedSpecs(ValueError):
    """Raised by ``dags/campaign_errors.py`` so that the Airflow UI lists the specs no DAG was built for."""

    def __init__(self, errors: list[SpecError]):
        self.errors = errors
        super().__init__(
            f"{len(errors)} campaign spec(s) rejected, no DAG built for them:\n" + "\n".join(str(e) for e in errors)
        )


def load_all(directory: Path | None = None) -> tuple[list[CampaignSpec], list[SpecError]]:
    """Every spec in a folder: the valid ones and the errors of the others."""
    paths, errors = spec_paths(directory)
    specs: list[CampaignSpec] = []
    for path in paths:
        try:
            specs.append(load_checked(path))
        except SpecError as exc:
            errors.append(exc)
    return specs, errors


def spec_paths(directory: Path | None = None) -> tuple[list[Path], list[SpecError]]:
    """The spec files of a folder to load, and the errors of those refused by their name alone: a suffix in
    another case (``x.YAML``), a name another file has (``x.yaml`` and ``x.yml``)."""
    directory = Path(directory or campaigns_dir())
    paths: list[Path] = []
    errors: list[SpecError] = []
    seen: dict[str, Path] = {}
    folder = _folder_campaigns(directory)
    for path in spec_files(directory):
        if path.suffix not in SPEC_SUFFIXES:
            errors.append(SpecError(path, [_suffix_error(path)]))
            continue
        if path.stem in seen:
            clash = f"campaign {path.stem!r} is also defined in {seen[path.stem].name}: rename one"
            errors.append(SpecError(path, [FieldError("name", clash, None)]))
            continue
        if path.stem in folder:  # two bundles, one DAG id: its runs would take whichever was parsed last
            clash = (
                f"campaign {path.stem!r} is also the deployment's campaigns folder's ({folder[path.stem]}): its DAG "
                f"{DAG_PREFIX}{path.stem} belongs to that one; rename this one"
            )
            errors.append(SpecError(path, [FieldError("name", clash, None)]))
            continue
        seen[path.stem] = path
        paths.append(path)
    return paths, errors


SPEC_SUFFIXES = (".yaml", ".yml")


def _folder_campaigns(directory: Path) -> dict[str, Path]:
    """For a folder other than the deployment's campaigns folder (a git spec repository's bundle): the campaigns
    folder's specs by name, which keep their DAG ids; empty for the campaigns folder itself."""
    own = campaigns_dir()
    try:
        if directory.resolve() == own.resolve() or not own.is_dir():
            return {}
    except OSError:
        return {}
    return {p.stem: p for p in spec_files(own) if p.suffix in SPEC_SUFFIXES}


def _suffix_error(path: Path) -> FieldError:
    message = f"a spec's file name ends in .yaml or .yml, in lower case: rename it to {path.stem}.yaml"
    return FieldError("", message, None)


def spec_files(directory: Path) -> list[Path]:
    """The folder's spec files, and those whose suffix is one in another case (``x.YAML``, ``x.Yml``): those are
    refused by name rather than ignored."""
    return sorted(p for p in Path(directory).iterdir() if p.suffix.lower() in SPEC_SUFFIXES)


def load_checked(path: Path) -> CampaignSpec:
    """:func:`load_spec`, with any other failure of a spec's checks turned into a :class:`SpecError` too: a bug in
    one spec's checks must neither hide the other specs nor reach a user as a traceback."""
    try:
        return load_spec(path)
    except SpecError:
        raise
    except Exception as exc:  # reported by file, like any other problem of the spec
        raise SpecError(path, [FieldError("", f"could not be checked: {exc!r}", None)]) from exc


def find_spec(name_or_path: str, directory: Path | None = None) -> Path:
    directory = directory or campaigns_dir()
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") and candidate.exists():
        return candidate
    path = Path(directory) / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in Path(directory).glob("*.yaml")))
        raise SpecError(path, [FieldError("", f"no such campaign; known: {known}", None)])
    return path


def _dotted(loc: Iterable[Any]) -> str:
    # pydantic reports union members as extra loc parts ("int", "list[...]"); they say nothing to a user.
    parts = [p for p in loc if not (isinstance(p, str) and re.search(r"[\[\]|]|^(int|float|bool|str)$", p))]
    return ".".join(_shown(p) if isinstance(p, str) else str(p) for p in parts)


def _line(node: Any, loc: Iterable[Any]) -> int | None:
    """Line (1-based) of the deepest YAML node that ``loc`` reaches."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == part), None)
            if match is None:
                key = next((k for k, _ in node.value if k.value == part), None)
                return key.start_mark.line + 1 if key is not None else line
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        line = node.start_mark.line + 1
    return line


def _display(path: Path) -> str:
    """The path as given (made relative to here), never where a link leads."""
    import os

    try:
        return str(Path(os.path.abspath(path)).relative_to(Path.cwd()))
    except ValueError:
        return str(path)
