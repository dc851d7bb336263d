"""Are the host's GPUs free? Memory in use per GPU and the compute processes holding any, from ``nvidia-smi``
(vLLM's CI checks the same between tests). A host without ``nvidia-smi`` has no GPUs to wait for."""

from __future__ import annotations

from dataclasses import dataclass, field


def query_command() -> str:
    return (
        "if ! command -v nvidia-smi >/dev/null 2>&1; then echo 'nvidia-smi=absent'; exit 0; fi\n"
        "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits | sed 's/^/gpu=/'\n"
        "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits"
        " | sed 's/^/proc=/'\n"
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

    def busy(self, max_used_mib: float) -> list[str]:
        """Why the GPUs are not free yet: one line per GPU over the threshold and per compute process."""
        reasons = [
            f"GPU {i}: {used:.0f} MiB in use (limit {max_used_mib:.0f})"
            for i, used in sorted(self.used_mib.items())
            if used > max_used_mib
        ]
        reasons += [f"process {p.pid} ({p.name}) holds {p.used_mib:.0f} MiB" for p in self.processes]
        return reasons


def parse_state(stdout: str) -> GpuState:
    if "nvidia-smi=absent" in stdout:
        return GpuState(present=False)
    state = GpuState(present=True)
    for line in stdout.splitlines():
        kind, _, rest = line.partition("=")
        parts = [p.strip() for p in rest.split(",")]
        try:
            if kind == "gpu" and len(parts) == 2:
                state.used_mib[int(parts[0])] = float(parts[1])
            elif kind == "proc" and len(parts) == 3:
                state.processes.append(GpuProcess(int(parts[0]), parts[1], float(parts[2])))
        except ValueError:
            continue  # "[N/A]" and the like: nothing to judge
    return state
