"""The host's lease: one campaign on a host at a time (a file in its workdir, changed under ``flock``)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

LEASE_FILE = ".bench-host-lease"


def acquire_command(workdir: str, owner: str, ttl_s: float) -> str:
    """Take the host's lease for ``owner`` (``<dag_id>/<run key>``), or report who holds it.

    Prints ``acquired <owner> <expires>`` or ``held <holder> <expires>``. The lease is a file in the
    host's workdir, read and written under ``flock``, so two campaigns racing for it cannot both win.
    It is re-entrant (a retry of the holder renews it) and expires ``ttl_s`` after it was taken, so a
    campaign whose teardown never ran cannot keep the host forever.
    """
    if not re.fullmatch(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+", owner):
        raise ValueError(f"lease owner {owner!r} must be <dag_id>/<run key>")
    wd = shlex.quote(workdir)
    lease = shlex.quote(f"{workdir.rstrip('/')}/{LEASE_FILE}")
    return (
        f"mkdir -p {wd} && exec 9>>{lease}.lock && flock -w 30 9 || exit 75\n"
        f"now=$(date +%s); holder=; expires=0\n"
        f"read -r holder expires < {lease} 2>/dev/null || true\n"
        f'if [ -z "$holder" ] || [ "$holder" = {shlex.quote(owner)} ] || [ "${{expires:-0}}" -lt "$now" ]; then\n'
        f'  want="{owner} $((now + {int(ttl_s)}))"\n'
        # written, renamed, read back: on a full disk (or any failed write) no one is told 'acquired'
        f"  if printf '%s\\n' \"$want\" > {lease}.new && mv -f {lease}.new {lease}"
        f' && [ "$(cat {lease} 2>/dev/null)" = "$want" ]; then printf \'acquired %s\\n\' "$want"\n'
        f"  else rm -f {lease}.new; echo 'cannot write the host lease (disk full?):' {lease} >&2; exit 74; fi\n"
        f'else printf \'held %s %s\\n\' "$holder" "$expires"; fi\n'
    )


def release_command(workdir: str, owner: str) -> str:
    """Give the lease back if ``owner`` holds it; prints ``released``, ``not held`` or ``held <holder> ...``."""
    lease = shlex.quote(f"{workdir.rstrip('/')}/{LEASE_FILE}")
    return (
        f"exec 9>>{lease}.lock && flock -w 30 9 || exit 75\n"
        f"holder=; expires=0; read -r holder expires < {lease} 2>/dev/null || true\n"
        f'if [ "$holder" = {shlex.quote(owner)} ]; then rm -f {lease}; echo released\n'
        f'elif [ -z "$holder" ]; then echo "not held"\n'
        f'else printf \'held %s %s\\n\' "$holder" "$expires"; fi\n'
    )


@dataclass(frozen=True)
class LeaseState:
    """What :func:`acquire_command` printed: ``acquired`` or ``held``, by whom, until when (epoch s)."""

    acquired: bool
    holder: str
    expires: int | None

    @property
    def until(self) -> str:
        from datetime import UTC, datetime

        return datetime.fromtimestamp(self.expires, UTC).isoformat() if self.expires is not None else "?"


def parse_acquire(stdout: str) -> LeaseState:
    state, _, rest = stdout.strip().partition(" ")
    holder, _, expires = rest.rpartition(" ")
    if state not in ("acquired", "held"):
        raise ValueError(f"unexpected lease output: {stdout[:200]!r}")
    return LeaseState(state == "acquired", holder, int(expires) if expires.isdigit() else None)
