"""What does the server-metrics sampler cost the GPU host? Its CPU time at the default period with 8 servers.

Eight HTTP servers on loopback each answer ``/metrics`` with an SGLang-sized exposition (the gauges and counters
SGLang exports with --enable-metrics and its latency histograms with 20 buckets each, once per label set:
``--ranks``, default 1, as SGLang's scheduler reports from the first rank of each data-parallel group), either
honouring prometheus_client's ``name[]`` filter or ignoring it. The sampler (``python -m benchhost.metrics_sampler``,
as a run starts it) reads them every ``--period-ms`` for ``--seconds``; its CPU time (user + system, from the
kernel's accounting of the child) is printed as a share of one core, with and without its start-up, beside the
target (1 %), for both kinds of server side by side.

    .venv/bin/python bench/metrics_overhead.py [--servers 8] [--period-ms 200] [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVERS = r"""
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

TEXT = sys.stdin.read()
FILTER = sys.argv[2] == "filter"

def body(path):
    # as prometheus_client answers: with name[] only the samples of those names, else everything
    names = set(parse_qs(urlsplit(path).query).get("name[]", []))
    if not FILTER or not names:
        return TEXT.encode()
    kept = [l for l in TEXT.splitlines() if l.split("{")[0].split(" ")[0] in names]
    return ("\n".join(kept) + "\n").encode()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args): pass
    def do_GET(self):
        BODY = body(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

servers = [ThreadingHTTPServer(("127.0.0.1", 0), Handler) for _ in range(int(sys.argv[1]))]
for s in servers:
    threading.Thread(target=s.serve_forever, daemon=True).start()
print(" ".join(str(s.server_address[1]) for s in servers), flush=True)
threading.Event().wait()
"""
GAUGES = ("num_running_reqs", "num_queue_reqs", "token_usage", "num_used_tokens", "gen_throughput", "cache_hit_rate")
COUNTERS = ("prompt_tokens_total", "generation_tokens_total", "num_requests_total", "cached_tokens_total")
HISTOGRAMS = ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds")
BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 15, 20, 30, 60)


def exposition(ranks: int = 1) -> str:
    """An SGLang-sized /metrics answer: every name once per label set (SGLang's scheduler reports from the first
    rank of each data-parallel group: one label set a server unless ``ranks``), histograms with 20 buckets."""
    lines = []
    for rank in range(ranks):
        labels = f'model_name="deepseek-ai/DeepSeek-V4-Flash",tp_rank="{rank}",pp_rank="0",engine_type="unified"'
        for name in GAUGES:
            lines += [f"# HELP sglang:{name} x", f"# TYPE sglang:{name} gauge", f"sglang:{name}{{{labels}}} 3.0"]
        for name in COUNTERS:
            lines += [f"# TYPE sglang:{name} counter", f"sglang:{name}{{{labels}}} 123456.0"]
        for name in HISTOGRAMS:
            lines.append(f"# TYPE sglang:{name} histogram")
            lines += [f'sglang:{name}_bucket{{{labels},le="{b}"}} {i * 10}.0' for i, b in enumerate(BUCKETS)]
            lines += [f"sglang:{name}_sum{{{labels}}} 51.5", f"sglang:{name}_count{{{labels}}} 200.0"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=8)
    parser.add_argument("--period-ms", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--ranks", type=int, default=1, help="label sets per name in each answer")
    args = parser.parse_args()
    shares = {mode: measure(args, mode) for mode in ("filter", "ignore")}
    print(
        f"side by side, after start-up: a server that honours name[] costs the sampler {shares['filter']:.2f} % of a "
        f"core, one that ignores it {shares['ignore']:.2f} % ({shares['ignore'] / max(shares['filter'], 1e-9):.1f}x)"
    )
    return 0 if shares["filter"] <= 1.0 else 1


def measure(args: argparse.Namespace, mode: str) -> float:
    """The sampler's CPU share of one core against ``args.servers`` servers that honour the name[] filter
    (``filter``, as prometheus_client does) or answer everything (``ignore``)."""
    body = exposition(args.ranks)
    servers = subprocess.Popen(
        [sys.executable, "-c", SERVERS, str(args.servers), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert servers.stdin is not None and servers.stdout is not None
    servers.stdin.write(body)
    servers.stdin.close()
    ports = servers.stdout.readline().split()
    urls = [arg for port in ports for arg in ("--endpoint", f"http://127.0.0.1:{port}/metrics")]
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "host")}
        command = [sys.executable, "-m", "benchhost.metrics_sampler", "--out", out, "--period-ms", str(args.period_ms)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.monotonic()
        sampler = subprocess.Popen([*command, *urls], env=env, stdout=subprocess.DEVNULL)
        time.sleep(args.seconds)
        sampler.send_signal(signal.SIGTERM)
        sampler.wait(30)
        wall = time.monotonic() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = sum(1 for _ in (Path(out) / "samples.csv").open()) - 1
    servers.kill()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    share = 100 * cpu / wall
    startup = startup_cpu(command, urls[:2], env)
    steady = 100 * (cpu - startup) / wall
    said = "honour the name[] filter" if mode == "filter" else "ignore the name[] filter"
    print(f"{len(ports)} servers that {said} ({len(body) / 1024:.0f} kB unfiltered), every {args.period_ms} ms")
    print(f"  sampler CPU: {cpu:.2f} s in {wall:.1f} s = {share:.2f} % of one core, start-up included")
    print(f"  start-up (interpreter, imports, first scrape): {startup:.2f} s; after it: {steady:.2f} % (target 1 %)")
    print(f"  rows written: {rows} ({rows / wall:.0f}/s)")
    return steady


def startup_cpu(command: list[str], urls: list[str], env: dict[str, str]) -> float:
    """The CPU a sampler spends to start, read once and stop (``--max-s`` ends it after its first period)."""
    with tempfile.TemporaryDirectory() as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        words = [*command[: command.index("--out") + 1], out, *command[command.index("--out") + 2 :]]
        subprocess.run([*words, *urls, "--max-s", "0.01"], env=env, stdout=subprocess.DEVNULL, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


if __name__ == "__main__":
    sys.exit(main())
