"""Devices a pod asks through Dynamic Resource Allocation claims, which no quota here counts.

Why this exists: a pod may ask its accelerators through DRA, a ``spec.resourceClaims`` entry
(from a ResourceClaimTemplate, or a ResourceClaim by name) that a container names in its
``resources.claims``, instead of an extended resource such as ``nvidia.com/gpu``. Such a pod
asks no extended resource, so its group would weigh nothing against a quota of GPUs and could
be admitted any number of times. What a claim allocates is known only from objects the
tenant owns (its template, or a claim shared by several pods) and a DeviceClass, so the
gatekeeper does not guess it: a group whose templates ask through claims is refused
(``core.model.demand``), and a pod of an admitted group that asks through claims does not go
through on that admission (``core.admission.conformance``). Kubernetes counts the other form:
a DeviceClass with ``spec.extendedResourceName`` lets a pod ask ``nvidia.com/gpu: 1`` in its
container resources, the scheduler allocating a device of that class through DRA, and that
request is counted like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.core.kube.objects import as_list, as_map

__all__ = ["asked_claims", "not_counted"]

#: The most claim names a message lists.
_SHOWN = 5


def asked_claims(pod_spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the DRA claims a pod spec asks (its ``spec.resourceClaims``, and any a
    container or init container names in ``resources.claims``), sorted; () when none."""
    names = {str(as_map(c).get("name") or "?") for c in as_list(pod_spec.get("resourceClaims"))}
    for key in ("containers", "initContainers"):
        for container in as_list(pod_spec.get(key)):
            resources = as_map(as_map(container).get("resources"))
            names.update(str(as_map(c).get("name") or "?") for c in as_list(resources.get("claims")))
    return tuple(sorted(names))


def not_counted(claims: tuple[str, ...]) -> str:
    """Why a pod that asks ``claims`` cannot be counted, and what to ask instead."""
    shown = ", ".join(claims[:_SHOWN]) + (f" and {len(claims) - _SHOWN} more" if len(claims) > _SHOWN else "")
    return (
        f"spec.resourceClaims: devices asked through DRA claims ({shown}) cannot be counted against "
        "a pool's quota; ask them as an extended resource in the containers' resources (a "
        "DeviceClass with spec.extendedResourceName serves it through DRA, and it is counted)"
    )
