"""Exclusive placement: LWS's ``exclusive-topology``, each group alone in one topology domain.

Why this exists: an LWS annotated ``leaderworkerset.sigs.k8s.io/exclusive-topology: <key>``
gets from LWS's pod webhook, on every pod, a required pod affinity (the group's pods in one
domain of ``<key>``: the nodes sharing that label's value) and a required pod anti-affinity
against the pods of every other LWS group of its namespace in that domain. The scheduler
holds both, and an existing pod's anti-affinity both ways round: no other LWS group of the
namespace comes into the domain of an exclusive group either. Quota and node room alone
would admit a group whose room is spread over domains, or lies in a domain another group of
the namespace holds: admitted, ungated, never bound, its quota held from every other group.

So a group of such an LWS is placed in one domain of its key where no pod of another LWS
group of its namespace is (bound, or placed earlier in the pass), the domain with the least
free room of the group's main resource that holds it (best fit: the large domains stay whole
for large groups), and a group of another LWS of the namespace is kept out of the domains
its exclusive groups hold. Nodes without the key's label are no domain (the affinity cannot
be met there). What the pod's own anti-affinity says is read from the LWS, as LWS writes it:
the pods' spec is not parsed (a pod made without LWS's webhook is not an LWS group's).

The domain chosen is pinned: the planner turns it into the group's ``status.domain`` (the
key and the domain's value), which its pods get in their node selectors as their gates are
lifted, so the scheduler cannot put a small group in the large domain a later, larger group
was counted into.

``subgroup-exclusive-topology`` (one domain to each subgroup) is ``core.admission.subgroups``.

Called by the pools planner (``core.backends.pools.planner``) with the occupants of the
bound pods (``occupants``, from the pass's bound-pod cache).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from gatekeeper.core.admission.fit import Misfit, NodeTable, Placement
from gatekeeper.core.admission.quota import by_importance
from gatekeeper.core.kube.keys import EXCLUSIVE_TOPOLOGY_ANNOTATION, GROUP_KEY_LABEL, SUBGROUP_KEY_LABEL
from gatekeeper.core.kube.objects import as_map, is_live
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.nodes import Node

__all__ = [
    "Domains",
    "KeptOut",
    "NoDomain",
    "Occupant",
    "Placer",
    "occupants",
    "open_nodes",
    "place",
    "without",
]

Placer = Callable[[bytearray | None, bool], Placement | None]
"""Places a group's pods on the nodes of a mask (None: every node), kept with the flag: how a group
whose pods have constraints of their own within a domain is placed (``core.admission.subgroups``)."""


class Occupant(NamedTuple):
    """An LWS group's pod on a node."""

    namespace: str
    key: str
    """Its LWS's exclusive topology key, or ""."""
    subgroup: bool = False
    """It carries LWS's subgroup key label (its LWS has a ``subGroupPolicy``): the subgroups of
    an LWS with subgroup exclusive placement keep out of its domains (``core.admission.subgroups``)."""


@dataclass(frozen=True)
class NoDomain:
    """No domain of ``key`` holds the whole group: ``domains`` of the pool's nodes carry the
    key, ``held`` of them hold another group of the namespace; ``largest`` is the most free
    ``resource`` of an open one (0 when none is open)."""

    key: str
    domains: int
    held: int
    resource: str
    needed: int
    largest: int


@dataclass(frozen=True)
class KeptOut:
    """A group without exclusive placement that would fit the pool's free room, but only in
    domains (of ``keys``) its namespace's exclusive groups hold."""

    keys: tuple[str, ...]


def _occupying(pods: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, Occupant]]:
    """(node, occupant) of each LWS group's live pod bound to a node.

    An LWS group's pod carries LWS's group key label; its exclusive key is the annotation
    LWS copies from the LWS to its pods."""
    for pod in pods:
        node = as_map(pod.get("spec")).get("nodeName")
        meta = as_map(pod.get("metadata"))
        if not isinstance(node, str) or not node or GROUP_KEY_LABEL not in as_map(meta.get("labels")):
            continue
        if not is_live(pod):
            continue
        pod_labels = as_map(meta.get("labels"))
        key = as_map(meta.get("annotations")).get(EXCLUSIVE_TOPOLOGY_ANNOTATION)
        namespace = str(meta.get("namespace") or "")
        yield node, Occupant(namespace, key if isinstance(key, str) else "", SUBGROUP_KEY_LABEL in pod_labels)


def occupants(pods: Iterable[Mapping[str, Any]]) -> dict[str, Counter[Occupant]]:
    """Per node: the LWS groups' live pods bound there, as (namespace, exclusive key or "")
    with how many pods of each (so that the room of some of them can be freed: ``without``)."""
    found: dict[str, Counter[Occupant]] = {}
    for node, occupant in _occupying(pods):
        found.setdefault(node, Counter())[occupant] += 1
    return found


def without(
    found: Mapping[str, Counter[Occupant]], gone: Iterable[Mapping[str, Any]]
) -> dict[str, Counter[Occupant]]:
    """``found`` once the pods ``gone`` are gone (preemption's simulation frees its victims'
    domains); only the nodes they were on are copied."""
    less: dict[str, Counter[Occupant]] = {}
    for node, occupant in _occupying(gone):
        less.setdefault(node, Counter())[occupant] += 1
    if not less:
        return dict(found)
    out = dict(found)
    for node, counted in less.items():
        left = found.get(node, Counter()) - counted
        if left:
            out[node] = left
        else:
            out.pop(node, None)
    return out


class Domains:
    """The LWS groups' pods on each node during one pass: bound ones, and those placed since."""

    def __init__(self, nodes: Iterable[Node], found: Mapping[str, Iterable[Occupant]] | None = None) -> None:
        self._labels: dict[str, Mapping[str, str]] = {n.name: n.labels for n in nodes}
        self._on: dict[str, set[Occupant]] = {}
        self._exclusive: dict[str, set[str]] = {}
        """Per namespace: the exclusive keys of its groups somewhere (the other groups'
        nodes are free of it otherwise, and cost nothing to check)."""
        for node, there in (found or {}).items():
            self.take(node, there)

    def take(self, node: str, there: Iterable[Occupant]) -> None:
        """Pods of these groups are (or are counted) on ``node``."""
        on = self._on.setdefault(node, set())
        for occupant in there:
            on.add(occupant)
            if occupant.key:
                self._exclusive.setdefault(occupant.namespace, set()).add(occupant.key)

    def held(self, namespace: str, key: str) -> set[str]:
        """The domains of ``key`` with a pod of an LWS group of ``namespace`` on them."""
        out = set()
        for node, there in self._on.items():
            value = self._labels.get(node, {}).get(key)
            if value is not None and any(o.namespace == namespace for o in there):
                out.add(value)
        return out

    def held_by_subgroups(self, namespace: str, key: str) -> set[str]:
        """The domains of ``key`` with a pod of ``namespace`` that carries a subgroup key."""
        out = set()
        for node, there in self._on.items():
            value = self._labels.get(node, {}).get(key)
            if value is not None and any(o.namespace == namespace and o.subgroup for o in there):
                out.add(value)
        return out

    def keys(self, namespace: str) -> tuple[str, ...]:
        """The exclusive keys of the namespace's groups."""
        return tuple(sorted(self._exclusive.get(namespace, ())))

    def closed(self, namespace: str) -> set[str]:
        """The nodes a group of ``namespace`` without exclusive placement may not use: those in
        a domain an exclusive group of the namespace holds (its anti-affinity keeps others out)."""
        keys = self._exclusive.get(namespace)
        if not keys:
            return set()
        held: dict[str, set[str]] = {}
        for node, there in self._on.items():
            for ns, key, _ in there:
                value = self._labels.get(node, {}).get(key) if ns == namespace and key else None
                if value is not None:
                    held.setdefault(key, set()).add(value)
        return {
            node
            for node, labels in self._labels.items()
            if any(labels.get(key) in values for key, values in held.items())
        }


def open_nodes(table: NodeTable, view: str, namespace: str, domains: Domains) -> bytearray | None:
    """The ``allowed`` of ``NodeTable.place`` for a group of ``namespace`` without exclusive
    placement: None (every node) unless an exclusive group of the namespace holds a domain."""
    closed = domains.closed(namespace)
    if not closed:
        return None
    return table.mask(n.name for n in table.view_nodes(view) if n.name not in closed)


def place(
    table: NodeTable,
    view: str,
    demand: GroupDemand,
    namespace: str,
    key: str,
    domains: Domains,
    *,
    keep: bool = True,
    placer: Placer | None = None,
) -> Placement | NoDomain:
    """All the group's pods in one open domain of ``key`` (best fit), kept in ``table`` and counted in
    ``domains`` with ``keep``; or why no domain holds them."""
    by_domain: dict[str, list[str]] = {}
    for node in table.view_nodes(view):
        value = node.labels.get(key)
        if value is not None:
            by_domain.setdefault(value, []).append(node.name)
    held = domains.held(namespace, key) & set(by_domain)
    closed = domains.closed(namespace)  # the domains of the namespace's other exclusive keys
    pods, total = demand.pods, demand.total
    resource = by_importance(total)[0] if total else "pods"
    needed = total.get(resource, len(pods))
    free = {d: table.free_sum(names, resource) for d, names in by_domain.items() if d not in held}
    for domain in sorted(free, key=lambda d: (free[d], d)):
        if free[domain] < needed:
            continue
        names = [n for n in by_domain[domain] if n not in closed]
        mask = table.mask(names)
        outcome = (
            placer(mask, keep) if placer is not None else table.place(view, pods, keep=keep, allowed=mask)
        )
        if outcome is not None and not isinstance(outcome, Misfit):
            if keep:
                for name in set(outcome):
                    domains.take(name, [Occupant(namespace, key)])
            return outcome
    return NoDomain(key, len(by_domain), len(held), resource, needed, max(free.values(), default=0))
