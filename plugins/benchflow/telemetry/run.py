"""A run's telemetry as the pipeline uses it: what one run left (its samples, the sampler's note, its phases,
its requests' times), read once, and what its result rows gain from it.

The result kind says how its rows join their phases and which columns they gain (its ``telemetry`` hook calls
:func:`~benchhost.telemetry.summary.kernel_rows` or :func:`~benchhost.telemetry.summary.serving_rows`); this module
holds what every kind's hook is given, and the per-phase, per-GPU rows and the raw samples that go to their own
tables whatever the kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from benchhost.telemetry import servers as server_metrics
from benchhost.telemetry.files import Phase, Sample, read_info, read_phases, read_samples
from benchhost.telemetry.summary import gpu_servers, phase_gpu_rows
from benchhost.telemetry.validity import Limits

SAMPLES_FILE = "telemetry/samples.csv"  # in the run directory: the sampler's job folder
INFO_FILE = "telemetry/telemetry.json"
PHASES_FILE = "phases.jsonl"  # beside the benchmark's --out
REQUESTS_FILE = "requests.jsonl"
METRICS_SAMPLES_FILE = "metrics/samples.csv"  # the server-metrics sampler's job folder
METRICS_INFO_FILE = "metrics/metrics.json"
FILES = (SAMPLES_FILE, INFO_FILE, PHASES_FILE, METRICS_SAMPLES_FILE, METRICS_INFO_FILE)


@dataclass(frozen=True)
class ServerOf:
    """A server (or router) of a config as the server metrics need it: its role and its endpoint's URL."""

    config: str
    server: str
    role: str
    url: str | None  # None: the spec reads no metrics from it


@dataclass
class RunTelemetry:
    """What a run's hooks are given: its samples, phases and requests, the GPUs each config's servers hold
    (config → GPU index → server), the validity limits and the run's benchmark arguments."""

    samples: list[Sample] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    phases: list[Phase] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    gpu_servers: dict[str, dict[int, str]] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    run_args: Mapping[str, Any] = field(default_factory=dict)
    metric_samples: list[server_metrics.MetricSample] = field(default_factory=list)
    metrics_info: dict[str, Any] = field(default_factory=dict)
    servers: list[ServerOf] = field(default_factory=list)

    @classmethod
    def read(
        cls,
        text_of: Callable[[str], str | None],
        configs: Mapping[str, Mapping[str, str | None]],
        limits: Limits,
        run_args: Mapping[str, Any],
        servers: Sequence[ServerOf] = (),
    ) -> RunTelemetry:
        """From the run's fetched files (``text_of(name)``: the file's text, None when it was not fetched) and
        ``configs`` (config → server → its ``gpus``)."""
        import json

        requests = [json.loads(line) for line in (text_of(REQUESTS_FILE) or "").splitlines() if _whole(line)]
        return cls(
            samples=read_samples(text_of(SAMPLES_FILE) or ""),
            info=read_info(text_of(INFO_FILE) or "{}"),
            phases=read_phases(text_of(PHASES_FILE) or ""),
            requests=requests,
            gpu_servers={name: gpu_servers(servers) for name, servers in configs.items()},
            limits=limits,
            run_args=run_args,
            metric_samples=server_metrics.read_samples(text_of(METRICS_SAMPLES_FILE) or ""),
            metrics_info=read_info(text_of(METRICS_INFO_FILE) or "{}"),
            servers=list(servers),
        )

    def note(self) -> str:
        """One line on where the figures came from (the sampler's source, or why there are none)."""
        source = self.info.get("source")
        if not source:
            return "telemetry: not recorded (no sampler output)"
        if source == "none":
            return f"telemetry: none ({self.info.get('reason') or 'no GPU'})"
        cut = "; the samples file reached its size bound" if self.info.get("truncated") else ""
        return f"telemetry: {source}, {len(self.samples)} samples, {len(self.phases)} phases{cut}"

    def endpoints(self) -> tuple[list[server_metrics.Endpoint], dict[int, str]]:
        """The servers whose endpoints the sampler read (its URL's position in metrics.json), and per position
        why it never answered (``HTTP 404``, ``connection refused``) when it never did."""
        urls = [str(e.get("url")) for e in self.metrics_info.get("endpoints") or [] if isinstance(e, dict)]
        found = [
            server_metrics.Endpoint(s.config, s.server, s.role, urls.index(s.url))
            for s in self.servers
            if s.url in urls
        ]
        why = {
            i: f"no metrics endpoint ({_error(e)} from {e.get('url')})"
            for i, e in enumerate(self.metrics_info.get("endpoints") or [])
            if isinstance(e, dict) and not e.get("ok")
        }
        return found, why

    def metrics_note(self) -> str | None:
        """One line on the server metrics: how many endpoints answered, and each that never did (once)."""
        if not self.servers:
            return None
        if not self.metrics_info:
            return "server metrics: not recorded (no sampler output)"
        entries = [e for e in self.metrics_info.get("endpoints") or [] if isinstance(e, dict)]
        silent = [f"{e.get('url')} ({_error(e)})" for e in entries if not e.get("ok")]
        said = f"server metrics: {len(entries) - len(silent)} of {len(entries)} endpoints answered"
        return said + (f"; no metrics from {', '.join(silent)}" if silent else "")

    def phase_servers(self) -> list[dict[str, Any]]:
        endpoints, why = self.endpoints()
        silent = [server_metrics.Endpoint(s.config, s.server, s.role, -1) for s in self.servers if s.url is None]
        rows = server_metrics.phase_server_rows(self.metric_samples, self.phases, [*endpoints, *silent], why)
        for row in rows:
            if not row["scrapes"] and any(s.server == row["server"] and s.url is None for s in self.servers):
                row["note"] = "metrics: false in the spec"
        return rows

    def server_timeline(self) -> list[dict[str, Any]]:
        return server_metrics.timeline_rows(self.metric_samples, self.endpoints()[0], self.phases)

    def phase_gpus(self) -> list[dict[str, Any]]:
        return phase_gpu_rows(self.samples, self.phases, self.gpu_servers, self.limits)

    def sample_rows(self) -> list[dict[str, Any]]:
        return [asdict(s) for s in self.samples]


def _error(endpoint: Mapping[str, Any]) -> str:
    """Why an endpoint gave nothing: what its server answered when it was up (HTTP 404: it exports no metrics),
    else the last error (connection refused: it never listened)."""
    return str(endpoint.get("http_error") or endpoint.get("last_error") or "no answer")


def merge(rows: Sequence[dict[str, Any]], extra: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each row with the columns its telemetry hook returned (same order)."""
    return [{**row, **cols} for row, cols in zip(rows, extra, strict=True)]


def _whole(line: str) -> bool:
    """A JSON line written whole (a record cut off mid-write is skipped, as the side tables skip it)."""
    import json

    try:
        json.loads(line)
    except ValueError:
        return False
    return bool(line.strip())
