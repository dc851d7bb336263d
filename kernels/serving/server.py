"""A small real serving target: a tiny decoder with random weights, served OpenAI-style.

    python server.py --port 30100 [--role both|prefill|decode] [--layers 2 --hidden 64 --experts 4 --topk 2]

Each layer is causal self-attention then an MoE feed-forward computed by the ``kernels/moe`` payload
(``fused_moe_torch`` on a CPU, the Triton kernel with CUDA). Decoding is greedy. Endpoints:
``GET /health`` and ``POST /v1/completions`` (``prompt`` as text or token ids, ``max_tokens``,
``stream``), streamed as server-sent events like OpenAI's API. Tokens are byte-level (vocab 256);
each choice also carries its ``token_id`` so a router can hand a prefill's first token to a decode
server. Requests are served one at a time (a lock), so queueing shows up in TTFT as load grows.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
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
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?-_+=*/()[]{}<>@#$%&"


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


def token_text(token: int) -> str:
    return ALPHABET[token % len(ALPHABET)]


def make_handler(model: TinyMoEDecoder, lock: threading.Lock, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return

        def _json(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json(200, {"status": "ok", "role": role})
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self._json(404, {"error": "not found"})
                return
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompt = request["prompt"]
                tokens = list(prompt.encode()) if isinstance(prompt, str) else [int(t) % VOCAB for t in prompt]
                max_tokens = int(request.get("max_tokens", 16))
            except (ValueError, KeyError, TypeError) as exc:
                self._json(400, {"error": f"bad request: {exc}"})
                return
            if not tokens or max_tokens < 1 or (role == "prefill" and max_tokens != 1):
                self._json(400, {"error": "need a prompt and max_tokens >= 1 (a prefill server makes one token)"})
                return
            stream = bool(request.get("stream"))
            if stream:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
            generated: list[int] = []
            with lock:
                for _ in range(max_tokens):
                    token = model.next_token(tokens + generated)
                    generated.append(token)
                    if stream:
                        self._chunk(token, None)
            if stream:
                self._chunk(None, "length")
                self._write(b"data: [DONE]\n\n")
                self._write(b"")
                return
            text = "".join(token_text(t) for t in generated)
            self._json(200, {"object": "text_completion", "choices": [
                {"index": 0, "text": text, "token_ids": generated, "finish_reason": "length"}],
                "usage": {"prompt_tokens": len(tokens), "completion_tokens": len(generated)}})  # fmt: skip

        def _chunk(self, token: int | None, finish: str | None) -> None:
            choice = {"index": 0, "text": "" if token is None else token_text(token), "finish_reason": finish}
            if token is not None:
                choice["token_id"] = token
            event = {"object": "text_completion", "created": int(time.time()), "choices": [choice]}
            self._write(f"data: {json.dumps(event)}\n\n".encode())

        def _write(self, payload: bytes) -> None:
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--role", choices=["both", "prefill", "decode"], default="both")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--topk", type=int, default=2)
    parser.add_argument("--inter", type=int, default=64)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = TinyMoEDecoder(args.layers, args.hidden, args.experts, args.topk, args.inter)
    model.next_token([1, 2, 3])  # warm up before reporting healthy
    server = ThreadingHTTPServer((args.host, args.port), make_handler(model, threading.Lock(), args.role))
    print(f"serving tiny MoE decoder ({args.role}, layers {args.layers}, hidden {args.hidden}) "
          f"on http://{args.host}:{args.port}", flush=True)  # fmt: skip
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
