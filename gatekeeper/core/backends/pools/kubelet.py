"""What a node Karpenter buys keeps for itself: the room a pod of an admitted group finds there.

Why this exists: a pool with ``spec.nodePools`` admits a group onto nodes not bought yet
(``provisioning.Launcher``), on each instance type's allocatable: its capacity less what the
kubelet reserves (kube-reserved, system-reserved, the eviction threshold). Karpenter publishes
no instance-type objects, and the reservation differs by cloud and type, so the room is read,
in this order of trust:

1. what the type's launched NodeClaims report (``status.allocatable``, the least of them per
   resource): the cloud's own word, used wherever it is less than the model's;
2. the type's ``overhead``, as the instance-types file gives it;
3. without either, an estimate on the safe side (``estimated_overhead``): the larger of the
   reservations GKE and EKS document for a node of that capacity, plus the kubelet's default
   hard eviction threshold (100Mi of memory).

Each type planned on anything but its file says so (``planned_room``'s note; the Pool's
status carries the notes of its NodePools' types). Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction as F

from gatekeeper.core.backends.pools.nodepools import INSTANCE_TYPE_LABEL, InstanceType, NodeClaim
from gatekeeper.core.kube.quantity import format_resources
from gatekeeper.core.model.demand import Resources

__all__ = ["estimated_overhead", "observed_allocatable", "planned_room"]

MI = 1024**2
GI = 1024**3
EVICTION_HARD = 100 * MI
"""The kubelet's default ``evictionHard`` of ``memory.available``."""
DEFAULT_MAX_PODS = 110

# (cores or bytes up to which, fraction reserved) of each tier, as GKE and EKS document them.
_CPU_TIERS = ((1000, F(6, 100)), (2000, F(1, 100)), (4000, F(5, 1000)), (None, F(25, 10000)))
_GKE_MEMORY_TIERS = (
    (4 * GI, F(25, 100)),
    (8 * GI, F(20, 100)),
    (16 * GI, F(10, 100)),
    (128 * GI, F(6, 100)),
    (None, F(2, 100)),
)


def _tiered(amount: int, tiers: tuple[tuple[int | None, F], ...]) -> int:
    """The reservation of ``amount`` by ``tiers``, rounded up; exact for any size."""
    reserved, below = F(0), 0
    for upto, fraction in tiers:
        top = amount if upto is None else min(amount, upto)
        if top > below:
            reserved += (top - below) * fraction
        if upto is None or amount <= upto:
            break
        below = upto
    return math.ceil(reserved)


def estimated_overhead(capacity: Mapping[str, int]) -> dict[str, int]:
    """What a node of ``capacity`` keeps, on the safe side: CPU by the tiers GKE and EKS share
    (6% of the first core, 1% of the second, 0.5% of the next two, 0.25% above), memory the
    larger of GKE's tiers (255Mi under 1Gi) and EKS's ``255Mi + 11Mi x maxPods``, plus the
    eviction threshold. Nothing of other resources (devices are not reserved)."""
    out: dict[str, int] = {}
    cpu = capacity.get("cpu", 0)
    if cpu > 0:
        out["cpu"] = min(_tiered(cpu, _CPU_TIERS), cpu)
    memory = capacity.get("memory", 0)
    if memory > 0:
        gke = 255 * MI if memory < GI else _tiered(memory, _GKE_MEMORY_TIERS)
        eks = 255 * MI + 11 * MI * capacity.get("pods", DEFAULT_MAX_PODS)
        out["memory"] = min(max(gke, eks) + EVICTION_HARD, memory)
    return out


def observed_allocatable(claims: Iterable[NodeClaim]) -> dict[str, dict[str, int]]:
    """Per instance type (its label on the claim): the least ``status.allocatable`` its launched
    NodeClaims report, per resource; claims not launched yet, or unlabelled, say nothing."""
    out: dict[str, dict[str, int]] = {}
    for claim in claims:
        kind = claim.labels.get(INSTANCE_TYPE_LABEL)
        if not kind or not claim.allocatable:
            continue
        seen = out.setdefault(kind, {})
        for resource, amount in claim.allocatable.items():
            seen[resource] = min(seen.get(resource, amount), amount)
    return out


def planned_room(it: InstanceType, seen: Mapping[str, int] | None) -> tuple[Resources, str]:
    """The allocatable a node of ``it`` is planned on, and a note when it is not the file's."""
    if seen:
        room = {r: min(a, seen[r]) if r in seen else a for r, a in it.allocatable.items()}
        less = {r: room[r] for r in room if room[r] < it.allocatable[r]}
        if not less:
            return room, ""
        return room, (
            f"instance type {it.name}: planned on the allocatable its NodeClaims show "
            f"({format_resources(less)}), less than its file gives"
        )
    if it.overhead_given:
        return dict(it.allocatable), ""
    kept = estimated_overhead(it.capacity)
    room = {r: max(a - kept.get(r, 0), 0) for r, a in it.allocatable.items()}
    return room, (
        f"instance type {it.name} gives no overhead: planned on its capacity less an estimate of "
        f"what its nodes keep ({format_resources(kept) or 'nothing'}), until a NodeClaim of it shows "
        "its allocatable"
    )
