"""Admissions the local plan made, held back: into Pools whose Karpenter view cannot be read.

Why this exists: a Pool with ``spec.nodePools`` plans on what Karpenter's NodePools can
still launch and on the nodes its NodeClaims are bringing up, read from Karpenter's
``karpenter.sh/v1`` API. When that cannot be read (the API is not served, the
gatekeeper may not list it, its lists fail), such a Pool would plan on nothing, or on a
stale view, and must admit no new group; but every other Pool must go on admitting. So
the controller never waits for Karpenter's caches, and after the pass
:func:`hold_node_pools` turns each admission into such a Pool into a wait with reason
``KarpenterUnavailable`` (saying why and since when), and rewrites its waiting groups'
reasons the same way. Admitted groups and their later pods are untouched (their ungating
is not an admission). :func:`held_back` adjusts the Pools' status for groups held back;
``core.backends.pools.hub_member`` uses it for groups that wait for the hub. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.decide import Actions, Snapshot, WaitStatus
from gatekeeper.core.backends.pools.planner import PoolStatus
from gatekeeper.core.model.demand import GroupDemand

__all__ = ["held_back", "hold_node_pools", "karpenter_unavailable"]


def karpenter_unavailable(index: int, pool: str, why: str) -> str:
    return (
        f"group {index} waits: pool {pool} plans on Karpenter's NodePools, and they cannot be read "
        f"({why[:300]}); pools without spec.nodePools, and admitted groups, are not affected"
    )


def hold_node_pools(actions: Actions, snap: Snapshot, why: str) -> Actions:
    """``actions`` with nothing new admitted into Pools with ``spec.nodePools`` while ``why``
    (Karpenter's view cannot be read) is not empty."""
    if not why:
        return actions
    affected = {pool.name for pool in snap.pools.ok if pool.node_pools}
    if not affected:
        return actions
    admit, held = [], []
    for one in actions.admit:
        gs = one.group
        if gs.pool in affected:
            held.append(
                WaitStatus(
                    gs, Reason.KARPENTER_UNAVAILABLE, karpenter_unavailable(gs.key.index, gs.pool, why), 0
                )
            )
        else:
            admit.append(one)
    waiting = [
        replace(
            w,
            reason=Reason.KARPENTER_UNAVAILABLE,
            message=karpenter_unavailable(w.group.key.index, w.group.pool, why),
        )
        if w.group.pool in affected and not w.reason.permanent
        else w
        for w in actions.waiting
    ]
    return replace(
        actions,
        admit=tuple(admit),
        waiting=tuple(waiting) + tuple(held),
        pools=held_back(actions.pools, held),
    )


def held_back(pools: Mapping[str, PoolStatus], waiting: Sequence[WaitStatus]) -> dict[str, PoolStatus]:
    """The Pools' status with ``waiting`` (groups the local plan admitted, now held back)
    counted as waiting and holding nothing."""
    out = dict(pools)
    for wait in waiting:
        st = out.get(wait.group.pool)
        demand = wait.group.demand
        if st is None or not isinstance(demand, GroupDemand):
            continue
        used = {r: max(a - demand.total.get(r, 0), 0) for r, a in st.used.items()}
        free = {r: max(st.quota.get(r, 0) - used.get(r, 0), 0) for r in st.free}
        out[wait.group.pool] = replace(
            st, used=used, free=free, admitted=max(st.admitted - 1, 0), waiting=st.waiting + 1
        )
    return out
