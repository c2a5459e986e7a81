"""Rules of the layout that no linter checks for us.

Ruff's PLC2701 refuses private names imported from another package, but lets the modules
of one package share them; the backends borrowing each other's private helpers is exactly
what made the core a tangle once. So: no module of ours imports an underscore name from
another module of ours, no module grows past what one person reads in one sitting, and no
function past what one screen shows. The functions already past it are listed with their
length: each may shrink, none may grow, and a new one may not join them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for d in ("gatekeeper", "lab", "benchmarks", "tests") for p in (ROOT / d).rglob("*.py"))
PACKAGE = sorted(p for d in ("gatekeeper", "lab/gatekeeper_lab") for p in (ROOT / d).rglob("*.py"))
MAX_LINES = 500
MAX_FUNCTION_LINES = 90
"""A function's lines, its docstring and comments included, from ``def`` to its last line."""
OVERSIZED = {
    "lab/gatekeeper_lab/sandbox/cluster.py:up": 111,
}
"""Functions longer than MAX_FUNCTION_LINES, with the most lines each may have: to be cut into
named stages, never to grow."""


def _private_imports(path: Path) -> list[str]:
    found = []
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gatekeeper"):
            mod_private = any(part.startswith("_") and part != "__main__" for part in node.module.split("."))
            for alias in node.names:
                if mod_private or (alias.name.startswith("_") and not alias.name.startswith("__")):
                    found.append(f"{where}:{node.lineno}: {node.module}.{alias.name}")
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_is_imported_from_another_module(path: Path) -> None:
    assert _private_imports(path) == []


def test_the_check_sees_a_private_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from gatekeeper.core.kube.objects import _hidden\nfrom gatekeeper.core._x import y\n")
    assert len(_private_imports(probe)) == 2


@pytest.mark.parametrize("path", PACKAGE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_500_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= MAX_LINES


def _functions(path: Path) -> dict[str, int]:
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return {
        f"{where}:{node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def test_no_function_is_over_its_limit() -> None:
    lengths = {name: n for path in PACKAGE for name, n in _functions(path).items()}
    over = {name: n for name, n in lengths.items() if n > OVERSIZED.get(name, MAX_FUNCTION_LINES)}
    assert over == {}, f"over {MAX_FUNCTION_LINES} lines (or over their listed length): {over}"
    gone = {name for name in OVERSIZED if lengths.get(name, 0) <= MAX_FUNCTION_LINES}
    assert gone == set(), f"within the limit now: take them out of OVERSIZED: {gone}"


def test_the_function_check_sees_a_long_function(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def long():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert _functions(probe) == {f"{probe}:long": MAX_FUNCTION_LINES + 1}
