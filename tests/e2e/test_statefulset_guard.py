"""The StatefulSet guard, as a tenant meets it: the StatefulSets an LWS controls are the LWS
controller's to change, and the refusal says to change the LWS instead.

The tenant is ``system:serviceaccount:<ns>:dev`` with ``edit`` and the LWS editor role,
against an admitted group of a Pool of quota 2 GPUs. Each route a tenant has to the
StatefulSets is tried (the scale subresource, a patch of ``spec.replicas``, the owner
reference, a StatefulSet made under the group's leader pod), with what the guard must
leave alone (labels, annotations, a StatefulSet of the tenant's own, the LWS's own scale,
which the LWS controller carries out). The scale and the template edit of a worker
StatefulSet, and what holds with the guard off, are in ``test_group_size.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import dev
from .conftest import Cluster, MakeNodes, MakePool, eventually
from .test_group_size import QUOTA, gpus_bound
from .test_policies import kubectl, ok
from .test_tenant_pools import create, plain_lws, pods_of, tolerate
from .watch import Watch


def tenant_statefulset(name: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    """A StatefulSet of one plain pod, ``owner`` its controller (``None``: no owner)."""
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [{**owner, "controller": True}]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "serviceName": name,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


async def test_a_tenant_cannot_change_the_statefulsets_of_an_lws(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
    attack_watch: Watch,
) -> None:
    nodes = await fake_nodes(6, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": QUOTA}, tolerations=tolerate(nodes.id))
    attack_watch.pool(nodes.selector, QUOTA)
    await create(api, namespace, plain_lws("lws", pool, size=2, replicas=1))

    async def whole() -> bool:
        return gpus_bound(await pods_of(api, namespace, "lws"), nodes.names) == QUOTA

    await eventually(whole, timeout=90, what="group 0 bound whole")
    leader = json.loads(await ok(cluster, "get", "pod", "lws-0", "-n", namespace, "-o", "json"))
    leader_ref = {"apiVersion": "v1", "kind": "Pod", "name": "lws-0", "uid": leader["metadata"]["uid"]}
    kubeconfig = await dev(cluster, namespace, tmp_path)
    drop_owner = json.dumps([{"op": "remove", "path": "/metadata/ownerReferences"}])
    refusals = [
        ("kubectl scale sts/lws --replicas=2 (the leader StatefulSet)", ["scale", "sts/lws", "--replicas=2"]),
        (
            "kubectl patch sts/lws-0 spec.replicas=4",
            ["patch", "sts/lws-0", "--type=merge", "-p", '{"spec":{"replicas":4}}'],
        ),
        (
            "kubectl patch sts/lws: owner references removed",
            ["patch", "sts/lws", "--type=json", "-p", drop_owner],
        ),
        (
            "kubectl patch sts/lws-0: owner references removed",
            ["patch", "sts/lws-0", "--type=json", "-p", drop_owner],
        ),
        ("kubectl create sts/lws-5 controlled by the leader pod lws-0", ["create", "-f", "-"]),
    ]
    peak = 0

    async def sample() -> None:
        nonlocal peak
        peak = max(peak, gpus_bound(await pods_of(api, namespace, "lws"), nodes.names))

    for attack, args in refusals:
        body = json.dumps(tenant_statefulset("lws-5", leader_ref)) if args[0] == "create" else None
        code, out, err = await kubectl(cluster, *args, "-n", namespace, kubeconfig=kubeconfig, input=body)
        assert code != 0, f"{attack}: accepted: {out}"
        assert "lws-gatekeeper: StatefulSet" in err and "only the LeaderWorkerSet controller may" in err, err
        assert "change LeaderWorkerSet lws instead" in err or args[0] == "create", err
        await sample()
        attack_table.add(
            f"dev: {attack} (peak {peak} of {QUOTA} GPUs)", "refused", err.strip().splitlines()[-1]
        )
    for sts in await list_raw(api, "statefulsets", namespace=namespace):
        name = sts["metadata"]["name"]
        assert name in ("lws", "lws-0"), f"{name} was made"
        owners = [r["kind"] for r in sts["metadata"].get("ownerReferences", []) if r.get("controller")]
        assert owners == (["LeaderWorkerSet"] if name == "lws" else ["Pod"]), (name, owners)
        assert sts["spec"]["replicas"] == 1, (name, sts["spec"]["replicas"])

    # What stays the tenant's: labels and annotations, its own StatefulSets, the LWS itself.
    for args in (
        ["label", "sts/lws-0", "team=a"],
        ["annotate", "sts/lws", "note=mine"],
    ):
        await ok(cluster, *args, "-n", namespace, kubeconfig=kubeconfig)
    await ok(
        cluster,
        "create",
        "-f",
        "-",
        "-n",
        namespace,
        kubeconfig=kubeconfig,
        input=json.dumps(tenant_statefulset("mine", None)),
    )
    await ok(cluster, "scale", "sts/mine", "--replicas=0", "-n", namespace, kubeconfig=kubeconfig)
    await ok(cluster, "scale", "lws/lws", "--replicas=2", "-n", namespace, kubeconfig=kubeconfig)

    async def scaled() -> bool:
        await sample()
        sts = json.loads(await ok(cluster, "get", "sts/lws", "-n", namespace, "-o", "json"))
        return bool(sts["spec"]["replicas"] == 2)

    await eventually(scaled, timeout=30, what="the LWS controller scaling its leader StatefulSet to 2")
    for _ in range(5):  # group 1 waits for quota: nothing more binds
        await sample()
        await anyio.sleep(1)
    assert peak <= QUOTA, f"{peak} GPUs bound on a pool of quota {QUOTA}"
    attack_table.add(
        f"dev: kubectl scale lws/lws --replicas=2, label and annotate its StatefulSets "
        f"(peak {peak} of {QUOTA} GPUs)",
        "allowed",
        "the LWS controller scaled its leader StatefulSet; group 1 waits for quota",
    )
