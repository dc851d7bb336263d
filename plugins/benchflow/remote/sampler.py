"""Shell commands for the GPU sampler on a host (pure builders): what a launch step runs
(detached, through ``remote.jobs.launch_command`` like any job) and how it waits for the first samples. Every
value is validated and shell-quoted."""

from __future__ import annotations

import shlex

MIN_PERIOD_MS, MAX_PERIOD_MS = 10, 60_000
DEFAULT_MAX_BYTES = 256 * 2**20


def _path(value: str, what: str) -> str:
    if not value or "\n" in value or "\0" in value:
        raise ValueError(f"{what} must be a non-empty path on one line, got {value!r}")
    return shlex.quote(value)


def sampler_command(
    python: str,
    out_dir: str,
    period_ms: int = 200,
    max_bytes: int = DEFAULT_MAX_BYTES,
    marker_file: str | None = None,
    payload: str | None = None,
) -> str:
    """``python -m benchhost.sampler --out DIR --period-ms N --max-bytes N [--marker-file F]``, every word quoted.
    With ``payload`` (the deployed payload's folder, which holds the host core), that folder goes first on the
    sampler's ``PYTHONPATH``, before whatever the host's environment had there (the path of its NVML binding, say),
    and the shell is replaced by the sampler (``exec``)."""
    if isinstance(period_ms, bool) or not isinstance(period_ms, int) or not MIN_PERIOD_MS <= period_ms <= MAX_PERIOD_MS:
        raise ValueError(f"period_ms must be an integer in {MIN_PERIOD_MS}..{MAX_PERIOD_MS}, got {period_ms!r}")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1024:
        raise ValueError(f"max_bytes must be an integer >= 1024, got {max_bytes!r}")
    words = [_path(python, "python"), "-m", "benchhost.sampler", "--out", _path(out_dir, "out_dir")]
    words += ["--period-ms", str(period_ms), "--max-bytes", str(max_bytes)]
    if marker_file is not None:
        words += ["--marker-file", _path(marker_file, "marker_file")]
    if payload is None:
        return " ".join(words)
    path = _path(payload, "payload") + '${PYTHONPATH:+:"$PYTHONPATH"}'
    return f"PYTHONPATH={path}; export PYTHONPATH; exec " + " ".join(words)


def wait_ready_command(marker_file: str, timeout_s: float = 30.0) -> str:
    """Wait until the sampler wrote its marker (first samples on disk, or no GPU); exit 1 past the timeout."""
    steps = max(1, int(float(timeout_s) / 0.1))
    marker = _path(marker_file, "marker_file")
    return f"for _ in $(seq {steps}); do test -e {marker} && exit 0; sleep 0.1; done\nexit 1\n"


def none_command(out_dir: str, reason: str) -> str:
    """Write the note a sampler writes on a host without GPUs (``telemetry.json``: source none, and why), for a
    run that starts no sampler there: the run says so once, from the same file."""
    import json

    note = json.dumps({"source": "none", "reason": reason})
    folder = _path(out_dir, "out_dir")
    return f"mkdir -p {folder} && printf '%s\\n' {shlex.quote(note)} > {folder}/telemetry.json"


def metrics_command(
    python: str,
    out_dir: str,
    urls: list[str],
    period_ms: int = 200,
    max_bytes: int = DEFAULT_MAX_BYTES,
    marker_file: str | None = None,
    payload: str | None = None,
) -> str:
    """``python -m benchhost.metrics_sampler --out DIR --endpoint URL ... --period-ms N --max-bytes N``, every
    word quoted; as :func:`sampler_command`, with ``payload`` first on its ``PYTHONPATH`` and ``exec``. Each URL
    must be an http URL on one line."""
    command = sampler_command(python, out_dir, period_ms, max_bytes, marker_file, payload)
    if not urls:
        raise ValueError("the metrics sampler needs at least one endpoint")
    words = []
    for url in urls:
        if not url.startswith("http://") or any(c in url for c in "\n\0 "):
            raise ValueError(f"an endpoint must be an http URL without spaces, got {url!r}")
        words += ["--endpoint", shlex.quote(url)]
    return command.replace("-m benchhost.sampler", "-m benchhost.metrics_sampler " + " ".join(words), 1)
