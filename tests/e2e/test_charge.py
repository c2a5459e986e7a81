"""The charge follows the pods: a group's reservation is held while any pod let through on
it lives, whatever happens to the pod's labels or owners since.

The tenant (``system:serviceaccount:<ns>:dev``, ``edit`` and the LWS editor role) removes
the pool label from its admitted group's running pods (so that they no longer look like
the group's; the policy lws-gatekeeper-member-labels refuses that, so it is turned off for
the namespace to show the charge holding alone), deletes the LWS with
``--cascade=orphan`` (its StatefulSets and pods keep running, ownerless) and creates
another LWS on the same pool. The pods were let through with a toleration that names
their group (``lws-gatekeeper.io/charged-to``, which no update can remove), so the first
group's record stays and holds its quota until they go, and the second LWS waits. GPUs
bound on the pool's nodes are sampled every second.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import kr8s.asyncio
import pytest

from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper_lab.sandbox.cluster import POLICIES_LABEL, POLICIES_OFF
from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import dev
from .conftest import (
    Cluster,
    MakeNodes,
    MakePool,
    admitted,
    condition,
    eventually,
    orphaning,
)
from .test_group_size import QUOTA, gpus_bound
from .test_policies import kubectl, ok
from .test_tenant_pools import create, plain_lws, tolerate
from .watch import Watch


@pytest.mark.parametrize("second", ["same-name", "other-name"])
async def test_orphaned_pods_without_their_label_keep_their_charge(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
    second: str,
    attack_watch: Watch,
) -> None:
    nodes = await fake_nodes(6, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": QUOTA}, tolerations=tolerate(nodes.id))
    attack_watch.pool(nodes.selector, QUOTA)
    others = await fake_nodes(2, gpus=1)
    other_pool = await make_pool(others, tolerations=tolerate(others.id))
    await create(api, namespace, plain_lws("lws", pool, size=2, replicas=1))

    async def bound() -> int:
        return gpus_bound(await list_raw(api, "pods", namespace=namespace), nodes.names)

    async def whole() -> bool:
        return await bound() == QUOTA

    await eventually(whole, timeout=90, what="group 0 bound whole")
    first_uid = json.loads(await ok(cluster, "get", "lws", "lws", "-n", namespace, "-o", "json"))["metadata"][
        "uid"
    ]
    kubeconfig = await dev(cluster, namespace, tmp_path)
    # The policy refuses the relabel of a pod let through; the charge must hold without it.
    relabel = ["label", "pod", "lws-0", f"{POOL_LABEL}-", "-n", namespace]
    code, _, err = await kubectl(cluster, *relabel, kubeconfig=kubeconfig)
    assert code != 0 and "is charged to it" in err, err
    refusal = err.strip().splitlines()[-1]
    await ok(cluster, "label", "namespace", namespace, f"{POLICIES_LABEL}={POLICIES_OFF}")
    said = []
    steps = orphaning("lws", namespace)
    await ok(cluster, *steps.hold)
    for args in (["label", "pod", "lws-0", "lws-0-1", f"{POOL_LABEL}-", "-n", namespace], steps.delete):
        code, out, err = await kubectl(cluster, *args, kubeconfig=kubeconfig)
        said.append((out or err).strip().splitlines()[-1] if (out or err).strip() else f"exit {code}")
        assert code == 0, f"kubectl {' '.join(args)}: {err}"
    # What the garbage collector does on an orphaning delete (see orphaning).
    for args in (steps.ownerless, steps.let_go, steps.gone):
        await ok(cluster, *args)
    name = "lws" if second == "same-name" else "second"
    await create(api, namespace, plain_lws(name, pool, size=2, replicas=1))
    peak = 0
    for _ in range(20):
        peak = max(peak, await bound())
        await anyio.sleep(1)
    assert peak <= QUOTA, f"{peak} GPUs bound on a pool of quota {QUOTA}"
    running = json.loads(await ok(cluster, "get", "pod", "lws-0", "lws-0-1", "-n", namespace, "-o", "json"))
    assert len(running["items"]) == 2, "the orphaned pods still run"
    waiting = [
        r for r in (await list_raw(api, "groupadmissions.lws-gatekeeper.io", namespace=namespace))
        if r["spec"].get("leaderWorkerSet") == name
        and r["spec"].get("leaderWorkerSetUID") != first_uid
        and not admitted(r)
    ]  # fmt: skip
    assert waiting, "the second LWS's group waits"
    message = condition(waiting[0]).get("message", "")
    # Other groups go on: an LWS of another pool runs whole.
    await create(api, namespace, plain_lws("other", other_pool, size=2, replicas=1))

    async def other_whole() -> bool:
        return gpus_bound(await list_raw(api, "pods", namespace=namespace), others.names) == 2

    await eventually(other_whole, timeout=90, what="another pool's group bound whole")
    # The pods go: the charge goes with them, and the second LWS runs.
    orphans = ("sts/lws", "sts/lws-0", "pod/lws-0", "pod/lws-0-1")  # the collector may take some first
    await ok(
        cluster,
        "delete",
        *orphans,
        "-n",
        namespace,
        "--ignore-not-found",
        "--wait=false",
        kubeconfig=kubeconfig,
    )

    async def second_whole() -> bool:
        return any(
            admitted(r)
            for r in await list_raw(api, "groupadmissions.lws-gatekeeper.io", namespace=namespace)
            if r["spec"].get("leaderWorkerSet") == name and r["spec"].get("leaderWorkerSetUID") != first_uid
        )

    await eventually(second_whole, timeout=90, what="the second LWS admitted once the orphans are gone")
    attack_table.add(
        f"dev: pool label removed from running pods, LWS deleted --cascade=orphan, LWS {name!r} "
        f"created (peak {peak} of {QUOTA} GPUs)",
        "contained",
        f"policy: {refusal}; policy off: {'; '.join(said)}; second LWS: {message or 'waits'}; "
        "admitted once the orphans were gone",
    )
