"""Pods of an admitted group are made without the gate, on the sandbox.

The decision is ``core/admission/pass_through.py`` (which pods) and
``core/backends/pools/pass_through.py`` (which groups).

A pod made again for a group that holds its admission (a failed worker, a LeaderReady
group's workers) is made by the webhook ungated and steered to the pool's nodes: the
gatekeeper never has to lift its gate. Groups that wait still have every pod gated.
"""

from __future__ import annotations

import re

import anyio
import kr8s.asyncio
from kr8s.asyncio.objects import Pod

from gatekeeper.core.kube.keys import SCHEDULING_GATE
from gatekeeper_lab.sandbox.replay import list_raw, settle

from .conftest import Cluster, MakeNodes, MakePool, eventually
from .test_admission import create_lws, lws_body


def passed_through(cluster: Cluster) -> float:
    assert cluster.sandbox is not None, "reads the sandbox gatekeeper's metrics"
    found = re.findall(r"^lws_gatekeeper_webhook_pass_through_total (\S+)$", cluster.sandbox.metrics(), re.M)
    return float(found[0]) if found else 0.0


async def test_pods_of_an_admitted_group_are_made_ungated_on_the_pools_nodes(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    """Two groups run, a third waits. A worker of group 0 that fails is made again by its
    StatefulSet (LWS ``restartPolicy: None``): the webhook makes it ungated, steered to the
    pool's nodes, and it runs again; the waiting group's pods stay gated."""
    nodes = await fake_nodes(4, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 4})
    body = lws_body("lr", pool, nodes, size=2, replicas=3, startup="LeaderReady")
    body["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "None"
    await create_lws(api, namespace, body)
    v = await settle(api, namespace, "lr", expected_pods=5, size=2, timeout=120)
    assert sorted(g.index for g in v.groups.values() if g.whole(2)) == [0, 1]
    waiting = v.groups[("lr", 2)]
    assert (waiting.pods, waiting.gated) == (1, 1), "group 2 waits: its leader is gated, no worker yet"
    await anyio.sleep(2)  # a pass after the last change: the table knows groups 0 and 1
    before = passed_through(cluster)
    worker = await Pod.get("lr-0-1", namespace=namespace, api=api)
    old_uid = worker.raw["metadata"]["uid"]
    await worker.delete()

    async def made_again() -> bool:
        pods = await list_raw(api, "pods", namespace=namespace, field_selector="metadata.name=lr-0-1")
        return (
            bool(pods)
            and pods[0]["metadata"]["uid"] != old_uid
            and pods[0]["status"].get("phase") == "Running"
        )

    await eventually(made_again, timeout=60, what="worker lr-0-1 made again and Running")
    assert passed_through(cluster) - before == 1, "the new worker was made without the gate"
    [again] = await list_raw(api, "pods", namespace=namespace, field_selector="metadata.name=lr-0-1")
    assert not [g for g in again["spec"].get("schedulingGates", []) if g["name"] == SCHEDULING_GATE]
    assert again["spec"]["nodeSelector"].items() >= nodes.selector.items(), again["spec"]["nodeSelector"]
    v = await settle(api, namespace, "lr", expected_pods=5, size=2, timeout=60)
    assert sorted(g.index for g in v.groups.values() if g.whole(2)) == [0, 1]
    assert v.groups[("lr", 2)].gated == 1, "the waiting group's leader is still gated"
