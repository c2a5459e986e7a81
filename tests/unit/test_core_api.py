"""The decision core's surface and its purity rules: rooms of modules, each saying why it exists."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import types
from pathlib import Path

import pytest

import gatekeeper.core as core

MODULES = sorted(m.name for m in pkgutil.walk_packages(core.__path__, prefix="gatekeeper.core."))
FORBIDDEN = {
    "kr8s",
    "kubernetes",
    "httpx",
    "aiohttp",
    "requests",
    "socket",
    "subprocess",
    "asyncio",
    "gatekeeper_lab.sandbox",
}


def test_the_core_package_holds_no_names_of_its_own() -> None:
    """Each name is imported from the room that defines it, so a reader finds it in one place."""
    public = {
        name
        for name, value in vars(core).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType) and name != "annotations"
    }
    assert public == set()


def test_the_rooms_are_there() -> None:
    assert {"gatekeeper.core.kube", "gatekeeper.core.model", "gatekeeper.core.admission"} <= set(MODULES)
    assert len(MODULES) > 60


@pytest.mark.parametrize("module", ["gatekeeper.core", *MODULES])
def test_every_module_says_why_it_exists(module: str) -> None:
    doc = importlib.import_module(module).__doc__
    assert doc is not None
    assert len(doc.strip()) > 40


@pytest.mark.parametrize("module", MODULES)
def test_no_kubernetes_io_in_the_core(module: str) -> None:
    path = Path(importlib.import_module(module).__file__ or "")
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    bad = {name for name in imported for root in FORBIDDEN if name == root or name.startswith(root + ".")}
    assert not bad


def test_user_facing_names_match_the_design() -> None:
    from gatekeeper.core.kube import keys as core

    assert core.SCHEDULING_GATE == "lws-gatekeeper.io/admission"
    assert core.POOL_LABEL == "lws-gatekeeper.io/pool"
    assert (core.API_GROUP, core.API_VERSION) == ("lws-gatekeeper.io", "v1alpha1")
    assert core.GATEKEEPER_API_VERSION == "lws-gatekeeper.io/v1alpha1"
    assert core.POOL_KIND == "Pool"
    assert core.LWS_API_VERSION == "leaderworkerset.x-k8s.io/v1"
