"""GPU telemetry sampler: runs beside a benchmark (and its servers) until SIGTERM, one row per GPU per period.

    python -m benchhost.sampler --out DIR [--period-ms 200] [--max-bytes 268435456] [--marker-file F] [--max-s 0]

Standard library only, plus ``pynvml`` (package ``nvidia-ml-py``) when it imports. Sources, in order:

* ``nvml``: ``pynvml`` imports, ``nvmlInit()`` works and sees a GPU. Reads ``nvmlDeviceGetPowerUsage`` (mW),
  ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded; Volta and newer, else the column stays
  empty), ``nvmlDeviceGetClockInfo`` (SM, MEM; MHz), ``nvmlDeviceGetTemperature`` (GPU die, °C),
  ``nvmlDeviceGetUtilizationRates`` (gpu, memory; %), ``nvmlDeviceGetMemoryInfo`` (used, bytes → MiB) and
  ``nvmlDeviceGetCurrentClocksEventReasons`` (bitmask; ``…ClocksThrottleReasons`` on drivers before 535).
* ``nvidia-smi``: ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits -lms <period>``, the fields
  picked once from ``nvidia-smi --help-query-gpu`` (first name that the driver lists, per column: e.g.
  ``clocks_event_reasons.active`` else ``clocks_throttle_reasons.active``, ``power.draw.instant`` else
  ``power.draw``). nvidia-smi has no energy field: ``energy_j`` stays empty and energy is integrated later.
  Row times come from its ``timestamp`` field (local time, ms).
* ``none``: neither works. ``DIR/telemetry.json`` says ``{"source": "none", "reason": ...}``, one line is
  printed, and the sampler exits 0 at once.

Output: ``DIR/samples.csv``, header ``t,index,uuid,power_w,energy_j,sm_mhz,mem_mhz,temp_c,util_gpu_pct,
util_mem_pct,mem_used_mib,clock_reasons``: t in epoch seconds, energy_j the counter in joules (cumulative;
differences are what count), clock_reasons the bitmask as an integer; an empty cell is a value the GPU did not
give (never 0). ``DIR/telemetry.json``: source, fields (query fields or NVML functions), period, GPUs (index,
name, uuid), driver, started/stopped, rows, and whether the size limit stopped it. The first samples are taken
at once (a short benchmark still gets them); ``--marker-file`` is written when they are on disk (or at once
without a GPU), so a launcher can start the benchmark after it.

Size: when the next rows would take ``samples.csv`` past ``--max-bytes``, the sampler stops appending,
records ``"truncated": true`` and the time in telemetry.json, and exits 0 (stopping, rather than sampling
slower, keeps every row at the same period; at 8 GPUs and 200 ms a row costs ~4 kB/s, 256 MiB ~17 h).
SIGTERM or SIGINT (the teardown) stops it within one period; ``--max-s`` bounds its life (0: no bound).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchhost.telemetry.files import SAMPLE_COLUMNS as COLUMNS
from benchhost.telemetry.files import plausible

# Column → nvidia-smi --query-gpu names, most wanted first (nvidia-smi --help-query-gpu spells them).
SMI_FIELDS = (
    ("t", ("timestamp",)),
    ("index", ("index",)),
    ("uuid", ("uuid", "gpu_uuid")),
    ("power_w", ("power.draw.instant", "power.draw")),
    ("sm_mhz", ("clocks.sm", "clocks.current.sm")),
    ("mem_mhz", ("clocks.mem", "clocks.current.memory")),
    ("temp_c", ("temperature.gpu",)),
    ("util_gpu_pct", ("utilization.gpu",)),
    ("util_mem_pct", ("utilization.memory",)),
    ("mem_used_mib", ("memory.used",)),
    ("clock_reasons", ("clocks_event_reasons.active", "clocks_throttle_reasons.active")),
)
NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
MAX_LINE = 64 * 1024  # the longest nvidia-smi line kept (a row of 8 GPUs' fields is under 200 bytes)
NVML_ERROR_FUNCTION_NOT_FOUND = 13  # an Event-reasons call on a driver before 535


class Stop:
    """Set by SIGTERM/SIGINT; ``fd`` becomes readable at once (signal.set_wakeup_fd) so waits end early."""

    def __init__(self) -> None:
        self.requested = False
        self.fd, wfd = os.pipe()
        os.set_blocking(wfd, False)
        os.set_blocking(self.fd, False)
        signal.set_wakeup_fd(wfd)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.handle)

    def handle(self, signum: int, frame: Any) -> None:
        self.requested = True


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically: a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def cell(column: str, value: Any) -> str:
    """A CSV cell: empty for a value the GPU did not give or one it cannot have (:func:`plausible`)."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return ""
    if column in ("t", "index"):
        return f"{value:.3f}" if isinstance(value, float) else str(value)
    kept = plausible(column, float(value))
    if kept is None:
        return ""
    return str(int(value)) if isinstance(value, int) else f"{kept:.3f}"


class Writer:
    """samples.csv, bounded by ``max_bytes`` (the header counts)."""

    def __init__(self, out: Path, max_bytes: int) -> None:
        self.path = out / "samples.csv"
        self.file = self.path.open("w")
        self.max_bytes = max_bytes
        self.size = 0
        self.rows = 0
        self.truncated_at: float | None = None
        self._put(",".join(COLUMNS) + "\n")

    def _put(self, text: str) -> None:
        self.file.write(text)
        self.file.flush()
        self.size += len(text.encode())

    def write(self, rows: list[dict[str, Any]]) -> bool:
        """Append rows; False (and nothing written) once the limit is reached."""
        text = "".join(",".join(cell(c, row.get(c)) for c in COLUMNS) + "\n" for row in rows)
        if self.size + len(text.encode()) > self.max_bytes:
            self.truncated_at = time.time()
            return False
        self._put(text)
        self.rows += len(rows)
        return True


# ----------------------------------------------------------------------------------------------
# NVML
# ----------------------------------------------------------------------------------------------


class Nvml:
    """The NVML source; ``open`` raises when NVML is not usable here."""

    name = "nvml"

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        if not self.handles:
            raise RuntimeError("NVML sees no GPU")
        self.energy = [True] * len(self.handles)
        self.reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self.uuids = [self.call(nvml.nvmlDeviceGetUUID, h) for h in self.handles]

    @classmethod
    def open(cls) -> Nvml:
        import pynvml

        pynvml.nvmlInit()
        return cls(pynvml)

    def call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    def reasons(self, handle: Any) -> int | None:
        """Event reasons, falling back for good to the Throttle name on a driver without the Event one."""
        if self.reasons_fn is not None:
            try:
                return int(self.reasons_fn(handle))
            except self.nvml.NVMLError as exc:
                if getattr(exc, "value", None) != NVML_ERROR_FUNCTION_NOT_FOUND:
                    return None
            self.reasons_fn = None
        value = self.call(self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
        return None if value is None else int(value)

    def read(self, index: int) -> dict[str, Any]:
        """One GPU now; a value NVML refuses is None (an empty cell), and the energy counter is not asked again
        once NotSupported."""
        nv, h = self.nvml, self.handles[index]
        row: dict[str, Any] = {"t": time.time(), "index": index, "uuid": self.uuids[index]}
        power = self.call(nv.nvmlDeviceGetPowerUsage, h)
        row["power_w"] = None if power is None else power / 1000.0
        if self.energy[index]:
            energy = self.call(nv.nvmlDeviceGetTotalEnergyConsumption, h)
            self.energy[index] = energy is not None  # NotSupported (before Volta): stop asking
            row["energy_j"] = None if energy is None else energy / 1000.0
        row["sm_mhz"] = self.call(nv.nvmlDeviceGetClockInfo, h, NVML_CLOCK_SM)
        row["mem_mhz"] = self.call(nv.nvmlDeviceGetClockInfo, h, NVML_CLOCK_MEM)
        row["temp_c"] = self.call(nv.nvmlDeviceGetTemperature, h, NVML_TEMPERATURE_GPU)
        util = self.call(nv.nvmlDeviceGetUtilizationRates, h)
        row["util_gpu_pct"], row["util_mem_pct"] = (None, None) if util is None else (util.gpu, util.memory)
        memory = self.call(nv.nvmlDeviceGetMemoryInfo, h)
        row["mem_used_mib"] = None if memory is None else round(memory.used / 2**20)
        row["clock_reasons"] = self.reasons(h)
        return row

    def info(self) -> dict[str, Any]:
        """Driver, GPUs and the NVML functions in use, for telemetry.json."""
        nv = self.nvml
        gpus = [
            {"index": i, "name": self.call(nv.nvmlDeviceGetName, h), "uuid": self.uuids[i]}
            for i, h in enumerate(self.handles)
        ]
        fields = [
            "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetTotalEnergyConsumption",
            "nvmlDeviceGetClockInfo(SM, MEM)",
            "nvmlDeviceGetTemperature(GPU)",
            "nvmlDeviceGetUtilizationRates",
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetCurrentClocksEventReasons"
            if self.reasons_fn
            else "nvmlDeviceGetCurrentClocksThrottleReasons",
        ]
        return {"driver": self.call(nv.nvmlSystemGetDriverVersion), "gpus": gpus, "fields": fields}

    def run(self, writer: Writer, period: float, stop: Stop, deadline: float, on_first: Any) -> str:
        """Sample every ``period`` s from now (missed periods are skipped, not made up) until stopped."""
        selector = selectors.DefaultSelector()
        selector.register(stop.fd, selectors.EVENT_READ)
        next_at = time.monotonic()
        while not stop.requested and time.monotonic() < deadline:
            if not writer.write([self.read(i) for i in range(len(self.handles))]):
                return "max-bytes"
            on_first()
            next_at += period
            now = time.monotonic()
            next_at = max(next_at, now)
            selector.select(min(next_at, deadline) - now)
        return "signal" if stop.requested else "max-s"

    def close(self) -> None:
        self.call(self.nvml.nvmlShutdown)


# ----------------------------------------------------------------------------------------------
# nvidia-smi
# ----------------------------------------------------------------------------------------------


def smi_fields(help_text: str) -> dict[str, str]:
    """Column → the first query name of SMI_FIELDS that ``--help-query-gpu`` lists (lines like
    ``"clocks.current.sm" or "clocks.sm"``)."""
    listed = {
        name for line in help_text.splitlines() if line.startswith('"') for name in re.findall(r'"([^"]+)"', line)
    }
    return {column: next(n for n in names if n in listed) for column, names in SMI_FIELDS if listed & set(names)}


def smi_number(text: str) -> float | None:
    """A cell under ``nounits``; ``[N/A]``, ``N/A``, ``[Not Supported]`` and the like are None, never 0."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def smi_time(text: str) -> float:
    """``2024/01/16 14:44:16.977`` (local time) → epoch seconds; now when it does not read."""
    try:
        whole, _, frac = text.partition(".")
        return time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S")) + (float(f"0.{frac}") if frac else 0.0)
    except ValueError:
        return time.time()


def hex_number(text: str) -> int | None:
    """``0x0000000000000004`` → 4; anything else (``0xZZ``, ``[N/A]``) is None, an empty cell."""
    try:
        return int(text, 16) if text.lower().startswith("0x") else None
    except ValueError:
        return None


def smi_row(line: str, columns: list[str]) -> dict[str, Any] | None:
    """One CSV line of the loop, cells by position (the header echoes canonical names, not the asked ones);
    None for a line that is not a row (an error message nvidia-smi printed instead)."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != len(columns):
        return None
    row: dict[str, Any] = {}
    for column, text in zip(columns, cells, strict=True):
        if column == "t":
            row["t"] = smi_time(text)
        elif column == "uuid":
            row["uuid"] = text
        elif column == "clock_reasons":
            row["clock_reasons"] = hex_number(text)
        elif column == "index":
            value = smi_number(text)
            row["index"] = round(value) if value is not None and 0 <= value < 1024 else None
        else:
            value = plausible(column, smi_number(text))
            row[column] = value if column == "power_w" or value is None else round(value)
    return row if row.get("index") is not None else None


class Smi:
    """The nvidia-smi source; ``open`` raises when nvidia-smi is missing or lists no GPU."""

    name = "nvidia-smi"

    def __init__(self, exe: str, fields: dict[str, str], gpus: list[dict[str, Any]], driver: str | None) -> None:
        self.exe, self.fields, self.gpus, self.driver = exe, fields, gpus, driver
        self.skipped = 0
        self.last_error = ""

    @classmethod
    def open(cls) -> Smi:
        """Pick the fields this driver lists and read the GPUs' names, once."""
        exe = shutil.which("nvidia-smi")
        if exe is None:
            raise RuntimeError("nvidia-smi is not on PATH")
        help_text = subprocess.run([exe, "--help-query-gpu"], capture_output=True, text=True, timeout=30).stdout
        fields = smi_fields(help_text)
        if "t" not in fields or "index" not in fields:
            raise RuntimeError("nvidia-smi --help-query-gpu lists no timestamp/index field")
        query = [exe, "--query-gpu=index,uuid,driver_version,name", "--format=csv,noheader,nounits"]
        done = subprocess.run(query, capture_output=True, text=True, timeout=30)
        gpus, driver = [], None
        for line in done.stdout.splitlines():
            parts = [p.strip() for p in line.split(",", 3)]
            if len(parts) == 4 and parts[0].isdigit():
                gpus.append({"index": int(parts[0]), "name": parts[3], "uuid": parts[1]})
                driver = parts[2]
        if done.returncode != 0 or not gpus:
            raise RuntimeError(f"nvidia-smi lists no GPU (exit {done.returncode}): {done.stdout[-300:].strip()}")
        return cls(exe, fields, gpus, driver)

    def info(self) -> dict[str, Any]:
        return {"driver": self.driver, "gpus": self.gpus, "fields": list(self.fields.values())}

    def command(self, period_ms: int) -> list[str]:
        query = "--query-gpu=" + ",".join(self.fields.values())
        return [self.exe, query, "--format=csv,noheader,nounits", "-lms", str(period_ms)]

    def run(self, writer: Writer, period: float, stop: Stop, deadline: float, on_first: Any) -> str:
        """Read the loop's rows as they come; one batch per timestamp (one row per GPU)."""
        child = subprocess.Popen(self.command(round(period * 1000)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert child.stdout is not None
        out = child.stdout.fileno()
        selector = selectors.DefaultSelector()
        selector.register(stop.fd, selectors.EVENT_READ)
        selector.register(out, selectors.EVENT_READ)
        columns, pending, why = list(self.fields), b"", "max-s"
        first_round: set[Any] = set()  # GPU indexes with a row written: a read may end between two GPUs' lines
        try:
            while not stop.requested and time.monotonic() < deadline:
                left = deadline - time.monotonic()
                ready = {key.fd for key, _ in selector.select(None if math.isinf(left) else max(0.0, left))}
                if out not in ready:
                    continue
                chunk = os.read(out, 65536)
                if not chunk:  # a teardown that TERMs the whole process group ends nvidia-smi too
                    code = child.wait()
                    why = "signal" if stop.requested or code == -signal.SIGTERM else f"nvidia-smi exited ({code})"
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                if len(pending) > MAX_LINE:  # output that never ends its line: dropped, not held without bound
                    self.skipped += 1
                    self.last_error = f"a line of over {MAX_LINE} bytes without a newline"
                    pending = b""
                rows = [r for r in (self.parse(line, columns) for line in lines) if r is not None]
                if rows and not writer.write(rows):
                    return "max-bytes"
                first_round.update(r["index"] for r in rows)
                if len(first_round) >= len(self.gpus):  # the marker says every GPU has a row on disk, not the first
                    on_first()
            return "signal" if stop.requested else why
        finally:
            child.terminate()
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

    def parse(self, raw: bytes, columns: list[str]) -> dict[str, Any] | None:
        line = raw.decode(errors="replace").strip()
        row = smi_row(line, columns) if line else None
        if line and row is None:
            self.skipped += 1
            self.last_error = line[-300:]
        return row

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------


def open_source() -> tuple[Nvml | Smi | None, str]:
    """The first source that works, with why the ones before it did not (all of them: None)."""
    reasons = []
    try:
        return Nvml.open(), ""
    except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, ...: try the next source
        reasons.append(f"NVML: {type(exc).__name__}: {exc}")
    try:
        return Smi.open(), reasons[0]
    except Exception as exc:
        reasons.append(f"nvidia-smi: {type(exc).__name__}: {exc}")
    return None, "; ".join(reasons)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, bounded: a period under 10 ms or a limit under 1 KiB is refused."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="directory for samples.csv and telemetry.json")
    parser.add_argument("--period-ms", type=int, default=200)
    parser.add_argument("--max-bytes", type=int, default=256 * 2**20, help="size limit of samples.csv")
    parser.add_argument("--marker-file", type=Path, help="written once the first samples are on disk")
    parser.add_argument("--max-s", type=float, default=0.0, help="stop after this many seconds (0: no limit)")
    args = parser.parse_args(argv)
    if args.period_ms < 10 or args.max_bytes < 1024 or args.max_s < 0:
        parser.error("--period-ms must be >= 10, --max-bytes >= 1024, --max-s >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Sample until stopped; telemetry.json is written at the start and rewritten at the end."""
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    stop = Stop()
    started = time.time()
    info: dict[str, Any] = {"version": 1, "columns": list(COLUMNS), "period_ms": args.period_ms}
    info.update({"max_bytes": args.max_bytes, "started": started, "pid": os.getpid()})
    source, reason = open_source()
    marker = {"done": False}

    def on_first() -> None:
        if not marker["done"] and args.marker_file is not None:
            write_json(args.marker_file, {"source": info["source"], "t": time.time()})
        marker["done"] = True

    if source is None:
        info.update({"source": "none", "reason": reason, "stopped": time.time()})
        write_json(args.out / "telemetry.json", info)
        on_first()
        print(f"telemetry: no GPU telemetry on this host ({reason})", flush=True)
        return 0
    info.update({"source": source.name, **source.info(), "truncated": False})
    if reason:
        info["not_used"] = reason  # why NVML was not the source
    write_json(args.out / "telemetry.json", info)
    print(f"telemetry: {source.name}, {len(info['gpus'])} GPU(s), every {args.period_ms} ms → {args.out}", flush=True)
    writer = Writer(args.out, args.max_bytes)
    deadline = time.monotonic() + args.max_s if args.max_s else math.inf
    try:
        why = source.run(writer, args.period_ms / 1000, stop, deadline, on_first)
    except Exception as exc:  # said in telemetry.json, as every other end is: the rows so far stay
        why = f"error: {type(exc).__name__}: {exc}"[:500]
    finally:
        source.close()
    info.update({"stopped": time.time(), "stop_reason": why, "rows": writer.rows, "fields": source.info()["fields"]})
    info.update({"truncated": writer.truncated_at is not None, "truncated_at": writer.truncated_at})
    if isinstance(source, Smi) and source.skipped:
        info.update({"skipped_lines": source.skipped, "last_skipped": source.last_error})
    write_json(args.out / "telemetry.json", info)
    print(f"telemetry: stopped ({why}), {writer.rows} rows", flush=True)
    return 1 if why.startswith(("nvidia-smi exited", "error:")) else 0


if __name__ == "__main__":
    sys.exit(main())
