"""A guard around the api-server's trigger endpoint (``POST /api/v2/dags/{dag_id}/dagRuns``), added by the Benchmarks
plugin as a root middleware:

* a body with NaN or Infinity anywhere (JSON has neither; Python's reader takes them) is refused with 400 naming
  where (``conf.extra.deep[1]``) before Airflow reads it, at any depth and under any key, declared param or not;
* a 400 or 422 answer never echoes a huge value whole: Airflow's Params error quotes the value that failed
  (a 10^5-element list, twice), so long lines are cut and the answer keeps its first lines.

Pure ASGI, so it buffers only these requests and these error answers; everything else passes untouched.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

TRIGGER = re.compile(r"/api/v2/dags/[^/]+/dagRuns/?$")  # under any base URL
MAX_LINE = 300  # characters of one line of an error answer
MAX_LINES = 12  # lines of one error message
MAX_ITEMS = 20  # items of a list in a 422 answer's input
MAX_BODY = 4 * 2**20  # bytes of a trigger's body: a run's conf is small (a 10^5-element list is ~0.6 MB)
_NOT_A_NUMBER = object()


def _constant(name: str) -> Any:
    return _NOT_A_NUMBER  # NaN, Infinity, -Infinity


def non_finite_at(body: bytes) -> str | None:
    """Where the JSON body has NaN or Infinity (``conf.a[2]``), or None (also when it is not JSON: Airflow says
    so itself)."""
    try:
        data = json.loads(body, parse_constant=_constant)
    except (ValueError, RecursionError):  # not JSON, or nested too deep for a parser: Airflow answers it
        return None

    def find(value: Any, where: str) -> str | None:
        if value is _NOT_A_NUMBER or (isinstance(value, float) and not math.isfinite(value)):
            return where or "the body"
        if isinstance(value, dict):
            pairs: Any = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            pairs = ((f"{where}[{i}]", v) for i, v in enumerate(value))
        else:
            return None
        return next((hit for path, item in pairs if (hit := find(item, path)) is not None), None)

    try:
        return find(data, "")
    except RecursionError:
        return "the body (nested deeper than any conf)"


def shorten_text(text: str) -> str:
    """At most :data:`MAX_LINES` lines of at most :data:`MAX_LINE` characters, each cut in its middle."""
    lines = text.splitlines() or [text]
    kept = [
        line if len(line) <= MAX_LINE else f"{line[: MAX_LINE // 2]} … ({len(line)} characters) … {line[-80:]}"
        for line in lines[:MAX_LINES]
    ]
    if len(lines) > MAX_LINES:
        kept.append(f"… ({len(lines) - MAX_LINES} more lines)")
    return "\n".join(kept)


def shorten(value: Any) -> Any:
    """A JSON error answer with every long string and list cut short."""
    if isinstance(value, str):
        return shorten_text(value)
    if isinstance(value, list):
        head = [shorten(v) for v in value[:MAX_ITEMS]]
        return [*head, f"… ({len(value) - MAX_ITEMS} more items)"] if len(value) > MAX_ITEMS else head
    if isinstance(value, dict):
        return {k: shorten(v) for k, v in value.items()}
    return value


class TriggerGuard:
    """The ASGI middleware (see the module's docstring)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not TRIGGER.match(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_BODY:
                await _answer(send, 413, {"detail": f"a run's conf is at most {MAX_BODY // 2**20} MiB"})
                return
        where = non_finite_at(body)
        if where is not None:
            detail = f"{where}: NaN and Infinity are not numbers a run can take (JSON has neither); give a number"
            await _answer(send, 400, {"detail": detail})
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return dict(await receive())

        await self.app(scope, replay, _Shortening(send))


class _Shortening:
    """``send`` for one answer: a 400 or 422 answer is buffered and sent with its values cut short."""

    def __init__(self, send: Any):
        self.send = send
        self.start: dict[str, Any] | None = None
        self.chunks: list[bytes] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] in (400, 422):
            self.start = message
            return
        if self.start is None or message["type"] != "http.response.body":
            await self.send(message)
            return
        self.chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = b"".join(self.chunks)
        try:
            body = json.dumps(shorten(json.loads(body))).encode()
        except ValueError:
            body = shorten_text(body.decode("utf-8", "replace")).encode()
        headers = [(k, v) for k, v in self.start.get("headers", []) if k.lower() != b"content-length"]
        await self.send({**self.start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await self.send({"type": "http.response.body", "body": body, "more_body": False})


async def _answer(send: Any, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
