"""The sandbox's layout rules that no linter checks: every module says why it exists, no private imports.

Import-linter keeps the sandbox's modules importing downwards (``pyproject.toml``); ruff's
PLC2701 does not flag a private name imported from the same top-level package, so this
checks that no sandbox module imports another module's ``_name``.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import gatekeeper.sandbox as sandbox

MODULES = sorted(m.name for m in pkgutil.iter_modules(sandbox.__path__, prefix="gatekeeper.sandbox."))


@pytest.mark.parametrize("module", ["gatekeeper.sandbox", *MODULES])
def test_every_sandbox_module_says_why_it_exists(module: str) -> None:
    doc = importlib.import_module(module).__doc__
    assert doc is not None
    assert "Why this exists" in doc


@pytest.mark.parametrize("module", MODULES)
def test_no_sandbox_module_imports_private_names(module: str) -> None:
    path = Path(importlib.import_module(module).__file__ or "")
    private = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert not private
