"""A small real serving target: a tiny decoder with random weights, served the way SGLang serves.

    python server.py --port 30100 [--model-path tokenizer] [--role both|prefill|decode]
                     [--layers 2 --hidden 64 --experts 4 --topk 2]

Each layer is causal self-attention then an MoE feed-forward computed by the ``kernels/moe`` payload
(``fused_moe_torch`` on a CPU, the Triton kernel with CUDA). Decoding is greedy and never stops early
(the model has no end-of-sequence token), so every request gets exactly the tokens it asked for.

Tokens: the tokenizer in ``--model-path`` (``tokenizer/``, built by ``make_tokenizer.py``), one character
per token, 256 tokens = the model's vocabulary; the server encodes and decodes with the vocabulary in its
``tokenizer.json``, so a client that loads the same directory with ``transformers`` counts the same tokens.

The endpoints the real clients (``sglang.bench_serving``, ``vllm bench serve``) and ``sglang_router`` call,
with SGLang's shapes: ``GET /health``, ``/health_generate`` (runs one token), ``/ready``, ``/v1/models``
(the model id is the absolute ``--model-path``, so a client loads the tokenizer from it), ``/model_info``
and ``/get_model_info``, ``/server_info`` and ``/get_server_info``; ``GET|POST /flush_cache`` (there is no
prefix cache: it succeeds and does nothing); ``POST /generate`` (``text`` or ``input_ids``,
``sampling_params.max_new_tokens``, streamed as cumulative ``text`` + ``meta_info`` like SGLang) and
``POST /v1/completions`` (``prompt`` as text or token ids, ``max_tokens``, ``stream``,
``stream_options.include_usage`` / ``continuous_usage_stats``), ``POST /tokenize`` and ``/detokenize``
(``vllm bench serve`` checks its prompts with them). Requests are served one at a time (a lock),
so queueing shows up in TTFT as load grows. ``--role`` is reported in ``/server_info`` only.

A capacity knob, off by default: ``--max-batch B --step-ms T [--noise F --seed S]`` replaces the lock by a
scheduler with a known capacity, for load searches whose answer a test must know. It decodes in rounds:
the N sequences running at a round's start are split into ceil(N / B) steps of at most B sequences, each
step takes T ms (multiplied by exp(F·z), z standard normal from ``--seed``, with noise) and every sequence
gets one token at the end of its step; a request that arrives joins at the next round. So each token of a
request takes one round, T·ceil(N / B): with closed-loop concurrency C (N ≈ C), TPOT ≈ T·ceil(C / B) and
TTFT ≤ 2·T·ceil(C / B). With B = 8 and T = 20 ms, TPOT is 20 ms up to C = 8 and 40 ms from C = 9: a P99 TPOT
limit of 30 ms holds up to C = 8 and fails from C = 9 (a probe's last requests, when fewer are left running,
see shorter rounds). A step lasts longer than T only when computing its tokens does (B model passes).
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
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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


class Sequence:
    """A request inside the scheduler: its tokens so far, and the queue its handler reads them from."""

    def __init__(self, tokens: list[int], max_tokens: int):
        self.tokens, self.left = list(tokens), max_tokens
        self.out: queue.Queue[int] = queue.Queue()
        self.cancelled = False  # the client went away: dropped at the next round


class Scheduler:
    """Batched decoding with a known capacity (see the module's doc): rounds of ceil(N / B) steps of T ms."""

    def __init__(self, model: TinyMoEDecoder, max_batch: int, step_ms: float, noise: float = 0.0, seed: int = 0):
        self.model, self.max_batch, self.step_s, self.noise = model, max_batch, step_ms / 1e3, noise
        self.random = random.Random(seed)
        self.pending: list[Sequence] = []
        self.ready = threading.Condition()
        threading.Thread(target=self._run, daemon=True, name="scheduler").start()

    def generate(self, tokens: list[int], max_tokens: int) -> Iterator[int]:
        sequence = Sequence(tokens, max_tokens)
        with self.ready:
            self.pending.append(sequence)
            self.ready.notify()
        try:
            for _ in range(max_tokens):
                yield sequence.out.get()
        finally:
            sequence.cancelled = True

    def _run(self) -> None:
        running: list[Sequence] = []
        while True:
            with self.ready:
                if not running:
                    self.ready.wait_for(lambda: bool(self.pending))
                running += self.pending
                self.pending.clear()
            for first in range(0, len(running), self.max_batch):
                self._step(running[first : first + self.max_batch])
            running = [s for s in running if s.left > 0 and not s.cancelled]

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


class Engine:
    """The model, its tokenizer and what the info endpoints report."""

    def __init__(self, model: TinyMoEDecoder, tokenizer: CharTokenizer, args: argparse.Namespace):
        self.model, self.tokenizer, self.args = model, tokenizer, args
        self.lock = threading.Lock()
        self.scheduler = (
            Scheduler(model, args.max_batch, args.step_ms, args.noise, args.seed) if args.max_batch else None
        )
        self.model_path = str(Path(args.model_path).resolve())
        self.served_model_name = args.served_model_name or self.model_path
        self.started = time.time()
        self.last_gen_throughput = 0.0
        self.requests = self.generated_tokens = 0  # model passes started / tokens made, for /server_info
        self.rooms = Rooms()

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

    def generate(self, tokens: list[int], max_tokens: int) -> Iterator[int]:
        """Yield the generated token ids one by one, holding the model for the whole request (or, with a
        capacity, as the scheduler's steps make them)."""
        if self.scheduler is not None:
            start, made = time.perf_counter(), 0
            for token in self.scheduler.generate(tokens, max_tokens):
                made += 1
                yield token
            self._count(made, time.perf_counter() - start)
            return
        with self.lock:
            start = time.perf_counter()
            generated: list[int] = []
            for _ in range(max_tokens):
                token = self.model.next_token(tokens + generated)
                generated.append(token)
                yield token
            self._count(len(generated), time.perf_counter() - start)

    def _count(self, tokens: int, seconds: float) -> None:
        self.last_gen_throughput = tokens / max(seconds, 1e-9)
        self.requests += 1
        self.generated_tokens += tokens

    def tokens_for(self, request: dict, tokens: list[int], max_tokens: int) -> tuple[int, Iterator[int]]:
        """How many tokens this server makes for the request, and their iterator. A request that the SGLang
        router sent in PD mode carries ``bootstrap_host``/``bootstrap_port``/``bootstrap_room`` and goes to both
        servers: the prefill server makes the first token and leaves it in the room; the decode server takes it
        from the prefill server's bootstrap port, streams it, and decodes the rest."""
        room = request.get("bootstrap_room")
        if room is None or self.args.role == "both":
            return max_tokens, self.generate(tokens, max_tokens)
        if isinstance(room, list):
            raise BadRequest("one prompt per request")
        if self.args.role == "prefill":
            return 1, self._prefill(tokens, int(room))
        host, port = request.get("bootstrap_host"), request.get("bootstrap_port")
        if not host or not port:
            raise BadRequest("a decode server needs the prefill server's bootstrap port (router: --prefill URL PORT)")
        return max_tokens, self._decode(tokens, max_tokens, f"http://{host}:{port}/kv/{int(room)}")

    def _prefill(self, tokens: list[int], room: int) -> Iterator[int]:
        for token in self.generate(tokens, 1):
            self.rooms.put(room, token)
            yield token

    def _decode(self, tokens: list[int], max_tokens: int, url: str) -> Iterator[int]:
        with urllib.request.urlopen(url, timeout=BOOTSTRAP_TIMEOUT + 30) as response:
            first = int(json.loads(response.read())["token"])
        yield first
        yield from self.generate([*tokens, first], max_tokens - 1)

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
            "max_running_requests": a.max_batch or 1,
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


def completion_usage(prompt_tokens: int, completion_tokens: int) -> dict:
    """A completion's ``usage`` as SGLang reports it."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
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
        self._send(200, b"Cache flushed.\nThere is no prefix cache in this server; nothing was done.\n", "text/plain")

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

    def _completions(self, request: dict) -> None:
        """OpenAI completions as SGLang streams them: one chunk per token, the finish reason on the last."""
        engine = self.engine
        tokens = engine.prompt_tokens(request["prompt"])
        max_tokens = int(request.get("max_tokens") or 16)
        if max_tokens < 1 or len(tokens) + max_tokens > CONTEXT_LEN:
            raise BadRequest(f"need max_tokens >= 1 and prompt + max_tokens <= {CONTEXT_LEN}")
        head = {
            "id": uuid.uuid4().hex,
            "object": "text_completion",
            "created": int(time.time()),
            "model": request.get("model") or engine.served_model_name,
        }
        options = request.get("stream_options") or {}
        max_tokens, tokens_out = engine.tokens_for(request, tokens, max_tokens)
        if not request.get("stream"):
            self._whole_completion(head, len(tokens), tokens_out)
        else:
            self._streamed_completion(head, len(tokens), tokens_out, max_tokens, options)

    def _whole_completion(self, head: dict, prompt_tokens: int, tokens_out: Iterator[int]) -> None:
        """A completion not streamed: every token's text in one response."""
        generated = list(tokens_out)
        choice = completion_choice(self.engine.tokenizer.decode(generated), "length")
        self._json(200, {**head, "choices": [choice], "usage": completion_usage(prompt_tokens, len(generated))})

    def _streamed_completion(
        self, head: dict, prompt_tokens: int, tokens_out: Iterator[int], max_tokens: int, options: dict
    ) -> None:
        """A completion streamed: one chunk per token (with the usage so far when asked), then the usage."""
        self._start_stream()
        for n, token in enumerate(tokens_out, start=1):
            choice = completion_choice(self.engine.tokenizer.decode([token]), "length" if n == max_tokens else None)
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
                    "cached_tokens": 0,
                    "e2e_latency": time.time() - start,
                },
            }

        max_tokens, tokens_out = engine.tokens_for(request, tokens, max_tokens)
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


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
    if args.max_batch is not None and (args.max_batch < 1 or args.step_ms <= 0 or args.noise < 0):
        parser.error("--max-batch needs B >= 1, --step-ms > 0 and --noise >= 0")
    torch.set_num_threads(1)
    model = TinyMoEDecoder(args.layers, args.hidden, args.experts, args.topk, args.inter)
    model.next_token([1, 2, 3])  # warm up before reporting healthy
    engine = Engine(model, CharTokenizer(Path(args.model_path)), args)
    server = Server((args.host, args.port), make_handler(engine))
    if args.role == "prefill":
        bootstrap = Server((args.host, args.disaggregation_bootstrap_port), make_bootstrap_handler(engine))
        threading.Thread(target=bootstrap.serve_forever, daemon=True).start()
    print(
        f"serving tiny MoE decoder ({args.role}, layers {args.layers}, hidden {args.hidden}) "
        f"as {engine.served_model_name} on http://{args.host}:{args.port}"
        + (f", capacity {args.max_batch} per {args.step_ms:g} ms step" if args.max_batch else ""),
        flush=True,
    )
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
