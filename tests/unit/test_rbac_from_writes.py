"""Every write a backend's code can plan is one the chart's ClusterRole lets it make.

Why this exists: the chart's RBAC is written by hand per backend, and the writes are planned in
the pure core (``Write(Op.DELETE, "pods", ...)``). When the two drift apart, the gatekeeper as the
chart installs it is refused a write that the sandbox's admin identity makes without a word: a
``pools`` give-back (``spec.admissionTimeout``) deleted no pod under the chart's RBAC while every
test run as the admin passed. So the writes are read from the code itself: every ``Write(...)``
call in a backend's folder and in the shared ``core.writes`` (what every backend's pass uses),
and every call of ``release_writes(RESOURCE, ...)`` there, with the resource resolved from the
module's own names; each becomes a verb on a resource, and the chart rendered for that backend
must grant it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest
from test_chart import Render, for_users, template

from gatekeeper.core.backends import BACKENDS
from gatekeeper.core.writes.plan import Op
from gatekeeper_lab.sandbox import build

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / "gatekeeper/core/writes"

VERB: dict[Op, tuple[str, str]] = {
    Op.CREATE: ("create", ""),
    Op.DELETE: ("delete", ""),
    Op.JSON_PATCH: ("patch", ""),
    Op.MERGE_STATUS: ("patch", "/status"),
    Op.APPLY_STATUS: ("patch", "/status"),
}
"""What the API server checks for each kind of write: the verb, and the subresource."""

Need = tuple[str, str]
"""(resource, verb), e.g. ("pods", "delete"), ("groupadmissions/status", "patch")."""


def _module(path: Path) -> ModuleType:
    dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return importlib.import_module(dotted.removesuffix(".__init__"))


def _resources(node: ast.expr, module: ModuleType, loops: dict[str, list[ast.expr]]) -> set[str] | None:
    """A string literal, a module-level name bound to a string (an imported constant), or a
    loop variable over a literal tuple of such (``for plural, objs in ((RECORD_PLURAL, ...), ...)``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name) and node.id in loops:
        found = [_resources(each, module, {}) for each in loops[node.id]]
        return set().union(*found) if found and all(f is not None for f in found) else None  # type: ignore[arg-type]
    if isinstance(node, ast.Name):
        value = getattr(module, node.id, None)
        return {value} if isinstance(value, str) else None
    return None


def _loops(tree: ast.AST) -> dict[str, list[ast.expr]]:
    """Loop variable -> the literal values it takes, for loops over a literal tuple of tuples."""
    out: dict[str, list[ast.expr]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.For) or not isinstance(node.iter, ast.Tuple | ast.List):
            continue
        rows = node.iter.elts
        if isinstance(node.target, ast.Name):
            out[node.target.id] = list(rows)
        elif isinstance(node.target, ast.Tuple) and all(isinstance(r, ast.Tuple) for r in rows):
            for i, name in enumerate(node.target.elts):
                if isinstance(name, ast.Name):
                    out[name.id] = [r.elts[i] for r in rows if isinstance(r, ast.Tuple) and i < len(r.elts)]
    return out


def _op(node: ast.expr) -> Op | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Op":
        return Op[node.attr]
    return None


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def writes_in(path: Path, module: ModuleType | None = None) -> tuple[set[Need], list[str]]:
    """The (resource, verb) pairs the module's writes need, and the writes it cannot resolve."""
    module = module or _module(path)
    needs: set[Need] = set()
    unresolved: list[str] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    loops = _loops(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        where = f"{path.name}:{node.lineno}"
        if _callee(node) == "Write":
            op = _op(node.args[0])
            if op is None:
                unresolved.append(where)
                continue
            if op is Op.EVENT:
                needs.add(("events", "create"))
                continue
            resources = _resources(node.args[1], module, loops)
            if resources is None:
                unresolved.append(where)
                continue
            verb, sub = VERB[op]
            needs.update((resource + sub, verb) for resource in resources)
        elif _callee(node) == "release_writes":
            resources = _resources(node.args[0], module, loops)
            if resources is None:
                unresolved.append(where)
                continue
            needs.update((resource, verb) for resource in resources for verb in ("patch", "delete"))
    return needs, unresolved


def backend_needs(name: str) -> tuple[set[Need], list[str]]:
    needs: set[Need] = set()
    unresolved: list[str] = []
    for path in sorted((ROOT / "gatekeeper/core/backends" / name).rglob("*.py")):
        got, lost = writes_in(path)
        needs |= got
        unresolved += lost
    for path in sorted(SHARED.glob("*.py")):
        got, _ = writes_in(path)  # helpers take their resource as a parameter: resolved at their callers
        needs |= got
    return needs, unresolved


@pytest.fixture(scope="module")
def render() -> Render:
    """``helm template`` of the chart (the pinned helm, built once, then from the cache)."""
    helm = build.build_all(["helm"])["helm"].bin / "helm"
    return lambda *args, **kw: template(helm, *args, **kw)


def granted(rendered: list[dict[str, object]]) -> set[Need]:
    role = next(o for o in rendered if o["kind"] == "ClusterRole" and not for_users(o))  # type: ignore[arg-type]
    out: set[Need] = set()
    for rule in role["rules"]:  # type: ignore[attr-defined]
        if rule.get("resourceNames"):
            continue  # a rule for named objects grants no write on a pass's objects
        out.update((res, verb) for res in rule["resources"] for verb in rule["verbs"])
    return out


@pytest.mark.parametrize("name", BACKENDS.names)
def test_the_chart_grants_every_write_a_backend_plans(name: str, render: Render) -> None:
    needs, unresolved = backend_needs(name)
    assert unresolved == [], f"writes whose resource the check cannot read (name a constant): {unresolved}"
    missing = needs - granted(render("--set", f"backend={name}"))
    assert missing == set(), f"the chart's ClusterRole for backend {name} lacks {sorted(missing)}"


def test_the_writes_of_each_backend_are_found() -> None:
    """The reader sees what each backend is known to write (a reader that finds nothing passes all)."""
    pools, _ = backend_needs("pools")
    assert {("pods", "delete"), ("pods", "patch"), ("groupadmissions", "create")} <= pools
    assert {("pools/status", "patch"), ("groupadmissions/status", "patch"), ("events", "create")} <= pools
    kueue, _ = backend_needs("kueue")
    assert {("workloads", "create"), ("workloads/status", "patch"), ("workloads", "delete")} <= kueue
    assert {("workloads", "patch"), ("pods", "delete")} <= kueue
    volcano, _ = backend_needs("volcano")
    assert {("podgroups", "create"), ("podgroups", "delete")} <= volcano


def test_a_write_the_chart_does_not_grant_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, render: Render
) -> None:
    """The chart for pools grants no delete of workloads: a plan that asked for one is caught."""
    (tmp_path / "rbac_probe.py").write_text(
        "from gatekeeper.core.kube.keys import RECORD_PLURAL\n"
        "from gatekeeper.core.writes.plan import Op, Write\n\n"
        'A = Write(Op.DELETE, "workloads", "n", "x", None)\n'
        "B = Write(Op.MERGE_STATUS, RECORD_PLURAL, 'n', 'x', None)\n"
        "def c(who: str) -> Write:\n    return Write(Op.CREATE, who, 'n', 'x', None)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    needs, unresolved = writes_in(tmp_path / "rbac_probe.py", importlib.import_module("rbac_probe"))
    assert needs == {("workloads", "delete"), ("groupadmissions/status", "patch")}
    assert unresolved == ["rbac_probe.py:7"]
    assert needs - granted(render("--set", "backend=pools")) == {("workloads", "delete")}
