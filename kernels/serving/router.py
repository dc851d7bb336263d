"""A prefill/decode router: the prompt goes to the prefill server for the first token, then the decode
server continues from prompt + first token and its stream is relayed to the client.

The project's own, from before the campaigns ran the real ``sglang_router`` (whose PD mode ``server.py`` now
honours); no campaign uses it. Kept while the main branch decides whether to drop it with ``loadgen.py``.

    python router.py --port 30200 --prefill http://127.0.0.1:30201 --decode http://127.0.0.1:30202
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def post(url: str, body: dict, stream: bool = False):
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=300)


def make_handler(prefill: str, decode: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            healthy = all(urllib.request.urlopen(f"{u}/health", timeout=5).status == 200 for u in (prefill, decode))
            body = json.dumps({"status": "ok" if healthy else "degraded"}).encode()
            self.send_response(200 if healthy and self.path == "/health" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            prompt = request["prompt"]
            if isinstance(prompt, str):
                with post(f"{prefill}/tokenize", {"prompt": prompt}) as response:
                    prompt = json.loads(response.read())["tokens"]
            tokens = list(prompt)
            max_tokens = int(request.get("max_tokens", 16))
            first_body = {"input_ids": tokens, "sampling_params": {"max_new_tokens": 1}}
            with post(f"{prefill}/generate", first_body) as response:
                out = json.loads(response.read())
            first = {"text": out["text"], "token_ids": out["output_ids"]}
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            event = {
                "object": "text_completion",
                "created": int(time.time()),
                "choices": [
                    {"index": 0, "text": first["text"], "token_id": first["token_ids"][0], "finish_reason": None}
                ],
            }
            self._write(f"data: {json.dumps(event)}\n\n".encode())
            if max_tokens > 1:
                body = {"prompt": [*tokens, first["token_ids"][0]], "max_tokens": max_tokens - 1, "stream": True}
                with post(f"{decode}/v1/completions", body) as response:
                    for line in response:
                        if line.strip() and not line.startswith(b"data: [DONE]"):
                            self._write(line.rstrip(b"\n") + b"\n\n")
            self._write(b"data: [DONE]\n\n")
            self._write(b"")

        def _write(self, payload: bytes) -> None:
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--prefill", required=True)
    parser.add_argument("--decode", required=True)
    args = parser.parse_args(argv)
    handler = make_handler(args.prefill.rstrip("/"), args.decode.rstrip("/"))
    server = ThreadingHTTPServer((args.host, args.port), handler)
    print(f"routing on http://{args.host}:{args.port}: prefill {args.prefill}, decode {args.decode}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
