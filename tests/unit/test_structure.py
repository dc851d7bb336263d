"""The structure the README promises, checked on the code itself: nothing outside ``kinds/`` names a result kind,
and nothing outside ``warehouse/`` holds SQL text (the kinds' DDL lives in ``include/sql/``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from benchflow import kinds
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.unit

LIBRARY = PROJECT_ROOT / "plugins" / "benchflow"
SQL = re.compile(
    r"^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|CREATE\s+(TABLE|VIEW|SCHEMA|DATABASE)\s|"
    r"DROP\s+(TABLE|VIEW)\s|ALTER\s+TABLE\s|COPY\s|WITH\s+\w+\s+AS\s)",
)


def sources(*, outside: str) -> list[Path]:
    files = [
        *LIBRARY.rglob("*.py"),
        *(PROJECT_ROOT / "dags").glob("*.py"),
        PROJECT_ROOT / "plugins" / "benchflow_ui_plugin.py",
    ]
    return sorted(p for p in files if outside not in p.relative_to(PROJECT_ROOT).parts)


def strings(path: Path) -> list[tuple[int, str]]:
    """Every string constant of a module (f-string parts too), with its line; docstrings included."""
    tree = ast.parse(path.read_text())
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def test_nothing_outside_kinds_names_a_kind():
    names = set(kinds.names())
    assert names >= {"kernel", "serving", "generic"}  # the test would pass vacuously without them
    hits = []
    for path in sources(outside="kinds"):
        where = path.relative_to(PROJECT_ROOT)
        hits += [f"{where}:{line}: {text!r}" for line, text in strings(path) if text in names]
        hits += [
            f"{where}:{line}: import {name}"
            for line, name in imports(path)
            if re.match(rf"benchflow\.kinds\.({'|'.join(names)})\b", name)
        ]
    assert not hits, "result kinds named outside plugins/benchflow/kinds/:\n" + "\n".join(hits)


def test_the_checks_of_this_module_find_what_they_look_for(tmp_path):
    """Both scans catch a planted kind name, kind import and query (a check that cannot fail is no check)."""
    planted = tmp_path / "planted.py"
    planted.write_text('from benchflow.kinds.serving import log\nKIND = "kernel"\nQ = "SELECT x FROM runs"\n')
    assert (2, "kernel") in strings(planted) and (1, "benchflow.kinds.serving.log") in imports(planted)
    assert any(SQL.match(text) for _, text in strings(planted))


def test_no_sql_outside_the_warehouse():
    hits = []
    for path in sources(outside="warehouse"):
        where = path.relative_to(PROJECT_ROOT)
        hits += [f"{where}:{line}: {text[:80]!r}" for line, text in strings(path) if SQL.match(text)]
    assert not hits, "SQL text outside plugins/benchflow/warehouse/:\n" + "\n".join(hits)


def test_airflow_loads_only_the_ui_plugin_from_the_plugins_folder():
    """Airflow imports every .py file of its plugins folder as a top-level module named after the file: the
    library's ``analysis/bisect.py`` would become ``bisect`` and shadow the standard library's for every later
    import (GX's markdown renderer among them). ``plugins/.airflowignore`` keeps the package out of that walk."""
    import sys

    from airflow._shared.plugins_manager.plugins_manager import _load_plugins_from_plugin_directory

    before = set(sys.modules)
    plugins, errors = _load_plugins_from_plugin_directory(str(PROJECT_ROOT / "plugins"))
    loaded = set(sys.modules) - before
    assert [p.name for p in plugins] == ["benchflow_ui"] and not errors
    stems = {p.stem for p in LIBRARY.rglob("*.py")}
    assert not (loaded & stems), f"library files imported as top-level modules: {sorted(loaded & stems)}"
    assert "plugins" not in str(getattr(sys.modules.get("bisect"), "__file__", ""))
