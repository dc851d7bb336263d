"""GPUs for a machine that has none: the stand-in ``nvidia-smi`` and ``pynvml`` of tests/fixtures/gpu_standin,
driven by one scenario file, and the scenario's truth for checking what was measured against it."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent / "fixtures" / "gpu_standin"
BIN = ROOT / "bin"
PYTHON = ROOT / "python"
PROJECT = Path(__file__).resolve().parents[1]
HOST_CORE = PROJECT / "host"  # benchhost, as a payload carries it (the host environment does not install it)
SAMPLER = ["-m", "benchhost.sampler"]
HOST_PYTHON = PROJECT / ".venv-host" / "bin" / "python"


def scenario_module() -> ModuleType:
    """tests/fixtures/gpu_standin/scenario.py, the truth both stand-ins answer from."""
    spec = importlib.util.spec_from_file_location("gpu_standin_scenario_tests", ROOT / "scenario.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_scenario(path: Path, **scenario: Any) -> dict[str, Any]:
    """Write a scenario (``start`` defaults to now) and return it with every GPU filled in."""
    scenario.setdefault("start", time.time())
    path.write_text(json.dumps(scenario))
    loaded: dict[str, Any] = scenario_module().load(path)
    return loaded


def env(scenario: Path, nvml: bool, smi: bool = True) -> dict[str, str]:
    """The environment of a process that sees the stand-ins: ``pynvml`` importable when ``nvml``,
    ``nvidia-smi`` on PATH when ``smi``; the host core importable as in a deployed payload."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BENCH_GPU_STANDIN")}
    path = base.get("PATH", "/usr/bin:/bin")
    base["PATH"] = f"{BIN}:{path}" if smi else path
    base["PYTHONPATH"] = f"{PYTHON}:{HOST_CORE}" if nvml else str(HOST_CORE)
    base["BENCH_GPU_STANDIN"] = str(scenario)
    return base


def host_env(**extra: str) -> dict[str, str]:
    """This environment with the host core importable, as it is inside a deployed payload."""
    return {**os.environ, "PYTHONPATH": str(HOST_CORE), **extra}


def python() -> str:
    """The benchmark host's interpreter (.venv-host) when there, else this one: the sampler needs only stdlib."""
    return str(HOST_PYTHON) if HOST_PYTHON.exists() else sys.executable
