"""Pods on a closed pool's nodes that no admission let there: counted against its quota.

Why this exists: a closed pool's nodes carry the taint ``lws-gatekeeper.io/pool``
(``core.model.closed``), and only the gatekeeper should give a pod a toleration of it. The
policy ``lws-gatekeeper-closed-pools`` refuses one anyone else writes; where that policy
is off (or a pod got there before it), a pod that tolerates the taint by itself can bind
on the pool's nodes and take what the pool's quota was to give to admitted groups. So
such a pod, an *intruder*, is held against the quota of every pool whose nodes it is on,
as if it were an admitted group, and the Pool's status names it: the pool then admits
only what its quota has left, and what is bound on its nodes stays within the quota.

An intruder is a live pod bound on a node tainted with that key, which carries no charge
mark (``core.model.charge``: the pods the gatekeeper let through are charged to their groups
already), carries a toleration that opens closed pools (``closed.opening_tolerations``:
a pod bound there before the node was tainted is not one), and is not in an exempt
namespace (those of DaemonSets that run on every node, as the policy exempts them).

Called by ``backends.pools.decide`` for the planner (``planner.plan``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.core.kube.keys import POOL_TAINT_KEY
from gatekeeper.core.kube.objects import as_map, is_live, meta
from gatekeeper.core.model.charge import charged_to
from gatekeeper.core.model.closed import opening_tolerations
from gatekeeper.core.model.demand import pod_requests
from gatekeeper.core.model.nodes import Node
from gatekeeper.core.model.pool import Pool

__all__ = ["Intruders", "intruders"]


@dataclass(frozen=True)
class Intruders:
    """The intruders on one pool's nodes: ``namespace/name`` of each, and what they ask."""

    pods: tuple[str, ...] = ()
    requests: Mapping[str, int] = field(default_factory=dict)
    """Their requests summed, with ``pods`` (their count), as an admitted group holds."""


def intruders(
    pools: Iterable[Pool],
    nodes: Iterable[Node],
    bound_pods: Iterable[Mapping[str, Any]],
    exempt: Collection[str],
) -> dict[str, Intruders]:
    """The intruders of each pool that has any, by pool name (see the module)."""
    closed = {n.name: n for n in nodes if any(t.key == POOL_TAINT_KEY for t in n.taints)}
    if not closed:
        return {}
    pool_list = list(pools)
    pods: dict[str, list[str]] = {}
    asked: dict[str, dict[str, int]] = {}
    for pod in bound_pods:
        spec = as_map(pod.get("spec"))
        node = closed.get(str(spec.get("nodeName") or ""))
        namespace = str(meta(pod).get("namespace") or "")
        if node is None or namespace in exempt or not is_live(pod) or charged_to(pod) is not None:
            continue
        if not opening_tolerations(spec):
            continue
        try:
            requests = pod_requests(spec)
        except (ValueError, ArithmeticError):
            requests = {}  # unreadable requests: the pod still counts as one
        requests = {**requests, "pods": 1}
        for pool in pool_list:
            if not pool.selects(node):
                continue
            pods.setdefault(pool.name, []).append(f"{namespace}/{meta(pod).get('name') or ''}")
            held = asked.setdefault(pool.name, {})
            for resource, amount in requests.items():
                held[resource] = held.get(resource, 0) + amount
    return {name: Intruders(tuple(sorted(found)), asked[name]) for name, found in pods.items()}
