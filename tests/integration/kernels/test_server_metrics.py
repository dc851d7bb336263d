"""The tiny server's ``GET /metrics`` (``kernels/serving/server.py --enable-metrics``), read back while real
requests run: the gauges show the KV pool holding requests back, the counters and histograms count exactly the
tokens and requests the clients sent and got, ``--metrics-names vllm`` answers with vLLM's names, and a server
without the flag answers 404 (a run's "server without an endpoint").

Three servers start at once, each with the small model (``--layers 1 --hidden 32``):

* ``kv``: ``--max-kv-tokens 64 --decode-step-ms 10``. A request is a 16-token prompt and 24 new tokens (40 tokens
  at its end): at most 3 run at a time (a 4th would need 3·16 + 16 + 4 > 64), so 8 concurrent requests queue;
  two sequences of 40 tokens cannot both finish, so the pool fills up (usage near 1) and retracts.
* ``vllm``: ``--metrics-names vllm --prefill-ms-per-token 2``, one request at a time (the lock): each request's
  TTFT holds its 32 ms prefill.
* ``plain``: no new option.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import partial

import pytest

from benchflow.hosts.local import signal_group
from benchflow.paths import host_python
from benchtools.net import free_port
from tests.conftest import PROJECT_ROOT, wait_for

pytestmark = pytest.mark.integration

SERVING = PROJECT_ROOT / "kernels" / "serving"
KV_TOKENS, STEP_MS, PREFILL_MS = 64, 10, 2
PROMPT, NEW_TOKENS, REQUESTS = "abcdefghijklmnop", 24, 8  # 16 one-character tokens
SERVERS = {
    "kv": ["--enable-metrics", "--max-kv-tokens", str(KV_TOKENS), "--decode-step-ms", str(STEP_MS)],
    "vllm": ["--enable-metrics", "--metrics-names", "vllm", "--prefill-ms-per-token", str(PREFILL_MS)],
    "plain": [],
}
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_]+=\"(?:[^\"\\]|\\.)*\",?)*)\} (\S+)$")
LABEL = re.compile(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"')


def healthy(url: str, proc: subprocess.Popen, log_path) -> bool:
    assert proc.poll() is None, f"the server exited:\n{log_path.read_text()[-3000:]}"
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[dict[str, str]]:
    """The three servers of the module's doc on free loopback ports, started together: name → base URL."""
    logs = tmp_path_factory.mktemp("servers")
    procs: dict[str, subprocess.Popen] = {}
    urls: dict[str, str] = {}
    try:
        for name, extra in SERVERS.items():
            port = free_port()
            command = [host_python(), "server.py", "--port", str(port), "--layers", "1", "--hidden", "32", *extra]
            with (logs / f"{name}.log").open("w") as log:
                procs[name] = subprocess.Popen(
                    command, cwd=SERVING, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            urls[name] = f"http://127.0.0.1:{port}"
        for name, url in urls.items():
            wait_for(partial(healthy, url, procs[name], logs / f"{name}.log"), 120, f"the {name} server")
        yield urls
    finally:
        for proc in procs.values():
            signal_group(proc, signal.SIGTERM)  # not once reaped (a health check's poll may have)
        for proc in procs.values():
            proc.wait(timeout=30)


def post(url: str, body: dict) -> bytes:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read()


def scrape(url: str) -> tuple[list[str], dict[tuple[str, frozenset], float]]:
    """``GET /metrics``: its lines, and each sample's value by (name, labels). Every line is a comment or a sample."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        lines = response.read().decode().splitlines()
    samples = {}
    for line in lines:
        if line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        samples[(match[1], frozenset(LABEL.findall(match[2])))] = float(match[3])
    return lines, samples


def total(samples: dict, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples over the series carrying ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, series), v in samples.items() if n == name and wanted <= series)


def check_histogram(samples: dict, name: str) -> None:
    """Each series' buckets are cumulative and its ``+Inf`` bucket is its count."""
    for (n, series), count in samples.items():
        if n != f"{name}_count":
            continue
        buckets = sorted(
            (float(dict(s)["le"]), v) for (m, s), v in samples.items() if m == f"{name}_bucket" and series < s
        )
        assert [v for _, v in buckets] == sorted(v for _, v in buckets), name
        assert buckets[-1] == (float("inf"), count), name


def watch(url: str, stop: threading.Event, peaks: dict[str, float]) -> None:
    """The highest value each gauge of the KV pool shows while requests run."""
    gauges = ("sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage", "sglang:num_used_tokens")
    while not stop.is_set():
        _, samples = scrape(url)
        for gauge in gauges:
            peaks[gauge] = max(peaks.get(gauge, 0.0), total(samples, gauge))
        time.sleep(0.003)


def generate(url: str, stream: bool) -> int:
    """One ``/generate`` request; the tokens the client got."""
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": NEW_TOKENS}, "stream": stream}
    raw = post(f"{url}/generate", body).decode()
    if not stream:
        return json.loads(raw)["meta_info"]["completion_tokens"]
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    assert all(e["meta_info"]["completion_tokens"] == n for n, e in enumerate(events, start=1))
    return len(events)


def test_the_kv_pool_holds_requests_back_and_every_token_is_counted(servers):
    url, peaks, stop, got = servers["kv"], {}, threading.Event(), []
    watcher = threading.Thread(target=watch, args=(url, stop, peaks))
    watcher.start()
    clients = [threading.Thread(target=lambda i=i: got.append(generate(url, i % 2 == 0))) for i in range(REQUESTS)]
    for client in clients:
        client.start()
    for client in clients:
        client.join(timeout=60)
    stop.set()
    watcher.join(timeout=10)
    assert got == [NEW_TOKENS] * REQUESTS
    assert peaks["sglang:num_running_reqs"] <= 3 and peaks["sglang:num_queue_reqs"] >= REQUESTS - 4, peaks
    assert 0.85 <= peaks["sglang:token_usage"] <= 1.0 and peaks["sglang:num_used_tokens"] <= KV_TOKENS, peaks
    lines, samples = scrape(url)
    for name in ("num_running_reqs", "num_queue_reqs", "num_used_tokens", "token_usage"):
        assert total(samples, f"sglang:{name}") == 0, name  # all done: nothing runs, waits or holds KV
    assert total(samples, "sglang:max_total_num_tokens") == KV_TOKENS
    assert total(samples, "sglang:num_retracted_requests_total") >= 1
    assert total(samples, "sglang:prompt_tokens_total") == REQUESTS * len(PROMPT)
    assert total(samples, "sglang:generation_tokens_total") == REQUESTS * NEW_TOKENS
    for streaming in ("true", "false"):
        assert total(samples, "sglang:num_requests_total", is_streaming=streaming) == REQUESTS / 2
        assert total(samples, "sglang:e2e_request_latency_seconds_count", is_streaming=streaming) == REQUESTS / 2
    for name in ("time_to_first_token", "e2e_request_latency", "queue_time", "inter_token_latency"):
        check_histogram(samples, f"sglang:{name}_seconds")
        assert f"# TYPE sglang:{name}_seconds histogram" in lines
    for name in ("time_to_first_token", "e2e_request_latency", "queue_time"):
        assert total(samples, f"sglang:{name}_seconds_count") == REQUESTS, name
    assert total(samples, "sglang:inter_token_latency_seconds_count") == REQUESTS * (NEW_TOKENS - 1)
    # every later token of a request is a decode step of at least 10 ms (a little slack for the clock's reading)
    assert total(samples, "sglang:inter_token_latency_seconds_sum") >= 0.9 * REQUESTS * (NEW_TOKENS - 1) * STEP_MS / 1e3
    assert total(samples, "sglang:queue_time_seconds_sum") > 0
    assert {"# TYPE sglang:num_queue_reqs gauge", "# TYPE sglang:prompt_tokens_total counter"} <= set(lines)
    assert total(samples, "sglang:num_requests_total", model_name=str(SERVING / "tokenizer"), engine_type="unified")


def test_vllm_names_and_a_prefill_that_costs_its_prompt(servers):
    url, prompt, n = servers["vllm"], "y" * 16, 4
    bodies = [{"prompt": prompt, "max_tokens": 4, "stream": i % 2 == 0} for i in range(n)]
    clients = [threading.Thread(target=post, args=(f"{url}/v1/completions", body)) for body in bodies]
    for client in clients:
        client.start()
    for client in clients:
        client.join(timeout=60)
    lines, samples = scrape(url)
    assert not [line for line in lines if "sglang:" in line]
    families = {"num_requests_running": "gauge", "num_requests_waiting": "gauge", "kv_cache_usage_perc": "gauge"}
    families |= {"num_preemptions_total": "counter", "prompt_tokens_total": "counter"}
    families |= {"generation_tokens_total": "counter", "request_success_total": "counter"}
    families |= {f"{h}_seconds": "histogram" for h in ("time_to_first_token", "inter_token_latency")}
    families |= {f"{h}_seconds": "histogram" for h in ("e2e_request_latency", "request_queue_time")}
    for name, kind in families.items():
        assert f"# TYPE vllm:{name} {kind}" in lines, name
    assert all(dict(series).keys() >= {"model_name", "engine"} for _, series in samples)
    assert total(samples, "vllm:prompt_tokens_total") == n * len(prompt)
    assert total(samples, "vllm:generation_tokens_total") == n * 4
    assert total(samples, "vllm:request_success_total", finished_reason="length") == n
    assert total(samples, "vllm:request_success_total", finished_reason="abort") == 0
    assert total(samples, "vllm:num_preemptions_total") == 0
    for name in ("time_to_first_token", "e2e_request_latency", "request_queue_time"):
        check_histogram(samples, f"vllm:{name}_seconds")
        assert total(samples, f"vllm:{name}_seconds_count") == n
    assert total(samples, "vllm:inter_token_latency_seconds_count") == n * 3
    # each request's TTFT holds its prefill: the prompt tokens the prefix cache did not hold (the first of the same
    # prompts to reach the cache pays for all 16; the others, as the race between them goes, for the rest or less)
    prefilled = n * len(prompt) - total(samples, "vllm:prefix_cache_hits_total")
    assert len(prompt) <= prefilled <= n * len(prompt), prefilled
    assert total(samples, "vllm:time_to_first_token_seconds_sum") >= prefilled * PREFILL_MS / 1e3


def test_without_enable_metrics_there_is_no_endpoint(servers):
    url = servers["plain"]
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{url}/metrics", timeout=10)
    assert missing.value.code == 404
    assert (
        json.loads(post(f"{url}/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 3}}))["meta_info"][
            "completion_tokens"
        ]
        == 3
    )


def test_the_metrics_sampler_reads_each_endpoint_and_says_once_why_one_gave_nothing(servers, tmp_path):
    """The host core's sampler (as a run starts it) against the servers: the SGLang- and vLLM-named endpoints read
    into the same canonical columns, the server without --enable-metrics and a closed port noted in metrics.json."""
    from benchhost.telemetry.servers import read_samples

    closed = f"http://127.0.0.1:{free_port()}/metrics"
    urls = [f"{servers[name]}/metrics" for name in ("kv", "vllm", "plain")] + [closed]
    command = [host_python(), "-m", "benchhost.metrics_sampler", "--out", str(tmp_path), "--period-ms", "50"]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "host")}
    sampler = subprocess.Popen([*command, *(w for u in urls for w in ("--endpoint", u))], env=env)
    try:
        post(f"{servers['vllm']}/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 4}})
        rows = tmp_path / "samples.csv"
        wait_for(lambda: rows.exists() and rows.stat().st_size > 2000, 30, "the sampler's first rows")
    finally:
        sampler.send_signal(signal.SIGTERM)
        assert sampler.wait(30) == 0
    samples = read_samples((tmp_path / "samples.csv").read_text())
    columns = {index: {s.column for s in samples if s.endpoint == index} for index in range(4)}
    assert {"up", "running", "queued", "kv_usage", "prompt_tokens", "ttft_s_count"} <= columns[0] & columns[1]
    assert columns[2] == columns[3] == set()
    info = json.loads((tmp_path / "metrics.json").read_text())
    said = [(e["ok"] > 0, e["last_error"]) for e in info["endpoints"]]
    # the two live endpoints were read (a scrape that a busy machine answered late may have left a timeout as their
    # last error, never an HTTP one); the one without metrics answered 404, the closed port refused
    assert said[0][0] and said[1][0] and not said[0][1].startswith("HTTP") and not said[1][1].startswith("HTTP"), said
    assert said[2] == (False, "HTTP 404") and said[3][0] is False, said
    assert "refused" in said[3][1].lower(), said
    assert info["stop_reason"] == "signal"
