"""Subgroup exclusive placement: LWS's ``subgroup-exclusive-topology``, each subgroup alone in
one topology domain.

Why this exists: an LWS with ``subGroupPolicy.subGroupSize`` and the annotation
``leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology: <key>`` (disaggregated serving: a
prefill and a decode part of one group, each on its own host or rack) gets from LWS's pod
webhook, on every pod of a subgroup, a required pod affinity to its subgroup's pods in one
domain of ``<key>`` and a required anti-affinity against every pod of its namespace that
carries another subgroup's key in that domain. So a group fits only if each of its subgroups
finds a domain of its own, free of every other subgroup of the namespace (of this group too):
GPUs that add up across domains are not enough.

The subgroups are placed largest first, each in the domain with the least free room of the
group's main resource that holds it (best fit), among the domains no subgroup of the namespace
holds (a bound pod with a subgroup key, or a subgroup placed earlier in the pass); a pod in no
subgroup (the leader, with ``LeaderExcluded``) goes anywhere the group may. All or nothing: a
subgroup without a domain undoes the ones placed before it.

Not modelled: the domains are not pinned (a subgroup's domain is the scheduler's choice under
LWS's affinity: with domains of different sizes it may take one a later subgroup was counted
into); together with ``exclusive-topology`` or a topology level, the group's subgroups are
placed within the one domain chosen for the group.

Called by the pools planner (``core.backends.pools.planner``), with the pass's ``Domains``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from gatekeeper.core.admission.exclusive import Domains, Occupant
from gatekeeper.core.admission.fit import Misfit, NodeTable, Placement
from gatekeeper.core.admission.quota import by_importance
from gatekeeper.core.admission.skew import Local
from gatekeeper.core.model.demand import GroupDemand, PodDemand
from gatekeeper.core.model.lws import Subgroups

__all__ = ["NoSubgroupDomain", "place"]


@dataclass(frozen=True)
class NoSubgroupDomain:
    """Subgroup ``part`` (0-based, of ``parts``) found no domain of ``key`` of its own:
    ``domains`` of the pool's nodes carry the key, ``held`` hold another subgroup of the
    namespace (or of the group); ``largest`` is the most free ``resource`` of an open one."""

    key: str
    part: int
    parts: int
    pods: int
    domains: int
    held: int
    resource: str
    needed: int
    largest: int


def _total(pods: Sequence[PodDemand], resource: str) -> int:
    return sum(p.requests.get(resource, 0) for p in pods) if resource != "pods" else len(pods)


def place(
    table: NodeTable,
    view: str,
    demand: GroupDemand,
    namespace: str,
    sub: Subgroups,
    domains: Domains,
    *,
    allowed: bytearray | None = None,
    keep: bool = True,
) -> Placement | NoSubgroupDomain | Misfit:
    """Each subgroup of the group in a domain of ``sub.key`` of its own (within ``allowed``),
    the loose pods anywhere on ``allowed``; kept in ``table`` and ``domains`` with ``keep``."""
    by_domain: dict[str, list[str]] = {}
    for node in table.view_nodes(view):
        value = node.labels.get(sub.key)
        if value is not None:
            by_domain.setdefault(value, []).append(node.name)
    held = domains.held_by_subgroups(namespace, sub.key) & set(by_domain)
    total = demand.total
    resource = by_importance(total)[0] if total else "pods"
    pods = demand.pods
    order = sorted(
        range(len(sub.parts)), key=lambda i: (-_total([pods[j] for j in sub.parts[i]], resource), i)
    )
    chosen: list[str | None] = [None] * len(pods)
    done: list[tuple[list[PodDemand], Placement]] = []
    taken = set(held)
    local: Local = Counter()  # the group's pods, across its parts, for its spread constraints

    def undo() -> None:
        for placed_pods, nodes in reversed(done):
            table.unplace(view, placed_pods, nodes)

    for i in order:
        part = [pods[j] for j in sub.parts[i] if j < len(pods)]
        needed = _total(part, resource)
        free = {d: table.free_sum(names, resource) for d, names in by_domain.items() if d not in taken}
        placed: Placement | None = None
        for domain in sorted(free, key=lambda d: (free[d], d)):
            if free[domain] < needed:
                continue
            mask = table.mask(by_domain[domain])
            if allowed is not None:
                mask = bytearray(a & b for a, b in zip(mask, allowed, strict=True))
            outcome = table.place(view, part, keep=True, allowed=mask, local=local)
            if not isinstance(outcome, Misfit):
                placed, taken = outcome, taken | {domain}
                break
        if placed is None:
            undo()
            largest = max(free.values(), default=0)
            return NoSubgroupDomain(
                sub.key, i, len(sub.parts), len(part), len(by_domain), len(held), resource, needed, largest
            )
        done.append((part, placed))
        for j, node_name in zip([j for j in sub.parts[i] if j < len(pods)], placed, strict=True):
            chosen[j] = node_name
    loose = [j for j in range(len(pods)) if chosen[j] is None]  # LeaderExcluded's leader
    if loose:
        rest = table.place(view, [pods[j] for j in loose], keep=True, allowed=allowed, local=local)
        if isinstance(rest, Misfit):
            undo()
            return rest
        done.append(([pods[j] for j in loose], rest))
        for j, node_name in zip(loose, rest, strict=True):
            chosen[j] = node_name
    nodes = tuple(c or "" for c in chosen)
    if not keep:
        undo()
        return nodes
    for node_name in set(nodes):
        domains.take(node_name, [Occupant(namespace, "", subgroup=True)])
    return nodes
