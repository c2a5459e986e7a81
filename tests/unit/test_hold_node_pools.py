"""Pools that plan on Karpenter admit nothing new while its API cannot be read; others go on
(``core.backends.pools.hold_node_pools``)."""

from __future__ import annotations

from core_builders import gpu_nodes, lws, lws_pod, lws_statefulsets, pool, read_pools, record

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools import Snapshot, decide, hold_node_pools

WHY = "nodepools: 404 the server could not find the requested resource (since 2026-12-01T19:00:00Z)"


def scene() -> Snapshot:
    """Two pools of 4 one-GPU nodes each; ``karp`` names a NodePool. An LWS of 3 groups of 2 in
    each: 2 groups fit each pool, the third waits for quota."""
    lwss, pods, records = [], [], []
    for name in ("karp", "plain"):
        the = lws(name).pool(name).uid(f"uid-{name}").size(2).replicas(3).worker(gpu_limit=1).obj()
        lwss.append(the)
        pods += [lws_pod(name, g, w, pool=name) for g in range(3) for w in range(2)]
        records += [record(the, g) for g in range(3)]
    karp = pool("karp").quota(gpu=4).obj()
    karp["spec"]["nodePools"] = ["np"]
    return Snapshot(
        lwss=lwss,
        pods=pods,
        bound_pods=[],
        nodes=[*gpu_nodes(4, prefix="k", pool="karp"), *gpu_nodes(4, prefix="p", pool="plain")],
        pools=read_pools([karp, pool("plain").quota(gpu=4).obj()]),
        records=records,
        statefulsets=lws_statefulsets(lwss, pods),
    )


def test_nothing_is_held_while_karpenter_can_be_read() -> None:
    snap = scene()
    actions = decide(snap)
    assert hold_node_pools(actions, snap, "") is actions


def test_a_pool_on_karpenter_admits_nothing_new_and_says_why_while_others_go_on() -> None:
    snap = scene()
    before = decide(snap)
    assert sorted((a.group.pool, a.group.key.index) for a in before.admit) == [
        ("karp", 0), ("karp", 1), ("plain", 0), ("plain", 1),
    ]  # fmt: skip
    after = hold_node_pools(before, snap, WHY)
    assert sorted((a.group.pool, a.group.key.index) for a in after.admit) == [("plain", 0), ("plain", 1)]
    karp = {w.group.key.index: w for w in after.waiting if w.group.pool == "karp"}
    assert sorted(karp) == [0, 1, 2]
    assert {w.reason for w in karp.values()} == {Reason.KARPENTER_UNAVAILABLE}
    assert karp[0].message == (
        "group 0 waits: pool karp plans on Karpenter's NodePools, and they cannot be read "
        f"({WHY}); pools without spec.nodePools, and admitted groups, are not affected"
    )
    plain = [w for w in after.waiting if w.group.pool == "plain"]
    assert [w.reason for w in plain] == [Reason.WAITING_FOR_QUOTA]
    status = after.pools["karp"]
    assert (status.admitted, status.waiting) == (0, 3)
    assert status.used.get("nvidia.com/gpu", 0) == 0
    assert after.pools["plain"] == before.pools["plain"]
