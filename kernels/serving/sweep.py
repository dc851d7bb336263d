"""Serving sweep driver: run a benchmark client once per concurrency phase against a running server.

    python sweep.py --label pd --base-url http://127.0.0.1:8000 --client sglang \
        --concurrency 1,8,16 --prompts 6,24,32 --input-len 256 --output-len 256 --out results.jsonl

One code path for every host: the client runs with this interpreter (the host's serving environment). Its module
is imported once, here, and each phase runs the client's command line in a fork of this process
(``benchhost.warmstart``: the same code, arguments and output, without an interpreter's start per phase);
``--fresh-client`` starts a new interpreter for each phase instead.

* ``--client sglang``: ``python -m sglang.bench_serving --backend sglang --dataset-name random-ids
  --random-range-ratio 1 ... --output-file <phase>.json --output-details``
* ``--client vllm``: ``python -m vllm.entrypoints.cli.main bench serve --backend vllm --dataset-name random
  ... --save-result --save-detailed --result-dir <dir> --result-filename <phase>.json`` (``vllm bench serve``)
* ``--client local`` (or ``loadgen``): the project's own ``loadgen.py``, which prints SGLang's block.

``--request-rate 2,4,8`` sweeps request rates in place of concurrency levels (``--prompts`` pairs with them; the
arrivals are Poisson, or gamma with ``--burstiness``, vLLM and the local client only; ``--max-concurrency`` caps
the requests in flight); the header is then ``===== pd request_rate=4 (n=24) =====``. ``--dataset`` is random
(``range_ratio``: lengths in [r x len, len]), a ShareGPT-format file (``path``, checked against ``sha256`` before
the first phase; the run stops with the reason when it differs), or generated shared prefixes (SGLang's
``generated-shared-prefix``, vLLM's ``prefix_repetition``); see benchflow/kinds/serving/workload.py.

The model and tokenizer are the server's: the clients ask ``/v1/models`` (and SGLang's ``/model_info``);
``--tokenizer`` overrides. Each phase runs ``--repeats`` times back to back (the servers stay up), after one
warm-up phase at the first level when ``--warmup`` is given. Prints ``===== pd concurrency=8 (n=24) =====``
before each phase (``... repeat=2 =====`` for the later repeats, ``... warmup =====`` for the warm-up), then
the client's own output (its result block); keeps each phase's raw output (``phase_c<C>_r<R>.log``) and result
file next to --out, appends the phase's summary (tagged with the label, repeat and warm-up, per-request arrays
left out) to --out and one row per request to ``requests.jsonl`` beside it, and prints the done marker only
after the last phase. A failed phase is reported and the sweep goes on.

``--search '<json>'`` (the spec's ``benchmark.search``: over, range, slo, precision, prompts_per_probe,
repeats, budget, optionally confidence) replaces the fixed levels by a load search (``benchhost/loadsearch.py``): each
probe is a phase of ``prompts_per_probe`` prompts at the load the search picks, the same client, header, raw
output, --out row and ``requests.jsonl`` rows as a fixed phase (``repeat=R`` numbers the repeats at one load;
a load is never probed again once decided, so config × load × repeat stays unique). ``over: concurrency``
runs ``--max-concurrency C`` (header ``concurrency=C``); ``over: request_rate`` runs ``--request-rate R``
with no concurrency limit, under the header ``===== <label> request_rate=R (n=N) =====`` (the log parser's
phase pattern must learn ``request_rate=``; its rows and request rows carry ``request_rate``, and no
``concurrency``). After each probe the driver prints the probe's verdict; at the end, the search's summary,
and it appends one record to ``search.jsonl`` beside --out (the bracket, the stopping reason, goodput at
the answer, and every probe with its bounds per SLO), then the done marker.

Phases carry their time: ``phases.jsonl`` beside --out gets one line per phase (config, concurrency, repeat,
warm-up, num_prompts, start and end in epoch seconds, whether the client succeeded, the host's load at both
ends; benchhost/phaselog.py, its "own" processes those whose working directory is in --out's
directory: the sweep, its client and the servers of a campaign run). Each request row gets ``start_s``,
``first_token_s`` and ``end_s`` (epoch s; end = the last token, TTFT + the inter-token gaps), and the phase line
says how they were found (``timing``):

* ``client``: vLLM's ``--save-detailed`` ``start_times`` (``time.perf_counter()`` of the client, which is
  CLOCK_MONOTONIC on Linux, shared by every process), converted with this process's wall - monotonic offset;
* ``fifo+start_line``: SGLang saves no start times. Requests are sent in order through ``--max-concurrency``
  slots, each taking the first slot that frees (asyncio.Semaphore is first come, first served; so is the
  local load generator's thread pool), so the start of each follows from the others' durations; the first
  starts 1.0 s after the client prints "Starting main benchmark run" (it sleeps 1.0 s there, SGLang 0.5.23),
  a line this driver timestamps as it arrives (the client runs unbuffered);
* ``fifo+first_end``: the same, placed so that the first completion falls when the local load generator
  printed "request 1/N";
* ``fifo+exit``: the same, the first start put at the client's exit minus its benchmark duration (late by the
  client's time after the benchmark: its report).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import heapq
import importlib.util
import json
import math
import os
import sys
import time
import urllib.request
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchhost import loadsearch
from benchhost.warmstart import WarmStart

HERE = Path(__file__).resolve().parent

# Per-request arrays in the clients' detailed results; kept in the phase file, not in the summary rows.
DETAIL_KEYS = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "generated_texts",
    "errors",
    "start_times",
    "cached_tokens",
    "cached_tokens_details",
)
DEFAULT_BACKEND = {"sglang": "sglang", "vllm": "vllm"}
SGLANG_START_LINE = "Starting main benchmark run"  # then asyncio.sleep(1.0), then the first request
SGLANG_START_DELAY_S = 1.0
LOADGEN_FIRST_END = "request 1/"
# What a client's command line imports after its module (vLLM's CLI imports its subcommands in main()): imported
# once with it, so that no phase pays for them (benchhost.warmstart).
WARM_IMPORTS = {
    "vllm.entrypoints.cli.main": ("vllm.entrypoints.cli.benchmark.main", "vllm.benchmarks.serve"),
}
PERF_IS_MONOTONIC = "CLOCK_MONOTONIC" in time.get_clock_info("perf_counter").implementation


def int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


@dataclass(frozen=True)
class Phase:
    """One run of the client: at a concurrency (a fixed sweep, or a search over concurrency) or at a
    request rate with no concurrency limit (a search over request_rate). Repeat 0 is the warm-up."""

    concurrency: int | None
    prompts: int
    repeat: int
    rate: float | None = None

    def load(self) -> str:
        rate = f"request_rate={rate_text(self.rate)}" if self.rate is not None else ""
        cap = f"concurrency={self.concurrency}" if self.concurrency is not None else ""
        return " ".join(p for p in (rate, cap) if p)

    def tag(self) -> str:
        return " warmup" if self.repeat == 0 else f" repeat={self.repeat}" if self.repeat > 1 else ""

    def stem(self) -> str:
        rate = "" if self.rate is None else f"q{rate_text(self.rate)}"
        cap = "" if self.concurrency is None else f"c{self.concurrency}"
        return f"phase_{rate}{cap}_r{self.repeat}"


def rate_text(rate: float) -> str:
    """A rate as the phase header writes it, never in exponent form: 4 → ``4``, 0.25 → ``0.25``."""
    return format(rate, ".6f").rstrip("0").rstrip(".")


def float_list(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


@dataclass
class PhaseData:
    """What a phase left: its request rows and the client's benchmark duration (s)."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    timing: str = ""  # how the requests' times were found (see the module docstring)


def client_command(args: argparse.Namespace, phase: Phase, result: Path) -> list[str]:
    load = ["--num-prompts", str(phase.prompts)]
    load += ["--max-concurrency", str(phase.concurrency)] if phase.concurrency is not None else []
    load += ["--request-rate", rate_text(phase.rate)] if phase.rate is not None else []
    if args.client in ("local", "loadgen"):
        command = [sys.executable, str(HERE / "loadgen.py"), "--base-url", args.base_url, *load]
        command += ["--input-len", str(args.input_len), "--output-len", str(args.output_len)]
        command += ["--range-ratio", str(args.dataset.get("range_ratio", 1))]
        command += ["--burstiness", str(args.burstiness)] if args.burstiness is not None else []
        return [*command, "--output-file", str(result), "--requests-file", str(result.with_suffix(".requests.jsonl"))]
    load += ["--model", args.model] if args.model else []
    load += ["--tokenizer", args.tokenizer] if args.tokenizer else []
    backend = args.backend or DEFAULT_BACKEND.get(args.client, "")
    if args.client == "sglang" and int(args.dataset.get("turns") or 1) > 1 and not args.backend:
        backend = "sglang-oai-chat"  # SGLang's multi-turn shared-prefix workload speaks only to chat endpoints
    if args.client == "sglang":
        sglang = ["-m", "sglang.bench_serving", "--backend", backend, "--base-url", args.base_url]
        sglang += [*sglang_dataset(args, phase), *load]
        # each request's prompt tokens found in the server's prefix cache, in the saved details; every phase starts
        # with an empty cache (a repeat sends the same prompts: the cache would hold them all)
        sglang += [f for f in ("--cache-report", "--flush-cache") if sglang_knows(f)]
        return [sys.executable, *sglang, "--output-file", str(result), "--output-details"]
    # E2E latency and the p90/p95 lines are printed only when asked for; SGLang prints them all by default.
    vllm = ["-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", backend, "--base-url", args.base_url]
    vllm += ["--endpoint", "/v1/completions", *vllm_dataset(args), *load]
    vllm += ["--burstiness", str(args.burstiness)] if args.burstiness is not None else []
    vllm += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "90,95,99"]
    saved = ["--save-result", "--save-detailed", "--result-dir", str(result.parent), "--result-filename", result.name]
    return [sys.executable, *vllm, *saved]


@functools.cache
def sglang_knows(flag: str) -> bool:
    """Whether the host's SGLang client takes ``flag`` (``--cache-report``: 2026-06 on): read from its source."""
    for module in ("sglang.benchmark.serving", "sglang.bench_serving"):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin and f'"{flag}"' in Path(spec.origin).read_text(errors="replace"):
            return True
    return False


def sglang_dataset(args: argparse.Namespace, phase: Phase) -> list[str]:
    """SGLang's ``bench_serving`` arguments for the dataset. Random: ``random-ids`` with ``--random-range-ratio r``
    (lengths uniform in [r x len, len]; 1: every prompt exactly input_len, every output output_len)."""
    data, out = args.dataset, str(args.output_len)
    if data["name"] == "sharegpt":
        kind = "custom" if data["path"].endswith(".jsonl") else "sharegpt"
        return ["--dataset-name", kind, "--dataset-path", data["path"], "--sharegpt-output-len", out]
    if data["name"] == "shared-prefix":
        groups = int(data.get("groups", 1))
        gsp = ["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", str(groups)]
        turns = int(data.get("turns") or 1)
        gsp += ["--gsp-prompts-per-group", str(max(1, phase.prompts // (groups * turns)))]
        gsp += ["--gsp-system-prompt-len", str(data.get("system_prompt_len", args.input_len))]
        gsp += ["--gsp-question-len", str(data.get("question_len", 16)), "--gsp-output-len", out]
        return [*gsp, "--gsp-num-turns", str(data["turns"])] if data.get("turns") else gsp
    ratio = str(data.get("range_ratio", 1))
    lengths = ["--random-input-len", str(args.input_len), "--random-output-len", out]
    return [
        "--dataset-name",
        "random-ids" if data["name"] == "random" else data["name"],
        *lengths,
        "--random-range-ratio",
        ratio,
    ]


def vllm_dataset(args: argparse.Namespace) -> list[str]:
    """``vllm bench serve``'s arguments for the dataset. Its random range ratio is a ± spread around the given
    length, so [r x len, len] is asked as a centre of len (1 + r) / 2 and a spread of (1 - r) / (1 + r)."""
    data, out = args.dataset, args.output_len
    if data["name"] == "sharegpt":
        return ["--dataset-name", "sharegpt", "--dataset-path", data["path"], "--sharegpt-output-len", str(out)]
    if data["name"] == "shared-prefix":
        prefix = ["--dataset-name", "prefix_repetition", "--prefix-repetition-num-prefixes", str(data.get("groups", 1))]
        prefix += ["--prefix-repetition-prefix-len", str(data.get("system_prompt_len", args.input_len))]
        prefix += ["--prefix-repetition-suffix-len", str(data.get("question_len", 16))]
        return [*prefix, "--prefix-repetition-output-len", str(out)]
    ratio = float(data.get("range_ratio", 1))
    spread = (1 - ratio) / (1 + ratio)
    centre_in, centre_out = (round(n * (1 + ratio) / 2) for n in (args.input_len, out))
    lengths = ["--random-input-len", str(centre_in), "--random-output-len", str(centre_out)]
    name = "random" if data["name"] in ("random", "random-ids") else data["name"]
    return ["--dataset-name", name, *lengths, "--random-range-ratio", f"{spread:.6g}"]


def served_model(base_url: str) -> str | None:
    """The first model id of ``/v1/models``, read whatever its content type: sglang-router 0.3.2 answers it as
    ``text/plain``, which ``vllm bench serve`` refuses ("Attempt to decode JSON with unexpected mimetype")."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/v1/models", timeout=30) as response:
            return str(json.loads(response.read())["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError) as exc:
        print(f"could not read the served model from {base_url}/v1/models: {exc!r}", flush=True)
        return None


def request_rows(summary: dict, label: str, concurrency: int | None) -> list[dict]:
    """One row per request from a client's detailed result (SGLang ``--output-details``, vLLM
    ``--save-detailed``): TTFT, the time of the last token (TTFT + the inter-token gaps) and mean ITL, in ms."""
    ttfts = summary.get("ttfts") or []
    itls = summary.get("itls") or [[] for _ in ttfts]
    errors = summary.get("errors") or ["" for _ in ttfts]
    input_lens = summary.get("input_lens") or [None for _ in ttfts]
    output_lens = summary.get("output_lens") or [None for _ in ttfts]
    saved = summary.get("cached_tokens")  # SGLang's --cache-report: per request, from the server's meta_info
    cached: list[Any] = saved if isinstance(saved, list) else []
    rows = []
    for seq, (ttft, gaps, error, input_len, output_len) in enumerate(
        zip(ttfts, itls, errors, input_lens, output_lens, strict=False)
    ):
        # a time that does not read (NaN, infinite, negative: a client's bug or a clock step) fails the request
        ok = bool(not error and _time(ttft) and ttft > 0 and all(_time(gap) for gap in gaps))
        if not error and not ok and ttft:
            bad = next(v for v in (ttft, *gaps) if not _time(v))
            error = f"the client reported a time that is not a finite number >= 0: {bad!r}"
        rows.append(
            {
                "config": label,
                "concurrency": concurrency,
                "seq": seq,
                "ok": ok,
                "input_len": input_len,
                "output_tokens": output_len if ok else 0,
                "ttft_ms": ttft * 1e3 if ok else None,
                "e2e_ms": (ttft + sum(gaps)) * 1e3 if ok else None,
                "mean_itl_ms": sum(gaps) / len(gaps) * 1e3 if ok and gaps else None,
                "error": (error or "")[-2000:],
                "cached_tokens": cached[seq] if seq < len(cached) and _time(cached[seq]) else None,
            }
        )
    return rows


def _time(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def read_results(result: Path) -> list[dict]:
    """The phase's result objects: SGLang appends JSON lines, vLLM writes one JSON document."""
    text = result.read_text()
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return whole if isinstance(whole, list) else [whole]


def fifo_starts(durations: list[float], concurrency: int) -> list[float]:
    """Start offsets of requests sent in order through ``concurrency`` slots, each taking the first slot to
    free (its holder's start + duration); the first ``concurrency`` start at 0."""
    free = [0.0] * max(1, min(concurrency, len(durations)))
    starts = []
    for duration in durations:
        start = heapq.heappop(free)
        starts.append(start)
        heapq.heappush(free, start + max(0.0, duration))
    return starts


def add_times(rows: list[dict], concurrency: int, summary: dict, anchors: dict[str, float]) -> str:
    """Give each request row ``start_s``, ``first_token_s`` and ``end_s`` (epoch s; the latter two None for a
    failed request); returns how they were found (see the module docstring)."""
    ttft = [(row.get("ttft_ms") or 0.0) / 1e3 for row in rows]
    e2e = [(row.get("e2e_ms") or 0.0) / 1e3 for row in rows]
    client = summary.get("start_times")
    if PERF_IS_MONOTONIC and isinstance(client, list) and len(client) == len(rows):
        offset = time.time() - time.monotonic()
        starts, how = [float(t) + offset for t in client], "client"
    else:
        rel = fifo_starts(e2e, concurrency)
        if "bench_start" in anchors:
            base, how = anchors["bench_start"], "fifo+start_line"
        elif "first_end" in anchors and rows:
            base, how = anchors["first_end"] - min(r + d for r, d in zip(rel, e2e, strict=True)), "fifo+first_end"
        else:
            duration = summary.get("duration") or max((r + d for r, d in zip(rel, e2e, strict=True)), default=0.0)
            base, how = anchors["exited"] - float(duration), "fifo+exit"
        starts = [base + r for r in rel]
    for row, start, first, last in zip(rows, starts, ttft, e2e, strict=True):
        row["start_s"] = start
        row["first_token_s"] = start + first if row.get("ok") else None
        row["end_s"] = start + last if row.get("ok") else None
    return how


def phase_log(out: Path) -> Any:
    """A ``benchhost.phaselog.PhaseLog`` writing ``phases.jsonl`` beside ``out`` (its own processes: those working
    in that directory); None (said once) when the host core is not beside the payload."""
    try:
        from benchhost.phaselog import PhaseLog
    except ImportError:
        print("Phases: not recorded (no benchhost beside the payload)", flush=True)
        return None
    return PhaseLog(out.parent / "phases.jsonl", own_root=out.parent)


def run_client(args: argparse.Namespace, phase: Phase, result: Path) -> tuple[int, dict[str, float]]:
    """Run the client, echoing and keeping its output; its exit code and the times of the lines that place
    its requests in time."""
    anchors: dict[str, float] = {}
    with result.with_suffix(".log").open("w") as raw:
        proc = args.launcher.start(client_command(args, phase, result), {**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        line = "\n"
        for line in proc.stdout:
            now = time.time()
            if SGLANG_START_LINE in line and "bench_start" not in anchors:
                anchors["bench_start"] = now + SGLANG_START_DELAY_S
            if line.startswith(LOADGEN_FIRST_END) and "first_end" not in anchors:
                anchors["first_end"] = now
            raw.write(line)
            print(line, end="", flush=True)
        code = proc.wait()
    anchors["exited"] = time.time()
    if not line.endswith("\n"):  # e.g. nanobind's leak report at a vLLM client's exit has no newline
        print(flush=True)
    return code, anchors


def requests_sent(args: argparse.Namespace, prompts: int) -> int:
    """The requests a phase of ``prompts`` sends: as many, except with SGLang's generated shared-prefix workload,
    which sends whole groups (groups x prompts per group x turns; the fewest of those holding ``prompts``)."""
    data = args.dataset
    if args.client != "sglang" or data["name"] != "shared-prefix":
        return prompts
    groups, turns = int(data.get("groups") or 1), int(data.get("turns") or 1)
    return groups * turns * max(1, math.ceil(prompts / (groups * turns)))


def run_phase(args: argparse.Namespace, phases_dir: Path, phase: Phase) -> PhaseData | None:
    """One phase: its header, the client's output, its --out rows and request rows (with their times), and its
    line in ``phases.jsonl``; None when the client failed or wrote no result."""
    phase = dataclasses.replace(phase, prompts=requests_sent(args, phase.prompts))
    print(f"===== {args.label} {phase.load()} (n={phase.prompts}){phase.tag()} =====", flush=True)
    result = phases_dir / f"{phase.stem()}.json"
    result.unlink(missing_ok=True)
    result.with_suffix(".requests.jsonl").unlink(missing_ok=True)
    rate = {} if phase.rate is None else {"request_rate": phase.rate}
    what = {"kind": "serving", "config": args.label, "concurrency": phase.concurrency, **rate, "repeat": phase.repeat}
    log = getattr(args, "phase_log", None)
    data: PhaseData | None = None
    with log.phase(**what, warmup=phase.repeat == 0, num_prompts=phase.prompts) if log else nullcontext({}) as record:
        code, anchors = run_client(args, phase, result)
        record.update(end=anchors["exited"], ok=code == 0 and result.exists())  # the phase ends with the client
        if record["ok"]:
            data = keep_results(args, phase, result, anchors)
            record["timing"] = data.timing
    if data is None:
        print(f"phase {phase.load()}{phase.tag()} failed (client exit {code}); going on", flush=True)
    return data


def keep_results(args: argparse.Namespace, phase: Phase, result: Path, anchors: dict[str, float]) -> PhaseData:
    """Append the phase's summaries to --out and its request rows, with their times, to ``requests.jsonl``."""
    rate = {} if phase.rate is None else {"request_rate": phase.rate}
    where = {"config": args.label, "concurrency": phase.concurrency, **rate, "repeat": phase.repeat}
    data = PhaseData()
    summaries = read_results(result)
    with args.out.open("a") as out:
        for summary in summaries:
            rows = request_rows(summary, args.label, phase.concurrency)
            data.requests += [{**row, **rate, "repeat": phase.repeat} for row in rows]
            data.duration_s += float(summary.get("duration") or 0.0)
            kept = {k: v for k, v in summary.items() if k not in DETAIL_KEYS}
            errors, completed = summary.get("errors"), summary.get("completed")
            if "failed" not in kept and isinstance(errors, list) and isinstance(completed, int):
                kept["failed"] = len(errors) - completed  # SGLang saves no count: one error entry a request
            tags = {"num_prompts": phase.prompts, "tag": args.label, "repeat": phase.repeat}
            out.write(json.dumps({**kept, **tags, "warmup": phase.repeat == 0}) + "\n")
    raw_requests = result.with_suffix(".requests.jsonl")
    if raw_requests.exists():  # the local load generator's own per-request file
        lines = raw_requests.read_text().splitlines()
        data.requests = [{**json.loads(line), **where} for line in lines if line.strip()]
    last = summaries[-1] if summaries else {}
    if phase.rate is not None and not isinstance(last.get("start_times"), list):
        # A request-rate phase sends on a random (Poisson) schedule: no slot order places its requests in time.
        data.timing = "none: a request-rate phase, and the client saved no start times"
    else:
        data.timing = add_times(data.requests, phase.concurrency or len(data.requests), last, anchors)
    if data.requests:
        with (args.out.parent / "requests.jsonl").open("a") as out:
            out.writelines(json.dumps(row) + "\n" for row in data.requests)
    return data


def fixed_sweep(args: argparse.Namespace, phases_dir: Path) -> list[str]:
    """Every level (concurrency, or request rate under ``--max-concurrency``), ``--repeats`` times, after the
    warm-up; the phases that failed."""
    if args.request_rate:
        levels = [(args.max_concurrency, q) for q in args.request_rate]
    else:
        levels = [(c, None) for c in args.concurrency]
    first = levels[0]
    plan = [Phase(first[0], args.prompts[0], 0, rate=first[1])] if args.warmup else []
    paired = zip(levels, args.prompts, strict=True)
    plan += [Phase(c, n, r, rate=q) for (c, q), n in paired for r in range(1, args.repeats + 1)]
    return [f"{p.load()} repeat={p.repeat}" for p in plan if run_phase(args, phases_dir, p) is None]


def probe_phase(plan: loadsearch.Plan, load: float, repeat: int) -> Phase:
    if plan.over == "concurrency":
        return Phase(int(load), plan.prompts_per_probe, repeat)
    return Phase(None, plan.prompts_per_probe, repeat, rate=float(load))


def search_sweep(args: argparse.Namespace, phases_dir: Path, plan: loadsearch.Plan) -> list[str]:
    """The load search (after the warm-up at the range's low end, which the budget does not count): one
    phase per probe; its record in ``search.jsonl`` and its summary. The phases that failed."""
    failed: list[str] = []
    if args.warmup and run_phase(args, phases_dir, probe_phase(plan, plan.low, 0)) is None:
        failed.append(f"{probe_phase(plan, plan.low, 0).load()} warmup")

    def probe(load: float, repeat: int) -> loadsearch.ProbeData:
        phase = probe_phase(plan, load, repeat)
        started, started_at = time.monotonic(), time.time()
        data = run_phase(args, phases_dir, phase)
        seconds = time.monotonic() - started
        if data is None:
            failed.append(f"{phase.load()} repeat={repeat}")
            return loadsearch.ProbeData([], 0.0, seconds, "the client failed: no data", started_at)
        return loadsearch.ProbeData(data.requests, data.duration_s, seconds, started_at=started_at)

    def report(step: loadsearch.Step) -> None:
        # No "label: value" shape: the log parser reads those near a result block as figures of the block.
        print(f"search probe {plan.over} {step.load:g} repeat {step.repeat} -> {step.text()}", flush=True)

    result = loadsearch.run_search(plan.search(), probe, plan.slo, plan.confidence, report)
    record = finite({"config": args.label, **plan.to_dict(), **result.to_dict()})
    with (args.out.parent / "search.jsonl").open("a") as out:
        out.write(json.dumps(record, allow_nan=False) + "\n")
    print(search_summary(args.label, plan, result), flush=True)
    return failed


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float made None: search.jsonl is strict JSON."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def search_summary(label: str, plan: loadsearch.Plan, result: loadsearch.SearchResult) -> str:
    slo = ", ".join(f"{key} ≤ {limit:g}" for key, limit in plan.slo.items())
    lines = [
        f"search {label} over {plan.over} in [{plan.low:g}, {plan.high:g}], SLO {slo} at "
        f"{plan.confidence * 100:g} % confidence, {plan.prompts_per_probe} prompts per probe"
    ]
    lines += [f"  {plan.over} {s.load:g} repeat {s.repeat} -> {s.text()}" for s in result.trail]
    lines.append(f"search {label} -> {result.text()}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--client", choices=["sglang", "vllm", "local", "loadgen"], default="sglang")
    parser.add_argument("--backend", help="the client's --backend (default: sglang for SGLang, vllm for vLLM)")
    parser.add_argument(
        "--dataset",
        default="random",
        help="random (no download), or JSON of benchmark.dataset: random with range_ratio, sharegpt with path and "
        "sha256 (checked before the first phase), shared-prefix with groups, system_prompt_len, question_len, turns",
    )
    parser.add_argument("--model", help="model id to request (default: the first of the server's /v1/models)")
    parser.add_argument("--tokenizer", help="tokenizer path or id (default: the model's)")
    parser.add_argument("--concurrency", type=int_list, default=[1, 8, 16])
    parser.add_argument("--request-rate", type=float_list, help="request rates (req/s) in place of --concurrency")
    parser.add_argument("--max-concurrency", type=int, help="the cap on requests in flight of a request-rate sweep")
    parser.add_argument("--burstiness", type=float, help="gamma shape of a rate sweep's arrivals (1: Poisson)")
    parser.add_argument("--prompts", type=int_list, default=[6, 24, 32])
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each phase, back to back")
    parser.add_argument("--warmup", action="store_true", help="one warm-up phase first (kept, marked)")
    parser.add_argument("--search", help="JSON of benchmark.search: a load search instead of the fixed levels")
    parser.add_argument("--out", type=Path, default=Path("results.jsonl"))
    parser.add_argument("--marker", default="ALL_DONE")
    parser.add_argument(
        "--fresh-client",
        action="store_true",
        help="a new interpreter for each phase's client (default: the client imported once, each phase a fork)",
    )
    args = parser.parse_args(argv)
    levels = "--request-rate" if args.request_rate else "--concurrency"
    if len(args.request_rate or args.concurrency) != len(args.prompts):
        parser.error(f"{levels} and --prompts need the same number of values")
    if args.request_rate and any(not 0 < q < math.inf for q in args.request_rate):
        parser.error("--request-rate: each rate a positive, finite number of requests/s")
    if args.burstiness is not None and args.client == "sglang" and args.burstiness != 1:
        parser.error("--burstiness other than 1 needs the vllm or local client: SGLang's bench_serving sends Poisson")
    try:
        args.dataset = dataset_spec(args.dataset, args.client)
    except ValueError as exc:
        parser.error(f"--dataset: {exc}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.search is not None:
        try:
            args.search = loadsearch.Plan.from_dict(json.loads(args.search))
        except (ValueError, KeyError, TypeError) as exc:
            parser.error(f"--search: {exc}")
    return args


def dataset_spec(text: str, client: str) -> dict[str, Any]:
    """``--dataset`` as a dict: a bare name (``random``; ``random-ids`` is SGLang's name for it) or JSON."""
    data = json.loads(text) if text.lstrip().startswith("{") else {"name": text}
    if data.get("name") == "random-ids":
        data["name"] = "random"
    if data.get("name") not in ("random", "sharegpt", "shared-prefix"):
        raise ValueError(f"{data.get('name')!r}: random, sharegpt or shared-prefix (nothing is downloaded)")
    if client in ("local", "loadgen") and data["name"] != "random":
        raise ValueError(f"a {data['name']} dataset needs the sglang or vllm client (the local one sends random)")
    if data["name"] == "sharegpt" and client == "vllm" and str(data.get("path", "")).endswith(".jsonl"):
        raise ValueError("vllm bench serve reads ShareGPT as a .json file (its .jsonl 'custom' has other records)")
    return data


def check_dataset(data: dict[str, Any]) -> str | None:
    """Why the dataset file cannot be used (missing, or not the sha256 the spec recorded); None when it can."""
    if "path" not in data:
        return None
    path = Path(data["path"])
    if not path.is_file():
        return f"dataset file {path} does not exist on this host"
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    if data.get("sha256") and digest.hexdigest() != data["sha256"]:
        return f"dataset file {path} has sha256 {digest.hexdigest()}, not {data['sha256']} as the spec records"
    print(f"dataset {data['name']} {path}: sha256 {digest.hexdigest()}", flush=True)
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if problem := check_dataset(args.dataset):
        print(problem, flush=True)
        return 2
    if args.client == "vllm" and not args.model:
        args.model = served_model(args.base_url)
    phases_dir = args.out.parent / f"phases_{args.label}"
    phases_dir.mkdir(parents=True, exist_ok=True)
    args.phase_log = phase_log(args.out)
    args.launcher = WarmStart(WARM_IMPORTS)
    if not args.fresh_client:
        print(args.launcher.prepare(client_command(args, Phase(1, 1, 1), phases_dir / "x.json")), flush=True)
    if args.search is None:
        failed = fixed_sweep(args, phases_dir)
    else:
        failed = search_sweep(args, phases_dir, args.search)
    if failed:
        print(f"failed phases: {', '.join(failed)}", flush=True)
    print(args.marker, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
