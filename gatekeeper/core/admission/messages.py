"""The sentences people read in Conditions and Events of the pools backend, one builder per reason.

Kept apart from the planner so that wording can be reviewed (and changed) in one
place. Each builder returns the text after "group N " so that results for one
(pool, demand) can be cached and reused for every group index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gatekeeper.core.admission.exclusive import NoDomain
from gatekeeper.core.admission.fit import Misfit
from gatekeeper.core.admission.quota import by_importance
from gatekeeper.core.admission.subgroups import NoSubgroupDomain
from gatekeeper.core.admission.topology import NoRoom
from gatekeeper.core.kube.quantity import format_amount, format_resources
from gatekeeper.core.model.demand import GroupDemand


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def amount(resource: str, units: int) -> str:
    """``2 nvidia.com/gpu``, ``500m cpu``, ``8Gi memory``, ``3 pod slots``."""
    if resource == "pods":
        return plural(units, "pod slot")
    return f"{format_amount(resource, units)} {resource}"


def _group_need(demand: GroupDemand, resource: str) -> str:
    if resource == "pods":
        return f"needs {plural(demand.pod_count, 'pod slot')}"
    nodes = demand.pods_needing(resource)
    return f"needs {amount(resource, demand.total[resource])} on {plural(nodes, 'node')}"


def pool_not_found(pool: str) -> str:
    return f"names pool {pool}, which does not exist"


def namespace_not_allowed(namespace: str, pool: str) -> str:
    return f"waits: namespace {namespace} may not use pool {pool}"


def priority_class_not_allowed(pool: str, named: Sequence[str], allowed: Iterable[str]) -> str:
    said = ", ".join(f"PriorityClass {c}" if c else "no PriorityClass" for c in named)
    listed = ", ".join(sorted(allowed))
    return (
        f"waits: its LeaderWorkerSet's templates name {said}; pool {pool} allows only "
        f"PriorityClasses {listed} (spec.allowedPriorityClasses): name one of them"
    )


def not_made_by(pods: Sequence[str], lws: str) -> str:
    if len(pods) == 1:
        return (
            f"pod {pods[0]} was not made by LeaderWorkerSet {lws}: "
            "it claims the group by its labels and stays gated"
        )
    return (
        f"pods {', '.join(pods)} were not made by LeaderWorkerSet {lws}: "
        "they claim the group by their labels and stay gated"
    )


def beyond_size(pods: Sequence[tuple[str, int]], lws: str, size: int) -> str:
    """Pods made through the LWS's own chain past its ``size`` (a worker StatefulSet scaled)."""
    said = ", ".join(f"{name} (worker {worker})" for name, worker in pods)
    one = len(pods) == 1
    return (
        f"{'pod' if one else 'pods'} {said} {'is' if one else 'are'} beyond the group's size {size} "
        f"(LeaderWorkerSet {lws}) and {'stays' if one else 'stay'} gated: a group is what its "
        "LeaderWorkerSet says; change the LeaderWorkerSet, not its StatefulSets"
    )


def not_as_admitted(why: str) -> str:
    """A pod made by its LWS that asks other than its role was admitted with (``why``)."""
    return f"{why}, and stays gated: change the LeaderWorkerSet, not its StatefulSets or pods"


def invalid_spec(message: str) -> str:
    return f"cannot be admitted: {message}"


def not_in_quota(pool: str, resources: tuple[str, ...], explicit: bool) -> str:
    names = ", ".join(resources)
    where = f"pool {pool}'s quota does not list" if explicit else f"no node of pool {pool} has"
    return f"requests {names}, which {where}; it can never be admitted"


def exceeds_quota(pool: str, demand: GroupDemand, resource: str, ceiling: int, explicit: bool) -> str:
    have = f"pool {pool}'s quota of" if explicit else f"all nodes of pool {pool} together,"
    return (
        f"{_group_need(demand, resource)}, more than {have} {format_amount(resource, ceiling)}; "
        "it can never be admitted"
    )


def waits_for_quota(
    pool: str,
    demand: GroupDemand,
    short: tuple[str, ...],
    quota: Mapping[str, int],
    used: Mapping[str, int],
    holders: Mapping[str, int],
    intruders: int = 0,
) -> str:
    resource = by_importance(short)[0]
    held, total = used.get(resource, 0), quota.get(resource, 0)
    free = format_amount(resource, max(total - held, 0))
    by = plural(holders.get(resource, 0), "admitted group")
    if intruders:
        by += f" and {plural(intruders, 'pod')} on its nodes without an admission"
    text = (
        f"{_group_need(demand, resource)}; pool {pool} has {free} free "
        f"({format_amount(resource, held)} of {format_amount(resource, total)} held by {by})"
    )
    others = [r for r in by_importance(short) if r != resource]
    if others:
        text += f"; also short of {', '.join(others)}"
    return text


def _pod_needs(misfit: Misfit) -> str:
    return format_resources({r: a for r, a in misfit.requests.items() if r != "pods"}) or "a pod slot"


def cannot_place(pool: str, misfit: Misfit) -> str:
    """A group that could not be placed even on the pool's empty nodes."""
    if misfit.nodes == 0:
        return f"can never be placed: pool {pool} has no nodes"
    if misfit.skew:
        return (
            f"can never be placed: pod {misfit.role}'s topologySpreadConstraints ({misfit.skew}) "
            f"leave it no node of pool {pool} with room, even on empty nodes"
        )
    if misfit.eligible == 0:
        return (
            f"can never be placed: pod {misfit.role} matches none of pool {pool}'s "
            f"{plural(misfit.nodes, 'node')} (check its nodeSelector, node affinity and tolerations)"
        )
    if misfit.resource is None:
        return (
            f"can never be placed: pod {misfit.role} needs {_pod_needs(misfit)}, "
            f"and no node of pool {pool} has all of that"
        )
    need = amount(misfit.resource, misfit.needed)
    largest = format_amount(misfit.resource, misfit.largest)
    if misfit.placed == 0:
        return (
            f"can never be placed: pod {misfit.role} needs {need}; "
            f"the largest node of pool {pool} has {largest}"
        )
    return (
        f"can never be placed: pod {misfit.role} needs {need}, and with the group's other "
        f"{plural(misfit.placed, 'pod')} on pool {pool}'s empty nodes, no node has more than {largest} left"
    )


def waits_for_domain(pool: str, nd: NoDomain) -> str:
    """A group of an LWS with exclusive placement for which no domain has room now."""
    head = f"fits pool {pool}'s quota but no {nd.key} domain has room for it alone (exclusive-topology):"
    if nd.held == nd.domains:
        return f"{head} each of the {plural(nd.domains, 'domain')} holds another group of this namespace"
    largest = format_amount(nd.resource, nd.largest)
    return (
        f"{head} the group needs {amount(nd.resource, nd.needed)} in one domain; of "
        f"{plural(nd.domains, 'domain')}, {nd.held} hold another group of this namespace "
        f"and the others have at most {largest} free"
    )


def kept_out(pool: str, keys: Sequence[str]) -> str:
    """A group whose room is only in the domains its namespace's exclusive groups hold."""
    return (
        f"fits pool {pool}'s quota, and its nodes have the room, but only in {' / '.join(keys)} domains "
        "that exclusive groups of this namespace hold (their anti-affinity keeps other groups out)"
    )


def no_domain_ever(pool: str, nd: NoDomain) -> str:
    """A group of an LWS with exclusive placement that no domain of the pool could ever hold."""
    if nd.domains == 0:
        return (
            f"can never be placed: its LWS's exclusive-topology names node label {nd.key}, "
            f"and no node of pool {pool} has it"
        )
    largest = format_amount(nd.resource, nd.largest)
    return (
        f"can never be placed: its LWS's exclusive-topology puts a group in one {nd.key} domain; "
        f"it needs {amount(nd.resource, nd.needed)}, and the largest of pool {pool}'s "
        f"{plural(nd.domains, 'domain')} has {largest}"
    )


def waits_for_subgroup_domain(pool: str, ns: NoSubgroupDomain) -> str:
    """A group of an LWS with subgroup exclusive placement one of whose subgroups finds no domain."""
    head = (
        f"fits pool {pool}'s quota but subgroup {ns.part} of {ns.parts} ({plural(ns.pods, 'pod')}) finds "
        f"no {ns.key} domain of its own (subgroup-exclusive-topology):"
    )
    if ns.held == ns.domains:
        return f"{head} each of the {plural(ns.domains, 'domain')} holds another subgroup of this namespace"
    return (
        f"{head} it needs {amount(ns.resource, ns.needed)} in one; of {plural(ns.domains, 'domain')}, "
        f"{ns.held} hold another subgroup of this namespace and the others have at most "
        f"{amount(ns.resource, ns.largest)} free (its other subgroups counted)"
    )


def no_subgroup_domain_ever(pool: str, ns: NoSubgroupDomain) -> str:
    """A group of an LWS with subgroup exclusive placement that the pool's domains could never hold."""
    if ns.domains == 0:
        return (
            f"can never be placed: its LWS's subgroup-exclusive-topology names node label {ns.key}, "
            f"and no node of pool {pool} has it"
        )
    return (
        f"can never be placed: its LWS's subgroup-exclusive-topology puts each of its {ns.parts} subgroups "
        f"in a {ns.key} domain of its own; subgroup {ns.part} needs {amount(ns.resource, ns.needed)}, "
        f"and pool {pool}'s {plural(ns.domains, 'domain')} cannot hold it beside the others"
    )


def waits_for_topology(pool: str, nr: NoRoom) -> str:
    """A group whose LWS requires one domain of a topology level, none of which has room now."""
    kind = "required" if nr.required else "preferred, nor anywhere in the pool"
    head = f"fits pool {pool}'s quota but no {nr.key} domain has room for the whole group (topology-{kind}):"
    need = amount(nr.resource, nr.needed)
    if not nr.freest:
        return f"{head} it needs {need} in one, and no node of the pool is in such a domain"
    return (
        f"{head} it needs {need} in one; the freest of the {plural(nr.domains, 'domain')}, "
        f"{nr.freest}, has {amount(nr.resource, nr.largest)} free"
    )


def no_topology_ever(pool: str, nr: NoRoom) -> str:
    """A group whose LWS requires one domain of a topology level that none could ever hold."""
    if nr.domains == 0:
        return (
            f"can never be placed: its LWS asks for one {nr.key} domain, and no node of pool {pool} "
            "carries that label (and those of the wider levels)"
        )
    return (
        f"can never be placed: its LWS asks for one {nr.key} domain; "
        f"it needs {amount(nr.resource, nr.needed)}, and the largest of pool {pool}'s "
        f"{plural(nr.domains, 'domain')} has {amount(nr.resource, nr.largest)}"
    )


def topology_not_in_pool(pool: str, key: str, levels: Sequence[str]) -> str:
    """A group whose LWS asks for a topology level its Pool does not have."""
    if not levels:
        return f"asks for one {key} domain (topology annotation), but pool {pool} has no spec.topology.levels"
    return (
        f"asks for one {key} domain (topology annotation), but it is not one of pool {pool}'s "
        f"spec.topology.levels ({', '.join(levels)})"
    )


def waits_for_nodes(pool: str, misfit: Misfit) -> str:
    """A group whose quota fits but whose pods do not all fit the pool's free node room now."""
    head = f"fits pool {pool}'s quota but not its nodes:"
    if misfit.nodes == 0:
        return f"{head} the pool has no schedulable node right now"
    if misfit.eligible == 0:
        nodes = plural(misfit.nodes, "schedulable node")
        return f"{head} pod {misfit.role} matches none of its {nodes} right now"
    if misfit.skew:
        text = (
            f"{head} pod {misfit.role} finds room only on nodes its topologySpreadConstraints "
            f"({misfit.skew}) forbid it now"
        )
    elif misfit.resource is None:
        text = (
            f"{head} pod {misfit.role} needs {_pod_needs(misfit)} "
            "and no pool node has all of that free at once"
        )
    else:
        resource = misfit.resource
        largest = format_amount(resource, misfit.largest)
        total = format_amount(resource, misfit.total)
        text = (
            f"{head} pod {misfit.role} needs {amount(resource, misfit.needed)}; "
            f"the largest free on any pool node is {largest} "
            f"({total} free in all, on {plural(misfit.spread, 'node')})"
        )
    if misfit.placed:
        text += f", after placing the group's other {plural(misfit.placed, 'pod')}"
    return text


def blocked(pool: str, blocker: str) -> str:
    return f"waits behind {blocker}: pool {pool} is StrictFIFO"


def cannot_launch(pool: str, node_pools: Sequence[str], role: str) -> str:
    """A group of a pool with NodePools that neither its nodes nor its NodePools could ever hold."""
    names = ", ".join(node_pools)
    return (
        f"can never be placed: pod {role} fits none of pool {pool}'s nodes, even empty, and no "
        f"instance type NodePool {names} may launch holds it (its requirements, taints, limits "
        "and available offerings)"
    )


def waits_for_launch(pool: str, role: str, launchable: str) -> str:
    """A group whose pods fit neither the free room of the pool's nodes nor what its NodePools can launch."""
    return (
        f"does not fit pool {pool}'s free node room plus what its NodePools can still launch: "
        f"pod {role} finds no room ({launchable}); no node is bought for part of it"
    )
