"""The sandbox's layout rule that no linter checks: every module of it says why it exists.

Import-linter keeps the sandbox's modules importing downwards (``pyproject.toml``).
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import gatekeeper_lab.sandbox as sandbox

MODULES = sorted(m.name for m in pkgutil.iter_modules(sandbox.__path__, prefix="gatekeeper_lab.sandbox."))


@pytest.mark.parametrize("module", ["gatekeeper_lab.sandbox", *MODULES])
def test_every_sandbox_module_says_why_it_exists(module: str) -> None:
    doc = importlib.import_module(module).__doc__
    assert doc is not None
    assert "Why this exists" in doc
