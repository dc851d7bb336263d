"""What a serving phase sends: the spec's ``benchmark.dataset`` and what the workload did (achieved rate, lengths,
prefix-cache reuse), per row.

```yaml
benchmark:
  dataset: {name: random, range_ratio: 0.5}          # lengths uniform in [0.5 x len, len]; default: fixed lengths
  dataset: {name: sharegpt, file: chat.json}         # include/datasets/chat.json, shipped with the payload
  dataset: {name: sharegpt, host_path: /data/sg.json, sha256: <64 hex>}   # already on the host, checked there
  dataset: {name: shared-prefix, groups: 8, system_prompt_len: 512, question_len: 64, turns: 1}
```

Nothing is downloaded during a run: a hub dataset (``hf``, ``burstgpt``, ``mmmu``, ...) is refused with what to do
instead. A file's sha256 is computed here (cached by size and modification time) and checked by the sweep driver on
the host before its first phase, for a shipped file and a host path alike; the dataset's label and sha256 are
columns of every row, so two runs on different data are never compared unless asked.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from benchflow.paths import datasets_dir as where
from benchflow.payloads.manifest import cached_sha256

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
FILE_SUFFIXES = (".json", ".jsonl")
# Sampling error of a rate estimated from n Poisson arrivals is about rate / sqrt(n): a phase "reached" its
# requested rate when it came within this many of those of it.
RATE_SIGMAS = 2.0
KNOWN = ("random", "sharegpt", "shared-prefix")

# The columns a serving row gains from its workload (include/sql/0017_load_axes_and_workloads.sql)
WORKLOAD_COLUMNS: dict[str, Literal["int", "float", "text", "bool"]] = {
    "burstiness": "float",  # 1 = Poisson arrivals, < 1 burstier (gamma); null: no request rate
    "achieved_rate": "float",  # req/s the phase sent
    "rate_reached": "bool",  # whether it came within sampling error of the requested rate
    "dataset": "text",  # random | sharegpt:<file> | shared-prefix:<groups>x<system>+<question>
    "dataset_sha256": "text",  # of the dataset file (null: generated)
    "achieved_input_len": "float",  # mean prompt tokens per request
    "achieved_output_len": "float",  # mean output tokens per completed request
    "cached_tokens": "int",  # prompt tokens the server answered from its prefix cache (client-reported)
    "prefix_cache_hit_rate": "float",  # cached_tokens / prompt tokens
}
WORKLOAD_UNITS = {
    "burstiness": "",
    "achieved_rate": "req/s",
    "achieved_input_len": "tokens",
    "achieved_output_len": "tokens",
    "cached_tokens": "tokens",
}


def datasets_dir() -> Path:
    return where()


class Dataset(BaseModel):
    """One of three workloads; which fields apply depends on ``name`` (others are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="random | sharegpt | shared-prefix")
    range_ratio: float | None = Field(
        default=None, gt=0, le=1, description="random: each length uniform in [range_ratio x len, len]"
    )
    file: str | None = Field(default=None, description="sharegpt: a file in include/datasets/, shipped")
    host_path: str | None = Field(default=None, description="sharegpt: an absolute path already on the host")
    sha256: str | None = Field(default=None, description="sharegpt: the file's sha256 (required with host_path)")
    groups: int | None = Field(default=None, ge=1, le=4096, description="shared-prefix: distinct system prompts")
    system_prompt_len: int | None = Field(default=None, ge=1, le=1_000_000, description="shared-prefix: tokens")
    question_len: int | None = Field(default=None, ge=1, le=1_000_000, description="shared-prefix: tokens")
    turns: int | None = Field(default=None, ge=1, le=64, description="shared-prefix: questions per conversation")
    _local: Path | None = PrivateAttr(default=None)  # the shipped file, resolved when the spec was read
    _local_sha256: str | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in KNOWN:
            raise ValueError(
                f"dataset {value!r} is not one this project sends: {', '.join(KNOWN)}. Nothing is downloaded during "
                "a run (a hub dataset would be): save the conversations as a ShareGPT-format JSON file under "
                "include/datasets/ and name it with `name: sharegpt, file: <it>`"
            )
        return value

    @field_validator("file")
    @classmethod
    def _shipped(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if "://" in value or value.startswith("hf:"):
            raise ValueError(f"{value!r}: a file in include/datasets/ (nothing is downloaded during a run)")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value) or not value.endswith(FILE_SUFFIXES):
            raise ValueError(f"{value!r}: a file name in include/datasets/ (letters, digits, '._-'), .json or .jsonl")
        if not (datasets_dir() / value).is_file():
            raise ValueError(f"{value!r}: no such file in {datasets_dir()}")
        return value

    @field_validator("host_path")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or not re.fullmatch(r"[A-Za-z0-9._/-]+", value)):
            raise ValueError(f"{value!r}: an absolute path on the host, of letters, digits and '._/-' only")
        if value is not None and not value.endswith(FILE_SUFFIXES):
            raise ValueError(f"{value!r}: a .json (ShareGPT) or .jsonl file")
        return value

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not SHA256_RE.match(value):
            raise ValueError("64 lowercase hex digits")
        return value

    @model_validator(mode="after")
    def _fields_of_its_kind(self) -> Dataset:
        own = {"random": {"range_ratio"}, "sharegpt": {"file", "host_path", "sha256"}}
        own["shared-prefix"] = {"groups", "system_prompt_len", "question_len", "turns"}
        given = {k for k in self.model_fields_set if k != "name"}
        if stray := sorted(given - own[self.name]):
            raise ValueError(
                f"{', '.join(stray)}: not a field of a {self.name} dataset ({', '.join(sorted(own[self.name]))})"
            )
        if self.name == "sharegpt":
            self.local_sha256()  # the file as it is now: what the DAG built from this spec ships
            if (self.file is None) == (self.host_path is None):
                raise ValueError("a sharegpt dataset names one of file (shipped) or host_path (on the host)")
            if self.host_path is not None and self.sha256 is None:
                raise ValueError("host_path needs sha256: the host's file is checked against it before the run")
            if self.file is not None and self.sha256 is not None and self.sha256 != self.local_sha256():
                raise ValueError(f"sha256 does not match include/datasets/{self.file} ({self.local_sha256()})")
        return self

    def local_sha256(self) -> str | None:
        """The shipped file's sha256, as it was when the spec was read (the DAG that ships it is built then)."""
        if self.file and self._local is None:
            self._local = (datasets_dir() / self.file).resolve()
            self._local_sha256 = cached_sha256(self._local)
        return self._local_sha256

    def checksum(self) -> str | None:
        return self.sha256 or self.local_sha256()

    def label(self) -> str:
        if self.name == "sharegpt":
            return f"sharegpt:{Path(self.file or self.host_path or '').name}"
        if self.name == "shared-prefix":
            turns = f"x{self.turns}turns" if (self.turns or 1) > 1 else ""
            return f"shared-prefix:{self.groups or 1}x{self.system_prompt_len or 0}+{self.question_len or 0}{turns}"
        return "random" if self.range_ratio in (None, 1) else f"random:{self.range_ratio:g}"

    def argument(self) -> str:
        """The section as ``sweep.py --dataset`` takes it: where the file is on the host (``datasets/<file>`` in
        the payload, or the host path) and the sha256 it must have."""
        body: dict[str, Any] = {k: v for k, v in self.model_dump().items() if v is not None and k != "file"}
        if self.file:
            body["path"] = f"datasets/{self.file}"
        if self.host_path:
            body["path"] = body.pop("host_path")
        if checksum := self.checksum():
            body["sha256"] = checksum
        return json.dumps(body, separators=(",", ":"), sort_keys=True)

    def shipped(self) -> list[Path]:
        self.local_sha256()
        return [self._local] if self._local is not None else []


def row_values(dataset: Dataset | None) -> dict[str, Any]:
    """What every row of a run gets from its dataset: the label and the file's sha256."""
    if dataset is None:
        return {"dataset": "random"}
    return {"dataset": dataset.label(), "dataset_sha256": dataset.checksum()}


def phase_of(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """A phase: config, concurrency, request rate (None: no limit, a client's ``inf`` too), repeat."""
    repeat = row.get("repeat")
    return row.get("config"), row.get("concurrency"), _number(row.get("request_rate")), 1 if repeat is None else repeat


def workload_columns(row: Mapping[str, Any], requests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the phase's workload did: the rate it sent at (and whether that reached the requested one), the mean
    lengths it achieved and the prompt tokens its server answered from the prefix cache."""
    out: dict[str, Any] = {}
    ok = [r for r in requests if r.get("ok")]
    inputs = [float(r["input_len"]) for r in requests if _finite(r.get("input_len"))]
    if inputs:
        out["achieved_input_len"] = sum(inputs) / len(inputs)
    elif (total := _number(row.get("total_input_tokens"))) is not None and row.get("completed"):
        out["achieved_input_len"] = total / float(row["completed"])
    outputs = [float(r["output_tokens"]) for r in ok if _finite(r.get("output_tokens"))]
    if outputs:
        out["achieved_output_len"] = sum(outputs) / len(outputs)
    elif (total := _number(row.get("total_output_tokens"))) is not None and row.get("completed"):
        out["achieved_output_len"] = total / float(row["completed"])
    reported = [r for r in ok if _finite(r.get("cached_tokens")) and _finite(r.get("input_len"))]
    if reported:  # over the requests that succeeded, as SGLang's cache report counts them
        cached, prompts = (sum(float(r[c]) for r in reported) for c in ("cached_tokens", "input_len"))
        out["cached_tokens"] = int(cached)
        out["prefix_cache_hit_rate"] = cached / prompts if prompts else None
    rate = _number(row.get("request_rate"))
    if rate is not None and rate > 0:
        out["burstiness"] = row.get("burstiness") or 1.0
        achieved = achieved_rate(row, requests)
        out["achieved_rate"] = achieved
        sent = len(requests) or int(row.get("completed") or 0)
        if achieved is not None and sent >= 2:
            out["rate_reached"] = achieved >= rate * (1 - RATE_SIGMAS / math.sqrt(sent))
    return out


def achieved_rate(row: Mapping[str, Any], requests: Sequence[Mapping[str, Any]]) -> float | None:
    """Requests per second the phase sent: (n - 1) over the span of the requests' start times where the client
    saved them; else completed requests over the duration less the mean end-to-end latency (the last request
    is sent about that long before the phase ends)."""
    starts = sorted(float(r["start_s"]) for r in requests if _finite(r.get("start_s")))
    if len(starts) >= 2 and starts[-1] > starts[0]:
        return (len(starts) - 1) / (starts[-1] - starts[0])
    duration, e2e, completed = (_number(row.get(c)) for c in ("duration_s", "mean_e2e_ms", "completed"))
    if duration is not None and e2e is not None and completed:
        sending = duration - e2e / 1e3
        return completed / sending if sending > 0 else None
    return None


def _number(value: Any) -> float | None:
    return float(value) if _finite(value) else None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def rate_notes(rows: list[dict[str, Any]]) -> list[str]:
    """A line per phase that sent below its requested rate (beyond sampling error): its figures describe the rate
    it achieved, not the one asked for."""
    notes = []
    for row in rows:
        if row.get("rate_reached") is False and not row.get("warmup"):
            rate, achieved = float(row["request_rate"]), float(row["achieved_rate"])
            notes.append(
                f"config {row.get('config')} request_rate {rate:g} repeat {row.get('repeat', 1)}: sent "
                f"{achieved:.3g} req/s ({achieved / rate:.0%} of the rate asked for): the client or the server did "
                "not keep up, and its figures are those of the lower rate"
            )
    return notes
