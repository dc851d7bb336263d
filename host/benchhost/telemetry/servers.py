"""What the servers report about themselves: their Prometheus endpoints read into canonical columns, and those
columns cut per phase and per server (standard library only: the host core).

The names SGLang (``--enable-metrics``), vLLM and sglang-router export, across their versions, are data:
``server_metrics.tsv`` beside this file maps each exposed name to one canonical column of :data:`COLUMNS` (or
declares it ``ignored``) and says how the values of one name with different label sets combine (``sum``: queue
lengths, counters; ``max``: fractions). A histogram is listed by its base name; its ``_sum`` and ``_count`` are
kept (as ``<column>_sum`` / ``<column>_count``), its buckets are not.

The metrics sampler (:mod:`benchhost.metrics_sampler`) writes ``samples.csv`` with one line per endpoint, time and
column (``t,endpoint,column,value``); :func:`phase_server_rows` turns them into one row per phase and server:
gauges as mean and max over the phase, counters as their increase over it, histograms as the mean of what they
observed in it (Δsum / Δcount).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from benchhost.telemetry.files import Phase

TABLE = Path(__file__).resolve().parent / "server_metrics.tsv"
TABLE_HEADER = ("server", "name", "type", "column", "how", "first_seen", "last_seen", "source", "note")

# canonical column → its type (gauge | counter | histogram)
COLUMNS: dict[str, str] = {
    "running": "gauge",  # requests running (in the batch)
    "queued": "gauge",  # requests waiting
    "kv_usage": "gauge",  # KV cache in use, 0..1
    "kv_tokens": "gauge",  # KV tokens in use
    "prefix_hit_rate": "gauge",  # the server's own prefix-cache hit rate, 0..1
    "spec_accept_length": "gauge",  # speculative decoding: mean accepted length
    "gen_throughput": "gauge",  # the server's own generation throughput, tokens/s
    "preemptions": "counter",  # requests preempted (vLLM) or retracted (SGLang)
    "prefix_queries": "counter",  # prompt tokens looked up in the prefix cache
    "prefix_hits": "counter",  # of those, found
    "prompt_tokens": "counter",
    "generation_tokens": "counter",
    "requests": "counter",  # requests finished (or, for a router, received)
    "spec_draft_tokens": "counter",
    "spec_accepted_tokens": "counter",
    "ttft_s": "histogram",  # time to first token, s
    "itl_s": "histogram",  # inter-token latency (time per output token), s
    "e2e_s": "histogram",  # end-to-end request latency, s
    "queue_s": "histogram",  # time queued, s
}
GAUGES = tuple(c for c, t in COLUMNS.items() if t == "gauge")
COUNTERS = tuple(c for c, t in COLUMNS.items() if t == "counter")
HISTOGRAMS = tuple(c for c, t in COLUMNS.items() if t == "histogram")
ROLES = ("prefill", "decode", "single", "router")
SAMPLE_HEADER = ("t", "endpoint", "column", "value")
UP = "up"  # the sampler writes 1 under this column for every endpoint it read
MAX_LINE = 64 * 1024  # an exposition line longer than this is not read


@dataclass(frozen=True)
class Name:
    """One exposed name: its canonical column ("ignored": declared and left out), how label sets combine, and
    whether it is the name to keep when a release exports it beside another of the same column (a name the
    table's note says was ``renamed`` yields to the newer one)."""

    server: str
    column: str
    type: str
    how: str
    preferred: bool = True


@cache
def table(path: Path = TABLE) -> dict[str, Name]:
    """The exposed name → :class:`Name` of ``server_metrics.tsv``."""
    names: dict[str, Name] = {}
    rows = csv.DictReader(io.StringIO(path.read_text()), delimiter="\t")
    for row in rows:
        preferred = "renamed" not in (row.get("note") or "")
        names[row["name"]] = Name(row["server"], row["column"], row["type"], row["how"], preferred)
    return names


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class Reader:
    """The table compiled for reading: every kept line name (a histogram's ``_sum`` and ``_count``) → (column,
    how, preferred)."""

    lines: Mapping[str, tuple[str, str, bool]]


@cache
def _reader(names: tuple[tuple[str, Name], ...]) -> Reader:
    lines: dict[str, tuple[str, str, bool]] = {}
    for name, entry in names:
        if entry.column == "ignored":
            continue
        if entry.type == "histogram":
            lines |= {name + s: (entry.column + s, "sum", entry.preferred) for s in ("_sum", "_count")}
        else:
            lines[name] = (entry.column, entry.how, entry.preferred)
    return Reader(lines)


@cache
def _default_reader() -> Reader:
    return _reader(tuple(table().items()))


def _reader_of(names: Mapping[str, Name] | None) -> Reader:
    return _default_reader() if names is None else _reader(tuple(names.items()))


def kept_names(names: Mapping[str, Name] | None = None) -> list[str]:
    """The exposed line names the table keeps (a histogram's ``_sum`` and ``_count``, never its buckets): what a
    scrape asks a server for with prometheus_client's ``name[]`` filter."""
    return sorted(_reader_of(names).lines)


def read_exposition(text: str, names: Mapping[str, Name] | None = None) -> dict[str, float]:
    """Prometheus text exposition → canonical column → value, for the names of the table (others are skipped):
    a histogram's ``_sum``/``_count`` become ``<column>_sum``/``<column>_count``; one name's label sets combine
    by the table's ``how``; where two names of one column are both exported (a release that kept the old name
    beside its new one), the preferred one counts. A line that does not read (or a NaN) is skipped, never a 0."""
    reader = _reader_of(names)
    values: dict[str, dict[str, list[float]]] = {}
    for line in text.split("\n"):
        if not line or line[0] == "#" or len(line) > MAX_LINE:
            continue
        brace = line.find("{")
        name = line[:brace] if brace >= 0 else line.split(None, 1)[0]
        if name not in reader.lines:
            continue
        rest = line[line.rfind("}") + 1 :] if brace >= 0 else line[len(name) :]
        words = rest.split()
        value = _number(words[0]) if 1 <= len(words) <= 2 else None
        if value is not None:
            values.setdefault(reader.lines[name][0], {}).setdefault(name, []).append(value)
    out = {}
    for column, by_name in values.items():
        kept = [n for n in by_name if reader.lines[n][2]] or list(by_name)
        numbers = by_name[kept[0]]
        out[column] = max(numbers) if reader.lines[kept[0]][1] == "max" else sum(numbers)
    return out


@dataclass(frozen=True)
class MetricSample:
    t: float
    endpoint: int
    column: str
    value: float


def read_samples(text: str) -> list[MetricSample]:
    """``samples.csv`` of the metrics sampler → samples in time order; a line cut off mid-write is dropped."""
    out = []
    for row in csv.DictReader(io.StringIO(text)):
        if None in row.values():
            continue
        t, endpoint, value = _number(row.get("t") or ""), _number(row.get("endpoint") or ""), None
        value = _number(row.get("value") or "")
        if t is None or endpoint is None or value is None or not row.get("column"):
            continue
        out.append(MetricSample(t, int(endpoint), str(row["column"]), value))
    return sorted(out, key=lambda s: (s.t, s.endpoint))


@dataclass(frozen=True)
class Endpoint:
    """A server of a config whose endpoint the sampler read: ``index`` in the sampler's ``--endpoint`` list."""

    config: str
    server: str
    role: str
    index: int


def _series(samples: Iterable[MetricSample], index: int) -> dict[str, list[tuple[float, float]]]:
    series: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        if s.endpoint == index:
            series.setdefault(s.column, []).append((s.t, s.value))
    return series


def _increase(points: Sequence[tuple[float, float]], t0: float, t1: float) -> float | None:
    """A counter's increase over [t0, t1]: from the last reading at or before t0 (else the first inside) to the
    last inside; None without two readings, or when the counter went down (the server restarted)."""
    before = [v for t, v in points if t <= t0]
    inside = [v for t, v in points if t0 < t <= t1]
    if not inside or (not before and len(inside) < 2):
        return None
    first = before[-1] if before else inside[0]
    return inside[-1] - first if inside[-1] >= first else None


def _gauge(points: Sequence[tuple[float, float]], t0: float, t1: float) -> tuple[float | None, float | None]:
    inside = [v for t, v in points if t0 <= t <= t1]
    return (sum(inside) / len(inside), max(inside)) if inside else (None, None)


def server_phase(series: Mapping[str, Sequence[tuple[float, float]]], t0: float, t1: float) -> dict[str, Any]:
    """One server over one phase: gauges' mean and max, counters' increase, histograms' mean observation."""
    row: dict[str, Any] = {"scrapes": len([t for t, _ in series.get(UP, []) if t0 <= t <= t1])}
    for column in GAUGES:
        row[f"mean_{column}"], row[f"max_{column}"] = _gauge(series.get(column, []), t0, t1)
    for column in COUNTERS:
        row[column] = _increase(series.get(column, []), t0, t1)
    for column in HISTOGRAMS:
        total = _increase(series.get(f"{column}_sum", []), t0, t1)
        count = _increase(series.get(f"{column}_count", []), t0, t1)
        row[f"mean_{column}"] = total / count if total is not None and count else None
        row[f"{column}_observed"] = count
    return row


def phase_server_rows(
    samples: Sequence[MetricSample],
    phases: Sequence[Phase],
    endpoints: Sequence[Endpoint],
    notes: Mapping[int, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per phase of a config and server of that config: the phase's key, the server and its role, its
    figures over the phase, and ``note`` (why there are none: the endpoint's error, from the sampler)."""
    series = {e.index: _series(samples, e.index) for e in endpoints}
    out = []
    for phase in phases:
        r = phase.record
        key = {k: r.get(k) for k in ("config", "concurrency", "request_rate", "repeat", "warmup")}
        for e in (e for e in endpoints if e.config == r.get("config")):
            figures = server_phase(series[e.index], phase.start, phase.end)
            note = "" if figures["scrapes"] else (notes or {}).get(e.index) or "no samples in the phase"
            out.append(
                {"kind": phase.kind, **key, "phase_start": phase.start, "phase_end": phase.end}
                | {"server": e.server, "role": e.role}
                | figures
                | {"note": note}
            )
    return out


def config_spans(phases: Sequence[Phase]) -> dict[str, tuple[float, float]]:
    """Each config's span: from its first phase's start to its last phase's end."""
    spans: dict[str, tuple[float, float]] = {}
    for phase in phases:
        config = str(phase.record.get("config") or "")
        low, high = spans.get(config, (phase.start, phase.end))
        spans[config] = (min(low, phase.start), max(high, phase.end))
    return spans


def timeline_rows(
    samples: Sequence[MetricSample], endpoints: Sequence[Endpoint], phases: Sequence[Phase], margin_s: float = 5.0
) -> list[dict[str, Any]]:
    """The gauges as a timeline, one row per server and scrape (``t``, config, server, role and each gauge). The
    sampler reads each distinct URL once, and configs that run one after the other may reuse a port: a sample
    goes to the server of its URL whose config's phases span its time (± ``margin_s``: the servers' start and
    stop); samples outside every such span are left out."""
    spans = config_spans(phases)
    by_index: dict[int, list[Endpoint]] = {}
    for e in endpoints:
        by_index.setdefault(e.index, []).append(e)
    rows: dict[tuple[float, str, str], dict[str, Any]] = {}
    for s in samples:
        if s.column not in GAUGES:
            continue
        for e in by_index.get(s.endpoint, []):
            low, high = spans.get(e.config, (math.inf, -math.inf))
            if low - margin_s <= s.t <= high + margin_s:
                base = {"t": s.t, "config": e.config, "server": e.server, "role": e.role}
                rows.setdefault((s.t, e.config, e.server), base)[s.column] = s.value
    return [rows[k] for k in sorted(rows)]
