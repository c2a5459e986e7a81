"""Topology levels on a Pool, on the sandbox: a group whose LWS requires one rack is admitted
only into a rack that holds it whole, and its pods are pinned there.

Two blocks of racks of two 8-GPU KWOK nodes (b1: r1, r2; b2: r3), a Pool with
``spec.topology.levels: [block, rack]``. Pods bound straight onto the nodes (no scheduler,
not the gatekeeper's) leave 6 GPUs free in every rack: 18 in the pool. The tenant's LWS of one
group of two 6-GPU pods requires one rack: the GPUs add up, no rack holds it, so it waits gated
with the freest rack named. Once the pods on r2 go, the group is admitted into r2 (its record
names b1/r2), its pods are lifted with r2's labels in their node selectors and run there. A
second LWS, of two 3-GPU pods, prefers a rack: it is pinned to the best-fitting rack with room.
The tenant acts as itself (``--as`` its ServiceAccount, ``edit`` in its namespace).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio
from kr8s.asyncio.objects import Pod

from gatekeeper.core.kube.keys import (
    GROUP_INDEX_LABEL,
    SCHEDULING_GATE,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
)

from .attack_support import dev
from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, records, states
from .test_policies import ok
from .test_tenant_pools import plain_lws, pods_of, tolerate

BLOCK, RACK = "topology.example.com/block", "topology.example.com/rack"
HELD_SECONDS = 6
"""How long the required group is watched waiting: several passes."""


def racked_lws(name: str, pool: str, annotation: str, gpus: int) -> dict[str, Any]:
    body = plain_lws(name, pool, size=2, replicas=1)
    body["metadata"]["annotations"] = {annotation: RACK}
    container = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    container["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    return body


def filler(name: str, node: str, gpus: int, nodes_id: str) -> dict[str, Any]:
    """A pod bound straight onto ``node`` (no scheduler, no gatekeeper): room taken."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "tolerations": tolerate(nodes_id),
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
    }


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == SCHEDULING_GATE for g in pod["spec"].get("schedulingGates", []))


async def test_a_group_required_in_one_rack_waits_for_a_rack_and_is_pinned_to_it(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
) -> None:
    nodes = await fake_nodes(2, gpus=8, labels={BLOCK: "b1", RACK: "r1"})
    await fake_nodes(2, gpus=8, labels={BLOCK: "b1", RACK: "r2"}, join=nodes)
    await fake_nodes(2, gpus=8, labels={BLOCK: "b2", RACK: "r3"}, join=nodes)
    rack = {name: ("r1", "r2", "r3")[i // 2] for i, name in enumerate(nodes.names)}
    pool = await make_pool(
        nodes, quota={"nvidia.com/gpu": 48}, tolerations=tolerate(nodes.id), levels=[BLOCK, RACK]
    )
    fillers = []
    for i, name in enumerate(nodes.names):
        body = filler(f"fill-{i}", name, 8 if i % 2 == 0 else 2, nodes.id)
        body["metadata"]["namespace"] = namespace
        fillers.append(await Pod(body, api=api))
        await fillers[-1].create()
    tenant = await dev(cluster, namespace, tmp_path)

    async def apply(body: dict[str, Any]) -> None:
        await ok(cluster, "apply", "-f", "-", "-n", namespace, kubeconfig=tenant, input=json.dumps(body))

    await apply(racked_lws("need", pool, TOPOLOGY_REQUIRED_ANNOTATION, 6))

    async def told() -> bool:
        said = condition((await records(api, namespace, "need")).get(0, {}))
        return said.get("reason") == "WaitingForNodes"

    await eventually(told, timeout=60, what="the required group waiting for nodes")
    await anyio.sleep(HELD_SECONDS)
    recs = await records(api, namespace, "need")
    said = condition(recs[0]).get("message", "")
    assert not admitted(recs[0]), states(recs)
    assert f"no {RACK} domain has room for the whole group (topology-required)" in said, said
    assert "it needs 12 nvidia.com/gpu in one; the freest of the 3 domains" in said, said
    assert "has 6 nvidia.com/gpu free" in said, said
    pods = await pods_of(api, namespace, "need")
    assert pods and all(gated(p) and not p["spec"].get("nodeName") for p in pods), "held gated"

    # r2's pods go: r2 has 16 free, the group is admitted there and its pods pinned to it.
    for pod in fillers[2:4]:
        await pod.delete(grace_period=0)

    async def running(name: str) -> bool:
        pods = await pods_of(api, namespace, name)
        return len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods)

    await eventually(lambda: running("need"), timeout=90, what="the required group Running")
    recs = await records(api, namespace, "need")
    assert recs[0]["status"].get("domain") == {BLOCK: "b1", RACK: "r2"}, recs[0]["status"]
    assert f"in {BLOCK}=b1, {RACK}=r2" in condition(recs[0]).get("message", ""), condition(recs[0])
    for pod in await pods_of(api, namespace, "need"):
        assert rack[pod["spec"]["nodeName"]] == "r2"
        selector = pod["spec"].get("nodeSelector", {})
        assert (selector.get(BLOCK), selector.get(RACK)) == ("b1", "r2"), selector

    # Preferred: two 3-GPU pods. r1 and r3 have 6 free on one node each, r2 2+2: the first
    # rack of the best fit (least free that holds it, then by name) is b1/r1.
    await apply(racked_lws("pref", pool, TOPOLOGY_PREFERRED_ANNOTATION, 3))
    await eventually(lambda: running("pref"), timeout=90, what="the preferred group Running")
    recs = await records(api, namespace, "pref")
    assert recs[0]["status"].get("domain") == {BLOCK: "b1", RACK: "r1"}, recs[0]["status"]
    by_index = {p["metadata"]["labels"][GROUP_INDEX_LABEL] for p in await pods_of(api, namespace, "pref")}
    assert by_index == {"0"}
    for pod in await pods_of(api, namespace, "pref"):
        assert rack[pod["spec"]["nodeName"]] == "r1"
        assert pod["spec"].get("nodeSelector", {}).get(RACK) == "r1", pod["spec"].get("nodeSelector")
