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
    SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION,
    SUBGROUP_INDEX_LABEL,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
)

from .attack_support import dev
from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, records, states
from .test_policies import ok
from .test_tenant_pools import plain_lws, pods_of, tolerate

BLOCK, RACK, HOST = "topology.example.com/block", "topology.example.com/rack", "topology.example.com/host"
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

    async def made() -> bool:
        return len(await pods_of(api, namespace, "need")) == 2

    await eventually(made, timeout=60, what="the group's two pods made (gated)")
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


async def test_each_subgroup_gets_a_host_of_its_own_or_the_group_waits(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
) -> None:
    """Three hosts of 16 GPUs; an LWS of two groups of four 4-GPU pods in two subgroups
    (prefill, decode) that LWS keeps each alone on a host. The GPUs add up for both groups
    (32 of 48), the hosts hold one: the second group waits gated, with the reason."""
    nodes = await fake_nodes(3, gpus=16)
    host = {name: name for name in nodes.names}
    for name in nodes.names:
        await ok(cluster, "label", "node", name, f"{HOST}={host[name]}")
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 48}, tolerations=tolerate(nodes.id))
    tenant = await dev(cluster, namespace, tmp_path)
    body = plain_lws("split", pool, size=4, replicas=2)
    body["metadata"]["annotations"] = {SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION: HOST}
    body["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = {"subGroupSize": 2}
    container = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    container["resources"]["limits"]["nvidia.com/gpu"] = "4"
    await ok(cluster, "apply", "-f", "-", "-n", namespace, kubeconfig=tenant, input=json.dumps(body))

    async def one_group_running() -> bool:
        pods = await pods_of(api, namespace, "split")
        return sum(1 for p in pods if p.get("status", {}).get("phase") == "Running") == 4

    await eventually(one_group_running, timeout=120, what="one whole group Running")
    await anyio.sleep(HELD_SECONDS)
    pods = await pods_of(api, namespace, "split")
    by_group: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_group.setdefault(pod["metadata"]["labels"][GROUP_INDEX_LABEL], []).append(pod)
    running = [g for g, ps in by_group.items() if all(p["status"].get("phase") == "Running" for p in ps)]
    assert len(running) == 1, f"groups Running: {running}"
    subgroup_hosts: dict[str, set[str]] = {}
    for pod in by_group[running[0]]:
        subgroup_hosts.setdefault(pod["metadata"]["labels"][SUBGROUP_INDEX_LABEL], set()).add(
            pod["spec"]["nodeName"]
        )
    assert len(subgroup_hosts) == 2 and all(len(h) == 1 for h in subgroup_hosts.values()), subgroup_hosts
    assert subgroup_hosts["0"] != subgroup_hosts["1"], subgroup_hosts
    (other,) = set(by_group) - set(running)
    stuck = [p["metadata"]["name"] for p in by_group[other] if not gated(p) or p["spec"].get("nodeName")]
    assert not stuck, f"pods of group {other} let through onto room the scheduler cannot bind: {stuck}"
    recs = await records(api, namespace, "split")
    said = condition(recs[int(other)])
    assert said.get("reason") == "WaitingForNodes", states(recs)
    assert f"finds no {HOST} domain of its own (subgroup-exclusive-topology)" in said.get("message", ""), said


async def test_a_pinned_group_that_loses_its_racks_room_is_given_back_and_admitted_into_another(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
) -> None:
    """A group of two 8-GPU pods required in one rack runs in r1 (two nodes). One of its nodes
    fails (cordoned, its pod deleted): LWS makes the group again, pinned to r1, where one node
    is left; the pod that finds no room there is waited for, then the group is given back whole
    (``Stranded``) and admitted anew into r2, where it runs."""
    nodes = await fake_nodes(2, gpus=8, labels={RACK: "r1"})
    await fake_nodes(2, gpus=8, labels={RACK: "r2"}, join=nodes)
    rack = {name: ("r1", "r2")[i // 2] for i, name in enumerate(nodes.names)}
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 32}, tolerations=tolerate(nodes.id), levels=[RACK])
    body = racked_lws("moved", pool, TOPOLOGY_REQUIRED_ANNOTATION, 8)
    body["metadata"]["namespace"] = namespace
    await ok(cluster, "apply", "-f", "-", input=json.dumps(body))

    async def running_in(where: str) -> bool:
        pods = await pods_of(api, namespace, "moved")
        return len(pods) == 2 and all(
            p.get("status", {}).get("phase") == "Running" and rack.get(p["spec"].get("nodeName", "")) == where
            for p in pods
        )

    await eventually(lambda: running_in("r1"), timeout=90, what="the group Running in r1")

    async def placed() -> bool:  # whole under its admission: from now on a lost pod is Stranded
        return bool((await records(api, namespace, "moved")).get(0, {}).get("status", {}).get("placedAt"))

    await eventually(placed, timeout=60, what="the record to say the group was placed whole")
    victim = next(
        p for p in await pods_of(api, namespace, "moved") if p["spec"]["nodeName"] == nodes.names[0]
    )
    await ok(cluster, "cordon", nodes.names[0])
    await ok(cluster, "delete", "pod", victim["metadata"]["name"], "-n", namespace, "--wait=false")

    async def stranded() -> bool:
        said = condition((await records(api, namespace, "moved")).get(0, {}))
        return said.get("reason") == "Stranded" or (said.get("status") == "True" and await running_in("r2"))

    await eventually(stranded, timeout=120, what="the group given back as Stranded")
    await eventually(lambda: running_in("r2"), timeout=120, what="the group admitted anew and Running in r2")
    recs = await records(api, namespace, "moved")
    assert recs[0]["status"].get("domain") == {RACK: "r2"}, recs[0]["status"]


async def test_a_group_whose_spread_rule_leaves_a_pod_no_room_waits_until_the_scheduler_could_bind_it(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
) -> None:
    """Four 8-GPU hosts, one of them full; a group of four 2-GPU pods, spread one a host
    (maxSkew 1 over the hostname, minDomains 4, each group on its own by LWS's group key).
    The GPUs add up (24 free on three hosts), but the fourth pod has room only where the rule
    forbids it: the group waits gated with the rule named, rather than being admitted with a
    pod the scheduler can never bind. Once the full host empties, all four run, one a host."""
    nodes = await fake_nodes(4, gpus=8)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 32}, tolerations=tolerate(nodes.id))
    body = filler("fill", nodes.names[0], 8, nodes.id)
    body["metadata"]["namespace"] = namespace
    full = await Pod(body, api=api)
    await full.create()
    tenant = await dev(cluster, namespace, tmp_path)
    lws = plain_lws("spread", pool, size=4)
    spec = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "minDomains": 4,
            "labelSelector": {"matchLabels": {"app": "spread"}},
            "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/group-key"],
        }
    ]
    await ok(cluster, "apply", "-f", "-", "-n", namespace, kubeconfig=tenant, input=json.dumps(lws))

    async def told() -> bool:
        said = condition((await records(api, namespace, "spread")).get(0, {}))
        return said.get("reason") == "WaitingForNodes"

    await eventually(told, timeout=60, what="the spread group waiting for nodes")
    await anyio.sleep(HELD_SECONDS)
    recs = await records(api, namespace, "spread")
    said = condition(recs[0]).get("message", "")
    assert not admitted(recs[0]), states(recs)
    assert "topologySpreadConstraints (maxSkew 1 over kubernetes.io/hostname) forbid it now" in said, said
    pods = await pods_of(api, namespace, "spread")
    assert pods and all(gated(p) and not p["spec"].get("nodeName") for p in pods), "held gated"

    await full.delete(grace_period=0)

    async def running() -> bool:
        pods = await pods_of(api, namespace, "spread")
        return len(pods) == 4 and all(p.get("status", {}).get("phase") == "Running" for p in pods)

    await eventually(running, timeout=90, what="the spread group Running")
    hosts = sorted(p["spec"]["nodeName"] for p in await pods_of(api, namespace, "spread"))
    assert hosts == sorted(nodes.names), hosts  # one a host: the scheduler bound every pod
