"""Where a group's pods go in one planning pass: node fit, topology domains, exclusive placement.

Why this exists: the pools planner (``planner``) decides admission in queue order; this is the
part of a pass that knows the nodes: the free room now (``NodeTable``) and on empty nodes (could
it ever fit?), the topology domains of each pool (``core.admission.topology``), the LWS groups'
pods per domain (``core.admission.exclusive``) and each subgroup's domain
(``core.admission.subgroups``). ``place`` says where a group's pods go, or why they cannot go
anywhere now; ``never`` why no domain could ever hold them. Kept apart so that the planner is
its queue, quota and cohort rules only. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gatekeeper.core.admission import exclusive, subgroups, topology
from gatekeeper.core.admission import messages as text
from gatekeeper.core.admission.exclusive import Domains, KeptOut, NoDomain, Occupant, Placer
from gatekeeper.core.admission.fit import Misfit, NodeTable, Placement
from gatekeeper.core.admission.queue import WaitingGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.admission.subgroups import NoSubgroupDomain
from gatekeeper.core.admission.topology import Layout, NoRoom, Placed
from gatekeeper.core.backends.pools.outcome import PoolTally
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.nodes import Node
from gatekeeper.core.model.pool import NodeFit, Pool
from gatekeeper.core.model.spread import BoundPods

__all__ = ["Placing", "domains_apply"]


def domains_apply(pool: Pool) -> bool:
    """Topology domains and exclusive placement are modelled where the pool's nodes are the nodes
    there will be (not in a QuotaOnly pool, nor one that buys nodes from Karpenter NodePools)."""
    return pool.node_fit is NodeFit.REQUIRED and not pool.node_pools


class Placing:
    """The nodes of one pass and what is on them; places groups, keeping what it placed."""

    def __init__(
        self,
        nodes: list[Node],
        usage: Mapping[str, Mapping[str, int]],
        occupants: Mapping[str, Iterable[Occupant]] | None = None,
        bound: BoundPods | None = None,
    ) -> None:
        self.domains = Domains(nodes, occupants)
        self.now = NodeTable(nodes, usage, bound=bound)
        self.empty = NodeTable(nodes, hypothetical=True)
        self.layout, self.empty_layout = Layout(self.now), Layout(self.empty)
        self._labels = {n.name: n.labels for n in nodes}
        self._misfit_cache: dict[tuple[str, GroupDemand], tuple[int, Misfit]] = {}

    def never(self, pool: Pool, demand: GroupDemand, group: WaitingGroup) -> tuple[Reason, str] | None:
        """Why no domain of the pool could ever hold the group (its LWS's exclusive placement, its
        topology level, its subgroups), or None; the quota and plain node fit are the planner's."""
        key, request, sub = group.exclusive, group.topology, group.subgroups
        never: tuple[Reason, str] | None = None
        if key and domains_apply(pool):
            alone = exclusive.place(self.empty, pool.name, demand, "", key, Domains(()), keep=False)
            if isinstance(alone, NoDomain):
                never = Reason.NODES_TOO_SMALL, text.no_domain_ever(pool.name, alone)
        elif request is not None and request.required:
            empty = topology.place(
                self.empty, self.empty_layout, pool.name, demand, pool.levels, request, keep=False
            )
            if isinstance(empty, NoRoom):
                never = Reason.NODES_TOO_SMALL, text.no_topology_ever(pool.name, empty)
        if never is None and sub is not None and domains_apply(pool):
            apart = subgroups.place(self.empty, pool.name, demand, "", sub, Domains(()), keep=False)
            if isinstance(apart, NoSubgroupDomain):
                never = Reason.NODES_TOO_SMALL, text.no_subgroup_domain_ever(pool.name, apart)
        return never

    def place(
        self, state: PoolTally, demand: GroupDemand, group: WaitingGroup
    ) -> Placed | Misfit | NoDomain | KeptOut | NoRoom | NoSubgroupDomain:
        """Node fit, remembering a misfit until node room changes (equal demands fail alike);
        in one domain for a group of an LWS with exclusive placement or a topology level, each
        subgroup in a domain of its own for subgroup exclusive placement, and out of the domains
        the exclusive groups of its namespace hold (``core.admission.exclusive``,
        ``core.admission.topology``, ``core.admission.subgroups``)."""
        pool = state.pool
        view, ns, sub = pool.name, group.key.namespace, group.subgroups
        if domains_apply(pool):
            placer = self._subgroup_placer(view, demand, ns, group) if sub is not None else None
            if group.exclusive:
                alone = exclusive.place(
                    self.now, view, demand, ns, group.exclusive, self.domains, placer=placer
                )
                if isinstance(alone, NoDomain):
                    return alone
                return Placed(alone, ((group.exclusive, self._labels[alone[0]][group.exclusive]),))
            allowed = exclusive.open_nodes(self.now, view, ns, self.domains)
            if group.topology is not None:
                request, shape = group.topology, (ns, sub) if sub is not None else None
                found = topology.place(
                    self.now,
                    self.layout,
                    view,
                    demand,
                    pool.levels,
                    request,
                    allowed=allowed,
                    placer=placer,
                    shape=shape,
                )
                if isinstance(found, Placed):
                    self._taken(ns, found.nodes)
                elif allowed is not None and self._kept_out(view, demand):
                    return KeptOut(self.domains.keys(ns))
                return found
            if sub is not None:
                apart = subgroups.place(self.now, view, demand, ns, sub, self.domains, allowed=allowed)
                if isinstance(apart, tuple):
                    return Placed(apart, ())
                if isinstance(apart, Misfit) and allowed is not None and self._kept_out(view, demand):
                    return KeptOut(self.domains.keys(ns))
                return apart
            if allowed is not None:
                outcome = self.now.place(view, demand.pods, allowed=allowed)
                if isinstance(outcome, Misfit) and self._kept_out(view, demand):
                    return KeptOut(self.domains.keys(ns))  # room there is, in the domains held
                return self._taken(ns, outcome)
        key = (view, demand)
        cached = self._misfit_cache.get(key)
        if cached is not None and cached[0] == self.now.version:
            return cached[1]
        outcome = self.now.place(view, demand.pods)
        if isinstance(outcome, Misfit):
            self._misfit_cache[key] = (self.now.version, outcome)
        return self._taken(ns, outcome)

    def _subgroup_placer(self, view: str, demand: GroupDemand, ns: str, group: WaitingGroup) -> Placer:
        """Places the group's subgroups each in a domain of its own, within a node mask."""
        sub = group.subgroups
        assert sub is not None

        def placer(allowed: bytearray | None, keep: bool) -> Placement | None:
            found = subgroups.place(self.now, view, demand, ns, sub, self.domains, allowed=allowed, keep=keep)
            return found if isinstance(found, tuple) else None

        return placer

    def _kept_out(self, view: str, demand: GroupDemand) -> bool:
        """Would the group fit the pool's free room if the exclusive groups' domains were open?"""
        return not isinstance(self.now.place(view, demand.pods, keep=False), Misfit)

    def _taken(self, namespace: str, outcome: Placement | Misfit) -> Placed | Misfit:
        """A group placed: its pods count on their nodes (for the exclusive groups after it)."""
        if isinstance(outcome, Misfit):
            return outcome
        for node in set(outcome):
            self.domains.take(node, [Occupant(namespace, "")])
        return Placed(outcome, ())
