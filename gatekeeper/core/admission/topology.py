"""Topology-aware admission: a group admitted only into one domain of a level that holds it all.

Why this exists: multi-host inference wants a group's pods inside one NVLink, rack or block
domain, not merely GPUs that add up somewhere in the pool. A Pool names its topology
(``spec.topology.levels``: node label keys from the widest domain to the narrowest, such as
block, rack, host); an LWS asks for one level (``lws-gatekeeper.io/topology-required`` or
``-preferred``, ``core.model.lws.topology_request``). A domain of a level is the pool's nodes
that share the values of that level's label and of every wider level's, so a rack ``r1`` of
block ``b1`` is not rack ``r1`` of block ``b2``; a node without one of those labels is in no
domain of that level.

* **Required**: the group is placed in one domain of the level where all its pods fit now,
  else it waits (``NoRoom``, with the largest free room of a domain in the words).
* **Preferred**: one domain of the level if one has room, else one of the next wider level,
  and so on up to the widest; else anywhere in the pool (as Kueue's preferred topology).

Among the domains that hold it, the one with the least free room of the group's main resource
is chosen (best fit, as Kueue's topology-aware scheduling): the large domains stay whole for
large groups. The chosen domain (``Domain``: the labels of its level and of the wider ones) is
kept on the group's record and added to each pod's node selector as its gate is lifted, and by
the webhook to the pods born ungated, so the scheduler picks nodes inside it: a gated pod's node
selector may be tightened. Within the domain the scheduler still chooses the nodes.

Called by the pools planner (``core.backends.pools.planner``) for the groups of an LWS that asks
for a level of its Pool, with a node mask of the nodes the group may use at all (those its
namespace's exclusive groups do not hold, ``core.admission.exclusive.open_nodes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gatekeeper.core.admission.exclusive import Placer
from gatekeeper.core.admission.fit import Misfit, NodeTable, Placement
from gatekeeper.core.admission.quota import by_importance
from gatekeeper.core.kube.selectors import NodeConstraints
from gatekeeper.core.model.demand import GroupDemand, PodDemand
from gatekeeper.core.model.lws import TopologyRequest

__all__ = ["Domain", "Layout", "NoRoom", "Placed", "path_to", "pin", "place"]

Domain = tuple[tuple[str, str], ...]
"""A domain as node labels, widest level first: what its pods' node selectors gain. () is the
whole pool (a preferred group placed in no domain)."""


@dataclass(frozen=True)
class Placed:
    """The group's pods placed (``nodes``, one per pod) inside ``domain``."""

    nodes: Placement
    domain: Domain


@dataclass(frozen=True)
class NoRoom:
    """No domain of ``key`` holds the whole group now: ``domains`` of them exist in the pool;
    ``largest`` is the most free ``resource`` of one (``needed``: what the group asks of it)."""

    key: str
    domains: int
    resource: str
    needed: int
    largest: int
    freest: str = ""
    """The ``key`` label's value of the domain with ``largest`` free ("" when there is none)."""
    required: bool = True
    """False: preferred, and no wider level nor the whole pool held it either."""


def path_to(levels: Sequence[str], key: str) -> tuple[str, ...]:
    """The label keys that name a domain of level ``key``: the wider levels and ``key`` itself
    (just ``key`` when it is not one of ``levels``)."""
    if key not in levels:
        return (key,)
    return tuple(levels[: levels.index(key) + 1])


def pin(demand: GroupDemand, domain: Domain) -> GroupDemand:
    """``demand`` with the domain's labels added to each pod's node selector (as its gate is
    lifted: a label the pod already selects keeps the pod's value)."""
    pods = []
    for pod in demand.pods:
        c = pod.constraints
        own = dict(c.node_selector)
        selector = {**{k: v for k, v in domain if k not in own}, **own}
        pinned = NodeConstraints(tuple(sorted(selector.items())), c.tolerations, c.affinity)
        pods.append(PodDemand(pod.role, pod.requests, pinned, pod.spreads, pod.counted_in))
    return GroupDemand(tuple(pods))


MissKey = tuple[str, GroupDemand, TopologyRequest, tuple[str, ...], bytes, object]


class Layout:
    """The pool views' nodes by domain, per level, computed once per pass (nodes do not change
    within one); each domain's free room, kept up to date from the nodes the table changed
    since (a placement changes a few nodes: summing every domain again per group cost 3.6x the
    flat pass at 5,000 nodes, ``benchmarks/bench_topology.py``); and the shapes that found no
    room since node room last changed."""

    def __init__(self, table: NodeTable) -> None:
        self._table = table
        self._by: dict[tuple[str, tuple[str, ...]], dict[Domain, list[int]]] = {}
        self._of: dict[tuple[str, tuple[str, ...]], dict[int, Domain]] = {}
        self._free: dict[tuple[str, tuple[str, ...], str], tuple[int, dict[Domain, int]]] = {}
        self._misses: dict[MissKey, tuple[int, NoRoom | Misfit]] = {}

    def domains(self, view: str, path: tuple[str, ...]) -> Mapping[Domain, list[int]]:
        """The view's nodes (table positions) by their domain of ``path`` (nodes missing a label
        are in none)."""
        found = self._by.get((view, path))
        if found is None:
            found = {}
            nodes = self._table.view_nodes(view)
            for node, i in zip(nodes, self._table.positions(n.name for n in nodes), strict=True):
                values = [node.labels.get(key) for key in path]
                if all(v is not None for v in values):
                    domain = tuple((k, str(v)) for k, v in zip(path, values, strict=True))
                    found.setdefault(domain, []).append(i)
            self._by[(view, path)] = found
            self._of[(view, path)] = {i: d for d, members in found.items() for i in members}
        return found

    def free(self, view: str, path: tuple[str, ...], resource: str) -> Mapping[Domain, int]:
        """Each domain's free ``resource`` now."""
        by_domain = self.domains(view, path)
        key = (view, path, resource)
        cached = self._free.get(key)
        if cached is None:
            sums = {d: self._table.free_at(members, resource) for d, members in by_domain.items()}
            self._free[key] = (self._table.changes, sums)
            return sums
        mark, sums = cached
        changed, mark = self._table.changed_since(mark)
        if changed:
            of = self._of[(view, path)]
            for domain in {d for i in changed if (d := of.get(i)) is not None}:
                sums[domain] = self._table.free_at(by_domain[domain], resource)
            self._free[key] = (mark, sums)
        return sums

    def missed(self, key: MissKey) -> NoRoom | Misfit | None:
        """Why this shape found no room, if node room has not changed since (equal demands fail
        alike: a hundred groups of one LWS cost one search)."""
        found = self._misses.get(key)
        return found[1] if found is not None and found[0] == self._table.version else None

    def miss(self, key: MissKey, why: NoRoom | Misfit) -> None:
        self._misses[key] = (self._table.version, why)


def _within(
    table: NodeTable,
    layout: Layout,
    view: str,
    demand: GroupDemand,
    path: tuple[str, ...],
    allowed: bytearray | None,
    keep: bool,
    placer: Placer | None,
) -> Placed | NoRoom:
    """All the group's pods in one domain of ``path`` (best fit), or why none holds them."""
    by_domain = layout.domains(view, path)
    total = demand.total
    resource = by_importance(total)[0] if total else "pods"
    needed = total.get(resource, len(demand.pods))
    free = layout.free(view, path, resource)
    for domain in sorted((d for d, room in free.items() if room >= needed), key=lambda d: (free[d], d)):
        mask = bytearray(len(allowed)) if allowed is not None else table.mask(())
        for i in by_domain[domain]:
            mask[i] = 1 if allowed is None else allowed[i]
        if placer is not None:
            outcome: Placement | Misfit | None = placer(mask, keep)
        else:
            outcome = table.place(view, demand.pods, keep=keep, allowed=mask)
        if outcome is not None and not isinstance(outcome, Misfit):
            return Placed(outcome, domain)
    freest = max(free, key=lambda d: (free[d], d), default=())
    largest = free[freest] if freest else 0
    return NoRoom(path[-1], len(by_domain), resource, needed, largest, freest[-1][1] if freest else "")


def place(
    table: NodeTable,
    layout: Layout,
    view: str,
    demand: GroupDemand,
    levels: Sequence[str],
    request: TopologyRequest,
    *,
    allowed: bytearray | None = None,
    keep: bool = True,
    placer: Placer | None = None,
    shape: object = None,
) -> Placed | NoRoom | Misfit:
    """The group placed (kept in ``table`` with ``keep``) in one domain of the requested level,
    or (preferred) of a wider one, or (preferred) anywhere on ``allowed``; else why not: the
    requested level's ``NoRoom`` (required), or the pool-wide ``Misfit`` (preferred). With
    ``placer`` the group is placed by it within a domain; ``shape`` then says what else its
    outcome depends on (its namespace's subgroups), for the misses remembered."""
    key: MissKey = (
        view,
        demand,
        request,
        tuple(levels),
        bytes(allowed) if allowed is not None else b"",
        shape,
    )
    missed = layout.missed(key)
    if missed is not None:
        return missed
    path = path_to(levels, request.key)
    outcome: Placed | NoRoom | Misfit = _within(table, layout, view, demand, path, allowed, keep, placer)
    if isinstance(outcome, NoRoom) and not request.required:
        for wider in range(len(path) - 1, 0, -1):
            found = _within(table, layout, view, demand, path[:wider], allowed, keep, placer)
            if isinstance(found, Placed):
                return found
        if placer is not None:
            anywhere = placer(allowed, keep)
            outcome = Placed(anywhere, ()) if anywhere is not None else replace(outcome, required=False)
        else:
            plain = table.place(view, demand.pods, keep=keep, allowed=allowed)
            outcome = plain if isinstance(plain, Misfit) else Placed(plain, ())
    if not isinstance(outcome, Placed):
        layout.miss(key, outcome)
    return outcome
