"""Devices a pod asks through Dynamic Resource Allocation claims, counted as the resource their
DeviceClass names.

Why this exists: a pod may ask its accelerators through DRA, a ``spec.resourceClaims`` entry
made from a ResourceClaimTemplate and named in a container's ``resources.claims``, instead of
an extended resource such as ``nvidia.com/gpu``. Such a pod asks no extended resource, so
unless its claims are counted its group would weigh nothing against a quota of GPUs. A claim
is counted by its DeviceClass's ``spec.extendedResourceName`` (Kubernetes' own name for what
a device of the class is, which the scheduler also serves extended-resource requests by):
each request of ``count`` devices of such a class adds ``count`` of that resource to the pod.
What cannot be counted is refused with the reason, never taken as nothing:

* a claim shared by name (``resourceClaimName``): several pods, of any group, use one claim,
  so it is no group's own;
* a ResourceClaimTemplate that does not exist (yet), or cannot be read;
* a request of ``allocationMode: All`` (as many devices as there are), or of
  ``firstAvailable`` alternatives (which one is allocated is the scheduler's choice);
* a DeviceClass that does not exist, or names no ``extendedResourceName``.

The demand counts a template's claims from its ResourceClaimTemplates (``template_counts``,
for ``core.model.demand``). A pod that is made counts its real claims, generated from the
template when the pod was created and immutable since (``pod_counts``, for
``core.admission.conformance``): a tenant who swaps the template after the admission makes
pods whose claims ask more, and those are judged by what they ask.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.core.kube.objects import as_list, as_map, meta

__all__ = [
    "MAX_DEVICES_PER_REQUEST",
    "NO_CLAIMS",
    "ClaimBook",
    "Unmade",
    "asked_claims",
    "claim_counts",
    "made_claims",
    "pod_counts",
    "read_claim_book",
    "template_counts",
]

#: The most devices one request of a claim may ask: a larger count is refused.
MAX_DEVICES_PER_REQUEST = 1024


@dataclass(frozen=True)
class ClaimBook:
    """What the cluster says DRA claims ask: each DeviceClass's counted resource ("" when it
    names none), and the ResourceClaimTemplates and ResourceClaims by (namespace, name)."""

    classes: Mapping[str, str] = field(default_factory=dict)
    templates: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    claims: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    unread: str = ""
    """Why the DRA objects could not all be read ("" when they were): a claim is then refused
    saying so, not for a template or class that may well exist."""

    def template_key(self, namespace: str, names: Iterable[str]) -> tuple[Any, ...]:
        """What a demand from templates naming ``names`` in ``namespace`` depends on: each
        template's uid and resourceVersion (None when missing), and the classes."""
        if not self.templates and not self.classes:
            return (self.unread,)
        found = []
        for name in sorted(set(names)):
            m = meta(self.templates.get((namespace, name), {}))
            found.append((name, m.get("uid"), m.get("resourceVersion")))
        return (tuple(found), tuple(sorted(self.classes.items())), self.unread)


NO_CLAIMS = ClaimBook()
"""No DRA objects read: every claim is refused as not counted."""


def read_claim_book(
    device_classes: Iterable[Mapping[str, Any]],
    templates: Iterable[Mapping[str, Any]] = (),
    claims: Iterable[Mapping[str, Any]] = (),
    *,
    unread: str = "",
) -> ClaimBook:
    """A ``ClaimBook`` from DeviceClass, ResourceClaimTemplate and ResourceClaim objects."""

    def keyed(objs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
        return {(str(meta(o).get("namespace") or ""), str(meta(o).get("name") or "")): o for o in objs}

    classes = {
        str(meta(c).get("name") or ""): str(as_map(c.get("spec")).get("extendedResourceName") or "")
        for c in device_classes
    }
    return ClaimBook(classes, keyed(templates), keyed(claims), unread)


class Unmade(Exception):
    """A pod's claim is not made (or not read) yet: nothing can be said of it until it is."""


def asked_claims(pod_spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the DRA claims a pod spec asks (its ``spec.resourceClaims``, and any a
    container or init container names in ``resources.claims``), sorted; () when none."""
    names = {str(as_map(c).get("name") or "?") for c in as_list(pod_spec.get("resourceClaims"))}
    for key in ("containers", "initContainers"):
        for container in as_list(pod_spec.get(key)):
            resources = as_map(as_map(container).get("resources"))
            names.update(str(as_map(c).get("name") or "?") for c in as_list(resources.get("claims")))
    return tuple(sorted(names))


def claim_counts(claim_spec: Mapping[str, Any], classes: Mapping[str, str], where: str) -> dict[str, int]:
    """What one ResourceClaim spec asks, as counted resources. Raises ValueError naming
    ``where`` and why when a request cannot be counted."""
    counts: dict[str, int] = {}
    for i, request in enumerate(as_list(as_map(claim_spec.get("devices")).get("requests"))):
        request = as_map(request)
        at = f"{where}.devices.requests[{i}]"
        if "firstAvailable" in request:
            raise ValueError(
                f"{at}.firstAvailable: which alternative is allocated is the scheduler's choice, "
                "so it cannot be counted; ask one DeviceClass with exactly"
            )
        exactly = as_map(request.get("exactly"))
        mode = exactly.get("allocationMode") or "ExactCount"
        if mode != "ExactCount":
            raise ValueError(
                f"{at}.exactly.allocationMode: {mode} asks as many devices as there are, which "
                "cannot be counted; ask an ExactCount"
            )
        count = exactly.get("count", 1)
        if type(count) is not int or not 1 <= count <= MAX_DEVICES_PER_REQUEST:
            raise ValueError(f"{at}.exactly.count: must be 1 to {MAX_DEVICES_PER_REQUEST}, got {count!r}")
        name = str(exactly.get("deviceClassName") or "")
        if name not in classes:
            raise ValueError(f"{at}.exactly.deviceClassName: DeviceClass {name or '(none)'} does not exist")
        resource = classes[name]
        if not resource:
            raise ValueError(
                f"{at}: DeviceClass {name} names no spec.extendedResourceName, so what its devices "
                "are cannot be counted against a quota; an admin sets it (e.g. nvidia.com/gpu)"
            )
        counts[resource] = counts.get(resource, 0) + count
    return counts


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for resource, amount in more.items():
        into[resource] = into.get(resource, 0) + amount


def _shared(entry: Mapping[str, Any], at: str) -> ValueError:
    return ValueError(
        f"{at}.resourceClaimName: claim {entry.get('resourceClaimName')} is shared by name, so it is "
        "no group's own and cannot be counted; make each pod's claim from a ResourceClaimTemplate"
    )


def template_counts(
    namespace: str, pod_spec: Mapping[str, Any], book: ClaimBook, where: str
) -> dict[str, int]:
    """What a pod made from ``pod_spec`` in ``namespace`` asks through DRA claims, from the
    ResourceClaimTemplates it names; {} when it asks none. Raises ValueError with why."""
    counts: dict[str, int] = {}
    entries = as_list(pod_spec.get("resourceClaims"))
    if entries and book.unread:
        raise ValueError(f"{where}.resourceClaims: what DRA claims ask cannot be read now ({book.unread})")
    if not entries and asked_claims(pod_spec):
        raise ValueError(f"{where}.resourceClaims: a container names a claim the pod does not list")
    for i, entry in enumerate(entries):
        entry, at = as_map(entry), f"{where}.resourceClaims[{i}]"
        if entry.get("resourceClaimName"):
            raise _shared(entry, at)
        name = str(entry.get("resourceClaimTemplateName") or "")
        template = book.templates.get((namespace, name))
        if template is None:
            raise ValueError(
                f"{at}.resourceClaimTemplateName: ResourceClaimTemplate {name or '(none)'} is not "
                f"in namespace {namespace}"
            )
        claim_spec = as_map(as_map(template.get("spec")).get("spec"))
        _add(counts, claim_counts(claim_spec, book.classes, f"ResourceClaimTemplate {name}: spec.spec"))
    return counts


def made_claims(pod: Mapping[str, Any]) -> dict[str, str | None]:
    """A pod's ``status.resourceClaimStatuses``: each claim's name in the pod, and the name of
    the claim made for it (None: Kubernetes needed none)."""
    made: dict[str, str | None] = {}
    for s in as_list(as_map(pod.get("status")).get("resourceClaimStatuses")):
        claim = as_map(s).get("resourceClaimName")
        made[str(as_map(s).get("name") or "")] = str(claim) if claim else None
    return made


def pod_counts(
    namespace: str, spec: Mapping[str, Any], made: Mapping[str, str | None], book: ClaimBook
) -> dict[str, int]:
    """What a made pod (its ``spec``) asks through its DRA claims, from the claims made for it
    (``made``, as ``made_claims`` reads them); {} when it asks none. Raises ``Unmade`` while a
    claim is not made or not read yet, ValueError when one cannot be counted."""
    counts: dict[str, int] = {}
    for i, entry in enumerate(as_list(spec.get("resourceClaims"))):
        entry, at = as_map(entry), f"spec.resourceClaims[{i}]"
        if entry.get("resourceClaimName"):
            raise _shared(entry, at)
        name = str(entry.get("name") or "")
        if name in made and made[name] is None:
            continue  # Kubernetes made no claim: none was needed
        claim_name = made.get(name)
        claim = book.claims.get((namespace, str(claim_name))) if claim_name else None
        if claim is None:
            raise Unmade(f"claim {name} is not made yet")
        _add(
            counts, claim_counts(as_map(claim.get("spec")), book.classes, f"ResourceClaim {claim_name}: spec")
        )
    return counts
