"""A small real serving target: a tiny decoder with random weights, served the way SGLang serves.

    python server.py --port 30100 [--model-path tokenizer] [--role both|prefill|decode]
                     [--layers 2 --hidden 64 --experts 4 --topk 2] [--enable-metrics [--metrics-names vllm]]
                     [--max-batch B --step-ms T | --decode-step-ms T] [--prefill-ms-per-token X] [--max-kv-tokens N]

Each layer is causal self-attention then an MoE feed-forward computed by the ``kernels/moe`` payload
(``fused_moe_torch`` on a CPU, the Triton kernel with CUDA). Decoding is greedy and never stops early
(the model has no end-of-sequence token), so every request gets exactly the tokens it asked for.

Tokens: the tokenizer in ``--model-path`` (``tokenizer/``, built by ``make_tokenizer.py``), one character
per token, 256 tokens = the model's vocabulary; the server encodes and decodes with the vocabulary in its
``tokenizer.json``, so a client that loads the same directory with ``transformers`` counts the same tokens.

The endpoints the real clients (``sglang.bench_serving``, ``vllm bench serve``) and ``sglang_router`` call,
with SGLang's shapes: ``GET /health``, ``/health_generate`` (runs one token), ``/ready``, ``/v1/models``
(the model id is the absolute ``--model-path``, so a client loads the tokenizer from it), ``/model_info``
and ``/get_model_info``, ``/server_info`` and ``/get_server_info``; ``GET|POST /flush_cache`` (empties the prefix
cache); ``POST /generate`` (``text`` or ``input_ids``,
``sampling_params.max_new_tokens``, streamed as cumulative ``text`` + ``meta_info`` like SGLang) and
``POST /v1/completions`` (``prompt`` as text or token ids, ``max_tokens``, ``stream``, and ``/v1/chat/completions``:
``messages`` as ``role: content`` lines, ``delta`` chunks,
``stream_options.include_usage`` / ``continuous_usage_stats``), ``POST /tokenize`` and ``/detokenize``
(``vllm bench serve`` checks its prompts with them); ``GET /metrics`` with ``--enable-metrics`` (below). Requests
are served one at a time (a lock), so queueing shows up in TTFT as load grows. ``--role`` is reported in
``/server_info`` (and as the metrics' ``engine_type``).

A capacity knob, off by default: ``--max-batch B --step-ms T [--noise F --seed S]`` replaces the lock by a
scheduler with a known capacity, for load searches whose answer a test must know. It decodes in rounds:
the N sequences running at a round's start are split into ceil(N / B) steps of at most B sequences, each
step takes T ms (multiplied by exp(F·z), z standard normal from ``--seed``, with noise) and every sequence
gets one token at the end of its step; a request that arrives joins at the next round. So each token of a
request takes one round, T·ceil(N / B): with closed-loop concurrency C (N ≈ C), TPOT ≈ T·ceil(C / B) and
TTFT ≤ 2·T·ceil(C / B). With B = 8 and T = 20 ms, TPOT is 20 ms up to C = 8 and 40 ms from C = 9: a P99 TPOT
limit of 30 ms holds up to C = 8 and fails from C = 9 (a probe's last requests, when fewer are left running,
see shorter rounds). A step lasts longer than T only when computing its tokens does (B model passes).

Knobs that make a role the bottleneck, off by default. ``--prefill-ms-per-token X`` (a prefill or both server):
each prompt this server prefills costs X ms per prompt token, spent holding the server's one path: inside the lock
before the first token, or, with the scheduler, in its thread at the start of the round that admits the request,
before that round's steps (prefills one after the other, stalling the decode steps as a scheduler without chunked
prefill does). Under load prefills queue behind each other: TTFT grows by X times the prompt tokens ahead and its
own. ``--decode-step-ms T`` (a decode or both server) is the capacity scheduler with a step of T ms (it replaces
``--step-ms``) and ``--max-batch B`` if given, else B = 256 (more sequences than the listen backlog of 128: one
step a round): every token of every running sequence then takes at least T, a round of T·ceil(N / B); on a
decode server the first token streamed is the prefill server's, the rest are steps. ``--max-kv-tokens N``: a KV
pool of N tokens; a running sequence holds its prompt + generated tokens. A queued request is admitted (in order,
at a round's start) only if the running sequences' tokens, its own, and one token for each of them (the round's)
fit in N; when a round's tokens would not fit, the newest running sequences are retracted, as SGLang retracts
decode requests out of memory: back to the head of the queue, keeping the tokens they made (no new prefill), one
preemption each. A request that cannot fit alone (prompt + max tokens > N; on a prefill server prompt + 1) is
refused with 400, so the oldest running sequence always fits and every request finishes. Without the scheduler
one request runs at a time, and the pool only refuses what cannot fit. Without ``--max-kv-tokens`` there is no
limit, and the usage reported is used / 2^20 nominal tokens (``sglang:max_total_num_tokens``).

A prefix cache, as SGLang's radix cache (on unless ``--disable-radix-cache``): the prompts a prefill or both server
has prefilled, as a token trie of at most ``--prefix-cache-tokens`` tokens (emptied when full, not evicted leaf by
leaf). A request's cached tokens are its longest prefix in the trie, all of its prompt but the last token at most
(one token is always prefilled); its prefill costs ``--prefill-ms-per-token`` for the others only. The count is in
``meta_info.cached_tokens`` (``/generate``), ``usage.prompt_tokens_details.cached_tokens`` (``/v1/completions``) and
the metrics (``sglang:cached_tokens_total``; vLLM's ``prefix_cache_queries_total`` and ``prefix_cache_hits_total``).

``--enable-metrics``: ``GET /metrics`` answers Prometheus text (``text/plain; version=0.0.4``), written here by hand,
with SGLang 0.5.23's names and labels (``model_name`` = the served model name, ``engine_type`` unified|prefill|
decode, ranks 0), or vLLM's with ``--metrics-names vllm`` (``model_name``, ``engine="0"``); without the flag
``/metrics`` is 404, as in SGLang. The values are the server's own state. Gauges: running = sequences holding the
model (the request in the lock, or the scheduler's running sequences, prefilling or decoding), queued = requests
accepted and not running (waiting for the lock, a round or KV room, or retracted), KV tokens used and used / N,
generation throughput = tokens made in the last 2 s / 2 s. Counters: retractions (preemptions); per request, at its
end, the prompt tokens this server prefilled (none on a PD decode server), the tokens it generated (1 on a prefill
server; on a decode server all but the first, which its prefill server made) and one finished request. Histograms,
per request, as its tokens leave this server: time to first token and end-to-end latency from its arrival, the
inter-token latency of each later token, and the queue time from queued to first admitted. ``/health_generate``
counts in the gauges only.
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import random
import sys
import threading
import time
import urllib.request
import uuid
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

import torch

HERE = Path(__file__).resolve().parent
for candidate in (HERE / "moe", HERE.parent / "moe"):  # deployed next to us, or the repo layout
    if candidate.is_dir():
        sys.path.insert(0, str(candidate))
        break
from fused_moe import fused_moe_torch, fused_moe_triton, route  # noqa: E402

VOCAB = 256
CONTEXT_LEN = 4096
BOOTSTRAP_TIMEOUT = 300.0  # how long a decode server waits for its prefill
VERSION = "benchflow-tiny-moe-1"
NOMINAL_KV_TOKENS = 1 << 20  # token_usage's denominator without --max-kv-tokens (there is no limit then)
DECODE_BATCH = 256  # --decode-step-ms without --max-batch: more sequences than the server's backlog holds
THROUGHPUT_WINDOW = 2.0  # seconds: the generation throughput gauge is the tokens made in the last window / window
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class TinyMoEDecoder(torch.nn.Module):
    def __init__(self, layers: int, hidden: int, experts: int, topk: int, inter: int, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)

        def weight(*shape: int, scale: float) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(*shape, generator=gen) * scale, requires_grad=False)

        self.topk = topk
        self.embed = weight(VOCAB, hidden, scale=1.0)
        self.qkv = [weight(3 * hidden, hidden, scale=hidden**-0.5) for _ in range(layers)]
        self.router = [weight(experts, hidden, scale=hidden**-0.5) for _ in range(layers)]
        self.w1 = [weight(experts, 2 * inter, hidden, scale=hidden**-0.5) for _ in range(layers)]
        self.w2 = [weight(experts, hidden, inter, scale=inter**-0.5) for _ in range(layers)]
        self.moe = fused_moe_triton if torch.cuda.is_available() else fused_moe_torch

    @torch.no_grad()
    def next_token(self, tokens: list[int]) -> int:
        x = self.embed[torch.tensor(tokens)]
        n, hidden = x.shape
        mask = torch.full((n, n), float("-inf")).triu(1)
        for qkv, router, w1, w2 in zip(self.qkv, self.router, self.w1, self.w2, strict=True):
            q, k, v = (torch.nn.functional.rms_norm(x, (hidden,)) @ qkv.T).split(hidden, dim=-1)
            x = x + torch.softmax(q @ k.T / hidden**0.5 + mask, dim=-1) @ v
            h = torch.nn.functional.rms_norm(x, (hidden,))
            weights, ids = route(h @ router.T, self.topk)
            x = x + self.moe(h, w1, w2, weights, ids)
        return int(torch.argmax(torch.nn.functional.rms_norm(x[-1], (hidden,)) @ self.embed.T))


class CharTokenizer:
    """The vocabulary of ``<model-path>/tokenizer.json``: one character per token, unknown → the unk token."""

    def __init__(self, model_path: Path):
        spec = json.loads((model_path / "tokenizer.json").read_text())
        model = spec["model"]
        if model.get("merges") or any(len(token) != 1 for token in model["vocab"]):
            raise SystemExit(f"{model_path}/tokenizer.json is not a one-character-per-token vocabulary")
        self.ids = {token: int(i) for token, i in model["vocab"].items()}
        self.chars = {i: token for token, i in self.ids.items()}
        self.unk = self.ids[model["unk_token"]]
        if sorted(self.chars) != list(range(VOCAB)):
            raise SystemExit(f"{model_path}/tokenizer.json has {len(self.chars)} tokens, the model {VOCAB}")

    def encode(self, text: str) -> list[int]:
        return [self.ids.get(c, self.unk) for c in text]

    def decode(self, tokens: list[int]) -> str:
        return "".join(self.chars[t] for t in tokens)


class BadRequest(ValueError):
    pass


class Rooms:
    """The prefill server's hand-over desk: bootstrap room → the prompt's first token, taken once by the decode
    server. The tiny model keeps no KV cache (each step recomputes the sequence), so the first token is all the
    state a decode server needs to continue a prefill."""

    def __init__(self) -> None:
        self.tokens: dict[int, int] = {}
        self.ready = threading.Condition()

    def put(self, room: int, token: int) -> None:
        with self.ready:
            self.tokens[room] = token
            self.ready.notify_all()

    def take(self, room: int, timeout: float) -> int | None:
        with self.ready:
            if not self.ready.wait_for(lambda: room in self.tokens, timeout):
                return None
            return self.tokens.pop(room)


class Load:
    """What the gauges read, kept by whichever path serves (the lock or the scheduler): requests queued and running,
    the KV tokens the running ones hold, retractions, and the tokens made lately (the throughput)."""

    def __init__(self, capacity: int) -> None:
        self.lock = threading.Lock()
        self.capacity = capacity
        self.queued = self.running = self.used = self.preemptions = 0
        self.recent: deque[tuple[float, int]] = deque()  # (monotonic time, tokens) of each step

    def change(self, queued: int = 0, running: int = 0, used: int = 0, preempted: int = 0) -> None:
        with self.lock:
            self.queued += queued
            self.running += running
            self.used += used
            self.preemptions += preempted

    def grew(self, tokens: int) -> None:
        """``tokens`` tokens made, one for each of as many running sequences."""
        now = time.monotonic()
        with self.lock:
            self.used += tokens
            self.recent.append((now, tokens))
            self._forget(now)

    def _forget(self, now: float) -> None:
        while self.recent and self.recent[0][0] < now - THROUGHPUT_WINDOW:
            self.recent.popleft()

    def readings(self) -> dict[str, float]:
        """The gauges' and the preemption counter's values now."""
        now = time.monotonic()
        with self.lock:
            self._forget(now)
            return {
                "running": self.running,
                "queued": self.queued,
                "used": self.used,
                "usage": self.used / self.capacity,
                "capacity": self.capacity,
                "preemptions": self.preemptions,
                "throughput": sum(n for _, n in self.recent) / THROUGHPUT_WINDOW,
            }


class PrefixCache:
    """The prompts prefilled so far, as a token trie of at most ``capacity`` tokens (emptied when full)."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.lock = capacity, threading.Lock()
        self.root: dict[int, dict] = {}
        self.size = 0

    def match_and_insert(self, tokens: list[int]) -> int:
        """The length of ``tokens``' longest cached prefix (all but the last token at most), then ``tokens`` cached."""
        with self.lock:
            node, matched = self.root, 0
            for token in tokens[:-1]:
                if token not in node:
                    break
                node, matched = node[token], matched + 1
            start = matched
            if self.size + len(tokens) - matched > self.capacity:
                self.root, self.size = {}, 0
                node, start = self.root, 0
            for token in tokens[start:]:
                node = node.setdefault(token, {})
            self.size += len(tokens) - start
            return matched

    def flush(self) -> None:
        with self.lock:
            self.root, self.size = {}, 0


class Clock:
    """One request's times at this server (``time.perf_counter``): arrived, queued for the model, first admitted."""

    def __init__(self) -> None:
        self.arrived = time.perf_counter()
        self.queued: float | None = None
        self.admitted: float | None = None
        self.cached = 0  # the prompt tokens found in the prefix cache (not prefilled again)

    def admit(self) -> None:
        if self.admitted is None:
            self.admitted = time.perf_counter()

    def queue_time(self) -> float:
        return 0.0 if self.queued is None or self.admitted is None else self.admitted - self.queued


class Sequence:
    """A request inside the scheduler: its tokens so far, and the queue its handler reads them from."""

    def __init__(self, tokens: list[int], max_tokens: int, prefill_s: float = 0.0, clock: Clock | None = None):
        self.tokens, self.left = list(tokens), max_tokens
        self.prefill_s, self.clock = prefill_s, clock  # the prefill's time, owed at its first admission
        self.out: queue.Queue[int] = queue.Queue()
        self.cancelled = False  # the client went away: dropped at the next round


class Scheduler:
    """Batched decoding with a known capacity (see the module's doc): rounds of ceil(N / B) steps of T ms, over
    the sequences the KV pool (``kv_limit`` tokens, if any) admits."""

    def __init__(
        self,
        model: TinyMoEDecoder,
        max_batch: int,
        step_ms: float,
        noise: float = 0.0,
        seed: int = 0,
        load: Load | None = None,
        kv_limit: int | None = None,
    ):
        self.model, self.max_batch, self.step_s, self.noise = model, max_batch, step_ms / 1e3, noise
        self.random = random.Random(seed)
        self.load, self.kv_limit = load or Load(NOMINAL_KV_TOKENS), kv_limit
        self.pending: list[Sequence] = []  # queued, in order: retracted sequences go back to the head
        self.running: list[Sequence] = []  # in admission order; changed by the scheduler's thread only
        self.ready = threading.Condition()
        threading.Thread(target=self._run, daemon=True, name="scheduler").start()

    def generate(
        self, tokens: list[int], max_tokens: int, prefill_s: float = 0.0, clock: Clock | None = None
    ) -> Iterator[int]:
        sequence = Sequence(tokens, max_tokens, prefill_s, clock)
        with self.ready:
            self.pending.append(sequence)
            self.load.change(queued=1)
            self.ready.notify()
        try:
            for _ in range(max_tokens):
                yield sequence.out.get()
        finally:
            sequence.cancelled = True

    def _run(self) -> None:
        while True:
            with self.ready:
                if not self.running:
                    self.ready.wait_for(lambda: bool(self.pending))
                admitted = self._admit()
            owed = sum(s.prefill_s for s in admitted)  # their prefills, one after the other, before the round
            for sequence in admitted:
                sequence.prefill_s = 0.0
            if owed:
                time.sleep(owed)
            running = list(self.running)
            for first in range(0, len(running), self.max_batch):
                self._step(running[first : first + self.max_batch])
            with self.ready:
                self._retire()
                self._retract()

    def _fits(self, sequence: Sequence) -> bool:
        """Whether the KV pool holds the running sequences, this one, and the round's token for each of them."""
        need = self.load.used + len(sequence.tokens) + len(self.running) + 1
        return self.kv_limit is None or need <= self.kv_limit

    def _admit(self) -> list[Sequence]:
        """Queued sequences to running, in order, while the KV pool has room for them (all, without a limit)."""
        admitted: list[Sequence] = []
        while self.pending:
            sequence = self.pending[0]
            if not sequence.cancelled and not self._fits(sequence):
                break
            self.pending.pop(0)
            if sequence.cancelled:
                self.load.change(queued=-1)
                continue
            self.running.append(sequence)
            self.load.change(queued=-1, running=1, used=len(sequence.tokens))
            if sequence.clock is not None:
                sequence.clock.admit()
            admitted.append(sequence)
        return admitted

    def _retire(self) -> None:
        """Finished and cancelled sequences leave, their KV tokens freed."""
        keep = []
        for sequence in self.running:
            if sequence.left > 0 and not sequence.cancelled:
                keep.append(sequence)
            else:
                self.load.change(running=-1, used=-len(sequence.tokens))
        self.running = keep

    def _retract(self) -> None:
        """While the next round's tokens would overflow the KV pool, the newest running sequence goes back to the
        head of the queue (the oldest always fits alone: a request larger than the pool is refused)."""
        while self.kv_limit is not None and len(self.running) > 1:
            if self.load.used + len(self.running) <= self.kv_limit:
                break
            sequence = self.running.pop()
            self.pending.insert(0, sequence)
            self.load.change(queued=1, running=-1, used=-len(sequence.tokens), preempted=1)

    def _step(self, batch: list[Sequence]) -> None:
        """One step: a token for each sequence of the batch, delivered when the step's time is up."""
        start = time.perf_counter()
        made = [(s, self.model.next_token(s.tokens)) for s in batch if not s.cancelled]
        jitter = math.exp(self.noise * self.random.gauss(0.0, 1.0)) if self.noise else 1.0
        time.sleep(max(0.0, start + self.step_s * jitter - time.perf_counter()))
        for sequence, token in made:
            sequence.tokens.append(token)
            sequence.left -= 1
            sequence.out.put(token)
        self.load.grew(len(made))


# The families /metrics exposes, as SGLang 0.5.23 (sglang/srt/observability/metrics_collector.py) and vLLM
# (vllm/v1/metrics/loggers.py, buckets.py) name them: key, name, type, help, base labels, per-request label, buckets.
def _bounds(text: str) -> tuple[float, ...]:
    """A histogram's bucket bounds, written as the servers' sources list them."""
    return tuple(float(word) for word in text.split())


SGLANG_TTFT_BUCKETS = _bounds("0.1 0.2 0.4 0.6 0.8 1 2 4 6 8 10 20 40 60 80 100 200 400")
SGLANG_E2E_BUCKETS = _bounds("0.1 0.2 0.4 0.6 0.8 1 2 4 6 8 10 20 40 60 80 100 200 400 600 1200 1800 2400")
SGLANG_ITL_BUCKETS = _bounds(
    "0.002 0.004 0.006 0.008 0.01 0.015 0.02 0.025 0.03 0.035 0.04 0.06 0.08 0.1 0.2 0.4 0.6 0.8 1 2 4 6 8"
)
SGLANG_QUEUE_BUCKETS = _bounds(
    "0 0.001 0.005 0.01 0.05 0.1 0.2 0.5 1 2 3 4 5 10 15 20 30 40 50 60 70 80 90 100 200 300 400 500 600 700 800 "
    "900 1000 1200 1400 1600 1800 2000 2500 3000"
)
VLLM_TTFT_BUCKETS = _bounds(
    "0.001 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.25 0.5 0.75 1 2.5 5 7.5 10 20 40 80 160 640 2560"
)
VLLM_ITL_BUCKETS = _bounds("0.01 0.025 0.05 0.075 0.1 0.15 0.2 0.3 0.4 0.5 0.75 1 2.5 5 7.5 10 20 40 80")
VLLM_LATENCY_BUCKETS = _bounds("0.3 0.5 0.8 1 1.5 2 2.5 5 10 15 20 30 40 50 60 120 240 480 960 1920 7680")
VLLM_FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


class Family(NamedTuple):
    """A metric family: our key for its value, its name, type and help, whose labels (:class:`Metrics`), the
    label a request adds (``is_streaming`` or ``finished_reason``) and a histogram's buckets."""

    key: str
    name: str
    kind: str
    help: str
    base: str
    extra: str | None = None
    buckets: tuple[float, ...] | None = None


SCHED, TOK = "scheduler", "tokenizer"
FAMILIES: dict[str, tuple[Family, ...]] = {
    "sglang": (
        Family("running", "sglang:num_running_reqs", "gauge", "The number of running requests.", SCHED),
        Family("queued", "sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", SCHED),
        Family("throughput", "sglang:gen_throughput", "gauge", "The generation throughput (token/s).", SCHED),
        Family("usage", "sglang:token_usage", "gauge", "The token usage.", SCHED),
        Family("used", "sglang:num_used_tokens", "gauge", "The number of used tokens.", SCHED),
        Family(
            "capacity",
            "sglang:max_total_num_tokens",
            "gauge",
            "Maximum total number of tokens in the KV cache pool.",
            SCHED,
        ),
        Family(
            "preemptions",
            "sglang:num_retracted_requests_total",
            "counter",
            "Total number of retracted requests.",
            SCHED,
        ),
        Family(
            "queue_time",
            "sglang:queue_time_seconds",
            "histogram",
            "Histogram of queueing time in seconds.",
            SCHED,
            buckets=SGLANG_QUEUE_BUCKETS,
        ),
        Family(
            "prompt_tokens",
            "sglang:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            TOK,
            "is_streaming",
        ),
        Family(
            "generation_tokens",
            "sglang:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            TOK,
            "is_streaming",
        ),
        Family(
            "requests", "sglang:num_requests_total", "counter", "Number of requests processed.", TOK, "is_streaming"
        ),
        Family("prefix_hits", "sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.", TOK),
        Family(
            "ttft",
            "sglang:time_to_first_token_seconds",
            "histogram",
            "Histogram of time to first token in seconds.",
            TOK,
            "is_streaming",
            SGLANG_TTFT_BUCKETS,
        ),
        Family(
            "itl",
            "sglang:inter_token_latency_seconds",
            "histogram",
            "Histogram of inter-token latency in seconds.",
            TOK,
            buckets=SGLANG_ITL_BUCKETS,
        ),
        Family(
            "e2e",
            "sglang:e2e_request_latency_seconds",
            "histogram",
            "Histogram of End-to-end request latency in seconds",
            TOK,
            "is_streaming",
            SGLANG_E2E_BUCKETS,
        ),
    ),
    "vllm": (
        Family(
            "running", "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", "vllm"
        ),
        Family("queued", "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", "vllm"),
        Family("usage", "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", "vllm"),
        Family(
            "preemptions",
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            "vllm",
        ),
        Family("prompt_tokens", "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", "vllm"),
        Family(
            "prefix_queries",
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            "vllm",
        ),
        Family(
            "prefix_hits",
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            "vllm",
        ),
        Family(
            "generation_tokens",
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            "vllm",
        ),
        Family(
            "requests",
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            "vllm",
            "finished_reason",
        ),
        Family(
            "ttft",
            "vllm:time_to_first_token_seconds",
            "histogram",
            "Histogram of time to first token in seconds.",
            "vllm",
            buckets=VLLM_TTFT_BUCKETS,
        ),
        Family(
            "itl",
            "vllm:inter_token_latency_seconds",
            "histogram",
            "Histogram of inter-token latency in seconds.",
            "vllm",
            buckets=VLLM_ITL_BUCKETS,
        ),
        Family(
            "e2e",
            "vllm:e2e_request_latency_seconds",
            "histogram",
            "Histogram of e2e request latency in seconds.",
            "vllm",
            buckets=VLLM_LATENCY_BUCKETS,
        ),
        Family(
            "queue_time",
            "vllm:request_queue_time_seconds",
            "histogram",
            "Histogram of time spent in WAITING phase for request.",
            "vllm",
            buckets=VLLM_LATENCY_BUCKETS,
        ),
    ),
}
Labels = tuple[tuple[str, str], ...]


def prometheus_float(value: float) -> str:
    """A sample's value as Prometheus' text format writes it (as ``prometheus_client`` does)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return "NaN" if math.isnan(value) else repr(float(value))


def prometheus_sample(name: str, labels: Labels, value: float) -> str:
    escaped = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for _, v in labels)
    inner = ",".join(f'{k}="{v}"' for (k, _), v in zip(labels, escaped, strict=True))
    return f"{name}{{{inner}}} {prometheus_float(value)}"


class Histogram:
    """A Prometheus histogram's state: observations per bucket, their sum and count."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * len(self.bounds)  # per bucket, not cumulative (over the last bound: in count only)
        self.sum, self.count = 0.0, 0

    def observe(self, value: float) -> None:
        i = next((i for i, bound in enumerate(self.bounds) if value <= bound), len(self.bounds))  # first >= value
        if i < len(self.bounds):
            self.counts[i] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: Labels) -> list[str]:
        out, cumulative = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=True):
            cumulative += n
            out.append(prometheus_sample(f"{name}_bucket", (*labels, ("le", prometheus_float(bound))), cumulative))
        out.append(prometheus_sample(f"{name}_bucket", (*labels, ("le", "+Inf")), self.count))
        out.append(prometheus_sample(f"{name}_count", labels, self.count))
        out.append(prometheus_sample(f"{name}_sum", labels, self.sum))
        return out


class Metrics:
    """``GET /metrics``: the :data:`FAMILIES` of ``names`` (SGLang's or vLLM's), the gauges read from ``load``,
    the per-request counters and histograms observed by :meth:`observed`."""

    def __init__(self, names: str, model_name: str, role: str, load: Load) -> None:
        self.families, self.load = FAMILIES[names], load
        self.family = {f.key: f for f in self.families}
        engine_type = {"both": "unified"}.get(role, role)
        tokenizer = (("model_name", model_name), ("engine_type", engine_type))
        self.base: dict[str, Labels] = {
            "tokenizer": tokenizer,
            "scheduler": (*tokenizer, ("tp_rank", "0"), ("pp_rank", "0"), ("moe_ep_rank", "0")),
            "vllm": (("model_name", model_name), ("engine", "0")),
        }
        self.lock = threading.Lock()
        self.counters: dict[str, dict[Labels, float]] = {}
        self.histograms: dict[str, dict[Labels, Histogram]] = {}
        if names == "vllm":  # vLLM makes its series at start-up: they read 0 before any request
            for family in self.families:
                if family.kind != "gauge" and family.key != "preemptions":
                    for value in VLLM_FINISH_REASONS if family.extra else ("",):
                        self._series(family.key, ((family.extra, value),) if family.extra else ())

    def _series(self, key: str, extra: Labels) -> Histogram | None:
        """Make the series of ``key`` with the per-request labels ``extra`` if it is not there (a histogram's)."""
        buckets = self.family[key].buckets
        if buckets is None:
            self.counters.setdefault(key, {}).setdefault(extra, 0.0)
            return None
        return self.histograms.setdefault(key, {}).setdefault(extra, Histogram(buckets))

    def _extra(self, key: str, stream: bool) -> Labels:
        extra = self.family[key].extra
        if extra == "is_streaming":
            return (("is_streaming", "true" if stream else "false"),)
        return (("finished_reason", "length"),) if extra == "finished_reason" else ()

    def _observe(self, key: str, value: float, stream: bool) -> None:
        with self.lock:
            histogram = self._series(key, self._extra(key, stream))
            if histogram is not None:
                histogram.observe(value)

    def _finish(self, prefilled: int, generated: int, clock: Clock, stream: bool) -> None:
        e2e = time.perf_counter() - clock.arrived
        counts = [("prompt_tokens", prefilled), ("generation_tokens", generated), ("requests", 1)]
        counts += [("prefix_queries", prefilled), ("prefix_hits", clock.cached if prefilled else 0)]
        with self.lock:
            for key, value in counts:
                if key not in self.family:
                    continue
                extra = self._extra(key, stream)
                self._series(key, extra)
                self.counters[key][extra] += value
        self._observe("e2e", e2e, stream)
        self._observe("queue_time", clock.queue_time(), stream)

    def observed(
        self, tokens_out: Iterator[int], clock: Clock, prefilled: int, bootstrapped: int, stream: bool
    ) -> Iterator[int]:
        """``tokens_out``, timed as each token leaves: TTFT, then inter-token latencies; at the end the request's
        prompt tokens this server prefilled, the tokens it generated (all it streams but ``bootstrapped``, made by
        a prefill server), e2e latency and queue time."""
        last, made = None, 0
        for token in tokens_out:
            now = time.perf_counter()
            self._observe("ttft" if last is None else "itl", now - (clock.arrived if last is None else last), stream)
            last, made = now, made + 1
            yield token
        self._finish(prefilled, made - bootstrapped, clock, stream)

    def exposition(self) -> bytes:
        """The text format 0.0.4 of every family, as ``prometheus_client`` writes it."""
        readings = self.load.readings()
        lines = []
        with self.lock:
            for key, name, kind, text, base, *_ in self.families:
                lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
                labels = self.base[base]
                if key in readings:
                    lines.append(prometheus_sample(name, labels, readings[key]))
                for extra, histogram in self.histograms.get(key, {}).items():
                    lines += histogram.lines(name, (*labels, *extra))
                for extra, value in self.counters.get(key, {}).items():
                    lines.append(prometheus_sample(name, (*labels, *extra), value))
        return ("\n".join(lines) + "\n").encode()


class Engine:
    """The model, its tokenizer and what the info endpoints report."""

    def __init__(self, model: TinyMoEDecoder, tokenizer: CharTokenizer, args: argparse.Namespace):
        self.model, self.tokenizer, self.args = model, tokenizer, args
        self.lock = threading.Lock()
        self.load = Load(args.max_kv_tokens or NOMINAL_KV_TOKENS)
        self.prefill_s_per_token = args.prefill_ms_per_token / 1e3
        batch, step_ms = args.max_batch, args.step_ms
        if args.decode_step_ms is not None:  # the scheduler, its step T, all sequences in one step unless --max-batch
            batch, step_ms = args.max_batch or DECODE_BATCH, args.decode_step_ms
        self.max_running = batch or 1
        self.scheduler = (
            Scheduler(model, batch, step_ms, args.noise, args.seed, self.load, args.max_kv_tokens) if batch else None
        )
        self.model_path = str(Path(args.model_path).resolve())
        self.served_model_name = args.served_model_name or self.model_path
        self.metrics = (
            Metrics(args.metrics_names, self.served_model_name, args.role, self.load) if args.enable_metrics else None
        )
        self.started = time.time()
        self.last_gen_throughput = 0.0
        self.requests = self.generated_tokens = 0  # model passes started / tokens made, for /server_info
        self.rooms = Rooms()
        self.prefix_cache = None if args.disable_radix_cache else PrefixCache(args.prefix_cache_tokens)

    def prompt_tokens(self, prompt: object) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and not isinstance(prompt[0], int):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            tokens = self.tokenizer.encode(prompt)
        elif isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            if any(not 0 <= t < VOCAB for t in prompt):
                raise BadRequest(f"token ids must be in [0, {VOCAB})")
            tokens = list(prompt)
        else:
            raise BadRequest("prompt must be a string or a list of token ids (one prompt per request)")
        if not tokens:
            raise BadRequest("empty prompt")
        return tokens

    def generate(
        self, tokens: list[int], max_tokens: int, prefill: bool = True, clock: Clock | None = None
    ) -> Iterator[int]:
        """Yield the generated token ids one by one, holding the model for the whole request (or, with a
        capacity, as the scheduler's steps make them). ``prefill``: the prompt is this server's to prefill (it
        costs ``--prefill-ms-per-token``); ``clock`` takes the times it queued and was admitted."""
        prefill_s = self.prefill_s_per_token * (len(tokens) - (clock.cached if clock else 0)) if prefill else 0.0
        if clock is not None:
            clock.queued = time.perf_counter()
        if self.scheduler is not None:
            start, made = time.perf_counter(), 0
            for token in self.scheduler.generate(tokens, max_tokens, prefill_s, clock):
                made += 1
                yield token
            self._count(made, time.perf_counter() - start)
            return
        yield from self._locked(tokens, max_tokens, prefill_s, clock)

    def _locked(self, tokens: list[int], max_tokens: int, prefill_s: float, clock: Clock | None) -> Iterator[int]:
        """The lock's path: queued until the model is free, then the prefill's time and every token."""
        self.load.change(queued=1)
        with self.lock:
            self.load.change(queued=-1, running=1, used=len(tokens))
            if clock is not None:
                clock.admit()
            generated: list[int] = []
            try:
                if prefill_s:
                    time.sleep(prefill_s)
                start = time.perf_counter()
                for _ in range(max_tokens):
                    token = self.model.next_token(tokens + generated)
                    generated.append(token)
                    self.load.grew(1)
                    yield token
            finally:
                self.load.change(running=-1, used=-len(tokens) - len(generated))
            self._count(len(generated), time.perf_counter() - start)

    def _count(self, tokens: int, seconds: float) -> None:
        self.last_gen_throughput = tokens / max(seconds, 1e-9)
        self.requests += 1
        self.generated_tokens += tokens

    def tokens_for(self, request: dict, tokens: list[int], max_tokens: int) -> tuple[int, Iterator[int], int]:
        """How many tokens this server streams for the request, their iterator (timed for ``/metrics`` when it
        is on), and the prompt tokens it found in its prefix cache."""
        clock = Clock()
        max_tokens, tokens_out, prefilled, bootstrapped = self._plan(request, tokens, max_tokens, clock)
        if self.metrics is not None:
            tokens_out = self.metrics.observed(tokens_out, clock, prefilled, bootstrapped, bool(request.get("stream")))
        return max_tokens, tokens_out, clock.cached

    def _plan(
        self, request: dict, tokens: list[int], max_tokens: int, clock: Clock
    ) -> tuple[int, Iterator[int], int, int]:
        """How many tokens this server streams, their iterator, the prompt tokens it prefills, and how many of the
        tokens it streams it does not make. A request that the SGLang router sent in PD mode carries
        ``bootstrap_host``/``bootstrap_port``/``bootstrap_room`` and goes to both servers: the prefill server makes
        the first token and leaves it in the room; the decode server takes it from the prefill server's bootstrap
        port, streams it, and decodes the rest."""
        room = request.get("bootstrap_room")
        if self.prefix_cache is not None and (room is None or self.args.role != "decode"):
            clock.cached = self.prefix_cache.match_and_insert(tokens)
        if room is None or self.args.role == "both":
            self._check_kv(len(tokens) + max_tokens)
            return max_tokens, self.generate(tokens, max_tokens, clock=clock), len(tokens), 0
        if isinstance(room, list):
            raise BadRequest("one prompt per request")
        if self.args.role == "prefill":
            self._check_kv(len(tokens) + 1)
            return 1, self._prefill(tokens, int(room), clock), len(tokens), 0
        host, port = request.get("bootstrap_host"), request.get("bootstrap_port")
        if not host or not port:
            raise BadRequest("a decode server needs the prefill server's bootstrap port (router: --prefill URL PORT)")
        self._check_kv(len(tokens) + max_tokens)
        return max_tokens, self._decode(tokens, max_tokens, f"http://{host}:{port}/kv/{int(room)}", clock), 0, 1

    def _check_kv(self, tokens: int) -> None:
        """A request must fit the KV pool alone (else it would wait, or be retracted, for ever)."""
        limit = self.args.max_kv_tokens
        if limit and tokens > limit:
            raise BadRequest(f"the request needs {tokens} KV tokens (prompt + output), over --max-kv-tokens {limit}")

    def _prefill(self, tokens: list[int], room: int, clock: Clock) -> Iterator[int]:
        for token in self.generate(tokens, 1, clock=clock):
            self.rooms.put(room, token)
            yield token

    def _decode(self, tokens: list[int], max_tokens: int, url: str, clock: Clock) -> Iterator[int]:
        with urllib.request.urlopen(url, timeout=BOOTSTRAP_TIMEOUT + 30) as response:
            first = int(json.loads(response.read())["token"])
        yield first
        yield from self.generate([*tokens, first], max_tokens - 1, prefill=False, clock=clock)

    def model_info(self) -> dict:
        return {
            "model_path": self.model_path,
            "served_model_name": self.served_model_name,
            "tokenizer_path": self.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "random",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": self.disaggregation_mode(),
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "tiny_moe_decoder",
            "architectures": ["TinyMoEDecoder"],
        }

    def disaggregation_mode(self) -> str:
        return "null" if self.args.role == "both" else self.args.role

    def server_info(self) -> dict:
        a = self.args
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path,
            "served_model_name": self.served_model_name,
            "host": a.host,
            "port": a.port,
            "tp_size": 1,
            "dp_size": 1,
            "ep_size": 1,
            "context_length": CONTEXT_LEN,
            "max_running_requests": self.max_running,
            "disaggregation_mode": self.disaggregation_mode(),
            "disaggregation_bootstrap_port": a.disaggregation_bootstrap_port,
            "num_layers": a.layers,
            "hidden": a.hidden,
            "num_experts": a.experts,
            "topk": a.topk,
            "intermediate": a.inter,
            "startup_time": self.started,
            "internal_states": [
                {
                    "last_gen_throughput": self.last_gen_throughput,
                    "requests": self.requests,
                    "generated_tokens": self.generated_tokens,
                    "avg_spec_accept_length": None,
                }
            ],
            "version": VERSION,
            "frontend": "python",
        }

    def model_card(self) -> dict:
        return {
            "id": self.served_model_name,
            "object": "model",
            "created": int(self.started),
            "owned_by": "sglang",
            "root": self.served_model_name,
            "parent": None,
            "max_model_len": CONTEXT_LEN,
        }


def completion_usage(prompt: tuple[int, int], completion_tokens: int) -> dict:
    """A completion's ``usage`` as SGLang reports it; ``prompt``: its tokens and those found in the prefix cache."""
    prompt_tokens, cached = prompt
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached} if cached else None,
        "reasoning_tokens": 0,
    }


def completion_choice(text: str, finish_reason: str | None) -> dict:
    """The one choice of a completion (or of a streamed chunk of one)."""
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "matched_stop": None}


class Handler(BaseHTTPRequestHandler):
    """The endpoints of the module's docstring, served by ``engine`` (:func:`make_handler` binds one)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # TCP_NODELAY, as uvicorn: each token leaves as soon as it is written
    engine: Engine

    def log_message(self, format: str, *args: object) -> None:
        return

    def _send(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self, code: int, body: object) -> None:
        self._send(code, json.dumps(body).encode(), "application/json")

    def _error(self, code: int, message: str) -> None:
        self._json(
            code, {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": code}
        )

    def _route(self) -> str:
        return self.path.split("?", 1)[0]

    def do_GET(self) -> None:
        path = self._route()
        if path in ("/health", "/ready"):
            self._send(200, b"", "text/plain")
        elif path == "/health_generate":
            self._health_generate()
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [self.engine.model_card()]})
        elif path.startswith("/v1/models/"):
            self._model(path.removeprefix("/v1/models/"))
        elif path in ("/model_info", "/get_model_info"):
            self._json(200, self.engine.model_info())
        elif path in ("/server_info", "/get_server_info"):
            self._json(200, self.engine.server_info())
        elif path == "/flush_cache":
            self._flush_cache()
        elif path == "/metrics" and self.engine.metrics is not None:  # without --enable-metrics: 404, as SGLang
            self._send(200, self.engine.metrics.exposition(), METRICS_CONTENT_TYPE)
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        path = self._route()
        try:
            length = int(self.headers.get("Content-Length", 0))
            request = json.loads(self.rfile.read(length)) if length else {}
            if path == "/flush_cache":
                self._flush_cache()
            elif path == "/v1/completions":
                self._completions(request)
            elif path == "/v1/chat/completions":
                self._chat(request)
            elif path == "/generate":
                self._generate(request)
            elif path in ("/tokenize", "/v1/tokenize"):
                self._tokenize(request)
            elif path in ("/detokenize", "/v1/detokenize"):
                self._detokenize(request)
            else:
                self._json(404, {"detail": "Not Found"})
        except (BadRequest, ValueError, KeyError, TypeError) as exc:
            self._error(400, str(exc))

    def _health_generate(self) -> None:
        """``GET /health_generate``: healthy once one token is generated."""
        for _ in self.engine.generate([0], 1):
            pass
        self._send(200, b"", "text/plain")

    def _model(self, name: str) -> None:
        """``GET /v1/models/<name>``: the model's card, if it is the one served."""
        if name == self.engine.served_model_name:
            self._json(200, self.engine.model_card())
        else:
            self._error(404, f"The model '{name}' does not exist")

    def _flush_cache(self) -> None:
        if self.engine.prefix_cache is not None:
            self.engine.prefix_cache.flush()
        self._send(200, b"Cache flushed.\nPlease check backend logs for more details.\n", "text/plain")

    def _tokenize(self, request: dict) -> None:
        """``POST /tokenize``: the prompt's token ids."""
        tokens = self.engine.prompt_tokens(request["prompt"])
        self._json(200, {"tokens": tokens, "count": len(tokens), "max_model_len": CONTEXT_LEN})

    def _detokenize(self, request: dict) -> None:
        """``POST /detokenize``: the text of token ids."""
        engine = self.engine
        self._json(200, {"text": engine.tokenizer.decode(engine.prompt_tokens(request["tokens"]))})

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _event(self, body: object) -> None:
        self._write(b"data: " + json.dumps(body).encode() + b"\n\n")

    def _end_stream(self) -> None:
        self._write(b"data: [DONE]\n\n")
        self._write(b"")

    def _write(self, payload: bytes) -> None:
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _chat(self, request: dict) -> None:
        """OpenAI chat completions (a multi-turn client sends the whole conversation each turn): the messages as one
        prompt, ``role: content`` lines (the tiny model has no chat template), streamed as ``delta`` chunks."""
        messages = request.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("messages must be a list of {role, content}")
        text = "".join(f"{m.get('role', 'user')}: {m.get('content') or ''}\n" for m in messages) + "assistant: "
        self._completions({**request, "prompt": text, "max_tokens": request.get("max_tokens")}, chat=True)

    def _completions(self, request: dict, chat: bool = False) -> None:
        """OpenAI completions as SGLang streams them: one chunk per token, the finish reason on the last."""
        engine = self.engine
        tokens = engine.prompt_tokens(request["prompt"])
        max_tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
        if max_tokens < 1 or len(tokens) + max_tokens > CONTEXT_LEN:
            raise BadRequest(f"need max_tokens >= 1 and prompt + max_tokens <= {CONTEXT_LEN}")
        head: dict = {
            "id": uuid.uuid4().hex,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": request.get("model") or engine.served_model_name,
        }
        options = request.get("stream_options") or {}
        max_tokens, tokens_out, cached = engine.tokens_for(request, tokens, max_tokens)
        # SGLang's OpenAI endpoints say the prompt tokens found in the prefix cache under "sglext"
        head["sglext"] = {"cached_tokens_details": {"device": cached, "host": 0}}
        if not request.get("stream"):
            self._whole_completion(head, (len(tokens), cached), tokens_out)
        else:
            self._streamed_completion(head, (len(tokens), cached), tokens_out, max_tokens, options)

    def _choice(self, head: dict, text: str, finish_reason: str | None, whole: bool = False) -> dict:
        """A completion's choice, or a chat completion's (``message`` whole, ``delta`` streamed)."""
        if head["object"] == "text_completion":
            return completion_choice(text, finish_reason)
        content = {"role": "assistant", "content": text}
        return {"index": 0, "message" if whole else "delta": content, "finish_reason": finish_reason}

    def _whole_completion(self, head: dict, prompt_tokens: tuple[int, int], tokens_out: Iterator[int]) -> None:
        """A completion not streamed: every token's text in one response."""
        generated = list(tokens_out)
        choice = self._choice(head, self.engine.tokenizer.decode(generated), "length", whole=True)
        self._json(200, {**head, "choices": [choice], "usage": completion_usage(prompt_tokens, len(generated))})

    def _streamed_completion(
        self, head: dict, prompt_tokens: tuple[int, int], tokens_out: Iterator[int], max_tokens: int, options: dict
    ) -> None:
        """A completion streamed: one chunk per token (with the usage so far when asked), then the usage."""
        self._start_stream()
        head = {**head, "object": "chat.completion.chunk"} if head["object"] != "text_completion" else head
        for n, token in enumerate(tokens_out, start=1):
            choice = self._choice(head, self.engine.tokenizer.decode([token]), "length" if n == max_tokens else None)
            usage = completion_usage(prompt_tokens, n) if options.get("continuous_usage_stats") else None
            self._event({**head, "choices": [choice], "usage": usage})
        if options.get("include_usage"):
            self._event({**head, "choices": [], "usage": completion_usage(prompt_tokens, max_tokens)})
        self._end_stream()

    def _generate(self, request: dict) -> None:
        """SGLang's native ``/generate``: cumulative text and ``meta_info`` in every streamed event."""
        engine = self.engine
        if request.get("input_ids") is not None:
            tokens = engine.prompt_tokens(request["input_ids"])
        else:
            tokens = engine.prompt_tokens(request.get("text"))
        params = request.get("sampling_params") or {}
        max_tokens = int(params.get("max_new_tokens") or 128)
        if max_tokens < 1 or len(tokens) + max_tokens > CONTEXT_LEN:
            raise BadRequest(f"need max_new_tokens >= 1 and prompt + max_new_tokens <= {CONTEXT_LEN}")
        rid = request.get("rid") or uuid.uuid4().hex
        start = time.time()
        generated: list[int] = []

        def event() -> dict:
            done = len(generated) == max_tokens
            return {
                "text": engine.tokenizer.decode(generated),
                "output_ids": list(generated),
                "meta_info": {
                    "id": rid,
                    "finish_reason": {"type": "length", "length": max_tokens} if done else None,
                    "prompt_tokens": len(tokens),
                    "completion_tokens": len(generated),
                    "cached_tokens": cached,
                    "e2e_latency": time.time() - start,
                },
            }

        max_tokens, tokens_out, cached = engine.tokens_for(request, tokens, max_tokens)
        if not request.get("stream"):
            generated += tokens_out
            self._json(200, event())
            return
        self._start_stream()
        for token in tokens_out:
            generated.append(token)
            self._event(event())
        self._end_stream()


def make_handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    """The endpoints' handler class, :class:`Handler` serving ``engine``."""
    return type("Handler", (Handler,), {"engine": engine})


def make_bootstrap_handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Bootstrap(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            room = self.path.removeprefix("/kv/")
            token = engine.rooms.take(int(room), BOOTSTRAP_TIMEOUT) if room.isdigit() else None
            body = json.dumps({"token": token} if token is not None else {"error": f"no room {room}"}).encode()
            self.send_response(200 if token is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Bootstrap


class Server(ThreadingHTTPServer):
    request_queue_size = 128  # a sweep opens up to its concurrency's connections at once
    daemon_threads = True


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--role", choices=["both", "prefill", "decode"], default="both")
    parser.add_argument("--model-path", default=str(HERE / "tokenizer"), help="directory with tokenizer.json")
    parser.add_argument("--served-model-name", help="model id in /v1/models (default: the model path)")
    parser.add_argument(
        "--disaggregation-bootstrap-port",
        type=int,
        default=8998,
        help="prefill role: where decode servers take the first token of a PD request",
    )
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--topk", type=int, default=2)
    parser.add_argument("--inter", type=int, default=64)
    parser.add_argument("--max-batch", type=int, help="capacity: at most this many sequences per decode step")
    parser.add_argument("--step-ms", type=float, default=20.0, help="capacity: the time of one step (ms)")
    parser.add_argument("--noise", type=float, default=0.0, help="capacity: step time × exp(noise · N(0, 1))")
    parser.add_argument("--seed", type=int, default=0, help="capacity: the noise's random seed")
    parser.add_argument("--prefill-ms-per-token", type=float, default=0.0, help="prefill: ms per prompt token")
    parser.add_argument("--decode-step-ms", type=float, help="decode: the scheduler, each step at least this (ms)")
    parser.add_argument("--max-kv-tokens", type=int, help="the KV pool in tokens: admission and retraction")
    parser.add_argument("--disable-radix-cache", action="store_true", help="no prefix cache (as SGLang's flag)")
    parser.add_argument("--prefix-cache-tokens", type=int, default=1 << 20, help="the prefix cache's size (tokens)")
    parser.add_argument("--enable-metrics", action="store_true", help="GET /metrics: Prometheus text")
    parser.add_argument("--metrics-names", choices=["sglang", "vllm"], help="whose metric names (default sglang)")
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    return args


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.max_batch is not None and (args.max_batch < 1 or args.step_ms <= 0 or args.noise < 0):
        parser.error("--max-batch needs B >= 1, --step-ms > 0 and --noise >= 0")
    if args.prefill_ms_per_token < 0 or (args.prefill_ms_per_token and args.role == "decode"):
        parser.error("--prefill-ms-per-token needs X >= 0, on a prefill or both server")
    if args.decode_step_ms is not None and (args.decode_step_ms <= 0 or args.noise < 0 or args.role == "prefill"):
        parser.error("--decode-step-ms needs T > 0 and --noise >= 0, on a decode or both server")
    if args.max_kv_tokens is not None and args.max_kv_tokens < 2:
        parser.error("--max-kv-tokens needs N >= 2")
    if args.metrics_names is not None and not args.enable_metrics:
        parser.error("--metrics-names needs --enable-metrics")
    args.metrics_names = args.metrics_names or "sglang"


def describe(args: argparse.Namespace, engine: Engine) -> str:
    """The start-up line: what is served where, and the knobs that are on."""
    knobs = []
    if args.decode_step_ms is not None:
        knobs.append(f"capacity {engine.max_running} per {args.decode_step_ms:g} ms decode step")
    elif args.max_batch:
        knobs.append(f"capacity {args.max_batch} per {args.step_ms:g} ms step")
    if args.prefill_ms_per_token:
        knobs.append(f"prefill {args.prefill_ms_per_token:g} ms per prompt token")
    if args.max_kv_tokens:
        knobs.append(f"KV pool {args.max_kv_tokens} tokens")
    if args.enable_metrics:
        knobs.append(f"/metrics with {args.metrics_names} names")
    return (
        f"serving tiny MoE decoder ({args.role}, layers {args.layers}, hidden {args.hidden}) "
        f"as {engine.served_model_name} on http://{args.host}:{args.port}" + "".join(f", {k}" for k in knobs)
    )


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    torch.set_num_threads(1)
    model = TinyMoEDecoder(args.layers, args.hidden, args.experts, args.topk, args.inter)
    model.next_token([1, 2, 3])  # warm up before reporting healthy
    engine = Engine(model, CharTokenizer(Path(args.model_path)), args)
    server = Server((args.host, args.port), make_handler(engine))
    if args.role == "prefill":
        bootstrap = Server((args.host, args.disaggregation_bootstrap_port), make_bootstrap_handler(engine))
        threading.Thread(target=bootstrap.serve_forever, daemon=True).start()
    print(describe(args, engine), flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
