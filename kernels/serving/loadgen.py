"""Load generator for an OpenAI-compatible ``/v1/completions`` endpoint, at a fixed concurrency or a request rate.

    python loadgen.py --base-url http://127.0.0.1:30100 --num-prompts 24 --max-concurrency 8 \
        --input-len 256 --output-len 256 --output-file phase.jsonl
    python loadgen.py ... --request-rate 4 --burstiness 1   # Poisson arrivals (gamma gaps for burstiness != 1)

``--range-ratio r`` draws each prompt's length uniformly in [r x input-len, input-len] (SGLang's sense).

Streams every request and measures TTFT, TPOT, ITL and end-to-end latency, then prints SGLang's
``Serving Benchmark Result`` block (40-wide labels) and appends one JSON object in SGLang's
``--output-file`` keys, so the same parsers read it as the real tools' output.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Result:
    ok: bool = False
    start: float = 0.0
    ttft: float = 0.0
    e2e: float = 0.0
    output_tokens: int = 0
    token_times: list[float] = field(default_factory=list)
    error: str = ""
    finish_reason: str | None = None


FINISHED = ("stop", "length")  # the finish reasons of an answer the server finished (not "abort", not none)


def judge(result: Result, output_len: int, done: bool) -> None:
    """A request is complete only when its stream ended as the protocol ends a finished answer (``data: [DONE]``
    after a choice with a finish reason of :data:`FINISHED`) with the tokens the workload asked for (it fixes them:
    ``ignore_eos``). Anything else fails it, saying how far it got: a cut stream is never a fast request."""
    got = f"after {result.output_tokens} of {output_len} tokens"
    if not done:
        result.error = f"the stream ended without [DONE] {got}"
    elif result.finish_reason not in FINISHED:
        result.error = f"the answer ended with finish_reason {result.finish_reason!r} {got}"
    elif result.output_tokens != output_len:
        result.error = f"the answer ended ({result.finish_reason}) {got}"
    result.ok = not result.error and result.output_tokens > 0


def one_request(base_url: str, prompt: list[int], output_len: int) -> Result:
    parts = urlsplit(base_url)
    result = Result(start=time.perf_counter())
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=600)
    try:
        request = {"prompt": prompt, "max_tokens": output_len, "stream": True, "temperature": 0, "ignore_eos": True}
        request["stream_options"] = {"include_usage": True}
        conn.request("POST", "/v1/completions", json.dumps(request), {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            result.error = f"HTTP {response.status}"
            return result
        done, counted = False, None
        for raw in response:
            line = raw.strip()
            if line == b"data: [DONE]":
                done = True
                break
            if not line.startswith(b"data: "):
                continue
            chunk = json.loads(line[6:])
            choice = (chunk.get("choices") or [{}])[0]
            if choice.get("text"):
                result.token_times.append(time.perf_counter())
            result.finish_reason = choice.get("finish_reason") or result.finish_reason
            counted = (chunk.get("usage") or {}).get("completion_tokens", counted)  # the server's own count
        result.output_tokens = counted if isinstance(counted, int) else len(result.token_times)
        judge(result, output_len, done)
        if result.ok:
            result.ttft = result.token_times[0] - result.start
            result.e2e = result.token_times[-1] - result.start
    except (OSError, http.client.HTTPException, ValueError) as exc:
        result.error = repr(exc)
    finally:
        conn.close()
    return result


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def summarize(
    results: list[Result],
    duration: float,
    input_lens: list[int],
    concurrency: int | None,
    backend: str,
    rate: float = float("inf"),
) -> dict:
    done = [r for r in results if r.ok]
    ms = 1000.0
    ttft = [r.ttft * ms for r in done]
    e2e = [r.e2e * ms for r in done]
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) * ms for r in done if r.output_tokens > 1]
    itl = [(b - a) * ms for r in done for a, b in zip(r.token_times, r.token_times[1:], strict=False)]
    output_tokens = sum(r.output_tokens for r in done)
    all_times = sorted(t for r in done for t in r.token_times)
    t0 = min((r.start for r in results), default=0.0)
    per_second: dict[int, int] = {}
    for t in all_times:
        per_second[int(t - t0)] = per_second.get(int(t - t0), 0) + 1
    spans = [(r.start, r.start + r.e2e) for r in done]
    peak_concurrent = max((sum(1 for s, e in spans if s <= start < e) for start, _ in spans), default=0)
    summary = {
        "backend": backend,
        "request_rate": rate,
        "max_concurrency": concurrency,
        "completed": len(done),
        "failed": len(results) - len(done),
        "num_prompts": len(results),
        "duration": duration,
        "random_input_len": max(input_lens, default=0),
        "total_input_tokens": sum(n for n, r in zip(input_lens, results, strict=True) if r.ok),
        "total_output_tokens": output_tokens,
        "request_throughput": len(done) / duration,
        "input_throughput": sum(n for n, r in zip(input_lens, results, strict=True) if r.ok) / duration,
        "output_throughput": output_tokens / duration,
        "total_throughput": (sum(n for n, r in zip(input_lens, results, strict=True) if r.ok) + output_tokens)
        / duration,
        "max_output_tokens_per_s": max(per_second.values(), default=0),
        "max_concurrent_requests": peak_concurrent,
        "concurrency": sum(e2e) / ms / duration,
        "start_times": [r.start for r in results],  # time.perf_counter(), as vLLM saves them
    }
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2e_latency", e2e)):
        summary[f"mean_{name}_ms"] = statistics.fmean(values) if values else float("nan")
        summary[f"median_{name}_ms"] = statistics.median(values) if values else float("nan")
        for q in (90, 95, 99):
            summary[f"p{q}_{name}_ms"] = percentile(values, q)
        summary[f"max_{name}_ms"] = max(values, default=float("nan"))
    return summary


def print_block(s: dict) -> None:
    def line(label: str, value: object) -> None:
        print(f"{label + ':':<40} {value:<10}")

    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    line("Backend", s["backend"])
    line("Traffic request rate", f"{s['request_rate']:g}")
    line("Max request concurrency", "not set" if s["max_concurrency"] is None else s["max_concurrency"])
    line("Successful requests", s["completed"])
    line("Failed requests", s["failed"])
    # Four significant digits at least: a short phase's duration must still give its throughput to 0.1%.
    decimals = max(2, 3 - math.floor(math.log10(s["duration"]))) if s["duration"] > 0 else 2
    line("Benchmark duration (s)", f"{s['duration']:.{decimals}f}")
    line("Total input tokens", s["total_input_tokens"])
    line("Total generated tokens", s["total_output_tokens"])
    line("Request throughput (req/s)", f"{s['request_throughput']:.2f}")
    line("Input token throughput (tok/s)", f"{s['input_throughput']:.2f}")
    line("Output token throughput (tok/s)", f"{s['output_throughput']:.2f}")
    line("Peak output token throughput (tok/s)", f"{s['max_output_tokens_per_s']:.2f}")
    line("Peak concurrent requests", s["max_concurrent_requests"])
    line("Total token throughput (tok/s)", f"{s['total_throughput']:.2f}")
    line("Concurrency", f"{s['concurrency']:.2f}")
    sections = [
        ("End-to-End Latency", "E2E Latency", "e2e_latency", ("mean", "median", "p90", "p99")),
        ("Time to First Token", "TTFT", "ttft", ("mean", "median", "p99")),
        ("Time per Output Token (excl. 1st token)", "TPOT", "tpot", ("mean", "median", "p99")),
        ("Inter-Token Latency", "ITL", "itl", ("mean", "median", "p95", "p99", "max")),
    ]
    for title, label, key, stats in sections:
        print("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        for stat in stats:
            line(
                f"{stat.capitalize() if stat in ('mean', 'median', 'max') else stat.upper()} {label} (ms)",
                f"{s[f'{stat}_{key}_ms']:.2f}",
            )
    print("=" * 50, flush=True)


def arrivals(count: int, rate: float, burstiness: float, rng: random.Random) -> list[float]:
    """Send offsets (s) of ``count`` requests at ``rate`` per second: gamma-distributed gaps of shape
    ``burstiness`` and mean 1 / rate (1: a Poisson process), as vLLM draws them; all at 0 for an infinite rate."""
    if math.isinf(rate):
        return [0.0] * count
    offsets, t = [], 0.0
    for _ in range(count):
        offsets.append(t)
        t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
    return offsets


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--num-prompts", type=int, required=True)
    parser.add_argument("--max-concurrency", type=int, help="the most requests in flight (default: no cap)")
    parser.add_argument("--request-rate", type=float, default=float("inf"), help="requests/s (default: all at once)")
    parser.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the gaps (1: Poisson)")
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--range-ratio", type=float, default=1.0, help="prompt lengths in [r x input-len, input-len]")
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--output-file")
    parser.add_argument("--requests-file", help="append one JSON object per request (raw timings)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if math.isinf(args.request_rate) and args.max_concurrency is None:
        parser.error("--max-concurrency is needed without --request-rate")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = random.Random(args.seed)
    low = max(1, math.ceil(args.range_ratio * args.input_len))
    lens = [rng.randint(low, args.input_len) for _ in range(args.num_prompts)]
    prompts = [[rng.randrange(256) for _ in range(n)] for n in lens]
    offsets = arrivals(args.num_prompts, args.request_rate, args.burstiness, rng)
    lock, finished = threading.Lock(), [0]
    slots = threading.BoundedSemaphore(args.max_concurrency or args.num_prompts)

    def run(prompt: list[int]) -> Result:
        try:
            result = one_request(args.base_url, prompt, args.output_len)
        finally:
            slots.release()
        with lock:
            finished[0] += 1
            print(f"request {finished[0]}/{args.num_prompts}: {'ok' if result.ok else result.error}", flush=True)
        return result

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.max_concurrency or args.num_prompts) as pool:
        futures = []
        for prompt, offset in zip(prompts, offsets, strict=True):
            time.sleep(max(0.0, start + offset - time.perf_counter()))
            slots.acquire()  # a capped rate waits for a slot, as the real clients do
            futures.append(pool.submit(run, prompt))
        results = [f.result() for f in futures]
    duration = time.perf_counter() - start
    summary = summarize(results, duration, lens, args.max_concurrency, "openai-completions", args.request_rate)
    print_block(summary)
    if args.output_file:
        with open(args.output_file, "a") as out:
            out.write(json.dumps(summary) + "\n")
    if args.requests_file:
        with open(args.requests_file, "a") as out:
            for seq, r in enumerate(results):
                gaps = [(b - a) * 1e3 for a, b in zip(r.token_times, r.token_times[1:], strict=False)]
                out.write(
                    json.dumps(
                        {
                            "seq": seq,
                            "ok": r.ok,
                            "input_len": lens[seq],
                            "output_tokens": r.output_tokens,
                            "expected_tokens": args.output_len,  # the workload fixes them (ignore_eos)
                            "ttft_ms": r.ttft * 1e3 if r.ok else None,
                            "e2e_ms": r.e2e * 1e3 if r.ok else None,
                            "mean_itl_ms": statistics.fmean(gaps) if gaps else None,
                            "error": r.error,
                        }
                    )
                    + "\n"
                )
    return 0 if summary["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
