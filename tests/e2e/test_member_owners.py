"""A tenant cannot forge a pod's owner chain: an opted-in pod that names a StatefulSet as its
controller is made only by the StatefulSet controller.

The gatekeeper counts a gated pod as a member of an LWS group only when its owner chain
leads to the LWS by UID (``core/admission/members.py``). Whoever creates a pod writes its
ownerReferences, so a tenant who reads the leader StatefulSet's UID could make a pod
"owned" by it, which the gatekeeper would let through on that group's admission. The
member-owners policy (``policies/member-labels.yaml``, enforced by the sandbox as by the
chart) refuses it.
"""

from __future__ import annotations

import json
from pathlib import Path

import kr8s.asyncio

from gatekeeper.core.kube.keys import GROUP_INDEX_LABEL, LWS_NAME_LABEL, POOL_LABEL, WORKER_INDEX_LABEL
from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import tenants
from .conftest import Cluster, MakeNodes, MakePool, admitted, eventually, records
from .test_policies import kubectl
from .test_tenant_pools import create, plain_lws, tolerate
from .watch import Watch


async def test_a_tenant_cannot_make_a_pod_its_lws_statefulsets(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
    attack_watch: Watch,
) -> None:
    nodes = await fake_nodes(4, gpus=1)
    pool = await make_pool(nodes, tolerations=tolerate(nodes.id))
    attack_watch.pool(nodes.selector, 4)  # no quota: the pool holds its 4 nodes' GPUs
    await create(api, namespace, plain_lws("lws", pool, replicas=1, tolerate_all=True))

    async def group_0_admitted() -> bool:
        return admitted((await records(api, namespace)).get(0, {}))

    await eventually(group_0_admitted, what="group 0 admitted")
    owner: dict[str, str] = {}

    async def leader_made() -> bool:  # admission may come before the pods: read the leader's owner
        for pod in await list_raw(api, "pods", namespace=namespace):
            for ref in pod["metadata"].get("ownerReferences", []):
                if ref.get("kind") == "StatefulSet" and ref.get("name") == "lws":
                    owner.update(ref)
        return bool(owner)

    await eventually(leader_made, what="the leader pod, owned by the leader StatefulSet")
    forged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "lws-0-7",  # named as a worker of group 0, as the LWS pod webhook wants
            "namespace": namespace,
            "labels": {
                POOL_LABEL: pool,
                LWS_NAME_LABEL: "lws",
                GROUP_INDEX_LABEL: "0",
                WORKER_INDEX_LABEL: "7",
            },
            "annotations": {"leaderworkerset.sigs.k8s.io/size": "2"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": "lws",
                    "uid": owner["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            "tolerations": tolerate(nodes.id),
        },
    }
    who = await tenants(cluster, namespace, tmp_path)
    for role in ("edit", "star"):
        code, _out, err = await kubectl(
            cluster, "create", "-f", "-", kubeconfig=who[role], input=json.dumps(forged)
        )
        assert code != 0, f"{role}: a pod claiming the leader StatefulSet as its controller was created"
        assert "only the StatefulSet controller makes such a pod" in err, err
        attack_table.add(
            f"{role}: a pod with a forged controller reference to the leader StatefulSet",
            "refused",
            next((line for line in err.splitlines() if line.strip()), err),
        )
    # The same pod without the forged owner is made (and stays gated: test_tenant_pools.py).
    del forged["metadata"]["ownerReferences"]
    code, _out, err = await kubectl(
        cluster, "create", "-f", "-", kubeconfig=who["edit"], input=json.dumps(forged)
    )
    assert code == 0, err
