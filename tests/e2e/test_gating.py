"""The admission webhook against the real API server and LWS controller: gated at birth.

The webhook is the one the cluster runs (the sandbox's gatekeeper process, registered
by URL). The LWSs here name pools that do not exist, so the controller never lifts
their gates: gated pods stay gated, which is the state under test, and hold no GPU.
"""

from __future__ import annotations

import copy
import functools
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
import kr8s.asyncio
import pytest
from kr8s.asyncio.objects import Pod

from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.observe import GROUP_INDEX_LABEL, LWS_NAME_LABEL
from gatekeeper_lab.sandbox.replay import LeaderWorkerSet, isolate, list_raw, load_scenario, settle

from .conftest import Cluster, MakeNodes, NodeSet

pytestmark = pytest.mark.usefixtures("gating_webhook")


async def _gates_a_dry_run_pod(api: kr8s.asyncio.Api) -> bool:
    """Does the API server already call the webhook? (A server-side dry run goes through it.)"""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "probe-", "labels": {POOL_LABEL: "probe"}},
        "spec": {"containers": [{"name": "c", "image": "probe"}]},
    }
    async with api.call_api(
        "POST", url="pods", namespace="default", params={"dryRun": "All"}, json=body, raise_for_status=False
    ) as resp:
        created: dict[str, Any] = resp.json() if resp.is_success else {}
    return _gated(created)


@pytest.fixture(scope="module")
async def gating_webhook(api: kr8s.asyncio.Api) -> None:
    """Wait until the API server calls the gatekeeper's webhook (a dry-run pod comes back gated)."""
    with anyio.fail_after(30):
        while not await _gates_a_dry_run_pod(api):
            await anyio.sleep(0.2)


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = pod.get("spec", {}).get("schedulingGates") or []
    return any(g.get("name") == SCHEDULING_GATE for g in gates)


def _scheduling_gated(pod: Mapping[str, Any]) -> bool:
    """What the scheduler reports for a gated pod: PodScheduled False, reason SchedulingGated."""
    conds = pod.get("status", {}).get("conditions") or []
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "SchedulingGated"
        for c in conds
    )


def _lws(name: str, nodes: NodeSet, *, pool: str | None, replicas: int) -> dict[str, Any]:
    """The seed scenario's LWS (size 2, 1 GPU per pod) on this test's nodes, opted in to ``pool``."""
    body = isolate(load_scenario()["lws"], nodes.selector, nodes.taint_key)
    body["metadata"]["name"] = name
    body["metadata"]["labels"].pop(POOL_LABEL)
    if pool is not None:
        body["metadata"]["labels"][POOL_LABEL] = pool
    body["spec"]["replicas"] = replicas
    return body


async def _create_lws(api: kr8s.asyncio.Api, namespace: str, body: dict[str, Any]) -> Any:
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = namespace
    lws = await LeaderWorkerSet(body, api=api)
    await lws.create()
    return lws


async def _lws_pods(api: kr8s.asyncio.Api, namespace: str, name: str) -> list[dict[str, Any]]:
    return await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: name})


def _template_pool_labels(lws: Mapping[str, Any]) -> dict[str, str | None]:
    lwt = lws["spec"]["leaderWorkerTemplate"]
    return {
        name: (lwt[name].get("metadata") or {}).get("labels", {}).get(POOL_LABEL)
        for name in ("leaderTemplate", "workerTemplate")
    }


async def _kubectl_statuses(cluster: Cluster, namespace: str) -> dict[str, str]:
    """``kubectl get pods`` as a person reads it: pod name -> STATUS column."""
    out = await anyio.to_thread.run_sync(
        functools.partial(cluster.kubectl, "get", "pods", "-n", namespace, "--no-headers")
    )
    return {cols[0]: cols[2] for cols in (line.split() for line in out.splitlines())}


async def test_every_pod_of_an_opted_in_lws_is_born_gated(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, fake_nodes: MakeNodes
) -> None:
    nodes = await fake_nodes(4, gpus=1)
    lws = await _create_lws(api, namespace, _lws("vllm", nodes, pool="x", replicas=2))

    verdict = await settle(api, namespace, "vllm", expected_pods=4, size=2, timeout=60)
    pods = await _lws_pods(api, namespace, "vllm")

    assert len(verdict.groups) == 2, "both groups were created, leaders and workers alike"
    assert verdict.gated_pods == 4
    assert verdict.gpus_held == 0, "a gated group holds nothing"
    for pod in pods:
        name, labels = pod["metadata"]["name"], pod["metadata"]["labels"]
        assert _gated(pod), f"{name} has the gate"
        assert not pod["spec"].get("nodeName"), f"{name} is not bound"
        assert _scheduling_gated(pod), f"{name}: {pod.get('status')}"
        assert labels[POOL_LABEL] == "x", "the LWS webhook copied the opt-in label into the template"
        assert GROUP_INDEX_LABEL in labels, "LWS's own pod webhook ran too"
    assert set((await _kubectl_statuses(cluster, namespace)).values()) == {"SchedulingGated"}
    await lws.refresh()
    assert _template_pool_labels(lws.raw) == {"leaderTemplate": "x", "workerTemplate": "x"}


async def test_an_lws_without_the_label_runs_beside_a_gated_one(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes
) -> None:
    nodes = await fake_nodes(4, gpus=1)
    plain = await _create_lws(api, namespace, _lws("plain", nodes, pool=None, replicas=1))
    await _create_lws(api, namespace, _lws("gated", nodes, pool="x", replicas=1))

    running = await settle(api, namespace, "plain", expected_pods=2, size=2, timeout=60)
    gated = await settle(api, namespace, "gated", expected_pods=2, size=2, timeout=60)

    assert (running.whole_groups, running.gated_pods, running.gpus_held) == (1, 0, 2)
    for pod in await _lws_pods(api, namespace, "plain"):
        assert pod["status"]["phase"] == "Running"
        assert not pod["spec"].get("schedulingGates")
        assert POOL_LABEL not in pod["metadata"]["labels"]
    assert (gated.gated_pods, gated.gpus_held) == (2, 0)
    await plain.refresh()
    assert _template_pool_labels(plain.raw) == {"leaderTemplate": None, "workerTemplate": None}


async def test_a_pod_with_the_label_is_gated_without_an_lws(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, fake_nodes: MakeNodes
) -> None:
    """The label on a pod is the opt-in: the pod webhook does not ask who made the pod."""
    nodes = await fake_nodes(1, gpus=1)
    name = f"bare-{uuid.uuid4().hex[:5]}"
    body = {
        "metadata": {"name": name, "namespace": namespace, "labels": {POOL_LABEL: "x"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
            "nodeSelector": nodes.selector,
            "tolerations": [{"key": nodes.taint_key, "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    pod = await Pod(body, api=api)
    await pod.create()

    with anyio.fail_after(30):
        while not _scheduling_gated(pod.raw):
            await anyio.sleep(0.3)
            await pod.refresh()

    assert _gated(pod.raw)
    assert not pod.raw["spec"].get("nodeName")
    assert (await _kubectl_statuses(cluster, namespace))[name] == "SchedulingGated"


async def test_removing_the_label_from_an_lws_releases_its_pods(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes
) -> None:
    """Opting out: the LWS webhook drops the template label, LWS rolls its pods, none is gated."""
    nodes = await fake_nodes(2, gpus=1)
    lws = await _create_lws(api, namespace, _lws("vllm", nodes, pool="x", replicas=1))
    await settle(api, namespace, "vllm", expected_pods=2, size=2, timeout=60)

    await lws.patch([{"op": "remove", "path": "/metadata/labels/lws-gatekeeper.io~1pool"}], type="json")
    await lws.refresh()
    assert _template_pool_labels(lws.raw) == {"leaderTemplate": None, "workerTemplate": None}

    verdict = await settle(api, namespace, "vllm", expected_pods=2, size=2, timeout=120)
    assert (verdict.whole_groups, verdict.gated_pods) == (1, 0)
