"""The Prometheus names SGLang (``--enable-metrics``), vLLM and the sglang-router export, as data
(``host/benchhost/telemetry/server_metrics.tsv``), checked against the packages installed in ``.venv-host``.

* The table reads: its header, a known server, type and ``how`` on every row, a canonical column or ``ignored``,
  one row per (server, name); a canonical column holds names of its kind (a counter column counters, ...) and
  combines them with ``max`` for fractions, ``sum`` for everything else.
* No column is counted twice. The rule: within one server, each canonical column has at most one mapped row whose
  note does not say ``renamed``. The others are older names of the same quantity (a rename, possibly with releases
  that export both); a reader that finds both in one scrape keeps the one whose note does not say ``renamed``.
  Two names of one release that mean the same thing are one mapped row and one ``ignored`` row.
* Every metric name the installed sglang and vllm define has a row: the string literals ``"sglang:..."`` /
  ``"vllm:..."`` in their source text (test and benchmark folders left out), a counter as ``..._total`` the way
  prometheus_client exposes it, a histogram by its base name. So has every ``smg_``/``sgl_router_`` name in the
  router's compiled extension (``strings`` of its .so, or its bytes when ``strings`` is missing).
* A row whose last_seen is the installed version names something that version defines.

The packages are read as text, never imported. Without ``.venv-host`` the checks fail: run ``make host-venv``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.unit

ROOT = PROJECT_ROOT
TABLE = ROOT / "host" / "benchhost" / "telemetry" / "server_metrics.tsv"
VENV = ROOT / ".venv-host"
HEADER = ["server", "name", "type", "column", "how", "first_seen", "last_seen", "source", "note"]
COLUMN_TYPES = {
    "running": "gauge",
    "queued": "gauge",
    "kv_usage": "gauge",
    "kv_tokens": "gauge",
    "preemptions": "counter",
    "prefix_queries": "counter",
    "prefix_hits": "counter",
    "prefix_hit_rate": "gauge",
    "prompt_tokens": "counter",
    "generation_tokens": "counter",
    "requests": "counter",
    "spec_draft_tokens": "counter",
    "spec_accepted_tokens": "counter",
    "spec_accept_length": "gauge",
    "gen_throughput": "gauge",
    "ttft_s": "histogram",
    "itl_s": "histogram",
    "e2e_s": "histogram",
    "queue_s": "histogram",
}
FRACTIONS = {"kv_usage", "prefix_hit_rate", "spec_accept_length"}  # combined with max; the other columns sum
TYPES = ("gauge", "counter", "histogram")
PREFIXES = {"sglang": ("sglang:",), "vllm": ("vllm:",), "router": ("smg_", "sgl_router_")}
DISTRIBUTIONS = {"sglang": "sglang", "vllm": "vllm", "router": "sglang_router"}
ROUTER_SO = "sglang_router/sglang_router_rs.abi3.so"
SKIPPED_FOLDERS = {"test", "tests", "benchmark", "benchmarks"}  # they read names, they define none
CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\(\s*(?:name\s*=\s*)?$")
# In the .so the names sit between other strings with no separator: a name ends where a capital, a non-name byte
# or the next name begins ("smg_db_items_storedTotal ...", "..._totalsmg_prefix_hash_policy_branch_total").
ROUTER_NAME = re.compile(r"(?:smg|sgl_router)_[a-z0-9_]+?(?=smg_|sgl_router_|[^a-z0-9_]|$)")


def read_rows() -> tuple[list[str], list[dict[str, str]]]:
    lines = TABLE.read_text().splitlines()
    header = lines[0].split("\t")
    return header, [
        dict(zip(HEADER, line.split("\t"), strict=False)) | {"_fields": line.count("\t") + 1} for line in lines[1:]
    ]


HEADER_READ, ROWS = read_rows()


def exposed(name: str, kind: str) -> str:
    """The name in the text exposition: prometheus_client appends ``_total`` to a counter that lacks it."""
    return name + "_total" if kind == "counter" and not name.endswith("_total") else name


@cache
def site_packages() -> Path:
    found = sorted(VENV.glob("lib/python3*/site-packages"))
    if not found:
        pytest.fail(f"no host venv at {VENV}: run `make host-venv` first")
    return found[0]


def installed_version(server: str) -> str:
    dist = DISTRIBUTIONS[server]
    found = sorted(site_packages().glob(f"{dist}-*.dist-info"))
    if not found:
        pytest.fail(f"{dist} is not installed in {VENV}: run `make host-venv`")
    return found[0].name[len(dist) + 1 : -len(".dist-info")]


def type_hint(before: str) -> str | None:
    """The kind of the call a literal is the name of (``Counter(name=...``, ``self._histogram_cls(``), if any."""
    call = CALL.search(before)
    word = call.group(1).lower() if call else ""
    if "histogram" in word or "summary" in word:
        return "histogram"
    return next((kind for kind in ("counter", "gauge") if kind in word), None)


@cache
def python_literals(server: str) -> dict[str, frozenset[str]]:
    """Metric-name literals of an installed package → the kinds of the calls they name (empty when none is seen)."""
    installed_version(server)
    package = site_packages() / server
    literal = re.compile(rf"""(["'])({server}:[A-Za-z_][A-Za-z0-9_:]*)\1""")
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        if SKIPPED_FOLDERS & set(path.relative_to(package).parts[:-1]):
            continue
        text = path.read_text(errors="replace")
        for match in literal.finditer(text):
            hint = type_hint(text[max(0, match.start() - 200) : match.start()])
            found.setdefault(match.group(2), set()).update([hint] if hint else [])
    return {name: frozenset(kinds) for name, kinds in found.items()}


@cache
def router_names() -> frozenset[str]:
    """The ``smg_``/``sgl_router_`` words of the router's compiled extension, cut where the next string begins."""
    installed_version("router")
    so = site_packages() / ROUTER_SO
    if not so.is_file():
        pytest.fail(f"{so} is missing: run `make host-venv`")
    if shutil.which("strings"):
        text = subprocess.run(["strings", "-n", "6", str(so)], capture_output=True, check=True).stdout
    else:
        text = so.read_bytes()
    return frozenset(ROUTER_NAME.findall(text.decode("latin-1")))


def covers(row: dict[str, str], found: str, kinds: frozenset[str] = frozenset()) -> bool:
    """Whether a row is the exposed form of a name found in the installed package."""
    if row["server"] == "router":  # a word glued to the name ends it unless the word continues it with "_"
        rest = found[len(row["name"]) :] if found.startswith(row["name"]) else None
        return rest is not None and not rest.startswith("_")
    return exposed(found, row["type"]) == row["name"] and (not kinds or row["type"] in kinds)


def defined_by_installed(row: dict[str, str]) -> bool:
    if row["server"] == "router":
        return any(covers(row, found) for found in router_names())
    return any(covers(row, name, kinds) for name, kinds in python_literals(row["server"]).items())


def row_problems(row: dict[str, str]) -> list[str]:
    server, name, kind, column = row["server"], row["name"], row["type"], row["column"]
    problems = []
    if row["_fields"] != len(HEADER):
        problems.append(f"{row['_fields']} fields")
    if server not in PREFIXES or not name.startswith(PREFIXES[server]) or re.search(r"\s", name):
        problems.append("unknown server or a name outside its prefix")
    if kind not in TYPES or row["how"] not in ("sum", "max"):
        problems.append("unknown type or how")
    if column != "ignored" and column not in COLUMN_TYPES:
        problems.append(f"unknown column {column!r}")
    if column in COLUMN_TYPES and COLUMN_TYPES[column] != kind:
        problems.append(f"a {kind} in the {COLUMN_TYPES[column]} column {column}")
    if column in COLUMN_TYPES and row["how"] != ("max" if column in FRACTIONS else "sum"):
        problems.append(f"{column} combines with {'max' if column in FRACTIONS else 'sum'}")
    if server != "router" and kind == "counter" and not name.endswith("_total"):
        problems.append("a prometheus_client counter is exposed with _total")
    if kind == "histogram" and name.endswith("_bucket"):
        problems.append("a histogram goes by its base name, not its _bucket series")
    if not row["source"] or (column == "ignored" and not row["note"]):
        problems.append("no source, or an ignored row without its reason")
    return problems


def test_the_table_reads_with_known_servers_types_and_columns():
    assert HEADER_READ == HEADER
    problems = [f"{row['server']} {row['name']}: {p}" for row in ROWS for p in row_problems(row)]
    assert not problems, "\n".join(problems)
    keys = [(row["server"], row["name"]) for row in ROWS]
    assert len(keys) == len(set(keys)), sorted({key for key in keys if keys.count(key) > 1})
    assert {row["server"] for row in ROWS} == set(PREFIXES)


def test_no_column_is_counted_twice_within_a_server():
    current: dict[tuple[str, str], list[str]] = {}
    for row in ROWS:
        if row["column"] != "ignored" and "renamed" not in row["note"]:
            current.setdefault((row["server"], row["column"]), []).append(row["name"])
    doubled = {key: names for key, names in current.items() if len(names) > 1}
    assert not doubled, f"columns with two current names (mark the older one `renamed`, or ignore one): {doubled}"


@pytest.mark.parametrize("server", ["sglang", "vllm"])
def test_every_metric_name_of_the_installed_package_is_in_the_table(server: str):
    rows = [row for row in ROWS if row["server"] == server]
    literals = python_literals(server)
    assert len(literals) > 50, (
        f"found only {sorted(literals)} in {server}: is the scan still looking in the right place?"
    )
    missing = [
        f"{name} ({'/'.join(sorted(kinds)) or 'kind unknown'})"
        for name, kinds in sorted(literals.items())
        if not any(covers(row, name, kinds) for row in rows)
    ]
    version = installed_version(server)
    assert not missing, (
        f"{server} {version} defines names the table lacks (add them, mapped or ignored):\n" + "\n".join(missing)
    )


def test_every_router_metric_name_is_in_the_table():
    rows = [row for row in ROWS if row["server"] == "router"]
    found = router_names()
    assert len(found) > 20, f"found only {sorted(found)} in the router's .so"
    missing = sorted(name for name in found if not any(covers(row, name) for row in rows))
    version = installed_version("router")
    assert not missing, f"sglang-router {version} has names the table lacks:\n" + "\n".join(missing)


@pytest.mark.parametrize("server", ["sglang", "vllm", "router"])
def test_rows_last_seen_in_the_installed_version_name_what_it_defines(server: str):
    version = installed_version(server)
    rows = [row for row in ROWS if row["server"] == server and row["last_seen"] == version]
    assert rows, f"no {server} row says last_seen {version}: is the table for the installed version?"
    absent = [row["name"] for row in rows if not defined_by_installed(row)]
    assert not absent, f"rows with last_seen {version} that {server} {version} does not define:\n" + "\n".join(absent)
