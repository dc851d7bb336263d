"""Server-metrics sampler: reads the servers' and the router's Prometheus endpoints beside a benchmark until
SIGTERM, at the GPU sampler's period (the host core: standard library only).

    python -m benchhost.metrics_sampler --out DIR --endpoint URL [--endpoint URL ...]
                                        [--period-ms 200] [--max-bytes 67108864] [--marker-file F] [--max-s 0]

Every period it GETs each URL (timeout: the period, at most 2 s) and keeps the names of
``benchhost/telemetry/server_metrics.tsv`` as canonical columns (:func:`benchhost.telemetry.servers.read_exposition`).

Output: ``DIR/samples.csv``, header ``t,endpoint,column,value`` (t in epoch seconds, endpoint the URL's position
in the ``--endpoint`` list, one line per column read, and ``up`` = 1 for each endpoint read); ``DIR/metrics.json``:
the endpoints with, for each, how many reads succeeded and failed, the first and last error (``HTTP 404``,
``connection refused``) and the last error a running server answered (``http_error``), rewritten every few
seconds and at the end. An endpoint that does not answer is not an error: its servers may not be up yet
(configs run one after the other), or may export no metrics (SGLang without ``--enable-metrics``); the run says
so once, from metrics.json. Size: past ``--max-bytes`` nothing more is appended, ``"truncated": true`` is
recorded and the sampler exits 0. SIGTERM or SIGINT stops it within one period.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
from pathlib import Path
from typing import Any

from benchhost.sampler import Stop, write_json
from benchhost.telemetry.servers import SAMPLE_HEADER, UP, kept_names, read_exposition

MAX_BODY = 8 * 2**20  # the most read from one endpoint per period
INFO_EVERY_S = 5.0
ERROR_PAUSE_S = 5.0  # after an error answer (HTTP 404), the endpoint is asked again this much later


class Endpoint:
    """One URL, read over one kept-alive connection, and what reading it gave so far.

    Each read asks only for the names the table keeps, with prometheus_client's ``name[]`` filter (SGLang's and
    vLLM's /metrics honour it; a histogram's buckets, most of an exposition, are never sent). A server that
    ignores the filter answers everything and is read the same; one whose filtered answer holds none of the
    names (a multiprocess registry answers the filter with nothing) is asked without it from then on."""

    def __init__(self, url: str, wanted: list[str]) -> None:
        self.url = url
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        query = urllib.parse.urlencode([("name[]", n) for n in wanted])
        self.path = (parts.path or "/") + (f"?{parts.query}&" if parts.query else "?")
        self.filtered, self.plain = self.path + query, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.use_filter = bool(wanted)
        self.socket: socket.socket | None = None
        self.buffer = b""
        self.ok = self.failed = 0
        self.first_error = self.last_error = ""
        self.deadline = 0.0  # of the exchange under way (monotonic)
        self.answered = ""  # the last error answer of a server that was up (HTTP 404: no metrics endpoint)
        self.paused_until = 0.0

    def _get(self, path: str, timeout: float) -> str:
        """GET over the kept-alive socket (a plain HTTP/1.1 exchange: http.client parses every header through
        the email package, several times the CPU of the whole scrape); a fresh connection when the server
        closed the last one."""
        for attempt in (1, 2):
            fresh = self.socket is None
            try:
                return self._exchange(path, timeout)
            except (ConnectionError, EOFError):
                self.close()
                if fresh or attempt == 2:
                    raise
            except BaseException:
                self.close()
                raise
        raise ConnectionError("unreachable")

    def _exchange(self, path: str, timeout: float) -> str:
        self.deadline = time.monotonic() + timeout  # the whole exchange, whatever the server trickles
        if self.socket is None:
            self.socket = socket.create_connection((self.host, self.port), timeout=timeout)
            self.buffer = b""
        self.socket.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAccept: text/plain\r\n\r\n".encode()
        )
        head = self._until(b"\r\n\r\n")
        status_line, _, header_text = head.partition(b"\r\n")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise ValueError(f"not an HTTP answer: {status_line[:80]!r}")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(b":") for h in header_text.split(b"\r\n"))}
        body = self._body(headers)
        if headers.get(b"connection", b"").lower() == b"close" or parts[0] == b"HTTP/1.0":
            self.close()
        if parts[1] != b"200":
            raise urllib.error.HTTPError(self.url, int(parts[1]), parts[-1].decode(errors="replace"), None, None)  # type: ignore[arg-type]
        return body.decode(errors="replace")

    def _body(self, headers: dict[bytes, bytes]) -> bytes:
        """The answer's body, never more than MAX_BODY and never past its end: an answer declared larger is refused
        before it is read (its rest would be taken for the next answer on a kept-alive connection)."""
        if b"content-length" in headers:
            length = int(headers[b"content-length"])
            if not 0 <= length <= MAX_BODY:
                raise ValueError(f"an answer of {length} bytes, over {MAX_BODY}")
            return self._exactly(length)
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            chunks, size = [], 0
            while (length := int(self._until(b"\r\n").split(b";")[0], 16)) > 0:
                size += length
                if size > MAX_BODY:  # before the chunk is read: one chunk may declare a GiB
                    raise ValueError(f"an answer of over {MAX_BODY} bytes")
                chunks.append(self._exactly(length))
                self._exactly(2)
            self._until(b"\r\n")
            return b"".join(chunks)
        body = self._rest()  # neither: the body ends with the connection
        self.close()
        return body

    def _fill(self) -> None:
        assert self.socket is not None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the answer took longer than the read's time")
        self.socket.settimeout(left)
        chunk = self.socket.recv(65536)
        if not chunk:
            raise EOFError("the server closed the connection")
        self.buffer += chunk

    def _until(self, mark: bytes) -> bytes:
        while (at := self.buffer.find(mark)) < 0:
            if len(self.buffer) > 65536:
                raise ValueError("an HTTP header line of over 64 kB")
            self._fill()
        found, self.buffer = self.buffer[:at], self.buffer[at + len(mark) :]
        return found

    def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._fill()
        found, self.buffer = self.buffer[:n], self.buffer[n:]
        return found

    def _rest(self) -> bytes:
        try:
            while len(self.buffer) <= MAX_BODY:
                self._fill()
        except EOFError:
            pass
        return self.buffer[:MAX_BODY]

    def read(self, timeout: float) -> dict[str, float] | None:
        """The kept columns, or None (and the error kept) when the endpoint does not answer 200. A server that
        answered with an error (404: it exports no metrics) is asked again only after ``ERROR_PAUSE_S``, so a
        server without an endpoint is not kept busy answering it; one not listening yet is tried every period."""
        if time.monotonic() < self.paused_until:
            return None
        try:
            values = read_exposition(self._get(self.filtered if self.use_filter else self.plain, timeout))
            if not values and self.use_filter:
                self.use_filter = False
                values = read_exposition(self._get(self.plain, timeout))
            self.ok += 1
            return values
        except urllib.error.HTTPError as exc:
            error = self.answered = f"HTTP {exc.code}"
            self.paused_until = time.monotonic() + ERROR_PAUSE_S
        except (TimeoutError, ValueError) as exc:  # too slow or too large: it would cost the others their period
            error = str(exc or type(exc).__name__)[:200]
            self.paused_until = time.monotonic() + ERROR_PAUSE_S
        except (OSError, EOFError) as exc:
            error = str(getattr(exc, "reason", None) or exc or type(exc).__name__)[:200]
        self.failed += 1
        self.first_error = self.first_error or error
        self.last_error = error
        return None

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close()
            self.socket = None
        self.buffer = b""

    def info(self) -> dict[str, Any]:
        return {"url": self.url, "ok": self.ok, "failed": self.failed, "first_error": self.first_error,
                "last_error": self.last_error, "http_error": self.answered, "filtered": self.use_filter}  # fmt: skip


class Writer:
    """samples.csv, bounded by ``max_bytes`` (the header counts)."""

    def __init__(self, out: Path, max_bytes: int) -> None:
        self.file = (out / "samples.csv").open("w")
        self.max_bytes, self.size, self.rows = max_bytes, 0, 0
        self.truncated = False
        self._put(",".join(SAMPLE_HEADER) + "\n")
        self.flush()

    def _put(self, text: str) -> None:
        self.file.write(text)
        self.size += len(text.encode())

    def flush(self) -> None:
        self.file.flush()

    def write(self, t: float, index: int, values: dict[str, float]) -> bool:
        """One endpoint's columns at ``t``; False (nothing written) once the size bound is reached."""
        lines = [f"{t:.3f},{index},{UP},1\n"] + [f"{t:.3f},{index},{c},{v:.9g}\n" for c, v in sorted(values.items())]
        text = "".join(lines)
        if self.size + len(text.encode()) > self.max_bytes:
            self.truncated = True
            return False
        self._put(text)
        self.rows += len(lines)
        return True


def sample(endpoints: list[Endpoint], writer: Writer, period: float, stop: Stop | None = None) -> bool:
    """Read every endpoint once (each within the period, at most 2 s); False when the size bound stopped the
    writing. A stop asked for ends the pass before the next endpoint."""
    for index, endpoint in enumerate(endpoints):
        if stop is not None and stop.requested:
            break
        values = endpoint.read(timeout=min(max(period, 0.1), 2.0))
        if values is not None and not writer.write(time.time(), index, values):
            writer.flush()
            return False
    writer.flush()
    return True


def run(args: argparse.Namespace, endpoints: list[Endpoint], info: dict[str, Any]) -> str:
    """Sample every period until stopped, the deadline, or the size bound; returns why it stopped."""
    stop = Stop()
    writer = Writer(args.out, args.max_bytes)
    period = args.period_ms / 1000
    deadline = time.monotonic() + args.max_s if args.max_s else math.inf
    next_at, info_at, why = time.monotonic(), 0.0, "max-s"
    while not stop.requested and time.monotonic() < deadline:
        if not sample(endpoints, writer, period, stop):
            why = "max-bytes"
            break
        if args.marker_file is not None and not args.marker_file.exists():
            write_json(args.marker_file, {"t": time.time()})
        now = time.monotonic()
        if now - info_at >= INFO_EVERY_S:
            write_json(args.out / "metrics.json", {**info, "endpoints": [e.info() for e in endpoints]})
            info_at = now
        next_at = max(next_at + period, now)
        _sleep(stop, min(next_at, deadline) - now)
    if stop.requested:
        why = "signal"
    info.update({"rows": writer.rows, "truncated": writer.truncated})
    return why


def _sleep(stop: Stop, seconds: float) -> None:
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(stop.fd, selectors.EVENT_READ)
        selector.select(max(0.0, seconds))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="directory for samples.csv and metrics.json")
    parser.add_argument("--endpoint", action="append", default=[], help="a Prometheus URL (repeat for each)")
    parser.add_argument("--period-ms", type=int, default=200)
    parser.add_argument("--max-bytes", type=int, default=64 * 2**20, help="size limit of samples.csv")
    parser.add_argument("--marker-file", type=Path, help="written once every endpoint was tried")
    parser.add_argument("--max-s", type=float, default=0.0, help="stop after this many seconds (0: no limit)")
    args = parser.parse_args(argv)
    if args.period_ms < 10 or args.max_bytes < 1024 or args.max_s < 0 or not args.endpoint:
        parser.error("--endpoint is needed; --period-ms must be >= 10, --max-bytes >= 1024, --max-s >= 0")
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = kept_names()
    endpoints = [Endpoint(url, wanted) for url in args.endpoint]
    info: dict[str, Any] = {"version": 1, "period_ms": args.period_ms, "max_bytes": args.max_bytes}
    info.update({"started": time.time(), "pid": os.getpid(), "endpoints": [e.info() for e in endpoints]})
    write_json(args.out / "metrics.json", info)
    print(f"metrics: {len(endpoints)} endpoint(s), every {args.period_ms} ms → {args.out}", flush=True)
    try:
        why = run(args, endpoints, info)
    except Exception as exc:  # said in metrics.json: the rows so far stay
        why = f"error: {type(exc).__name__}: {exc}"[:500]
    info.update({"stopped": time.time(), "stop_reason": why, "endpoints": [e.info() for e in endpoints]})
    write_json(args.out / "metrics.json", info)
    print(f"metrics: stopped ({why})", flush=True)
    return 1 if why.startswith("error:") else 0


if __name__ == "__main__":
    sys.exit(main())
