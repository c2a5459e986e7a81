"""A group's reservation is held until its pods are gone, however its LWS or record goes.

Each test admits one group that fills its Pool's quota, takes away what the gatekeeper's
record of it hangs on (its LWS, deleted without its pods; its namespace), and checks that a
second LWS of the same demand stays waiting while the first group's pods live, and is
admitted once they are gone. The nodes have room for both groups: only the quota (held
by the record) stands in the second one's way.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import kr8s
import kr8s.asyncio
from kr8s.asyncio.objects import Namespace, Pod

from gatekeeper.core.kube.keys import LWS_NAME_LABEL
from gatekeeper_lab.sandbox.replay import list_raw, settle

from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, orphaning
from .test_admission import create_lws, lws_body, lws_pods

HOLD = "test.lws-gatekeeper.io/hold"
"""A finalizer of the test's own: it keeps a deleted pod terminating (still live) until removed."""


async def records_of(api: kr8s.asyncio.Api, namespace: str, name: str) -> list[dict[str, Any]]:
    """The records of one LWS (``conftest.records`` keys them by group index alone)."""
    objs = await list_raw(api, "groupadmissions.lws-gatekeeper.io", namespace=namespace)
    return [r for r in objs if r["spec"]["leaderWorkerSet"] == name]


async def _waits_for_quota(api: kr8s.asyncio.Api, namespace: str, name: str) -> bool:
    pods = await lws_pods(api, namespace, name)
    recs = await records_of(api, namespace, name)
    return (
        len(pods) == 2
        and all(p["spec"].get("schedulingGates") for p in pods)
        and len(recs) == 1
        and condition(recs[0]).get("reason") == "WaitingForQuota"
    )


async def _admitted_whole(api: kr8s.asyncio.Api, namespace: str, name: str) -> None:
    """B is admitted once A's pods are gone: wait for its whole group to run (a settled
    snapshot alone may be B still gated while A's release is under way: CI saw that)."""

    async def whole() -> bool:
        v = await settle(api, namespace, name, expected_pods=2, size=2, timeout=30, stable_for=1.0)
        return v.whole_groups == 1

    await eventually(
        whole, timeout=90, what=f"{name}'s group admitted and running whole once A's pods are gone"
    )


async def _stays_waiting(api: kr8s.asyncio.Api, namespace: str, name: str, seconds: float = 8.0) -> None:
    """B waits for quota, and still does after several passes (the resync is 10 s at most,
    watch events make a pass at once)."""
    await eventually(lambda: _waits_for_quota(api, namespace, name), what=f"{name} to wait for quota")
    with anyio.move_on_after(seconds):
        while True:
            assert await _waits_for_quota(api, namespace, name), f"{name} was let through over the quota"
            await anyio.sleep(0.5)


async def test_orphaned_pods_of_a_deleted_lws_hold_its_quota(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    """Delete LWS A with orphan propagation: its pods keep running, and so does its hold on
    the quota; B waits. Once A's pods are deleted, B is admitted."""
    nodes = await fake_nodes(4, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    await create_lws(api, namespace, lws_body("first", pool, nodes))
    v = await settle(api, namespace, "first", expected_pods=2, size=2)
    assert v.whole_groups == 1

    for args in orphaning("first", namespace):
        cluster.kubectl(*args)
    await create_lws(api, namespace, lws_body("second", pool, nodes))
    await _stays_waiting(api, namespace, "second")
    left = await lws_pods(api, namespace, "first")
    assert len(left) == 2 and all(p["spec"].get("nodeName") for p in left), "A's pods still run"
    held = await records_of(api, namespace, "first")
    assert len(held) == 1 and admitted(held[0]), "A's record stays and holds its quota"

    # The orphans' owners (the leader StatefulSet, the leader pod) are orphaned too: delete them all.
    owned = f"{LWS_NAME_LABEL}=first"
    cluster.kubectl("delete", "statefulsets,pods", "-n", namespace, "-l", owned)
    await _admitted_whole(api, namespace, "second")

    async def first_released() -> bool:
        return not await records_of(api, namespace, "first")

    await eventually(first_released, what="A's record to go once its pods are gone")


async def test_a_deleted_namespace_holds_its_quota_until_its_pods_are_gone(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    """Delete A's namespace while a (test) finalizer keeps one of its pods terminating: its
    record stays, B (in another namespace) waits; when the pod goes, B is admitted and the
    namespace is gone (the record's finalizer does not keep it).

    The sandbox's Kubernetes (1.37) deletes a namespace's pods before its other objects
    (ordered namespace deletion), so here the record is deleted only after the pod is gone;
    where that is off, the namespace controller deletes it at once, and its finalizer holds
    it (the unit tests' ``gc-*`` cases). So this test passes without the finalizer too."""
    nodes = await fake_nodes(4, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    doomed = f"doomed-{uuid.uuid4().hex[:5]}"
    await (await Namespace({"metadata": {"name": doomed}}, api=api)).create()
    with anyio.fail_after(30):
        while not await list_raw(api, "serviceaccounts", namespace=doomed):
            await anyio.sleep(0.2)
    await create_lws(api, doomed, lws_body("first", pool, nodes))
    v = await settle(api, doomed, "first", expected_pods=2, size=2)
    assert v.whole_groups == 1
    worker = await Pod.get("first-0-1", namespace=doomed, api=api)
    await worker.patch({"metadata": {"finalizers": [HOLD]}})

    await (await Namespace.get(doomed, api=api)).delete()
    try:
        await create_lws(api, namespace, lws_body("second", pool, nodes))
        await _stays_waiting(api, namespace, "second")
        [held] = await records_of(api, doomed, "first")
        assert admitted(held), "A's record stays and still holds the quota"
    finally:
        await worker.patch({"metadata": {"finalizers": None}})
    await _admitted_whole(api, namespace, "second")

    async def gone() -> bool:
        try:
            await Namespace.get(doomed, api=api)
        except kr8s.NotFoundError:
            return True
        return False

    await eventually(gone, timeout=90, what=f"namespace {doomed} to be deleted")
