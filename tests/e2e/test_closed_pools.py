"""A closed pool's nodes stay closed: nothing but the groups the gatekeeper admits there runs on them.

The pool's nodes are tainted ``lws-gatekeeper.io/pool=<pool>:NoSchedule`` and its
``spec.tolerations`` tolerate that taint (the gatekeeper adds them to an admitted group's
pods as it lifts their gate). The tenant (``system:serviceaccount:<ns>:dev``, ``edit`` and
the LWS editor role) scales its admitted group away, so that the nodes are free, and tries
to get on them without an admission: a pod tolerating the taint, one tolerating every taint
(a key-less ``operator: Exists``), a Deployment whose pods tolerate it, a toleration added
to a pending pod, an LWS whose template tolerates it, and a pod with the opt-in label that
does. The policy lws-gatekeeper-closed-pools refuses the first four; the gatekeeper's pod
webhook refuses the last two, and still does with the namespace's policies turned off.
With the policies off, a plain pod that tolerates the taint does bind there (nothing but
the policy sees such a pod at creation): the gatekeeper then holds what it asks against the
pool's quota and names it in the Pool's status, so the tenant's own group waits until it
is gone. GPUs bound on the pool's nodes are sampled every second throughout; an LWS of another pool
runs meanwhile, and the tenant's own group is admitted again at the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper.core.kube.keys import POOL_LABEL, POOL_TAINT_KEY
from gatekeeper_lab.sandbox.cluster import POLICIES_LABEL, POLICIES_OFF
from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import dev
from .conftest import TEST_NODES_KEY, Cluster, MakeNodes, MakePool, condition, eventually
from .test_group_size import QUOTA, gpus_bound
from .test_policies import kubectl, ok
from .test_tenant_pools import create, plain_lws, tolerate
from .watch import Watch

POLICY = "tolerates the taint lws-gatekeeper.io/pool of closed pools' nodes"
WEBHOOK = "lws-gatekeeper refuses pod"


def closed(pool: str) -> dict[str, Any]:
    return {"key": POOL_TAINT_KEY, "operator": "Equal", "value": pool, "effect": "NoSchedule"}


def gpu_pod(name: str, nodes_id: str, tolerations: list[dict[str, Any]], **labels: str) -> dict[str, Any]:
    """A one-GPU pod aimed at the test's nodes (their selector and test taint tolerated)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "intruder", **labels}},
        "spec": {
            "nodeSelector": {TEST_NODES_KEY: nodes_id},
            "tolerations": [*tolerate(nodes_id), *tolerations],
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


async def test_nothing_but_admitted_groups_runs_on_a_closed_pools_nodes(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
    attack_watch: Watch,
) -> None:
    nodes = await fake_nodes(3, gpus=1)  # more room than quota: the quota, not the nodes, must hold
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": QUOTA})
    attack_watch.pool(nodes.selector, QUOTA)
    tolerations = [*tolerate(nodes.id), closed(pool)]
    spec = json.dumps({"spec": {"tolerations": tolerations}})
    await ok(cluster, "patch", "pool", pool, "--type=merge", "-p", spec)
    await ok(cluster, "taint", "nodes", *nodes.names, f"{POOL_TAINT_KEY}={pool}:NoSchedule")
    others = await fake_nodes(2, gpus=1)
    other_pool = await make_pool(others, tolerations=tolerate(others.id))
    kubeconfig = await dev(cluster, namespace, tmp_path)

    async def pods() -> list[dict[str, Any]]:
        return await list_raw(api, "pods", namespace=namespace)

    async def bound() -> int:
        return gpus_bound(await pods(), nodes.names)

    async def whole() -> bool:
        return await bound() == QUOTA

    # The tenant's own group is admitted: its pods get the pool's tolerations from the gatekeeper.
    await ok(cluster, "apply", "-f", "-", "-n", namespace, kubeconfig=kubeconfig,
             input=json.dumps(plain_lws("lws", pool, size=2)))  # fmt: skip
    await eventually(whole, timeout=90, what="the tenant's group bound whole on the closed pool")
    own = [p for p in await pods() if p["spec"].get("nodeName") in nodes.names]
    assert all(closed(pool) in p["spec"]["tolerations"] for p in own), "the gatekeeper added the toleration"
    await ok(cluster, "scale", "lws", "lws", "--replicas=0", "-n", namespace, kubeconfig=kubeconfig)

    async def free() -> bool:
        return await bound() == 0

    await eventually(free, timeout=60, what="the group scaled away")

    peak = 0
    rows: list[tuple[str, str]] = []

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, await bound())
            await anyio.sleep(1)

    async def as_dev(*args: str, body: dict[str, Any] | None = None) -> tuple[int, str]:
        code, out, err = await kubectl(
            cluster, *args, "-n", namespace, kubeconfig=kubeconfig, input=json.dumps(body) if body else None
        )
        return code, err if code else out

    async def refused(attack: str, says: str, *args: str, body: dict[str, Any] | None = None) -> None:
        code, said = await as_dev(*args, body=body)
        assert code != 0 and says in said, f"{attack}: exit {code}: {said}"
        rows.append((attack, last_line(said)))

    async def failed_create(owner: str, says: str) -> str:
        """The message of the FailedCreate Event of ``owner`` (a ReplicaSet or StatefulSet)."""
        found = ""

        async def seen() -> bool:
            nonlocal found
            events = await list_raw(api, "events", namespace=namespace)
            found = next(
                (
                    e.get("message", "")
                    for e in events
                    if e.get("reason") == "FailedCreate"
                    and e.get("involvedObject", {}).get("name", "").startswith(owner)
                    and says in e.get("message", "")
                ),
                "",
            )
            return bool(found)

        await eventually(seen, timeout=60, what=f"a FailedCreate Event of {owner} saying {says!r}")
        return found

    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        # Another pool's group goes on meanwhile.
        await create(api, namespace, plain_lws("other", other_pool, size=2))
        await refused(
            "a pod tolerating the pool's taint",
            POLICY, "create", "-f", "-", body=gpu_pod("exact", nodes.id, [closed(pool)]),
        )  # fmt: skip
        await refused(
            "a pod tolerating every taint (`operator: Exists`, no key)",
            POLICY, "create", "-f", "-", body=gpu_pod("every", nodes.id, [{"operator": "Exists"}]),
        )  # fmt: skip
        await refused(
            "a pod tolerating the key with `operator: Exists`",
            POLICY, "create", "-f", "-",
            body=gpu_pod("key", nodes.id, [{"key": POOL_TAINT_KEY, "operator": "Exists"}]),
        )  # fmt: skip
        template = gpu_pod("x", nodes.id, [closed(pool)])
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "sneak"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "sneak"}},
                "template": {"metadata": {"labels": {"app": "sneak"}}, "spec": template["spec"]},
            },
        }
        code, said = await as_dev("create", "-f", "-", body=deployment)
        assert code == 0, said
        said = await failed_create("sneak", POLICY)
        rows.append(("a Deployment whose pods tolerate the pool's taint", last_line(said)))
        # Its ReplicaSet tries again: gone before the namespace's policies are turned off below.
        await ok(cluster, "delete", "deployment", "sneak", "-n", namespace, "--wait=true",
                 kubeconfig=kubeconfig)  # fmt: skip
        # A pod pending on the taint, given the toleration by an update.
        await ok(cluster, "create", "-f", "-", "-n", namespace, kubeconfig=kubeconfig,
                 input=json.dumps(gpu_pod("pending", nodes.id, [])))  # fmt: skip
        patch = json.dumps([{"op": "add", "path": "/spec/tolerations/-", "value": closed(pool)}])
        await refused("a toleration of the pool's taint added to a pending pod", "may not add it",
                      "patch", "pod", "pending", "--type=json", "-p", patch)  # fmt: skip
        # An LWS whose template tolerates the taint: the webhook refuses its pods as written.
        sneaky = plain_lws("sneaky", pool, size=2)
        sneaky["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["tolerations"] = [closed(pool)]
        code, said = await as_dev("apply", "-f", "-", body=sneaky)
        assert code == 0, said
        rows.append(("an LWS whose pod template tolerates the pool's taint",
                     last_line(await failed_create("sneaky", WEBHOOK))))  # fmt: skip
        # Its group would be admitted on its spec and hold the quota with no pod: it goes.
        await ok(cluster, "delete", "lws", "sneaky", "-n", namespace, "--wait=true", kubeconfig=kubeconfig)
        # With the namespace's policies off, the webhook alone holds opted-in pods.
        await ok(cluster, "label", "namespace", namespace, f"{POLICIES_LABEL}={POLICIES_OFF}")
        labelled = gpu_pod("labelled", nodes.id, [closed(pool)], **{POOL_LABEL: pool})
        await refused("a pod with the opt-in label tolerating the taint, policies off", WEBHOOK,
                      "create", "-f", "-", body=labelled)  # fmt: skip
        await ok(cluster, "label", "namespace", namespace, f"{POLICIES_LABEL}-")

        async def other_whole() -> bool:
            return gpus_bound(await pods(), others.names) == 2

        await eventually(other_whole, timeout=90, what="another pool's group bound whole")
        # Nothing got on in the meantime.
        for _ in range(5):
            await anyio.sleep(1)
        on_nodes = [p["metadata"]["name"] for p in await pods() if p["spec"].get("nodeName") in nodes.names]
        assert not on_nodes, f"pods on the closed pool's nodes without an admission: {on_nodes}"
        # With the policies off, a plain pod tolerating the taint gets on: the gatekeeper holds
        # it against the pool's quota, so the tenant's own group of 2 waits for what it leaves.
        await ok(cluster, "label", "namespace", namespace, f"{POLICIES_LABEL}={POLICIES_OFF}")
        await ok(cluster, "create", "-f", "-", "-n", namespace, kubeconfig=kubeconfig,
                 input=json.dumps(gpu_pod("intruder", nodes.id, [closed(pool)])))  # fmt: skip
        await ok(cluster, "label", "namespace", namespace, f"{POLICIES_LABEL}-")

        async def intruder_bound() -> bool:
            return any(
                p["metadata"]["name"] == "intruder" and p["spec"].get("nodeName") for p in await pods()
            )

        await eventually(intruder_bound, timeout=60, what="the intruder bound")

        async def named() -> bool:
            status = json.loads(await ok(cluster, "get", "pool", pool, "-o", "json")).get("status", {})
            return f"{namespace}/intruder" in status.get("intruders", [])

        await eventually(named, timeout=60, what="the Pool's status naming the intruder")
        await ok(cluster, "scale", "lws", "lws", "--replicas=1", "-n", namespace, kubeconfig=kubeconfig)
        said = ""

        async def waits() -> bool:
            nonlocal said
            every = await list_raw(api, "groupadmissions.lws-gatekeeper.io", namespace=namespace)
            found = [r for r in every if r["spec"].get("leaderWorkerSet") == "lws"]
            said = condition(found[0]).get("message", "") if found else ""
            return "1 pod on its nodes without an admission" in said

        await eventually(waits, timeout=60, what="the group waiting for what the intruder leaves")
        for _ in range(8):
            await anyio.sleep(1)
        assert await bound() == 1, "only the intruder is bound; the group of 2 waits"
        rows.append(("policies off: a plain pod tolerating the taint binds (held against the quota)", said))
        await ok(cluster, "delete", "pod", "intruder", "-n", namespace, "--wait=false", kubeconfig=kubeconfig)
        await eventually(whole, timeout=90, what="the tenant's group admitted once the intruder is gone")
        peak = max(peak, await bound())
        tg.cancel_scope.cancel()
    assert peak <= QUOTA, f"{peak} GPUs bound on a pool of quota {QUOTA}"
    stranded = [
        p["metadata"]["name"]
        for p in await pods()
        if p["metadata"].get("labels", {}).get(POOL_LABEL) == pool and not p["spec"].get("nodeName")
        and p["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/name") == "lws"
    ]  # fmt: skip
    assert not stranded, stranded
    for attack, said in rows:
        expected = "contained" if attack.startswith("policies off: a plain") else "refused"
        attack_table.add(f"dev, closed pool: {attack} (peak {peak} of {QUOTA} GPUs)", expected, said)
