"""sha256 manifests of a payload tree, in ``sha256sum`` format so a host can check it by hand."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

MANIFEST_NAME = "MANIFEST.sha256"
_SKIP_DIRS = {"__pycache__", ".pytest_cache"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@functools.cache
def _stat_sha256(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(Path(path))


def cached_sha256(path: Path) -> str:
    """A file's sha256, computed once per size and modification time (a spec is read over and over)."""
    stat = path.stat()
    return _stat_sha256(str(path), stat.st_size, stat.st_mtime_ns)


def build_manifest(root: Path) -> dict[str, str]:
    """``{relative posix path: sha256}`` of every payload file (caches excluded), sorted."""
    root = Path(root)
    entries = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_dir() or path.name == MANIFEST_NAME or path.suffix in _SKIP_SUFFIXES:
            continue
        if _SKIP_DIRS.intersection(rel.parts):
            continue
        entries[rel.as_posix()] = file_sha256(path)
    return entries


def format_manifest(entries: dict[str, str]) -> str:
    return "".join(f"{sha}  {rel}\n" for rel, sha in sorted(entries.items()))


def parse_manifest(text: str) -> dict[str, str]:
    entries = {}
    for line in text.splitlines():
        sha, sep, rel = line.partition("  ")
        if sep and len(sha) == 64:
            entries[rel] = sha
    return entries


def manifest_sha256(entries: dict[str, str]) -> str:
    """One hash for the whole payload: the sha256 of its manifest text."""
    return hashlib.sha256(format_manifest(entries).encode()).hexdigest()
