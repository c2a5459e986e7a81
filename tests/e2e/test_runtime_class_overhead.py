"""A RuntimeClass's pod overhead is in a group's demand, as the scheduler counts it.

Why this exists: a group's demand is computed from its LWS's templates before its pods exist.
A template that names a ``runtimeClassName`` gets that RuntimeClass's ``overhead.podFixed``
at pod creation (the RuntimeClass admission plugin writes ``spec.overhead``), invisible in the
template; the scheduler and a ResourceQuota count it on top of the containers' requests.
Without it in the demand, a Pool with a cpu quota admits groups whose pods then take more
than the quota holds. Here an admin's RuntimeClass adds 1 cpu to every pod; the tenant's LWS
(made as the tenant, who holds ``edit``) asks 1 cpu per container; the Pool's quota is 5 cpu,
so 2 groups of one pod (2 cpu each) fit and the third waits.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import kr8s.asyncio

from gatekeeper.core.kube.keys import LWS_NAME_LABEL
from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import dev
from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, records, states
from .test_admission import lws_body
from .test_policies import kubectl, ok
from .watch import Watch


async def test_a_runtime_classes_pod_overhead_is_in_the_demand(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
    tmp_path: Path,
) -> None:
    nodes = await fake_nodes(3, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 3, "cpu": 5})
    attack_watch.pool(nodes.selector, 3)
    runtime = f"sandboxed-{uuid.uuid4().hex[:6]}"
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": runtime},
        "handler": "runc",
        "overhead": {"podFixed": {"cpu": "1"}},
    }
    await ok(cluster, "apply", "-f", "-", input=json.dumps(runtime_class))
    try:
        tenant = await dev(cluster, namespace, tmp_path)
        body = lws_body("vllm", pool, nodes, size=1, replicas=3)
        body["metadata"]["namespace"] = namespace
        for role in ("leaderTemplate", "workerTemplate"):
            body["spec"]["leaderWorkerTemplate"][role]["spec"]["runtimeClassName"] = runtime
        code, _, err = await kubectl(cluster, "create", "-f", "-", kubeconfig=tenant, input=json.dumps(body))
        assert code == 0, err

        async def settled() -> bool:
            recs = await records(api, namespace, "vllm")
            return len(recs) == 3 and sum(admitted(r) for r in recs.values()) == 2 and not admitted(recs[2])

        try:
            await eventually(settled, what="2 groups admitted (4 cpu with the overhead), group 2 waiting")
        finally:
            recs = await records(api, namespace, "vllm")
            seen = states(recs)
            attack_table.add(
                "dev: an LWS asking 1 cpu a pod on a RuntimeClass whose overhead adds 1 cpu; quota 5 cpu",
                "bounded",
                seen,
            )
        waiting = condition(recs[2])
        assert waiting["reason"] == "WaitingForQuota" and "cpu" in waiting["message"], waiting
        assert recs[0]["status"]["demand"]["cpu"] == "2", recs[0]["status"]["demand"]

        async def admitted_pods_run() -> bool:
            pods = await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "vllm"})
            return len(pods) == 3 and len([p for p in pods if p["spec"].get("nodeName")]) == 2

        await eventually(admitted_pods_run, timeout=90, what="the admitted groups' 2 pods bound")
        pods = await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "vllm"})
        assert {json.dumps(p["spec"].get("overhead")) for p in pods} == {'{"cpu": "1"}'}, (
            "the RuntimeClass admission gave each pod its overhead"
        )
        assert all(admitted(r) for i, r in (await records(api, namespace, "vllm")).items() if i < 2), (
            "the admitted groups' pods conform to their roles, overhead and all"
        )
    finally:
        await ok(cluster, "delete", "runtimeclass", runtime, "--ignore-not-found")
