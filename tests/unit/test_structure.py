"""The structure the README promises, checked on the code itself.

* Three packages split by where their code runs: the runtime library (``plugins/benchflow``), the operator's tools
  (``tools/benchtools``) and the host core (``host/benchhost``, standard library only). Imports go one way
  (tools → library → host core), form no circle, and load nothing by file path or through ``sys.path``;
  ``bench/`` imports nothing from ``tests/``.
* Nothing outside ``kinds/`` names a result kind: not as a word of a string (a kind's name, or the name of a
  table or view only that kind has), not as a part of a name (``SERVING_COLUMNS``, ``kernel_x``), not as an import.
* Nothing outside ``warehouse/`` holds SQL text (the kinds' DDL lives in ``include/sql/``).
* No function is longer than 60 lines (a Triton kernel's body excepted).
* The library's imports of its own packages sit at the top of its modules: at most 15 % inside functions, each
  with its reason on its line (what DAG parsing or an Airflow-free reader must not load); its top level holds at
  most 14 loose modules; every search DAG file is at most 30 lines (the engine builds it).
* Inside the unit and integration tiers, tests mirror the source (``tests/unit/benchflow/analysis/`` for
  ``plugins/benchflow/analysis/``); only tests of the whole project sit at a tier's top.
* The bottleneck rule engine (``kinds/rules.py``) knows no kind; each kind's rules are a YAML file in its folder,
  and a kind's declaration holds at most 8 callables (what is not data is a function of the rows).

Each check is a function over source text, and ``test_the_checks_find_what_they_look_for`` plants a violation of
each: a check that cannot fail is no check.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from benchflow import kinds
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.unit

PACKAGES = {
    "benchflow": PROJECT_ROOT / "plugins" / "benchflow",
    "benchtools": PROJECT_ROOT / "tools" / "benchtools",
    "benchhost": PROJECT_ROOT / "host" / "benchhost",
}
# Who may import whom: each package, the packages below it (and itself).
MAY_IMPORT = {"benchtools": {"benchtools", "benchflow", "benchhost"}, "benchflow": {"benchflow", "benchhost"}}
MAY_IMPORT["benchhost"] = {"benchhost"}
HOST_THIRD_PARTY = {"pynvml"}  # the sampler's optional NVML binding, imported when it is there
LIBRARY = PACKAGES["benchflow"]
SQL = re.compile(
    r"^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|CREATE\s+(TABLE|VIEW|SCHEMA|DATABASE)\s|"
    r"DROP\s+(TABLE|VIEW)\s|ALTER\s+TABLE\s|COPY\s|WITH\s+\w+\s+AS\s)",
)
PATH_LOADING = re.compile(r"\bsys\.path\b|spec_from_file_location|\brun_path\b|SourceFileLoader|\b__import__\b")
MAX_LINES = 60
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# -- reading the source ----------------------------------------------------------------------------------------


def package_files() -> dict[str, Path]:
    """Module name → file, for the three packages."""
    found = {}
    for package, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def type_checking_nodes(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:`` (imports for annotations only: no edge at run time)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            inside |= {id(sub) for stmt in node.body for sub in ast.walk(stmt)}
    return inside


def imported(module: str, path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """Every module a file imports at run time (at module level or inside functions), absolute names, with their
    line: ``from a import b`` gives ``a.b`` (a submodule or a name of ``a``: the graph keeps what is a module)."""
    tree = ast.parse(source if source is not None else path.read_text())
    skip = type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found += [(node.lineno, base), *((node.lineno, f"{base}.{a.name}") for a in node.names)]
    return found


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the modules of the three packages it imports (a name that is not a module counts as its module)."""
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        for _, name in imported(module, path):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(f"{name}."):  # a package's own __init__: no edge
                graph[module].add(name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def wrong_way(module: str, path: Path, source: str | None = None) -> list[str]:
    """Imports of a package that ``module``'s package may not import; for the host core, also any third-party
    module (it runs on a GPU host with the standard library only)."""
    own = module.split(".")[0]
    bad = []
    for line, name in imported(module, path, source):
        top = name.split(".")[0]
        if top in PACKAGES and top not in MAY_IMPORT[own]:
            bad.append(f"{path.relative_to(PROJECT_ROOT)}:{line}: {own} imports {name}")
        elif own == "benchhost" and top not in PACKAGES and top not in sys.stdlib_module_names | HOST_THIRD_PARTY:
            bad.append(f"{path.relative_to(PROJECT_ROOT)}:{line}: the host core imports {name} (not stdlib)")
    return bad


def path_loading(path: Path, text: str | None = None) -> list[str]:
    """Code (not prose) that loads a module by file path or changes the import path."""
    tree = ast.parse(text if text is not None else path.read_text())
    prose = docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) or id(node) in prose:
            continue
        if isinstance(node, ast.Attribute | ast.Name) and PATH_LOADING.search(ast.unparse(node)):
            hits.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return sorted(set(hits))


def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def strings(path: Path, text: str | None = None) -> list[tuple[int, str]]:
    """Every string constant of a module (f-string parts too), docstrings left out (prose may name a kind)."""
    tree = ast.parse(text if text is not None else path.read_text())
    prose = docstrings(tree)
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in prose
    ]


def names(path: Path, text: str | None = None) -> list[tuple[int, str]]:
    """Every name a module binds or uses: variables, attributes, functions, classes, arguments, keywords."""
    tree = ast.parse(text if text is not None else path.read_text())
    found = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = node.name
        elif isinstance(node, ast.arg):
            name = node.arg
        elif isinstance(node, ast.keyword):
            name = node.arg
        if name:
            found.append((getattr(node, "lineno", 0), name))
    return found


def kind_words() -> tuple[set[str], set[str]]:
    """(the kinds' names, the tables and views that belong to one kind)."""
    every = kinds.all_kinds()
    owned: dict[str, set[str]] = {}
    for kind in every:
        for table in (kind.table, kind.wide_view, *(side.table for side in kind.side_tables)):
            owned.setdefault(table, set()).add(kind.name)
    return {k.name for k in every}, {table for table, owners in owned.items() if len(owners) == 1}


def kind_mentions(path: Path, text: str | None = None) -> list[str]:
    """Where a module names a result kind: a word of a string that is a kind's name or a table of one kind; a part
    of a name (split at ``_``) that is a kind's name; an import of a kind's module."""
    kind_names, tables = kind_words()
    where = path.name
    hits = [
        f"{where}:{line}: {text_!r:.80}"
        for line, text_ in strings(path, text)
        if set(WORD.findall(text_)) & (kind_names | tables)
    ]
    hits += [
        f"{where}:{line}: name {name}" for line, name in names(path, text) if set(name.lower().split("_")) & kind_names
    ]
    tree_text = text if text is not None else path.read_text()
    hits += [
        f"{where}:{line}: import {name}"
        for line, name in imported("x", path, tree_text)
        if re.match(rf"benchflow\.kinds\.({'|'.join(kind_names)})\b", name)
    ]
    return hits


def long_functions(path: Path, text: str | None = None) -> list[str]:
    tree = ast.parse(text if text is not None else path.read_text())
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if any("jit" in ast.unparse(d) for d in node.decorator_list):  # a Triton kernel's body: one program
            continue
        length = node.end_lineno - node.lineno + 1 if node.end_lineno else 0
        if length > MAX_LINES:
            hits.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}: {node.name} ({length} lines)")
    return hits


def inner_imports(path: Path, text: str | None = None) -> tuple[int, list[tuple[int, str]]]:
    """A module's first-party imports (the three packages): how many, and those inside functions with their line's
    text (a reason is a comment on it)."""
    source = text if text is not None else path.read_text()
    tree, lines = ast.parse(source), source.splitlines()
    inside = {
        id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(f)
    }
    total, found = 0, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if any(m.split(".")[0] in PACKAGES for m in modules):
                total += 1
                if id(node) in inside:
                    found.append((node.lineno, lines[node.lineno - 1]))
    return total, found


def sources(roots: Iterable[Path], outside: str = "") -> list[Path]:
    files = [p for root in roots for p in ([root] if root.is_file() else root.rglob("*.py"))]
    return sorted(p for p in files if not outside or outside not in p.relative_to(PROJECT_ROOT).parts)


# -- the checks ------------------------------------------------------------------------------------------------


def test_the_packages_import_one_way_without_circles_or_file_paths():
    files = package_files()
    graph = import_graph(files)
    assert sum(len(edges) for edges in graph.values()) > 100  # the graph was read (a check of nothing passes)
    assert circles(graph) == [], "import circles"
    bad = [hit for module, path in files.items() for hit in wrong_way(module, path)]
    assert not bad, "imports against the layering:\n" + "\n".join(bad)
    loading = [hit for path in files.values() for hit in path_loading(path)]
    loading += [hit for path in sources([PROJECT_ROOT / "dags", PROJECT_ROOT / "bench"]) for hit in path_loading(path)]
    assert not loading, "modules loaded by path or through sys.path:\n" + "\n".join(loading)


def test_every_folder_of_the_packages_is_a_package():
    """A folder without ``__init__.py`` imports as a namespace package: it works here and fails on an install."""
    folders = {path.parent for root in PACKAGES.values() for path in root.rglob("*.py")}
    assert len(folders) > 10
    assert sorted(str(f.relative_to(PROJECT_ROOT)) for f in folders if not (f / "__init__.py").exists()) == []


def test_bench_scripts_import_nothing_from_the_tests():
    hits = [
        f"{path.name}:{line}: {name}"
        for path in sources([PROJECT_ROOT / "bench"])
        for line, name in imported("bench", path)
        if name.split(".")[0] == "tests"
    ]
    assert not hits, hits


def test_nothing_outside_kinds_names_a_kind():
    roots = [
        LIBRARY,
        PROJECT_ROOT / "dags",
        PROJECT_ROOT / "plugins" / "benchflow_ui_plugin.py",
        PACKAGES["benchtools"],
    ]
    hits = [hit for path in sources(roots, outside="kinds") for hit in kind_mentions(path)]
    assert not hits, "result kinds named outside plugins/benchflow/kinds/:\n" + "\n".join(hits)


def test_no_sql_outside_the_warehouse():
    roots = [
        LIBRARY,
        PROJECT_ROOT / "dags",
        PROJECT_ROOT / "plugins" / "benchflow_ui_plugin.py",
        PACKAGES["benchtools"],
    ]
    hits = []
    for path in sources(roots, outside="warehouse"):
        hits += [f"{path.name}:{line}: {text[:80]!r}" for line, text in strings(path) if SQL.match(text)]
    assert not hits, "SQL text outside plugins/benchflow/warehouse/:\n" + "\n".join(hits)


def test_no_function_is_longer_than_60_lines():
    roots = [*PACKAGES.values(), PROJECT_ROOT / "dags", PROJECT_ROOT / "kernels", PROJECT_ROOT / "bench"]
    files = [p for p in sources(roots) if not p.name.startswith("test_") and p.name != "conftest.py"]
    hits = [hit for path in files for hit in long_functions(path)]
    assert not hits, "functions over 60 lines:\n" + "\n".join(hits)


def test_the_librarys_own_imports_sit_at_the_top_each_one_inside_a_function_with_its_reason():
    total, inner = 0, []
    for path in sorted(LIBRARY.rglob("*.py")):
        count, found = inner_imports(path)
        total += count
        inner += [f"{path.relative_to(PROJECT_ROOT)}:{line}: {text.strip()}" for line, text in found]
    assert len(inner) <= 0.15 * total, f"{len(inner)} of {total} first-party imports inside functions:\n" + "\n".join(
        inner
    )
    assert not [i for i in inner if "#" not in i], "an import inside a function without its reason"


def test_the_library_has_few_loose_modules_and_each_search_dag_file_is_short():
    loose = sorted(p.name for p in LIBRARY.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= 14, loose
    from benchflow.searches.engine import STRATEGIES

    files = {PROJECT_ROOT / "dags" / f"{k.dag_id.removeprefix('bench_')}.py" for k in STRATEGIES.values()}
    assert {f.name for f in files} == {"bisect.py", "config_search.py", "tile_search.py"}
    assert all(len(f.read_text().splitlines()) <= 30 for f in files), {
        f.name: len(f.read_text().splitlines()) for f in files
    }


def test_each_kind_declares_its_bottleneck_rules_as_data_beside_it_and_few_callables():
    """The rule engine (kinds/rules.py) imports nothing of the library; each kind's rules file sits in its folder;
    what a kind declares is data except what is a function of the rows (at most 8 callables on ResultKind)."""
    import dataclasses

    engine = (LIBRARY / "kinds" / "rules.py").read_text()
    assert not re.search(r"^\s*(from|import) bench", engine, re.M), "the rule engine imports the library"
    with_rules = [k for k in kinds.all_kinds() if k.rules is not None]
    assert with_rules, "no kind declares bottleneck rules"
    for kind in with_rules:
        assert kind.rules.parent == LIBRARY / "kinds" / kind.name and kind.rules.suffix == ".yaml", kind.rules
        assert kind.bottleneck_rules().rules, f"{kind.rules} holds no rules"
    callables = [f.name for f in dataclasses.fields(kinds.ResultKind) if "Callable" in str(f.type)]
    assert len(callables) <= 8, callables


SOURCE_ROOTS = {**PACKAGES, "kernels": PROJECT_ROOT / "kernels"}
# Tests of the whole project rather than of one module: they sit at their tier's top.
CROSS_CUTTING = {"test_structure.py", "test_compose.py", "test_hardening.py", "test_long_lines.py"}


def unmirrored(tier: Path, roots: dict[str, Path] = SOURCE_ROOTS) -> list[str]:
    """Test files of ``tier`` not in a folder that mirrors a source folder of ``roots`` (``benchflow/kinds/``)."""
    bad = []
    for path in sorted(tier.rglob("test_*.py")):
        parts = path.relative_to(tier).parts
        if len(parts) == 1:
            bad += [] if parts[0] in CROSS_CUTTING else [path.relative_to(tier).as_posix()]
        elif parts[0] not in roots or not roots[parts[0]].joinpath(*parts[1:-1]).is_dir():
            bad.append(path.relative_to(tier).as_posix())
    return bad


def test_the_unit_and_integration_tiers_mirror_the_source():
    """Inside each of these tiers a module's tests sit where the module does (tests/unit/benchflow/analysis/ for
    plugins/benchflow/analysis/); e2e and stack tests are scenarios of the whole product, by what they run."""
    tiers = [PROJECT_ROOT / "tests" / tier for tier in ("unit", "integration")]
    assert all(len(list(t.rglob("test_*.py"))) > 10 for t in tiers)
    assert [bad for tier in tiers for bad in unmirrored(tier)] == []


def test_the_checks_find_what_they_look_for(tmp_path):
    """Each check catches a planted violation (and the graph finds a planted circle)."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import sys\nfrom benchflow.kinds.serving import text_output\nKIND = 'kernel'\nQ = 'SELECT x FROM runs'\n"
        "T = 'FROM serving_requests WHERE'\nSERVING_COLUMNS = {}\nsys.path.insert(0, 'x')\n"
        "def f():\n" + "    x = 1\n" * MAX_LINES + "    return x\n"
    )
    text = planted.read_text()
    mentions = kind_mentions(planted, text)
    assert any("'kernel'" in h for h in mentions) and any("serving_requests" in h for h in mentions)
    assert any("SERVING_COLUMNS" in h for h in mentions) and any(
        "import benchflow.kinds.serving" in h for h in mentions
    )
    assert any(SQL.match(s) for _, s in strings(planted, text))
    assert path_loading(planted, text) == ["planted.py:7: sys.path", "planted.py:7: sys.path.insert"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    (tmp_path / "src" / "pkg" / "sub").mkdir(parents=True)
    for test in ("test_compose.py", "pkg/sub/test_ok.py", "test_stray.py", "pkg/nowhere/test_x.py", "other/test_y.py"):
        (tmp_path / "tier" / test).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tier" / test).write_text("")
    found = unmirrored(tmp_path / "tier", {"pkg": tmp_path / "src" / "pkg"})
    assert found == ["other/test_y.py", "pkg/nowhere/test_x.py", "test_stray.py"]
    host = PACKAGES["benchhost"] / "planted.py"
    assert wrong_way("benchhost.planted", host, "import pandas\nfrom benchflow import spec\n") == [
        "host/benchhost/planted.py:1: the host core imports pandas (not stdlib)",
        "host/benchhost/planted.py:2: benchhost imports benchflow",
        "host/benchhost/planted.py:2: benchhost imports benchflow.spec",
    ]
    assert long_functions(PROJECT_ROOT / "planted.py", text) == [f"planted.py:8: f ({MAX_LINES + 2} lines)"]
    inner = (
        "from benchflow import spec\ndef g():\n    from benchflow import kinds\n    from benchflow import x  # why\n"
    )
    assert inner_imports(planted, inner) == (
        3,
        [(3, "    from benchflow import kinds"), (4, "    from benchflow import x  # why")],
    )


def test_airflow_loads_only_the_ui_plugin_from_the_plugins_folder():
    """Airflow imports every .py file of its plugins folder as a top-level module named after the file: a library
    module named like one of the standard library's (``bisect.py``, ``json.py``) would shadow it for every later
    import (GX's markdown renderer among them). ``plugins/.airflowignore`` keeps the package out of that walk."""
    from airflow._shared.plugins_manager.plugins_manager import _load_plugins_from_plugin_directory

    before = set(sys.modules)
    plugins, errors = _load_plugins_from_plugin_directory(str(PROJECT_ROOT / "plugins"))
    loaded = set(sys.modules) - before
    assert [p.name for p in plugins] == ["benchflow_ui"] and not errors
    stems = {p.stem for p in LIBRARY.rglob("*.py")}
    assert not (loaded & stems), f"library files imported as top-level modules: {sorted(loaded & stems)}"
    assert "plugins" not in str(getattr(sys.modules.get("bisect"), "__file__", ""))
