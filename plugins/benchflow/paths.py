"""Where the project keeps things on the machine that runs Airflow."""

from __future__ import annotations

import os
from pathlib import Path

import benchhost

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CAMPAIGNS_DIR = PROJECT_ROOT / "include" / "campaigns"
SQL_DIR = PROJECT_ROOT / "include" / "sql"
KERNELS_DIR = PROJECT_ROOT / "kernels"
# The host core (stdlib only): shipped inside every payload as payload/benchhost/, beside the payload's scripts.
HOST_CORE_DIR = Path(benchhost.__file__).resolve().parent
HOST_CORE = HOST_CORE_DIR.name


def campaigns_dir() -> Path:
    """Campaign specs; ``BENCH_CAMPAIGNS_DIR`` points a deployment (or a test) at another folder."""
    return Path(os.environ.get("BENCH_CAMPAIGNS_DIR", CAMPAIGNS_DIR))


def kernels_dir() -> Path:
    """Payloads deployable to hosts; ``BENCH_KERNELS_DIR`` overrides."""
    return Path(os.environ.get("BENCH_KERNELS_DIR", KERNELS_DIR))


def datasets_dir() -> Path:
    """Dataset files a serving spec may name (``benchmark.dataset.file``), shipped with the payload;
    ``BENCH_DATASETS_DIR`` overrides."""
    return Path(os.environ.get("BENCH_DATASETS_DIR", PROJECT_ROOT / "include" / "datasets"))


def var_dir() -> Path:
    """Mutable state: warehouse file, artifacts, the local host's workdir. ``BENCH_VAR_DIR`` overrides."""
    return Path(os.environ.get("BENCH_VAR_DIR", PROJECT_ROOT / "var")).resolve()


def project_git_sha() -> str | None:
    """The commit of this project that runs a campaign (``BENCH_GIT_SHA`` where the image has no .git)."""
    if sha := os.environ.get("BENCH_GIT_SHA"):
        return sha
    import subprocess

    try:
        result = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def host_python() -> str:
    """The local host's Python for payloads, servers and benchmark clients: ``BENCH_HOST_PYTHON``, else the
    host environment the set-up makes (``.venv-host``), else this interpreter."""
    if configured := os.environ.get("BENCH_HOST_PYTHON"):
        return configured
    made = PROJECT_ROOT / ".venv-host" / "bin" / "python"
    if made.exists():
        return str(made)
    import sys

    return sys.executable
