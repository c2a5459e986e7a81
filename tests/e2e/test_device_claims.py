"""GPUs asked through DRA claims are never admitted as nothing.

Why this exists: a pod may ask its accelerators through Dynamic Resource Allocation, a
``spec.resourceClaims`` entry made from a ResourceClaimTemplate and named in a container's
``resources.claims``, instead of ``resources.limits: {nvidia.com/gpu: 1}``. Such a pod asks
no extended resource, so a group of them weighs nothing against a Pool's quota of
``nvidia.com/gpu`` and would be admitted as many times as there are groups. The tenant here
holds ``edit`` in its namespace and makes the ResourceClaimTemplate and the LWS itself; the
cluster has a DRA driver's devices (a DeviceClass and a ResourceSlice per node, as the
driver would publish them), so a claim the scheduler is let to allocate binds a device.

What the gatekeeper does: a group whose templates ask devices through claims cannot be
counted, so it is not admitted: its record says ``InvalidSpec`` with why and what to ask
instead (the extended resource a DeviceClass serves with ``extendedResourceName``, which the
demand counts), its pods stay gated, no device is allocated, and other groups go on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kr8s.asyncio

from gatekeeper.core.kube.keys import SCHEDULING_GATE
from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import dev
from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, records, states
from .test_admission import lws_body
from .test_policies import kubectl
from .watch import Watch

DRIVER = "gpu.example.com"


def _device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def _slice(node: str) -> dict[str, Any]:
    """One GPU on ``node``, as a DRA driver publishes it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }


def _claim_template(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": namespace},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}
        },
    }


def _with_claims(body: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``body`` whose pods ask one GPU each through a claim, and no extended resource."""
    body["metadata"]["namespace"] = namespace
    lwt = body["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        spec = lwt[role]["spec"]
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        for c in spec["containers"]:
            c["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}
    return body


async def test_gpus_asked_through_dra_claims_are_not_admitted_as_nothing(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
    tmp_path: Path,
) -> None:
    nodes = await fake_nodes(4, gpus=0)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    attack_watch.pool(nodes.selector, 2)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [_device_class(), *(_slice(n) for n in nodes.names)]}
    ))  # fmt: skip
    try:
        tenant = await dev(cluster, namespace, tmp_path)
        for obj in (
            _claim_template(namespace),
            _with_claims(lws_body("dra", pool, nodes, replicas=2), namespace),
        ):
            code, _, err = await kubectl(
                cluster, "create", "-f", "-", kubeconfig=tenant, input=json.dumps(obj)
            )
            assert code == 0, err

        async def said() -> bool:
            recs = await records(api, namespace)
            return len(recs) == 2 and all(condition(r).get("reason") == "InvalidSpec" for r in recs.values())

        try:
            await eventually(said, timeout=60, what="both groups' records to say InvalidSpec")
        finally:
            recs = await records(api, namespace)
            seen = states(recs)
            attack_table.add("dev: GPUs asked through DRA claims, no extended resource", "refused", seen)
        message = condition(recs[0])["message"]
        assert "spec.resourceClaims" in message and "extendedResourceName" in message, message
        assert not any(admitted(r) for r in recs.values())

        async def four_pods() -> bool:
            return len(await list_raw(api, "pods", namespace=namespace)) == 4

        await eventually(four_pods, timeout=60, what="the LWS's 4 pods")
        pods = await list_raw(api, "pods", namespace=namespace)
        assert all(
            SCHEDULING_GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []] for p in pods
        ), "every pod stays gated"
        claims = await list_raw(api, "resourceclaims.resource.k8s.io", namespace=namespace)
        assert not [c for c in claims if c.get("status", {}).get("allocation")], "no device is allocated"
    finally:
        cluster.kubectl(
            "delete", "resourceslices", *[f"{n}-{DRIVER}" for n in nodes.names], "--ignore-not-found"
        )
        cluster.kubectl("delete", "deviceclass", DRIVER, "--ignore-not-found")
