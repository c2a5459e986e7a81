"""A disaggregated slice admitted whole, on the sandbox, with LWS's own DisaggregatedSet.

LWS v0.9.0's DisaggregatedSet controller makes one LWS per role (here prefill and decode, each
one group of two one-GPU pods), labelled with the set's name and revision. The roles' LWSs
require one rack (``lws-gatekeeper.io/topology-required``), so the slice (4 GPUs) goes whole
into one rack or waits. Two racks of two 2-GPU nodes; pods bound straight onto one node of
each rack leave 3 GPUs free in each: either role alone (2 GPUs) would fit a rack, the slice
fits none. Both roles wait gated with the gang's reason; once one rack is free, both are
admitted into it together and run there.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import kr8s.asyncio
from kr8s.asyncio.objects import Pod

from gatekeeper.core.kube.keys import (
    DISAGGREGATED_SET_LABEL,
    GANG_SIZE_ANNOTATION,
    LWS_NAME_LABEL,
    POOL_LABEL,
    TOPOLOGY_REQUIRED_ANNOTATION,
)
from gatekeeper_lab.sandbox.replay import list_raw

from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, records, states
from .test_policies import ok
from .test_tenant_pools import tolerate
from .test_topology import filler, gated

RACK = "topology.example.com/rack"
HELD_SECONDS = 6


def disaggregated_set(name: str, pool: str) -> dict[str, Any]:
    def role(role_name: str) -> dict[str, Any]:
        template = {
            "metadata": {"labels": {"role": role_name}},
            "spec": {
                "containers": [
                    {"name": "c", "image": "vllm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ]
            },
        }
        return {
            "name": role_name,
            "metadata": {
                "labels": {POOL_LABEL: pool},
                # one rack for the slice; two LWSs in the gang (the set makes them one by one)
                "annotations": {TOPOLOGY_REQUIRED_ANNOTATION: RACK, GANG_SIZE_ANNOTATION: "2"},
            },
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": template}},
        }

    return {
        "apiVersion": "disaggregatedset.x-k8s.io/v1",
        "kind": "DisaggregatedSet",
        "metadata": {"name": name},
        "spec": {"roles": [role("prefill"), role("decode")]},
    }


async def test_a_slice_of_two_roles_waits_whole_and_runs_whole_in_one_rack(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    nodes = await fake_nodes(2, gpus=2, labels={RACK: "r1"})
    await fake_nodes(2, gpus=2, labels={RACK: "r2"}, join=nodes)
    rack = {name: ("r1", "r2")[i // 2] for i, name in enumerate(nodes.names)}
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 8}, tolerations=tolerate(nodes.id), levels=[RACK])
    fillers = []
    for i in (0, 2):
        body = filler(f"fill-{i}", nodes.names[i], 1, nodes.id)
        body["metadata"]["namespace"] = namespace
        fillers.append(await Pod(body, api=api))
        await fillers[-1].create()
    await ok(cluster, "apply", "-n", namespace, "-f", "-", input=json.dumps(disaggregated_set("ds", pool)))

    async def role_lwss() -> list[dict[str, Any]]:
        objs = await list_raw(api, "leaderworkersets", namespace=namespace)
        return [o for o in objs if o["metadata"].get("labels", {}).get(DISAGGREGATED_SET_LABEL) == "ds"]

    async def both_made() -> bool:
        return len(await role_lwss()) == 2

    await eventually(both_made, timeout=60, what="the DisaggregatedSet's two role LWSs")
    names = sorted(o["metadata"]["name"] for o in await role_lwss())

    async def pods() -> list[dict[str, Any]]:
        found = await list_raw(api, "pods", namespace=namespace)
        return [p for p in found if p["metadata"].get("labels", {}).get(LWS_NAME_LABEL) in names]

    async def all_told() -> bool:
        said = [condition((await records(api, namespace, n)).get(0, {})) for n in names]
        return all(s.get("reason") == "WaitingForNodes" for s in said)

    await eventually(all_told, timeout=60, what="both roles waiting for nodes")

    async def made() -> bool:
        return len(await pods()) == 4

    await eventually(made, timeout=60, what="the four pods made (gated)")
    await anyio.sleep(HELD_SECONDS)
    for n in names:
        recs = await records(api, namespace, n)
        said = condition(recs[0]).get("message", "")
        assert not admitted(recs[0]), states(recs)
        assert "all or none" in said and "DisaggregatedSet ds" in said, said
        assert f"no {RACK} domain has room for the whole group" in said, said
    stuck = [p["metadata"]["name"] for p in await pods() if not gated(p) or p["spec"].get("nodeName")]
    assert not stuck, f"pods let through while their slice cannot be placed whole: {stuck}"

    await fillers[1].delete(grace_period=0)  # r2 is free: 4 GPUs, the whole slice

    async def running_in_r2() -> bool:
        found = await pods()
        return len(found) == 4 and all(
            p["status"].get("phase") == "Running" and rack.get(p["spec"].get("nodeName", "")) == "r2"
            for p in found
        )

    await eventually(running_in_r2, timeout=90, what="both roles Running in r2")
    for n in names:
        recs = await records(api, namespace, n)
        assert admitted(recs[0]) and recs[0]["status"].get("domain") == {RACK: "r2"}, recs[0]["status"]
