"""GPUs asked through DRA claims count against a Pool's quota, by what their DeviceClass names.

Why this exists: a pod may ask its accelerators through Dynamic Resource Allocation, a
``spec.resourceClaims`` entry made from a ResourceClaimTemplate and named in a container's
``resources.claims``, instead of ``resources.limits: {nvidia.com/gpu: 1}``. Such a pod asks
no extended resource, so unless its claims are counted a group of them weighs nothing against
a Pool's quota of ``nvidia.com/gpu``. The tenant here holds ``edit`` in its namespace and makes
the ResourceClaimTemplates and the LWSs itself; the cluster has a DRA driver's devices (a
DeviceClass whose ``extendedResourceName`` is ``nvidia.com/gpu``, and a ResourceSlice of two
devices per node, as the driver would publish them), so a claim the scheduler is let to
allocate binds devices.

What the gatekeeper does: each claim counts as its class's resource times its request's count,
so the groups are admitted as far as the quota goes and the rest wait; a claim that cannot be
counted (``allocationMode: All``) is refused with the reason. A tenant that swaps its template
for one that asks more, makes its group's pods again, and swaps it back, does not get the
bigger claims through: a made pod is judged by the claims made for it.
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
from .test_admission import events_for, lws_body
from .test_policies import kubectl
from .watch import Watch

DRIVER = "gpu.example.com"
GPU = "nvidia.com/gpu"


def device_class(name: str = DRIVER) -> dict[str, Any]:
    """A DeviceClass of the driver's devices, counted as ``nvidia.com/gpu``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
            "extendedResourceName": GPU,
        },
    }


def device_slice(node: str) -> dict[str, Any]:
    """Two GPUs on ``node``, as a DRA driver publishes them."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
        },
    }


def claim_template(
    namespace: str, name: str = "one-gpu", device_class: str = DRIVER, **exactly: Any
) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class, **exactly}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def with_claims(body: dict[str, Any], namespace: str, template: str = "one-gpu") -> dict[str, Any]:
    """``body`` whose pods ask their GPUs through a claim from ``template``, and no extended resource."""
    body["metadata"]["namespace"] = namespace
    lwt = body["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        spec = lwt[role]["spec"]
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
        for c in spec["containers"]:
            c["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}
    return body


def _devices(claims: list[dict[str, Any]], lws: str) -> list[int]:
    """The devices each claim of ``lws``'s pods asks, by the claims made for them."""
    return sorted(
        sum(r.get("exactly", {}).get("count", 1) for r in c["spec"]["devices"]["requests"])
        for c in claims
        if c["metadata"]["name"].startswith(f"{lws}-")
    )


async def test_gpus_asked_through_dra_claims_count_against_the_pool_quota(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
    tmp_path: Path,
) -> None:
    nodes = await fake_nodes(4, gpus=0)
    pool = await make_pool(nodes, quota={GPU: 2})
    attack_watch.pool(nodes.selector, 2)
    devices = [device_class(), *(device_slice(n) for n in nodes.names)]
    cluster.kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": devices}),
    )
    tenant = await dev(cluster, namespace, tmp_path)

    async def as_tenant(*args: str, obj: dict[str, Any] | None = None) -> None:
        code, _, err = await kubectl(
            cluster, *args, kubeconfig=tenant, input=json.dumps(obj) if obj is not None else None
        )
        assert code == 0, err

    try:
        await as_tenant("create", "-f", "-", obj=claim_template(namespace))
        await as_tenant("create", "-f", "-", obj=claim_template(namespace, "every-gpu", allocationMode="All"))
        dra = with_claims(lws_body("dra", pool, nodes, replicas=2), namespace)
        # A worker deleted is made again alone: LWS's default restart policy would delete the
        # whole group and make it again, from the template as it is by then (put back: it asks
        # 1 again), before the gatekeeper's grace for a pod not as admitted runs out.
        dra["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "None"
        await as_tenant("create", "-f", "-", obj=dra)
        await as_tenant(
            "create", "-f", "-", obj=with_claims(lws_body("all", pool, nodes), namespace, "every-gpu")
        )

        async def counted() -> bool:
            recs, refused = await records(api, namespace, "dra"), await records(api, namespace, "all")
            return (
                len(recs) == 2
                and admitted(recs[0])
                and not admitted(recs[1])
                and len(refused) == 1
                and condition(refused[0]).get("reason") == "InvalidSpec"
            )

        try:
            await eventually(counted, timeout=90, what="group 0 admitted, group 1 waiting, 'all' refused")
        finally:
            recs, refused = await records(api, namespace, "dra"), await records(api, namespace, "all")
            attack_table.add(
                "dev: GPUs asked through DRA claims (1 a pod), quota 2; and a claim of allocationMode All",
                "counted: 1 group in, 1 waits; All refused",
                f"{states(recs)}; all: {states(refused)}",
            )
        assert recs[0]["status"]["demand"].get(GPU) in ("2", 2), recs[0]["status"]
        said = condition(recs[1])["message"]
        assert GPU in said, said
        message = condition(refused[0])["message"]
        assert "allocationMode: All asks as many devices as there are" in message, message

        async def running() -> bool:
            pods = await list_raw(
                api, "pods", namespace=namespace, label_selector="leaderworkerset.sigs.k8s.io/name=dra"
            )
            return sum(1 for p in pods if p.get("status", {}).get("phase") == "Running") == 2

        await eventually(running, timeout=60, what="group 0's two pods Running with their devices")

        # The swap: a template that asks 2, the group's pods made again from it, then the template
        # put back, so that the LWS asks what group 0 was admitted with while its pods' claims ask more.
        await as_tenant("delete", "resourceclaimtemplate", "one-gpu", "-n", namespace)
        await as_tenant("create", "-f", "-", obj=claim_template(namespace, count=2))
        await as_tenant("delete", "pod", "dra-0-1", "-n", namespace, "--wait=false")

        async def greedy_claims() -> bool:
            return 2 in _devices(
                await list_raw(api, "resourceclaims.resource.k8s.io", namespace=namespace), "dra-0"
            )

        await eventually(
            greedy_claims, timeout=60, what="group 0's pods made again, with claims of 2 devices"
        )
        await as_tenant("delete", "resourceclaimtemplate", "one-gpu", "-n", namespace)
        await as_tenant("create", "-f", "-", obj=claim_template(namespace))

        # Two ways to the same end, by when the gatekeeper reads the swap: while the template asks
        # 2, the LWS asks another demand than group 0's record and its pods made again ask more
        # than the record holds; once it is put back, a pod asks more than its role.
        said = ("2 nvidia.com/gpu, more than its role", "more than its record holds")

        told: list[str] = []

        async def given_back() -> bool:
            told[:] = [f"record: {condition((await records(api, namespace, 'dra'))[0])}"]
            told.extend(f"event: {e.get('message', '')}" for e in await events_for(api, namespace, "dra"))
            return any("given back" in m and any(s in m for s in said) for m in told)

        try:
            await eventually(given_back, timeout=60, what="group 0 given back for its pods' claims of 2")
        except AssertionError as exc:  # what was seen instead, and the pods and claims then
            pods = await list_raw(api, "pods", namespace=namespace)
            claims = await list_raw(api, "resourceclaims.resource.k8s.io", namespace=namespace)
            seen = [
                f"pod {p['metadata']['name']} gates={p['spec'].get('schedulingGates')} "
                f"claims={p.get('status', {}).get('resourceClaimStatuses')}"
                for p in pods
            ]
            seen += [f"claim {c['metadata']['name']} asks {c['spec']['devices']['requests']}" for c in claims]
            raise AssertionError("\n".join([str(exc), *told, *seen])) from None

        async def settled() -> bool:
            claims = await list_raw(api, "resourceclaims.resource.k8s.io", namespace=namespace)
            allocated = [c for c in claims if c.get("status", {}).get("allocation")]
            pods = await list_raw(
                api, "pods", namespace=namespace, label_selector="leaderworkerset.sigs.k8s.io/name=dra"
            )
            running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
            return len(running) == 2 and _devices(allocated, "dra") == [1, 1]

        # The quota went to the group that waited; whichever runs, it runs whole on claims of 1.
        await eventually(settled, timeout=120, what="a group of 'dra' running whole on claims of 1 device")
        recs = await records(api, namespace, "dra")
        attack_table.add(
            "dev: template swapped to ask 2 a pod, group 0's pods made again, template put back",
            "pods judged by their claims: given back",
            states(recs),
        )
        pods = await list_raw(api, "pods", namespace=namespace)
        assert all(
            SCHEDULING_GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []]
            for p in pods
            if p["metadata"]["name"].startswith("all-")
        ), "the refused group's pods stay gated"
    finally:
        cluster.kubectl("delete", "lws", "--all", "-n", namespace, "--wait=false")
        cluster.kubectl(
            "delete", "resourceslices", *[f"{n}-{DRIVER}" for n in nodes.names], "--ignore-not-found"
        )
        cluster.kubectl("delete", "deviceclass", DRIVER, "--ignore-not-found")
