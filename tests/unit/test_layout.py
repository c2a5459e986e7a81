"""Rules of the layout that no linter checks for us.

Ruff's PLC2701 refuses private names imported from another package, but lets the modules
of one package share them; the backends borrowing each other's private helpers is exactly
what made the core a tangle once. So: no module of ours imports an underscore name from
another module of ours, and no module grows past what one person reads in one sitting.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for d in ("gatekeeper", "lab", "benchmarks", "tests") for p in (ROOT / d).rglob("*.py"))
PACKAGE = sorted(p for d in ("gatekeeper", "lab/gatekeeper_lab") for p in (ROOT / d).rglob("*.py"))
MAX_LINES = 500


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
    probe.write_text("from gatekeeper.core.objects import _hidden\nfrom gatekeeper.core._x import y\n")
    assert len(_private_imports(probe)) == 2


@pytest.mark.parametrize("path", PACKAGE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_500_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= MAX_LINES
