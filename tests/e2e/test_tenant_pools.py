"""The ``pools`` backend's tenant boundary: pods go to their pool's nodes, only namespaces a
pool admits use it, and only pods the LWS made are let through on its groups' admissions.

Unlike the other end-to-end tests, the LWSs here have no node selector of their own: where
their pods land is the gatekeeper's doing.
"""

from __future__ import annotations

import copy
from typing import Any

import kr8s.asyncio
import yaml
from kr8s.asyncio.objects import Namespace, Pod

from gatekeeper.core.kube.keys import (
    GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    POOL_LABEL,
    SCHEDULING_GATE,
    WORKER_INDEX_LABEL,
)
from gatekeeper.render.admission import MEMBER_LABELS, load_policies
from gatekeeper_lab.sandbox.replay import LeaderWorkerSet, list_raw

from . import attack_table
from .conftest import TEST_NODES_KEY, Cluster, MakeNodes, MakePool, admitted, condition, eventually, records
from .test_policies import for_test
from .watch import Watch


def plain_lws(
    name: str, pool: str, *, size: int = 2, replicas: int = 1, tolerate_all: bool = False
) -> dict[str, Any]:
    """An opted-in LWS of one-GPU pods with no node selector; ``tolerate_all`` lets its pods
    onto any test node (so only the gatekeeper keeps them off other pools' nodes)."""
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "vllm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    }
    if tolerate_all:
        spec["tolerations"] = [{"key": TEST_NODES_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {POOL_LABEL: pool}},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "workerTemplate": copy.deepcopy(template)},
        },
    }


async def create(api: kr8s.asyncio.Api, namespace: str, body: dict[str, Any]) -> None:
    obj = copy.deepcopy(body)
    obj["metadata"]["namespace"] = namespace
    await (await LeaderWorkerSet(obj, api=api)).create()


async def pods_of(api: kr8s.asyncio.Api, namespace: str, name: str) -> list[dict[str, Any]]:
    return await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: name})


def tolerate(nodes_id: str) -> list[dict[str, Any]]:
    return [{"key": TEST_NODES_KEY, "operator": "Equal", "value": nodes_id, "effect": "NoSchedule"}]


async def test_pods_bind_only_on_their_own_pools_nodes(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool, attack_watch: Watch
) -> None:
    """Pools ta (2 one-GPU nodes) and tb (4 empty 8-GPU nodes); LWSs without a node selector.

    a: groups of 2 into ta, its pods tolerate every test node: they still bind on ta's.
    b: groups of 2 into tb, its pods tolerate nothing: tb's tolerations let them onto tb.
    """
    ta_nodes = await fake_nodes(2, gpus=1)
    tb_nodes = await fake_nodes(4, gpus=8)
    ta = await make_pool(ta_nodes, tolerations=tolerate(ta_nodes.id))
    attack_watch.pool(ta_nodes.selector, 2)  # no quota: ta holds its 2 nodes' GPUs
    tb = await make_pool(tb_nodes, tolerations=tolerate(tb_nodes.id))
    await create(api, namespace, plain_lws("a", ta, replicas=2, tolerate_all=True))
    await create(api, namespace, plain_lws("b", tb, replicas=1))

    async def bound(name: str, count: int) -> bool:
        pods = await pods_of(api, namespace, name)
        return len([p for p in pods if p["spec"].get("nodeName")]) >= count

    await eventually(lambda: bound("a", 2), timeout=90, what="group 0 of a bound")
    await eventually(lambda: bound("b", 2), timeout=90, what="group 0 of b bound")
    a_pods = await pods_of(api, namespace, "a")
    on = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in a_pods}
    assert {n for n in on.values() if n} <= set(ta_nodes.names), f"a's pods on {on}"
    gated = [
        p for p in a_pods if any(g["name"] == SCHEDULING_GATE for g in p["spec"].get("schedulingGates", []))
    ]
    assert len(gated) == 2, "group 1 of a waits: ta has room for one group"
    ungated = [p for p in a_pods if p not in gated]
    assert all(p["spec"]["nodeSelector"] == ta_nodes.selector for p in ungated)
    b_pods = await pods_of(api, namespace, "b")
    assert {p["spec"].get("nodeName") for p in b_pods} <= set(tb_nodes.names)
    assert all(tolerate(tb_nodes.id)[0] in p["spec"]["tolerations"] for p in b_pods)
    attack_table.add(
        "an LWS whose pods tolerate every node, charged to a 2-node pool",
        "contained",
        f"its pods bound on that pool's nodes only ({len([n for n in on.values() if n])} of 2), "
        "the pool's nodeSelector added with the gate's removal",
    )


async def test_a_namespace_the_pool_does_not_admit_waits_with_a_warning(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool, attack_watch: Watch
) -> None:
    """A pool for one team: another namespace's LWS waits (NamespaceNotAllowed) until its
    namespace gets the team's label."""
    nodes = await fake_nodes(2, gpus=1)
    team = f"team-{nodes.id}"
    pool = await make_pool(
        nodes, tolerations=tolerate(nodes.id), namespace_selector={"matchLabels": {"team": team}}
    )
    attack_watch.pool(nodes.selector, 2)  # no quota: the pool holds its 2 nodes' GPUs
    await create(api, namespace, plain_lws("lws", pool))

    async def says_not_allowed() -> bool:
        return condition((await records(api, namespace)).get(0, {})).get("reason") == "NamespaceNotAllowed"

    await eventually(says_not_allowed, what="group 0 waits with NamespaceNotAllowed")
    record = (await records(api, namespace))[0]
    assert condition(record)["message"] == f"group 0 waits: namespace {namespace} may not use pool {pool}"
    attack_table.add(
        "an LWS in a namespace another team's pool does not admit",
        "contained",
        f"waits, NamespaceNotAllowed: {condition(record)['message']}",
    )
    events = [
        e
        for e in await list_raw(api, "events", namespace=namespace)
        if e.get("reason") == "NamespaceNotAllowed" and e["involvedObject"].get("name") == "lws"
    ]
    assert events and events[0]["type"] == "Warning"
    assert all(p["spec"].get("schedulingGates") for p in await pods_of(api, namespace, "lws"))

    await (await Namespace.get(namespace, api=api)).label({"team": team})

    async def admitted_now() -> bool:
        return admitted((await records(api, namespace)).get(0, {}))

    await eventually(admitted_now, what="group 0 admitted once its namespace is the team's")


async def test_a_pod_the_lws_did_not_make_is_never_let_through(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool, attack_watch: Watch
) -> None:
    """A bare pod that claims admitted group 0 by its labels (and asks 2 GPUs, more than the
    group's pods) stays gated; the record and an Event say so."""
    nodes = await fake_nodes(4, gpus=1)
    pool = await make_pool(nodes, tolerations=tolerate(nodes.id))
    attack_watch.pool(nodes.selector, 4)  # no quota: the pool holds its 4 nodes' GPUs
    await create(api, namespace, plain_lws("lws", pool, replicas=1, tolerate_all=True))

    async def group_0_admitted() -> bool:
        return admitted((await records(api, namespace)).get(0, {}))

    await eventually(group_0_admitted, what="group 0 admitted")
    labels = {
        POOL_LABEL: pool,
        LWS_NAME_LABEL: "lws",
        GROUP_INDEX_LABEL: "0",
        WORKER_INDEX_LABEL: "7",
    }
    forged = {
        # The LWS pod webhook wants the size annotation on any pod with the LWS labels, and a
        # worker's ordinal in its name: named as a worker of group 0 would be.
        "metadata": {
            "name": "lws-0-7",
            "namespace": namespace,
            "labels": labels,
            "annotations": {"leaderworkerset.sigs.k8s.io/size": "2"},
        },
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            "tolerations": tolerate(nodes.id),
        },
    }
    pod = await Pod(forged, api=api)
    await pod.create()

    async def record_names_it() -> bool:
        return "lws-0-7" in condition((await records(api, namespace)).get(0, {})).get("message", "")

    await eventually(record_names_it, what="the record names the forged pod")
    message = condition((await records(api, namespace))[0])["message"]
    assert "pod lws-0-7 was not made by LeaderWorkerSet lws" in message, message
    await pod.refresh()
    assert any(g["name"] == SCHEDULING_GATE for g in pod.raw["spec"].get("schedulingGates", []))
    events = [
        e
        for e in await list_raw(api, "events", namespace=namespace)
        if e.get("reason") == "NotMadeByLeaderWorkerSet"
    ]
    assert events and events[0]["type"] == "Warning"
    attack_table.add(
        "a bare pod claiming admitted group 0 (pools backend)", "contained", f"stays gated: {message}"
    )


async def test_a_gated_pods_group_and_pool_labels_cannot_be_changed(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, attack_watch: Watch
) -> None:
    """The member-labels policy (a copy acting in this namespace): a gated pod cannot be
    relabelled into another group or pool; its other labels can change."""
    attack_watch.quota = 0  # no pool: nothing here may hold a GPU
    policy = for_test(load_policies([MEMBER_LABELS]), "x" + namespace[-5:], namespace)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(policy))
    try:
        labels = {POOL_LABEL: "p", LWS_NAME_LABEL: "lws", GROUP_INDEX_LABEL: "3", WORKER_INDEX_LABEL: "0"}
        body = {
            "metadata": {
                "name": "lws-3",  # named as the LWS names a leader, as its pod webhook wants
                "namespace": namespace,
                "labels": labels,
                "annotations": {"leaderworkerset.sigs.k8s.io/size": "2"},
            },
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
        pod = await Pod(body, api=api)
        await pod.create()  # the webhook gives it the gate
        await pod.refresh()
        assert any(g["name"] == SCHEDULING_GATE for g in pod.raw["spec"].get("schedulingGates", []))

        said: list[str] = []

        async def relabel_refused() -> bool:
            try:
                await pod.patch({"metadata": {"labels": {GROUP_INDEX_LABEL: "0"}}})
            except kr8s.ServerError as err:
                said[:] = [str(err)]
                return "may not change" in str(err.response.text if err.response else err)
            await pod.patch({"metadata": {"labels": {GROUP_INDEX_LABEL: "3"}}})  # not yet enforced
            return False

        await eventually(relabel_refused, what="the policy refuses a new group index")
        attack_table.add("relabel a gated pod into another group", "refused", said[0])
        for change in ({POOL_LABEL: None}, {LWS_NAME_LABEL: "other"}, {WORKER_INDEX_LABEL: "1"}):
            refused = False
            try:
                await pod.patch({"metadata": {"labels": change}})
            except kr8s.ServerError:
                refused = True
            assert refused, f"{change} was allowed on a gated pod"
        await pod.patch({"metadata": {"labels": {"note": "ok"}}})
        await pod.refresh()
        assert pod.raw["metadata"]["labels"]["note"] == "ok"
        assert pod.raw["metadata"]["labels"][GROUP_INDEX_LABEL] == "3"
    finally:
        for obj in sorted(policy, key=lambda o: not o["kind"].endswith("Binding")):
            cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found")
