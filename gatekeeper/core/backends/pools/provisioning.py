"""What a pool's Karpenter NodePools can still launch, and the nodes they are launching now.

Why this exists: a Pool whose nodes Karpenter buys (``spec.nodePools``) must admit a group
only when its whole demand fits the free room of the existing nodes plus what those
NodePools can still launch; otherwise Karpenter, which acts on the Pending pods of the
admitted groups, buys nodes for part of a group and the rest waits for ever. The planner
(``planner.py``) calls this module; the ``pools`` controller reads the NodePools and
NodeClaims from the API and the instance types from a file (Karpenter publishes no
object that lists them) and passes them in. No I/O here.

The model follows Karpenter v1.14.1's provisioner (``pkg/controllers/provisioning/
scheduling``):

* A NodePool holds what its NodeClaims hold: each claim's ``status.capacity`` (before it
  is launched, ``spec.resources.requests``) and one ``nodes``. ``spec.limits`` minus that
  is what it may still launch; a NodePool without limits has no cap.
* An instance type can be launched by a NodePool when the NodePool's requirements allow
  its labels (instance type, architecture, OS), it has an *available* offering whose
  capacity type and zone the requirements allow, and its whole capacity is within what
  the NodePool may still launch (Karpenter's ``filterByRemainingResources``).
* A launched node has the NodePool's template labels, the single values its
  requirements name, the type's labels, the offering's capacity type and zone, and the
  template's taints; a pod goes there only if its node selector, required node affinity
  and tolerations allow it and its requests fit the type's allocatable.

A group's pods that find no free room on existing nodes are placed, largest first, on
nodes opened for the group (a pod first tries the nodes already opened for it, then opens
the cheapest type that holds it). Like the fit check this is a greedy heuristic, and it
is on the safe side of Karpenter's: Karpenter may pack two pods on one larger node where
this opens two, never the other way round. A NodeClaim whose node is not ready for pods
yet (not there, NotReady, or still tainted ``karpenter.sh/unregistered``) is a node
*coming up*: :func:`coming_up` makes it a node of the pass with the claim's allocatable,
so the admitted group it was bought for holds its room (the planner's ``hold``).

The objects are parsed, bounded, by ``nodepools.py``; they are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gatekeeper.core.backends.pools.kubelet import observed_allocatable, planned_room
from gatekeeper.core.backends.pools.nodepools import (
    CAPACITY_TYPE_LABEL,
    NODE_POOL_LABEL,
    UNREGISTERED_TAINT,
    ZONE_LABEL,
    InstanceType,
    NodeClaim,
    NodePool,
    Offering,
    parse_instance_types,
    parse_node_claim,
    parse_node_pool,
)
from gatekeeper.core.kube.parsed import Parsed
from gatekeeper.core.kube.quantity import format_amount
from gatekeeper.core.model.daemons import less_daemons
from gatekeeper.core.model.demand import PodDemand
from gatekeeper.core.model.nodes import Node

__all__ = [
    "CAPACITY_TYPE_LABEL",
    "NODE_POOL_LABEL",
    "UNREGISTERED_TAINT",
    "ZONE_LABEL",
    "InstanceType",
    "Launch",
    "Launcher",
    "NodeClaim",
    "NodePool",
    "Offering",
    "coming_up",
    "held",
    "parse_instance_types",
    "parse_node_claim",
    "parse_node_pool",
    "read_launcher",
]


def held(claims: Iterable[NodeClaim]) -> dict[str, dict[str, int]]:
    """What each NodePool's NodeClaims hold (Karpenter's count against ``spec.limits``)."""
    out: dict[str, dict[str, int]] = {}
    for claim in claims:
        into = out.setdefault(claim.node_pool, {})
        for resource, amount in {**claim.capacity, "nodes": 1}.items():
            into[resource] = into.get(resource, 0) + amount
    return out


def coming_up(
    claims: Iterable[NodeClaim], nodes: Iterable[Node], daemons: Sequence[PodDemand] = ()
) -> tuple[Node, ...]:
    """The NodeClaims whose node cannot take pods yet, as nodes of the pass (their room to come).

    A claim stands for its node until that node is there, Ready and registered (no
    ``karpenter.sh/unregistered`` taint); a claim being deleted is no room. Its node is
    the one it names (``status.nodeName``) or, before it names one, the one with its
    provider ID: Karpenter removes the node's taint before it writes the claim's
    ``nodeName``, and in between the node takes pods (counting both would count its room
    twice). A claim not launched yet has the room it asked for
    (``spec.resources.requests``). The node's name is the claim's with `` (launching)``
    added, so it never meets a real one. The pods of ``daemons`` that will go there take
    their room off it (``core.model.daemons.less_daemons``): they are not bound to it yet.
    """
    ready = [
        n
        for n in nodes
        if n.schedulable and n.ready is True and not any(t.key == UNREGISTERED_TAINT for t in n.taints)
    ]
    usable = {n.name for n in ready}
    by_provider = {n.provider_id for n in ready if n.provider_id}
    out = []
    for claim in claims:
        if claim.deleting or (claim.node_name and claim.node_name in usable):
            continue
        if not claim.node_name and claim.provider_id and claim.provider_id in by_provider:
            continue
        node = Node(
            name=f"{claim.name} (launching)",
            labels=dict(claim.labels),
            # Before launch a claim knows only what it asked for: room for those pods.
            allocatable=dict(claim.allocatable or claim.capacity),
            taints=tuple(t for t in claim.taints if t.key != UNREGISTERED_TAINT),
        )
        out.append(less_daemons(node, daemons))
    return tuple(out)


@dataclass(frozen=True)
class Launch:
    """A node the plan would have a NodePool launch: type, offering, and its node shape."""

    node_pool: str
    instance_type: str
    offering: Offering
    node: Node


@dataclass
class _Opened:
    launch: Launch
    free: dict[str, int]


def _within(capacity: Mapping[str, int], remaining: Mapping[str, int] | None) -> bool:
    if remaining is None:
        return True
    return all(capacity.get(r, 0) <= left for r, left in remaining.items())


def _fits(free: Mapping[str, int], req: Mapping[str, int]) -> bool:
    return all(free.get(r, 0) >= amount for r, amount in req.items())


class Launcher:
    """What the NodePools can still launch during one planning pass.

    Built from the NodePools, their NodeClaims and the instance types; :meth:`launch`
    places pods on nodes it would launch and, when kept, counts them against the
    NodePools' limits for the rest of the pass.
    """

    def __init__(
        self,
        node_pools: Iterable[NodePool],
        claims: Iterable[NodeClaim],
        instance_types: Iterable[InstanceType],
        daemons: Sequence[PodDemand] = (),
    ) -> None:
        self.pools = {p.name: p for p in node_pools}
        claims = tuple(claims)
        holding = held(claims)
        self.remaining: dict[str, dict[str, int] | None] = {}
        for pool in self.pools.values():
            if pool.limits is None:
                self.remaining[pool.name] = None
            else:
                have = holding.get(pool.name, {})
                self.remaining[pool.name] = {r: lim - have.get(r, 0) for r, lim in pool.limits.items()}
        seen = observed_allocatable(claims)
        types, said = [], {}
        for it in instance_types:
            room, note = planned_room(it, seen.get(it.name))
            types.append(replace(it, allocatable=room))
            said[it.name] = note
        self._shapes = {p.name: self._candidates(p, types, daemons) for p in self.pools.values()}
        self.notes = {
            name: tuple(sorted({said[it.name] for it, _ in shapes if said[it.name]}))
            for name, shapes in self._shapes.items()
        }
        """Per NodePool: how the room of the types it may launch was planned, where not as
        their file gives it (``kubelet.planned_room``)."""

    @staticmethod
    def _candidates(
        pool: NodePool, types: Iterable[InstanceType], daemons: Sequence[PodDemand]
    ) -> list[tuple[InstanceType, Launch]]:
        """Each (type, cheapest allowed available offering) the NodePool may launch, cheapest
        first; its node's room is its allocatable less the DaemonSets' pods that go there."""
        out = []
        for it in types:
            if not all(pool.allows(key, value) for key, value in it.labels.items()):
                continue
            offers = [
                o
                for o in it.offerings
                if o.available
                and pool.allows(CAPACITY_TYPE_LABEL, o.capacity_type)
                and pool.allows(ZONE_LABEL, o.zone)
            ]
            for offer in sorted(offers, key=lambda o: (o.price, o.capacity_type, o.zone)):
                labels = dict(pool.labels)
                for req in pool.requirements:
                    if req.operator == "In" and len(req.values) == 1:
                        labels.setdefault(req.key, req.values[0])
                labels.update(it.labels)
                labels.update({CAPACITY_TYPE_LABEL: offer.capacity_type, ZONE_LABEL: offer.zone})
                labels[NODE_POOL_LABEL] = pool.name
                node = less_daemons(
                    Node(
                        f"{pool.name}/{it.name}/{offer.capacity_type}",
                        labels,
                        dict(it.allocatable),
                        pool.taints,
                    ),
                    daemons,
                )
                out.append((it, Launch(pool.name, it.name, offer, node)))
        return sorted(out, key=lambda c: (c[1].offering.price, c[0].name, c[1].offering.capacity_type))

    def notes_of(self, node_pools: Sequence[str]) -> tuple[str, ...]:
        """The notes (``notes``) of the types these NodePools may launch."""
        return tuple(sorted({note for name in node_pools for note in self.notes.get(name, ())}))

    def known(self, name: str) -> bool:
        return name in self.pools

    def launch(
        self,
        node_pools: Sequence[str],
        pods: Sequence[PodDemand],
        accepts: Callable[[Node], bool],
        *,
        keep: bool = True,
        fresh: bool = False,
    ) -> tuple[Launch, ...] | PodDemand:
        """Nodes for ``pods`` (largest first) from ``node_pools``: one ``Launch`` per pod, in
        pod order, or the first pod that none can hold. ``accepts`` says whether the pool
        takes a node (its node selector). With ``fresh`` the NodePools count as holding
        nothing (could it *ever* launch them). Nothing is counted unless ``keep``."""
        remaining = {
            n: (None if self.remaining.get(n) is None else dict(self.remaining[n] or {}))
            for n in node_pools
            if n in self.pools
        }
        if fresh:
            remaining = {
                n: (None if self.pools[n].limits is None else dict(self.pools[n].limits or {}))
                for n in remaining
            }
        opened: list[_Opened] = []
        chosen: list[Launch | None] = [None] * len(pods)
        order = sorted(range(len(pods)), key=lambda i: (-sum(pods[i].requests.values()), i))
        for i in order:
            pod = pods[i]
            req = {**pod.requests, "pods": pod.requests.get("pods", 0) + 1}
            spot = next(
                (o for o in opened if self._takes(o.launch.node, pod, accepts) and _fits(o.free, req)), None
            )
            if spot is None:
                spot = self._open(remaining, pod, req, accepts)
                if spot is None:
                    return pod
                opened.append(spot)
            for r, amount in req.items():
                spot.free[r] = spot.free.get(r, 0) - amount
            chosen[i] = spot.launch
        if keep:
            for name, left in remaining.items():
                self.remaining[name] = left
        return tuple(c for c in chosen if c is not None)

    @staticmethod
    def _takes(node: Node, pod: PodDemand, accepts: Callable[[Node], bool]) -> bool:
        c = pod.constraints
        return accepts(node) and c.matches_labels(node.name, node.labels) and c.tolerates(node.taints)

    def _open(
        self,
        remaining: dict[str, dict[str, int] | None],
        pod: PodDemand,
        req: Mapping[str, int],
        accepts: Callable[[Node], bool],
    ) -> _Opened | None:
        for name, left in remaining.items():
            for it, launch in self._shapes[name]:
                capacity = {**it.capacity, "nodes": 1}
                if not _within(capacity, left) or not _fits(launch.node.allocatable, req):
                    continue
                if not self._takes(launch.node, pod, accepts):
                    continue
                if left is not None:
                    for r in left:
                        left[r] -= capacity.get(r, 0)
                return _Opened(launch, dict(launch.node.allocatable))
        return None

    def headroom(self, node_pools: Sequence[str]) -> dict[str, int]:
        """What the NodePools may still launch in all, for each resource every one of them
        limits (a resource one of them does not limit has no bound, and is left out)."""
        known = [self.remaining.get(n) for n in node_pools if n in self.pools]
        if not known or any(left is None for left in known):
            return {}
        limited = set.intersection(*(set(left or {}) for left in known))
        return {r: sum(max((left or {}).get(r, 0), 0) for left in known) for r in sorted(limited)}

    def describe(self, node_pools: Sequence[str]) -> str:
        """What the NodePools may still launch, for people: ``np-a: 2 nvidia.com/gpu left of 4``."""
        parts = []
        for name in node_pools:
            pool = self.pools.get(name)
            if pool is None:
                parts.append(f"{name}: no such NodePool")
                continue
            left = self.remaining.get(name)
            if left is None or pool.limits is None:
                parts.append(f"{name}: no limits")
                continue
            shown = [r for r in sorted(pool.limits) if r not in ("cpu", "memory", "pods")] or sorted(
                pool.limits
            )
            parts.append(
                f"{name}: "
                + ", ".join(
                    f"{format_amount(r, max(left.get(r, 0), 0))} {r} left "
                    f"of {format_amount(r, pool.limits[r])}"
                    for r in shown
                )
            )
        return "; ".join(parts)


def read_launcher(
    node_pools: Parsed[NodePool],
    node_claims: Parsed[NodeClaim],
    instance_types: Sequence[InstanceType],
    nodes: Iterable[Node],
    problems: list[str],
    daemon_sets: Parsed[PodDemand] | None = None,
) -> tuple[Launcher, tuple[Node, ...]]:
    """What the Karpenter NodePools can still launch, and their NodeClaims coming up as nodes
    (for ``backends.pools.decide``), less the DaemonSets' pods on them; a NodePool, NodeClaim
    or DaemonSet that could not be read is left out and named in ``problems``."""
    daemons = daemon_sets or Parsed()
    problems.extend(node_pools.bad.values())
    problems.extend(node_claims.bad.values())
    problems.extend(daemons.bad.values())
    claims = list(node_claims.ok)
    return Launcher(list(node_pools.ok), claims, instance_types, daemons.ok), coming_up(
        claims, nodes, daemons.ok
    )
