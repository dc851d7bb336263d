"""Are the host's GPUs free? Memory in use per GPU and the compute processes holding any, from ``nvidia-smi``
(vLLM's CI checks the same between tests). A host without ``nvidia-smi`` has no GPUs to wait for; an
``nvidia-smi`` that fails (non-zero exit) or prints what cannot be read never counts as "free"."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

OUTPUT_BYTES = 20000  # what is kept of each query's output


def query_command() -> str:
    """Each query's lines prefixed (``gpu=``, ``proc=``), then its exit code (``gpu_rc=``, ``proc_rc=``)."""
    return (
        "if ! command -v nvidia-smi >/dev/null 2>&1; then echo 'nvidia-smi=absent'; exit 0; fi\n"
        "out=$(nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits 2>&1); rc=$?\n"
        f"{{ printf '%s\\n' \"$out\" | head -c {OUTPUT_BYTES}; echo; }} | sed 's/^/gpu=/'; echo \"gpu_rc=$rc\"\n"
        "out=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits 2>&1)"
        "; rc=$?\n"
        f"{{ printf '%s\\n' \"$out\" | head -c {OUTPUT_BYTES}; echo; }} | sed 's/^/proc=/'; echo \"proc_rc=$rc\"\n"
    )


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_mib: float


@dataclass
class GpuState:
    present: bool
    used_mib: dict[int, float] = field(default_factory=dict)  # GPU index → memory in use
    processes: list[GpuProcess] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why nvidia-smi's answer cannot be trusted

    def busy(self, max_used_mib: float) -> list[str]:
        """Why the GPUs are not free yet: what made ``nvidia-smi``'s answer unreadable, one line per GPU over the
        threshold and per compute process."""
        reasons = list(self.problems)
        reasons += [
            f"GPU {i}: {used:.0f} MiB in use (limit {max_used_mib:.0f})"
            for i, used in sorted(self.used_mib.items())
            if used > max_used_mib
        ]
        reasons += [
            f"process {p.pid} ({p.name}) holds "
            + ("GPU memory (amount not reported)" if math.isnan(p.used_mib) else f"{p.used_mib:.0f} MiB")
            for p in self.processes
        ]
        return reasons


_NOT_AVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "[Insufficient Permissions]")


def parse_state(stdout: str) -> GpuState:
    if "nvidia-smi=absent" in stdout:
        return GpuState(present=False)
    state = GpuState(present=True)
    codes: dict[str, str] = {}
    unreadable: list[str] = []
    gpus_seen = 0
    for line in stdout.splitlines():
        kind, _, rest = line.partition("=")
        if kind in ("gpu_rc", "proc_rc"):
            codes[kind] = rest.strip()
            continue
        if kind not in ("gpu", "proc") or not rest.strip():
            continue
        parts = [p.strip() for p in rest.split(",")]
        try:
            if kind == "gpu" and len(parts) == 2:
                gpus_seen += 1
                if parts[1] not in _NOT_AVAILABLE:  # a GPU that does not report its memory: nothing to judge
                    state.used_mib[int(parts[0])] = float(parts[1])
                continue
            if kind == "proc" and len(parts) == 3:
                used = math.nan if parts[2] in _NOT_AVAILABLE else float(parts[2])
                state.processes.append(GpuProcess(int(parts[0]), parts[1], used))
                continue
        except ValueError:
            pass
        unreadable.append(f"{kind}: {rest.strip()[:200]}")
    for kind, what in (("gpu_rc", "--query-gpu"), ("proc_rc", "--query-compute-apps")):
        code = codes.get(kind)
        if code != "0":
            how = f"exited with code {code}" if code else "gave no exit code"
            state.problems.append(f"nvidia-smi {what} {how}: not judged free")
    if unreadable:
        state.problems.append(f"nvidia-smi printed {len(unreadable)} unreadable line(s): {'; '.join(unreadable[:3])}")
    elif gpus_seen == 0 and not state.problems:
        state.problems.append("nvidia-smi listed no GPU: not judged free")
    return state
