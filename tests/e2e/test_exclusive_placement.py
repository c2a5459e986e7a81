"""LWS's exclusive placement on the sandbox, in the shape of the LWS project's own example
(``docs/examples/sample/lws-exclusive-placement.yaml``: an LWS of three groups of four with
``leaderworkerset.sigs.k8s.io/exclusive-topology``), with GPUs: two racks of two 8-GPU nodes,
a Pool of 32 GPUs, groups of 4 pods of 2 GPUs.

The GPUs add up for all three groups (24 of 32); the racks hold two, one each, because LWS's
pod webhook gives every pod a required affinity to its group's rack and anti-affinity to
every other group's pods there. The third group must wait gated with the reason, not be
admitted and ungated onto room the scheduler can never bind (``core.admission.exclusive``).
"""

from __future__ import annotations

from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper.core.kube.keys import EXCLUSIVE_TOPOLOGY_ANNOTATION, GROUP_INDEX_LABEL, SCHEDULING_GATE

from .conftest import MakeNodes, MakePool, admitted, condition, eventually, records, states
from .test_tenant_pools import create, plain_lws, pods_of, tolerate

RACK = "topology.example.com/rack"
HELD_SECONDS = 8
"""How long the third group is watched after the first two run: several passes."""


def exclusive_lws(pool: str) -> dict[str, Any]:
    body = plain_lws("ex", pool, size=4, replicas=3)
    body["metadata"]["annotations"] = {EXCLUSIVE_TOPOLOGY_ANNOTATION: RACK}
    container = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    container["resources"]["limits"]["nvidia.com/gpu"] = "2"
    return body


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == SCHEDULING_GATE for g in pod["spec"].get("schedulingGates", []))


async def test_three_exclusive_groups_on_two_racks_run_two_and_hold_the_third(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    nodes = await fake_nodes(2, gpus=8, labels={RACK: "r1"})
    await fake_nodes(2, gpus=8, labels={RACK: "r2"}, join=nodes)
    rack = {name: ("r1" if i < 2 else "r2") for i, name in enumerate(nodes.names)}
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 32}, tolerations=tolerate(nodes.id))
    await create(api, namespace, exclusive_lws(pool))

    async def two_groups_running() -> bool:
        pods = await pods_of(api, namespace, "ex")
        return sum(1 for p in pods if p.get("status", {}).get("phase") == "Running") == 8

    await eventually(two_groups_running, timeout=120, what="two whole groups Running")
    await anyio.sleep(HELD_SECONDS)

    pods = await pods_of(api, namespace, "ex")
    by_group: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_group.setdefault(pod["metadata"]["labels"][GROUP_INDEX_LABEL], []).append(pod)
    running = {g for g, ps in by_group.items() if all(p["status"].get("phase") == "Running" for p in ps)}
    assert len(running) == 2, f"groups Running: {sorted(running)}"
    racks = {g: {rack[p["spec"]["nodeName"]] for p in by_group[g]} for g in running}
    assert sorted(map(sorted, racks.values())) == [["r1"], ["r2"]], f"racks by group: {racks}"

    (third,) = set(by_group) - running
    stuck = [p["metadata"]["name"] for p in by_group[third] if not gated(p) or p["spec"].get("nodeName")]
    assert not stuck, f"pods of group {third} let through onto room the scheduler cannot bind: {stuck}"
    recs = await records(api, namespace, "ex")
    record = recs[int(third)]
    assert not admitted(record), states(recs)
    said = condition(record)
    assert said.get("reason") == "WaitingForNodes", states(recs)
    assert f"no {RACK} domain has room for it alone" in said.get("message", ""), said
    assert sum(1 for r in recs.values() if admitted(r)) == 2, states(recs)

    # A plain LWS of the namespace (no annotation), one pod of one GPU: each rack has 8 GPUs
    # free, but the exclusive groups' anti-affinity keeps it out of both. Told from their
    # bound pods (the annotation LWS copies to them), it waits gated, not let through.
    await create(api, namespace, plain_lws("plain", pool, size=1, replicas=1))

    async def plain_told() -> bool:
        recs = await records(api, namespace, "plain")
        return 0 in recs and condition(recs[0]).get("reason") == "WaitingForNodes"

    await eventually(plain_told, timeout=60, what="the plain LWS's group told WaitingForNodes")
    await anyio.sleep(HELD_SECONDS / 2)
    plain = await records(api, namespace, "plain")
    assert not admitted(plain[0]), states(plain)
    assert "only in topology.example.com/rack domains" in condition(plain[0]).get("message", ""), plain[0]
    assert all(gated(p) for p in await pods_of(api, namespace, "plain"))
