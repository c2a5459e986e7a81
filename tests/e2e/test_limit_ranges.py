"""A namespace's LimitRange defaults are in a group's demand, as the API server applies them.

Why this exists: a group's demand is computed from its LWS's templates before its pods exist.
A container that names no request of a resource gets the namespace's LimitRange default at
pod creation (the LimitRanger admission plugin), invisible in the template. Without them in
the demand, a Pool with a cpu quota admits groups whose pods then ask more than the quota
holds, and each pod asks more than its role was admitted with. Here an admin's LimitRange
gives every container 1 cpu by default; the tenant's LWS (made as the tenant, who holds
``edit``) names only GPUs; the Pool's quota is 4 cpu, so 2 groups of 2 fit and the third waits.
"""

from __future__ import annotations

import json
from pathlib import Path

import kr8s.asyncio

from gatekeeper.core.kube.keys import LWS_NAME_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import dev
from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, records, states
from .test_admission import lws_body
from .test_policies import kubectl, ok
from .watch import Watch


async def test_a_limit_ranges_defaults_are_in_the_demand(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
    tmp_path: Path,
) -> None:
    nodes = await fake_nodes(6, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 6, "cpu": 4})
    attack_watch.pool(nodes.selector, 6)
    limits = {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "defaults", "namespace": namespace},
        "spec": {"limits": [{"type": "Container", "default": {"cpu": "1"}}]},
    }
    await ok(cluster, "apply", "-f", "-", input=json.dumps(limits))
    tenant = await dev(cluster, namespace, tmp_path)
    gpu_only = {"limits": {"nvidia.com/gpu": "1"}}
    body = lws_body("vllm", pool, nodes, replicas=3, leader=gpu_only, worker=gpu_only)
    body["metadata"]["namespace"] = namespace
    code, _, err = await kubectl(cluster, "create", "-f", "-", kubeconfig=tenant, input=json.dumps(body))
    assert code == 0, err

    async def settled() -> bool:
        recs = await records(api, namespace, "vllm")
        return len(recs) == 3 and sum(admitted(r) for r in recs.values()) == 2 and not admitted(recs[2])

    try:
        await eventually(settled, what="2 groups admitted (4 cpu), group 2 waiting")
    finally:
        recs = await records(api, namespace, "vllm")
        seen = states(recs)
        attack_table.add(
            "dev: an LWS naming no cpu; its namespace's LimitRange gives a container 1 cpu; quota 4 cpu",
            "bounded",
            seen,
        )
    waiting = condition(recs[2])
    assert waiting["reason"] == "WaitingForQuota" and "cpu" in waiting["message"], waiting
    assert recs[0]["status"]["demand"]["cpu"] == "2", recs[0]["status"]["demand"]

    async def admitted_pods_run() -> bool:
        pods = await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "vllm"})
        bound = [p for p in pods if p["spec"].get("nodeName")]
        return len(pods) == 6 and len(bound) == 4

    await eventually(admitted_pods_run, timeout=90, what="the admitted groups' 4 pods bound")
    pods = await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "vllm"})
    asked = {p["spec"]["containers"][0]["resources"].get("requests", {}).get("cpu") for p in pods}
    assert asked == {"1"}, f"the LimitRange gave each pod 1 cpu: {asked}"
    gated = [p["metadata"]["name"] for p in pods if SCHEDULING_GATE in str(p["spec"].get("schedulingGates"))]
    assert sorted(gated) == ["vllm-2", "vllm-2-1"], gated
    assert all(admitted(r) for i, r in (await records(api, namespace, "vllm")).items() if i < 2), (
        "the admitted groups' pods ask what their roles were admitted with"
    )
