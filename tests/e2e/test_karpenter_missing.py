"""Karpenter's API missing: the pools that plan on it wait, saying why; every other pool goes on.

The main sandbox runs no Karpenter, so its API server serves no ``karpenter.sh/v1``. Its
gatekeeper is restarted with ``--karpenter-instance-types`` (as the chart runs it with
``karpenter.instanceTypes`` set): its NodePool and NodeClaim lists fail with a 404. A Pool
naming a NodePool admits nothing, its groups' records saying ``KarpenterUnavailable``
and the error; a Pool without ``spec.nodePools`` admits a whole group as before (the
admission loop used to wait for every informer's first list, and admitted nothing in any
pool). The gatekeeper is restarted as it was afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kr8s.asyncio
import pytest
from kr8s.asyncio.objects import Pod

from gatekeeper_lab.sandbox import gatekeeper as gk
from gatekeeper_lab.sandbox.karpenter import instance_types
from gatekeeper_lab.sandbox.replay import settle

from .conftest import Cluster, MakeNodes, MakePool, condition, eventually
from .test_admission import create_lws, lws_body
from .test_release import records_of


@pytest.fixture
async def without_karpenter(cluster: Cluster, tmp_path: Path) -> AsyncIterator[None]:
    sb = cluster.sandbox
    assert sb is not None, "this test restarts the sandbox's gatekeeper"
    types = tmp_path / "instance-types.json"
    types.write_text(instance_types())
    sb.stop(gk.COMPONENT)
    sb.start_gatekeeper(args=[f"--karpenter-instance-types={types}"])
    try:
        yield
    finally:
        sb.stop(gk.COMPONENT)
        sb.start_gatekeeper()


async def test_a_pool_on_a_missing_karpenter_waits_and_the_others_admit(
    api: kr8s.asyncio.Api,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    without_karpenter: None,
) -> None:
    plain_nodes = await fake_nodes(2, gpus=1)
    plain = await make_pool(plain_nodes, quota={"nvidia.com/gpu": 2})
    karp_nodes = await fake_nodes(2, gpus=1)
    karp = await make_pool(karp_nodes, quota={"nvidia.com/gpu": 2})
    karp_pool = await kr8s.asyncio.objects.new_class(
        "Pool", "lws-gatekeeper.io/v1alpha1", namespaced=False
    ).get(karp, api=api)
    await karp_pool.patch({"spec": {"nodePools": ["gpu-np"]}})
    await create_lws(api, namespace, lws_body("plain", plain, plain_nodes))
    await create_lws(api, namespace, lws_body("karp", karp, karp_nodes))

    v = await settle(api, namespace, "plain", expected_pods=2, size=2, timeout=90)
    assert v.whole_groups == 1, "a pool without spec.nodePools admits as before"

    async def says_why() -> bool:
        recs = await records_of(api, namespace, "karp")
        cond: dict[str, Any] = condition(recs[0]) if recs else {}
        return cond.get("reason") == "KarpenterUnavailable"

    await eventually(says_why, timeout=60, what="the karp group's record to say KarpenterUnavailable")
    [rec] = await records_of(api, namespace, "karp")
    message = condition(rec)["message"]
    print(f"\nkarp group 0: {message}")
    assert message.startswith(
        f"group 0 waits: pool {karp} plans on Karpenter's NodePools, and they cannot be read ("
    )
    assert "pools without spec.nodePools, and admitted groups, are not affected" in message
    pods = [
        p
        async for p in api.get(
            Pod, namespace=namespace, label_selector={"leaderworkerset.sigs.k8s.io/name": "karp"}
        )
    ]
    assert pods and all(p.raw["spec"].get("schedulingGates") for p in pods), "its pods stay gated"
