"""Host facts read before a run: GPUs, driver, disk, the payload Python's versions."""

from __future__ import annotations

import re
import shlex


def facts_command(python: str, workdir: str) -> str:
    """Host facts as ``key=value`` lines; exits non-zero when the payload's runtime is missing or the workdir
    cannot take a write (a full disk fails here, before any service is stopped)."""
    py, wd = shlex.quote(python), shlex.quote(workdir)
    probe = shlex.quote(f"{workdir.rstrip('/')}/.bench-write-probe")
    return (
        f"mkdir -p {wd}\n"
        f"if ! (head -c 65536 /dev/zero > {probe}) 2>/dev/null; then rm -f {probe}\n"
        f"  echo 'the host workdir cannot be written (disk full or read-only):' {wd} >&2; exit 74; fi\n"
        f"rm -f {probe}\n"
        'printf "hostname=%s\\n" "$(hostname)"\n'
        'printf "os=%s\\n" "$(uname -srm)"\n'
        f'printf "disk_free_gb=%s\\n" "$(df -Pk {wd} | awk \'NR==2{{print int($4/1048576)}}\')"\n'
        "if command -v nvidia-smi >/dev/null 2>&1; then\n"
        "  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader"
        ' | sed "s/^/gpu=/"\n'
        'else echo "gpu=none"; fi\n'
        f'{py} -c \'import sys, torch; print("python=" + sys.version.split()[0]);'
        ' print("torch=" + torch.__version__); print("cuda=" + str(torch.version.cuda))\'\n'
    )


def parse_facts(stdout: str) -> dict[str, str]:
    """``key=value`` lines to a dict; repeated keys (one ``gpu`` line per GPU) are joined with '; '."""
    facts: dict[str, str] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[a-z_]+", key):
            facts[key] = f"{facts[key]}; {value.strip()}" if key in facts else value.strip()
    gpus = [g for g in facts.get("gpu", "none").split("; ") if g and g != "none"]
    facts["gpu_count"] = str(len(gpus))
    return facts
