"""The admission policies of ``policies/`` as objects, with the gatekeeper's identity filled in.

Why this exists: the policies are plain YAML a person can read and ``kubectl apply``, but
whoever installs them programmatically (``sandbox up``, the chart's tests, the policy
end-to-end tests) needs them as objects and must fill one value: who may remove the
scheduling gate (the gatekeeper's ServiceAccount, or the sandbox's admin user). That
value is a CEL list written into the gate-protection policy (see the comment in
``policies/gate-protection.yaml`` for why it is not a parameter object).

Where the files come from: ``policies/`` at the repository root, reached through the
symbolic link ``gatekeeper/render/policies`` (packaged like the render templates).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import yaml

__all__ = [
    "ALLOWED_USERNAMES_VARIABLE",
    "CLOSED_POOLS",
    "GATEKEEPER_SCOPE",
    "GATE_PROTECTION",
    "HUB_MEMBER_CLAIMS",
    "HUB_POLICY_FILES",
    "LIST_VARIABLES",
    "MEMBER_LABELS",
    "POLICY_FILES",
    "PRIORITY_CLASSES",
    "RECORD_PROTECTION",
    "PoliciesMissing",
    "cel_string_list",
    "load_policies",
    "policies_dir",
    "service_account_username",
]

GATE_PROTECTION = "gate-protection"
RECORD_PROTECTION = "record-protection"
GATEKEEPER_SCOPE = "gatekeeper-scope"
MEMBER_LABELS = "member-labels"
CLOSED_POOLS = "closed-pools"
PRIORITY_CLASSES = "priority-classes"
POLICY_FILES = (
    GATE_PROTECTION,
    "gate-injection",
    "pool-label",
    PRIORITY_CLASSES,
    RECORD_PROTECTION,
    GATEKEEPER_SCOPE,
    MEMBER_LABELS,
    CLOSED_POOLS,
)
"""The policy files (without ``.yaml``): each holds its policies and their bindings."""
HUB_MEMBER_CLAIMS = "hub-member-claims"
HUB_POLICY_FILES = (HUB_MEMBER_CLAIMS,)
"""Policy files for the hub cluster only (the chart with ``role=hub`` installs them, as
``sandbox hub up`` does)."""
ALLOWED_USERNAMES_VARIABLE = "allowedUsernames"
"""The variable (gate protection, record protection) that lists the gatekeeper's identities."""
LIST_VARIABLES = (
    ALLOWED_USERNAMES_VARIABLE,
    "poolAdminUsernames",
    "poolAdminGroups",
    "gatekeeperUsernames",
    "statefulSetControllers",
    "exemptNamespaces",
)
"""The CEL list variables an installer fills (see each policy file's PLACEHOLDER comment)."""


class PoliciesMissing(RuntimeError):
    """The package was installed without its policies."""


def service_account_username(namespace: str, name: str) -> str:
    """The username the API server gives a ServiceAccount's tokens."""
    return f"system:serviceaccount:{namespace}:{name}"


def policies_dir() -> Traversable:
    folder = resources.files("gatekeeper.render").joinpath("policies")
    if not folder.is_dir() or not folder.joinpath(f"{GATE_PROTECTION}.yaml").is_file():
        raise PoliciesMissing(
            f"the admission policies are missing from {folder}: it should be a link to the "
            "repository's policies/ folder (a source checkout) or hold its files (a wheel). "
            "Reinstall lws-gatekeeper, or restore the link with "
            "`ln -s ../../policies gatekeeper/render/policies`."
        )
    return folder


def load_policies(
    names: Iterable[str] = POLICY_FILES,
    *,
    allowed_usernames: Sequence[str] | None = None,
    lists: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """The objects of the named policy files, in file order.

    ``allowed_usernames`` replaces the list of the gatekeeper's identities in the gate- and
    record-protection policies (who may remove the gate, write records and Pool status;
    None keeps the files' default, the chart's default ServiceAccount). ``lists`` fills
    other list variables of LIST_VARIABLES by name (``gatekeeperUsernames``: whom the scope
    policy holds; ``poolAdminUsernames``, ``poolAdminGroups``: who else writes Pools);
    each must occur in a loaded policy.
    """
    folder = policies_dir()
    objects: list[dict[str, Any]] = []
    for name in names:
        if name not in POLICY_FILES + HUB_POLICY_FILES:
            known = ", ".join(POLICY_FILES + HUB_POLICY_FILES)
            raise ValueError(f"unknown policy file {name!r}; known: {known}")
        text = folder.joinpath(f"{name}.yaml").read_text(encoding="utf-8")
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    if allowed_usernames is not None:
        _set_allowed_usernames(objects, allowed_usernames)
    for variable, values in (lists or {}).items():
        if variable not in LIST_VARIABLES or variable == ALLOWED_USERNAMES_VARIABLE:
            raise ValueError(f"lists: unknown variable {variable!r}; known: {', '.join(LIST_VARIABLES[1:])}")
        if any(not v or v != v.strip() for v in values):
            raise ValueError(f"lists[{variable!r}]: names without blanks, got {list(values)!r}")
        if not _set_variable(objects, variable, cel_string_list(values)):
            raise ValueError(f"lists[{variable!r}] given, but no loaded policy has that variable")
    return objects


def _set_variable(objects: list[dict[str, Any]], name: str, expression: str) -> bool:
    found = False
    for obj in objects:
        if obj.get("kind") != "ValidatingAdmissionPolicy":
            continue
        for variable in obj.get("spec", {}).get("variables", []):
            if variable.get("name") == name:
                variable["expression"] = expression
                found = True
    return found


def cel_string_list(values: Sequence[str]) -> str:
    """A CEL list literal of strings: ``['a', 'b']`` (backslashes and quotes escaped)."""
    quoted = ("'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'" for value in values)
    return "[" + ", ".join(quoted) + "]"


def _set_allowed_usernames(objects: list[dict[str, Any]], usernames: Sequence[str]) -> None:
    if not usernames or any(not u or u != u.strip() for u in usernames):
        raise ValueError(
            f"allowed_usernames: give at least one username, without blanks, got {list(usernames)!r}"
        )
    if not _set_variable(objects, ALLOWED_USERNAMES_VARIABLE, cel_string_list(usernames)):
        raise ValueError(
            f"allowed_usernames given, but no ValidatingAdmissionPolicy has a variable "
            f"{ALLOWED_USERNAMES_VARIABLE!r} (include {GATE_PROTECTION!r} in names)"
        )
