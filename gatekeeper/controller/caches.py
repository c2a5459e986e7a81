"""The informers of one leadership term, one per kind and selector, shared by every loop.

Why this exists: the ``pools`` backend and the node-fit check both watch Nodes and bound
Pods (each pod in one watch: ``bound_pods``); the ``kueue`` backend and the node-fit check
both watch Workloads and flavors. One informer per (kind, selectors) serves them all, and
what is parsed from a kind (nodes, PriorityClass values) is parsed once per change of that
kind, not once per loop and pass. A ``Caches`` is made afresh for each term: a replica that
wins the Lease back starts from new lists, never from the caches of its last term.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper.controller import resources as r
from gatekeeper.controller.credentials import Credentials
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.resources import Resource
from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper.core.model.claims import ClaimBook, read_claim_book
from gatekeeper.core.model.daemons import daemon_set_view
from gatekeeper.core.model.devices import (
    DeviceRoom,
    claim_view,
    class_view,
    device_room,
    slice_view,
    template_view,
)
from gatekeeper.core.model.nodes import Node, RequestsMemo, bound_pod_view, parse_node
from gatekeeper.core.model.owned import statefulset_view

__all__ = ["BOUND_PODS", "OTHER_PODS", "Caches"]

log = logging.getLogger("gatekeeper.caches")

BOUND_PODS = "spec.nodeName!="
"""Field selector of every pod bound to a node, anyone's: node room is physical."""

OTHER_PODS = f"!{POOL_LABEL}"
"""Label selector of the pods not of an opted-in LWS. The bound ones are watched with it
(``Caches.bound_pods``): the opted-in pods' own watch brings the others, so that no pod
arrives twice (at a scale-up, the pods are most of what the gatekeeper reads)."""


def _view_of(
    resource: Resource, field_selector: str | None
) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """What an informer keeps of each object: only what the decisions read, for the kinds
    whose objects anyone can make large (bound pods, StatefulSets); the whole object else."""
    if resource == r.PODS and field_selector == BOUND_PODS:
        return bound_pod_view
    if resource == r.STATEFULSETS:
        return statefulset_view
    if resource == r.DAEMON_SETS:
        return daemon_set_view
    return _DRA_VIEWS.get(resource)


_DRA_VIEWS = {
    r.DEVICE_CLASSES: class_view,
    r.RESOURCE_SLICES: slice_view,
    r.RESOURCE_CLAIM_TEMPLATES: template_view,
    r.RESOURCE_CLAIMS: claim_view,
}
"""What is kept of the DRA kinds (``core.model.devices``): a tenant writes templates and
claims, so only the fields counted are, whatever their size."""


class Caches:
    """Informers by (resource, label selector, field selector), made on first use."""

    def __init__(self, api: kr8s.asyncio.Api | None, credentials: Credentials | None = None) -> None:
        self.api = api
        self.credentials = credentials or Credentials(api)
        self._informers: dict[tuple[str, str, str, str, str], Informer] = {}
        self._nodes: tuple[int, list[Node]] = (-1, [])
        self._parsed_nodes: dict[str, tuple[Mapping[str, Any], Node | None]] = {}
        self._priorities: tuple[int, dict[str, int]] = (-1, {})
        self._never: tuple[int, frozenset[str]] = (-1, frozenset())
        self._bound: tuple[tuple[int, int], list[dict[str, Any]]] = ((-1, -1), [])
        self._dra: tuple[tuple[int, ...], ClaimBook, DeviceRoom] = ((), ClaimBook(), DeviceRoom())
        self.requests = RequestsMemo()
        """Requests of bound pods by (uid, resourceVersion), for every loop of the term."""

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_change: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> Informer:
        """The informer of ``resource`` with these selectors; ``on_change`` joins its listeners.

        The bound pods (``BOUND_PODS``, every pod on a node, anyone's: most of a big
        cluster's objects) are cached as ``bound_pod_view``, and StatefulSets as
        ``statefulset_view``: only what the decisions read.
        """
        key = (resource.plural, resource.version, namespace or "", label_selector or "", field_selector or "")
        inf = self._informers.get(key)
        if inf is None:
            inf = Informer(
                self.api,  # type: ignore[arg-type]  # None: unit tests, or a hub not yet connected (hub_link)
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                credentials=self.credentials,
                view=_view_of(resource, field_selector),
            )
            self._informers[key] = inf
        if on_change is not None:
            inf.listeners.append(on_change)
        return inf

    @property
    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    async def run(self) -> None:
        """Run every informer made so far until cancelled."""
        async with anyio.create_task_group() as tg:
            for inf in self._informers.values():
                tg.start_soon(inf.run)

    def nodes(self) -> list[Node]:
        """The Nodes, the list made once per change of the Node informer, each Node parsed
        once per change of its own object (a pass during a scale-up reads hundreds of nodes
        of which a few changed); unreadable ones are skipped, said once per change."""
        inf = self.informer(r.NODES)
        if self._nodes[0] != inf.changes:
            parsed: dict[str, tuple[Mapping[str, Any], Node | None]] = {}
            for obj in inf.values():
                name = str(obj.get("metadata", {}).get("name"))
                seen = self._parsed_nodes.get(name)
                if seen is not None and seen[0] is obj:  # the informer keeps an object until it changes
                    parsed[name] = seen
                    continue
                try:
                    parsed[name] = (obj, parse_node(obj))
                except (ValueError, ArithmeticError) as exc:
                    log.warning("node %s ignored: %s", name, exc)
                    parsed[name] = (obj, None)
            self._parsed_nodes = parsed
            self._nodes = (inf.changes, [node for _, node in parsed.values() if node is not None])
        return self._nodes[1]

    def bound_informers(self) -> tuple[Informer, Informer]:
        """The two pod watches that together see every pod on a node, each pod once: the
        opted-in pods (``POOL_LABEL``, whole: the groups read them) and the other bound pods
        (``OTHER_PODS`` and ``BOUND_PODS``, kept as ``bound_pod_view``)."""
        return (
            self.informer(r.PODS, label_selector=POOL_LABEL),
            self.informer(r.PODS, label_selector=OTHER_PODS, field_selector=BOUND_PODS),
        )

    def bound_pods(self) -> list[dict[str, Any]]:
        """Every pod on a node, anyone's, one object per pod (by UID), made once per change of
        the two watches. A pod whose pool label is taken off leaves one watch and comes into the
        other; while both still hold it, it is counted once."""
        opted, others = self.bound_informers()
        changes = (opted.changes, others.changes)
        if self._bound[0] != changes:
            pods = [p for p in opted.values() if p.get("spec", {}).get("nodeName")]
            seen = {p.get("metadata", {}).get("uid") for p in pods}
            pods.extend(p for p in others.values() if p.get("metadata", {}).get("uid") not in seen)
            self._bound = (changes, pods)
        return self._bound[1]

    def dra_informers(self) -> list[Informer]:
        """The DRA kinds' informers: DeviceClasses, ResourceSlices, ResourceClaimTemplates and
        ResourceClaims. Side informers: a cluster that does not serve ``resource.k8s.io/v1``
        must not stop every pool; its claims are then refused, saying so."""
        return [self.informer(kind) for kind in _DRA_VIEWS]

    def dra(self) -> tuple[ClaimBook, DeviceRoom]:
        """What DRA claims ask, and the devices of each node, read once per change of the DRA kinds."""
        classes, slices, templates, claims = self.dra_informers()
        changes = tuple(inf.changes for inf in (classes, slices, templates, claims))
        if self._dra[0] != changes:
            unread = "; ".join(
                f"{inf.resource.plural} not read: {inf.last_error[:200] or 'not listed yet'}"
                for inf in (classes, templates, claims)
                if not inf.synced.is_set() or inf.failing_since
            )
            book = read_claim_book(classes.values(), templates.values(), claims.values(), unread=unread)
            room = device_room(classes.values(), slices.values(), claims.values())
            self._dra = (changes, book, room)
        return self._dra[1], self._dra[2]

    def default_priority(self) -> int:
        """The value of the PriorityClass with ``globalDefault`` (the highest, if several); 0
        without one: what the API server gives a pod that names no class."""
        values = [
            obj.get("value", 0)
            for obj in self.informer(r.PRIORITY_CLASSES).values()
            if obj.get("globalDefault") is True
        ]
        found = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        return max(found) if found else 0

    def never_preempt(self) -> frozenset[str]:
        """The PriorityClasses whose ``preemptionPolicy`` is ``Never``, and "" when the cluster's
        default class's is (a pod that names no class gets it); read once per change of their informer."""
        inf = self.informer(r.PRIORITY_CLASSES)
        if self._never[0] == inf.changes:
            return self._never[1]
        never: set[str] = set()
        defaults: list[tuple[int, bool]] = []
        for obj in inf.values():
            off = obj.get("preemptionPolicy") == "Never"
            if off:
                never.add(str(obj["metadata"]["name"]))
            value = obj.get("value", 0)
            if obj.get("globalDefault") is True and isinstance(value, int) and not isinstance(value, bool):
                defaults.append((value, off))
        if defaults and max(defaults)[1]:
            never.add("")
        self._never = (inf.changes, frozenset(never))
        return self._never[1]

    def priorities(self) -> dict[str, int]:
        """PriorityClass name -> value, read once per change of their informer."""
        inf = self.informer(r.PRIORITY_CLASSES)
        if self._priorities[0] != inf.changes:
            values: dict[str, int] = {}
            for obj in inf.values():
                value = obj.get("value", 0)
                if isinstance(value, int) and not isinstance(value, bool):
                    values[str(obj["metadata"]["name"])] = value
            self._priorities = (inf.changes, values)
        return self._priorities[1]
