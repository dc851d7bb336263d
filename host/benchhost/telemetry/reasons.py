"""Clock-event (throttle) reasons: the bitmask NVML and nvidia-smi report, as names.

Bit values from NVML (nvml.h ``nvmlClocksEventReason…`` / ``nvmlClocksThrottleReason…``; pynvml.py of
nvidia-ml-py 12.560.30); names as nvidia-smi's boolean query fields spell them
(``clocks_event_reasons.<name>``), ``display_clock_setting`` after NVML's. Bits not in this table (newer
drivers add some: board limit, reliability) are kept as ``bit_0x…``, never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable

REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Not throttling: an idle GPU clocks down, and application clocks are a setting (deprecated, "no longer used").
BENIGN = ("gpu_idle", "applications_clocks_setting")


def decode(mask: int) -> list[str]:
    """``0x9`` → ``["gpu_idle", "hw_slowdown"]``, lowest bit first."""
    names, bit = [], 1
    while bit <= mask:
        if mask & bit:
            names.append(REASONS.get(bit, f"bit_{bit:#x}"))
        bit <<= 1
    return names


def seen(masks: Iterable[int | None]) -> list[str]:
    """Every reason set in any of ``masks``, in bit order."""
    union = 0
    for mask in masks:
        union |= mask or 0
    return decode(union)


def throttling(names: Iterable[str], benign: Iterable[str] = BENIGN) -> list[str]:
    """The reasons that mean the clocks were held down for a cause other than idling or a setting."""
    allowed = set(benign)
    return [name for name in names if name not in allowed]
