"""Payloads from git: a repository and a ref instead of a folder of ``kernels/``.

A spec names the repository (an absolute path on the Airflow side, or an https://, ssh://, file:// or
scp-like ``user@host:path`` URL the workers can reach), a ref (branch, tag or commit) and optionally the
payload's folder inside it::

    payload: moe                                                      # today: kernels/moe/
    payload: {repo: /srv/git/moe.git, ref: main, path: kernels/moe}   # from git

The ref is resolved once to the full commit sha (:func:`resolve`), which the run records; the tree at that
commit is written into a temporary folder (:func:`materialise`, the blobs exactly as committed: no
attributes, filters or line-ending conversion of the worker's git), and ``Host.put_tree`` ships it with the
usual sha256 manifest, so only files that changed since the host's last deploy are sent. URLs are fetched
into a bounded cache under ``var/git-cache/``. Every git call is an argument list with a timeout; values
from a spec pass ``--end-of-options`` and an allow-list first, and git itself may only speak file, https
and ssh (no ``ext::`` helper, no ``--upload-pack`` smuggled in as a URL).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from benchflow.paths import var_dir

GIT_TIMEOUT_S = 120.0  # one local git command
FETCH_TIMEOUT_S = 900.0  # one fetch of a remote repository into the cache
CACHE_MAX_REPOS = 16  # repositories kept in var/git-cache; the least recently used go first
MAX_TREE_BYTES = 512 << 20  # a payload larger than this is refused before anything is written
MAX_TREE_FILES = 20_000
MAX_COMMITS = 10_000  # a longer range between good and bad is refused

SCHEMES = ("https", "ssh", "file")
# git may only use these transports, whatever the URL or a repository's config asks for
_PROTOCOLS = ["-c", "protocol.allow=never"] + [
    arg for scheme in SCHEMES for arg in ("-c", f"protocol.{scheme}.allow=always")
]
_GIT = ["git", "-c", "core.fsmonitor=false", "-c", "core.quotePath=false", *_PROTOCOLS]
_SHA_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_REF_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/@^~{}+-]{0,255}$")
_SUBDIR_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)*$")
_SCP_RE = re.compile(r"^(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*):(?P<path>[^:]+)$")
_HELPER_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_HOST_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*$|^[0-9a-f:.]+$")  # a name, IPv4 or IPv6 (urlsplit lowercases)


class PayloadError(ValueError):
    """A git payload that cannot be used; the message names the repository and the ref or path."""


@dataclass(frozen=True)
class GitPayload:
    """A spec's ``payload: {repo, ref, path}``; checked when made, so a bad one fails at parse time."""

    repo: str
    ref: str
    path: str = ""

    def __post_init__(self) -> None:
        validate_source(self.repo)
        validate_ref(self.ref, self.repo)
        validate_subdir(self.path, self.repo)


@dataclass(frozen=True)
class Materialised:
    """A payload tree written to ``path``: the commit it came from and the git tree id of the payload folder
    (two commits with the same ``tree`` ship the same files)."""

    commit: str
    tree: str
    path: Path
    files: int
    bytes: int


def validate_source(source: str) -> str:
    """The repository as given, when it is an absolute path or an allowed URL; else :class:`PayloadError`."""
    if not source or len(source) > 2048 or any(ord(c) < 0x20 or ord(c) == 0x7F for c in source):
        raise PayloadError(f"payload repository {source[:80]!r}: empty, too long or with control characters")
    if source.startswith("-"):
        raise PayloadError(f"payload repository {source!r}: starts with '-' (read as a git option)")
    if _HELPER_RE.match(source):  # git's <transport>::<address>; an IPv6 host ([::1]) is not one
        raise PayloadError(f"payload repository {source!r}: transport helpers (ext::, fd::) are not allowed")
    if source.startswith("/"):
        if ".." in source.split("/"):
            raise PayloadError(f"payload repository {source!r}: '..' in the path")
        return source
    if "://" in source:
        return _validate_url(source)
    match = _SCP_RE.match(source)
    if match is None or match["path"].startswith("-"):
        raise PayloadError(
            f"payload repository {source!r}: not an absolute path, an {', '.join(s + '://' for s in SCHEMES)} URL"
            " or user@host:path"
        )
    return source


def _validate_url(source: str) -> str:
    parts = urlsplit(source)
    if parts.scheme not in SCHEMES:
        raise PayloadError(f"payload repository {source!r}: scheme {parts.scheme!r} (allowed: {', '.join(SCHEMES)})")
    if parts.password is not None or (parts.scheme == "https" and parts.username is not None):
        raise PayloadError(
            f"payload repository {parts.scheme}://…@{parts.hostname}: credentials in the URL would reach logs"
            " and the warehouse; use a credential helper or an SSH key"
        )
    if parts.query or parts.fragment:
        raise PayloadError(f"payload repository {source!r}: a query or fragment in the URL")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/") or ".." in parts.path.split("/"):
            raise PayloadError(f"payload repository {source!r}: file:// needs an absolute local path without '..'")
        return source
    host = parts.hostname or ""
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        host = ""
    if not _HOST_RE.match(host) or (parts.username or "").startswith("-"):
        raise PayloadError(f"payload repository {source!r}: host {host!r} is not a host name")
    if not parts.path.strip("/") or parts.path.lstrip("/").startswith("-"):
        raise PayloadError(f"payload repository {source!r}: no repository path, or one starting with '-'")
    return source


def validate_ref(ref: str, source: str = "") -> str:
    """A branch, tag, commit or revision like ``main~3``; never an option, a range or a ``rev:path``."""
    if not _REF_RE.match(ref or "") or ".." in ref or ref.endswith((".lock", "/", ".")):
        raise PayloadError(f"{source or 'payload'}: ref {ref!r} is not a branch, tag or commit")
    return ref


def validate_subdir(subdir: str, source: str = "") -> str:
    """A relative folder inside the repository ('' = its root): no '..', no absolute path, no option."""
    if subdir and (not _SUBDIR_RE.match(subdir) or ".." in subdir.split("/") or ".git" in subdir.split("/")):
        raise PayloadError(f"{source or 'payload'}: path {subdir!r} is not a relative folder inside the repository")
    return subdir


def is_sha(text: str) -> bool:
    return bool(_SHA_RE.match(text))


def _is_local(source: str) -> bool:
    return source.startswith("/")


def _git(
    cwd: Path,
    args: list[str],
    *,
    source: str,
    what: str,
    timeout: float = GIT_TIMEOUT_S,
    stdin: bytes | None = None,
    ok: tuple[int, ...] = (0,),
) -> subprocess.CompletedProcess[bytes]:
    """Run one git command in ``cwd``; a failure or timeout names the repository and what was asked."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_PROTOCOL_FROM_USER": "0"}
    try:
        result = subprocess.run(
            [*_GIT, "-C", str(cwd), *args],
            input=stdin,
            capture_output=True,
            timeout=timeout,
            env=env,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PayloadError(f"{source}: {what}: git did not answer within {timeout:.0f} s") from None
    except OSError as exc:
        raise PayloadError(f"{source}: {what}: cannot run git ({exc})") from None
    if result.returncode not in ok:
        detail = result.stderr.decode(errors="replace").strip()[-1000:]
        raise PayloadError(f"{source}: {what} failed (git exit {result.returncode}): {detail}")
    return result


def cache_dir() -> Path:
    """Clones of URL repositories (``BENCH_VAR_DIR``/git-cache)."""
    return var_dir() / "git-cache"


@contextlib.contextmanager
def _locked(path: Path, timeout: float) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``, waited for up to ``timeout`` (a fetch by another task holds it)."""
    deadline = time.monotonic() + timeout
    with open(path, "a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    raise PayloadError(f"{path}: lock not free after {timeout:.0f} s") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def git_dir(source: str, *, fetch: bool = True, need: tuple[str, ...] = ()) -> Path:
    """The local repository that answers for ``source``: the path itself, or the cache's clone of the URL,
    fetched when ``fetch`` or when a commit in ``need`` is missing."""
    validate_source(source)
    if _is_local(source):
        path = Path(source)
        if not path.is_dir():
            raise PayloadError(f"{source}: no such repository on this machine")
        _git(path, ["rev-parse", "--git-dir"], source=source, what="open the repository")
        return path
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(source.encode()).hexdigest()[:24] + ".git"
    path = root / name
    with _locked(root / f"{name}.lock", FETCH_TIMEOUT_S):
        if not (path / "HEAD").exists():
            path.mkdir(exist_ok=True)
            _git(path, ["init", "--bare", "--quiet"], source=source, what="create the cache clone")
            (path / "benchflow-source").write_text(source + "\n")
        if fetch or not all(_has_commit(path, sha) for sha in need):
            _fetch(path, source, [sha for sha in need if is_sha(sha)])
        os.utime(path)
    _evict(root, keep=path)
    return path


def _has_commit(path: Path, sha: str) -> bool:
    args = ["cat-file", "-e", "--end-of-options", f"{sha}^{{commit}}"]
    return _git(path, args, source=str(path), what="look up a commit", ok=(0, 1, 128)).returncode == 0


def _fetch(path: Path, source: str, shas: list[str]) -> None:
    """Every branch and tag of ``source``; then any needed commit that none of them holds, by its sha."""
    refspecs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
    args = ["fetch", "--prune", "--no-tags", "--quiet", "--end-of-options", source, *refspecs]
    _git(path, args, source=source, what="fetch", timeout=FETCH_TIMEOUT_S)
    missing = [sha for sha in shas if not _has_commit(path, sha)]
    if missing:
        args = ["fetch", "--quiet", "--end-of-options", source, *missing]
        _git(path, args, source=source, what=f"fetch commit {missing[0]}", timeout=FETCH_TIMEOUT_S)


def _evict(root: Path, keep: Path) -> None:
    """Keep at most :data:`CACHE_MAX_REPOS` clones: remove the least recently used that nobody is fetching.

    Every use touches its clone, so one being read by another task is among the newest and stays unless more
    than :data:`CACHE_MAX_REPOS` repositories are in use at once."""
    clones = sorted((p for p in root.glob("*.git") if p != keep), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in clones[CACHE_MAX_REPOS - 1 :]:
        with contextlib.suppress(PayloadError), _locked(root / f"{old.name}.lock", 0):
            shutil.rmtree(old, ignore_errors=True)


def _rev(path: Path, source: str, ref: str) -> str:
    args = ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"]
    result = _git(path, args, source=source, what=f"resolve ref {ref!r}", ok=(0, 1, 128))
    sha = result.stdout.decode().strip()
    if result.returncode != 0 or not is_sha(sha):
        raise PayloadError(f"{source}: ref {ref!r} names no commit (not a branch, tag or commit there)")
    return sha


def resolve(repo: str, ref: str) -> str:
    """The full sha of the commit ``ref`` names now (a URL is fetched first: branches move)."""
    validate_source(repo)
    validate_ref(ref, repo)
    path = git_dir(repo, fetch=not is_sha(ref), need=(ref,) if is_sha(ref) else ())
    return _rev(path, repo, ref)


def commits_between(repo: str, good: str, bad: str, path: str = "", limit: int = MAX_COMMITS) -> list[str]:
    """First-parent history from ``good`` (exclusive) to ``bad`` (inclusive), oldest first.

    With ``path``, only the commits that change that folder against their first parent: the others ship the
    same payload as their parent, so none of them can be the first bad one. Refused when ``good`` is not on
    the first-parent line of ``bad`` (bisection needs each commit's parent to be the one before it)."""
    validate_source(repo)
    validate_subdir(path, repo)
    pinned = is_sha(validate_ref(good, repo)) and is_sha(validate_ref(bad, repo))
    where = git_dir(repo, fetch=not pinned, need=(good, bad) if pinned else ())
    good_sha, bad_sha = _rev(where, repo, good), _rev(where, repo, bad)
    if good_sha == bad_sha:
        raise PayloadError(f"{repo}: good {good!r} and bad {bad!r} are the same commit {good_sha}")
    what = f"check that {good!r} is an ancestor of {bad!r}"
    if _git(where, ["merge-base", "--is-ancestor", good_sha, bad_sha], source=repo, what=what, ok=(0, 1)).returncode:
        raise PayloadError(
            f"{repo}: good {good!r} ({good_sha[:12]}) is not an ancestor of bad {bad!r} ({bad_sha[:12]})"
        )
    line = _rev_list(where, repo, good_sha, bad_sha, "")
    if _first_parent(where, repo, line[0]) != good_sha:
        raise PayloadError(
            f"{repo}: good {good!r} ({good_sha[:12]}) is an ancestor of bad {bad!r} but not on its first-parent"
            " line (it came in through a merge); take the merge's first parent, or the merge-base, as good"
        )
    commits = _rev_list(where, repo, good_sha, bad_sha, path) if path else line
    if len(commits) > limit:
        raise PayloadError(f"{repo}: {len(commits)} commits between {good!r} and {bad!r} (at most {limit})")
    return commits


def _rev_list(where: Path, repo: str, good_sha: str, bad_sha: str, path: str) -> list[str]:
    args = ["rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}", "--", *([path] if path else [])]
    out = _git(where, args, source=repo, what=f"list commits {good_sha[:12]}..{bad_sha[:12]}").stdout.decode()
    return out.split()


def _first_parent(where: Path, repo: str, sha: str) -> str:
    return _rev(where, repo, f"{sha}^1")


def materialise(repo: str, sha: str, subdir: str, dest: Path) -> Materialised:
    """Write the tree of commit ``sha`` (its folder ``subdir``, '' for all of it) into the empty folder
    ``dest``. Takes a full sha, never a ref: what a retry ships cannot move with a branch."""
    validate_subdir(subdir, repo)
    if not is_sha(sha):
        raise PayloadError(f"{repo}: materialise takes the full commit sha resolve() returned, not {sha!r}")
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise PayloadError(f"{repo}@{sha[:12]}: destination {dest} is not empty")
    where = git_dir(repo, fetch=False, need=(sha,))
    treeish = f"{sha}:{subdir}" if subdir else f"{sha}^{{tree}}"
    kind = _git(where, ["cat-file", "-t", treeish], source=repo, what=f"find {subdir or '/'}", ok=(0, 128))
    if kind.stdout.strip() != b"tree":
        raise PayloadError(f"{repo}@{sha[:12]}: no folder {subdir!r} at that commit")
    tree = _git(where, ["rev-parse", treeish], source=repo, what="read the tree id").stdout.decode().strip()
    entries = _tree_entries(where, repo, sha, treeish)
    total = sum(size for _, _, size, _ in entries)
    if len(entries) > MAX_TREE_FILES or total > MAX_TREE_BYTES:
        raise PayloadError(
            f"{repo}@{sha[:12]}:{subdir}: {len(entries)} files, {total} bytes (at most {MAX_TREE_FILES} files,"
            f" {MAX_TREE_BYTES} bytes)"
        )
    dest.mkdir(parents=True, exist_ok=True)
    _write_blobs(where, repo, sha, entries, dest)
    return Materialised(sha, tree, dest, len(entries), total)


def _tree_entries(where: Path, repo: str, sha: str, treeish: str) -> list[tuple[str, str, int, str]]:
    """``(mode, blob id, size, path)`` of every file; symlinks and submodules are refused, not shipped."""
    out = _git(where, ["ls-tree", "-r", "-z", "-l", treeish], source=repo, what=f"list the tree of {sha[:12]}")
    entries = []
    for record in out.stdout.decode("utf-8", errors="surrogateescape").split("\0"):
        if not record:
            continue
        meta, _, rel = record.partition("\t")
        mode, kind, obj, size = meta.split()
        parts = rel.split("/")
        if rel.startswith("/") or any(p in ("", ".", "..", ".git") for p in parts):
            raise PayloadError(f"{repo}@{sha[:12]}: unsafe path {rel!r} in the tree")
        if mode not in ("100644", "100755") or kind != "blob":
            what = {"120000": "a symlink", "160000": "a submodule"}.get(mode, f"mode {mode}")
            raise PayloadError(f"{repo}@{sha[:12]}: {rel} is {what}; a payload holds plain files only")
        entries.append((mode, obj, int(size), rel))
    return entries


def _write_blobs(where: Path, repo: str, sha: str, entries: list[tuple[str, str, int, str]], dest: Path) -> None:
    """Every blob in one ``git cat-file --batch`` (the tree's size is bounded before this)."""
    request = "".join(f"{obj}\n" for _, obj, _, _ in entries).encode()
    out = _git(where, ["cat-file", "--batch"], source=repo, what=f"read the files of {sha[:12]}", stdin=request)
    data, pos = memoryview(out.stdout), 0
    for mode, obj, size, rel in entries:
        header_end = out.stdout.index(b"\n", pos)
        header = bytes(data[pos:header_end]).split()
        if len(header) != 3 or header[0].decode() != obj or int(header[2]) != size:
            raise PayloadError(f"{repo}@{sha[:12]}: unexpected answer for {rel}: {bytes(data[pos:header_end])[:100]!r}")
        target = dest.joinpath(*rel.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data[header_end + 1 : header_end + 1 + size])
        target.chmod(0o755 if mode == "100755" else 0o644)
        pos = header_end + 1 + size + 1


@contextlib.contextmanager
def materialised(repo: str, sha: str, subdir: str = "") -> Iterator[Materialised]:
    """:func:`materialise` into a temporary folder under ``var/tmp`` that is removed afterwards (a deploy
    reads it with ``Host.put_tree``)."""
    tmp = var_dir() / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    dest = Path(tempfile.mkdtemp(prefix=f"payload-{sha[:12]}-", dir=tmp))
    try:
        yield materialise(repo, sha, subdir, dest)
    finally:
        shutil.rmtree(dest, ignore_errors=True)
