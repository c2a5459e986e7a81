"""Helpers for end-to-end tests against the sandbox's real Karpenter.

Why this exists: the tests of Karpenter itself and of pools that know their provisioner
set up the same things: a NodePool of the sandbox's GPU instance types whose nodes carry a
test's own label and taint (so no other test's pods land there), pods that select and
tolerate them, and reads of the NodeClaims and nodes Karpenter made. One sandbox with
Karpenter serves the whole session (``karpenter_sandbox`` in ``conftest.py``); each test
makes its own NodePool under a random tag and deletes it after.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

from gatekeeper.core.kube.keys import GATEKEEPER_API_VERSION, POOL_KIND
from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.cluster import GATEKEEPER_NAMESPACE, Sandbox
from gatekeeper_lab.sandbox.karpenter import GPU_TYPES, NODE_CLASS, NODE_CLASS_GROUP, NODE_CLASS_KIND
from tests.e2e.kueue_support import items, make_namespace, new_tag, wait

#: The label (and taint key) that ties a test's Karpenter nodes to it.
TEST_LABEL = "lws-gatekeeper.io/test-nodes"
#: Karpenter's label on its NodeClaims and nodes: the NodePool they belong to.
NODE_POOL_LABEL = "karpenter.sh/nodepool"
KARPENTER_API = "karpenter.sh/v1"


def node_pool(
    name: str,
    tag: str,
    *,
    gpu_limit: int,
    capacity_types: Sequence[str] = ("on-demand",),
    consolidate_after: str = "10s",
) -> dict[str, Any]:
    """A NodePool of the sandbox's GPU types: nodes labelled and tainted ``TEST_LABEL=tag``,
    at most ``gpu_limit`` nvidia.com/gpu in all, empty nodes removed after ``consolidate_after``."""
    return {
        "apiVersion": KARPENTER_API,
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {TEST_LABEL: tag}},
                "spec": {
                    "nodeClassRef": {"group": NODE_CLASS_GROUP, "kind": NODE_CLASS_KIND, "name": NODE_CLASS},
                    "requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": list(capacity_types),
                        }
                    ],
                    "taints": [{"key": TEST_LABEL, "value": tag, "effect": "NoSchedule"}],
                    "expireAfter": "Never",
                },
            },
            "limits": {"nvidia.com/gpu": str(gpu_limit)},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": consolidate_after},
        },
    }


def pool_over(name: str, tag: str, node_pools: Sequence[str], **spec: Any) -> dict[str, Any]:
    """A Pool of the nodes tagged ``tag`` that ``node_pools`` buy (more ``spec`` fields as given)."""
    return {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": POOL_KIND,
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {TEST_LABEL: tag},
            "tolerations": [toleration(tag)],
            "namespaceSelector": {},
            "nodePools": list(node_pools),
            **spec,
        },
    }


def toleration(tag: str) -> dict[str, str]:
    return {"key": TEST_LABEL, "operator": "Equal", "value": tag, "effect": "NoSchedule"}


def gpu_pod(name: str, namespace: str, tag: str, *, gpus: int = 1) -> dict[str, Any]:
    """A plain pod asking ``gpus`` GPUs (1 CPU, 1 GiB) on the nodes of NodePools tagged ``tag``."""
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/fake:1",
                    "resources": {"requests": res, "limits": res},
                }
            ],
            "nodeSelector": {TEST_LABEL: tag},
            "tolerations": [toleration(tag)],
        },
    }


def node_claims(sb: Sandbox, pool: str) -> list[dict[str, Any]]:
    return items(sb, "nodeclaims.karpenter.sh", "-l", f"{NODE_POOL_LABEL}={pool}")


def nodes(sb: Sandbox, pool: str) -> list[dict[str, Any]]:
    return items(sb, "nodes", "-l", f"{NODE_POOL_LABEL}={pool}")


def ready(node: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


def delete_node_pool(sb: Sandbox, name: str, timeout: float = 120) -> None:
    """Delete a NodePool and wait until Karpenter has removed its NodeClaims and nodes."""
    sb.kubectl("delete", "nodepools.karpenter.sh", name, "--ignore-not-found", "--wait=false")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not node_claims(sb, name) and not nodes(sb, name):
            return
        time.sleep(1)
    raise AssertionError(f"NodePool {name}'s NodeClaims and nodes still there after {timeout:.0f}s")


def wait_bound(sb: Sandbox, namespace: str, pod: str, timeout: float = 120) -> dict[str, Any]:
    """Wait until ``pod`` is bound to a node and Running; return it."""

    def bound() -> dict[str, Any] | None:
        found = items(sb, "pods", "-n", namespace, f"--field-selector=metadata.name={pod}")
        if (
            found
            and found[0]["spec"].get("nodeName")
            and found[0].get("status", {}).get("phase") == "Running"
        ):
            return found[0]
        return None

    return wait(f"pod {pod} bound and Running", bound, timeout=timeout)


def scene(sb: Sandbox, prefix: str) -> Iterator[str]:
    """A test's tag, with its namespace ``<prefix>-<tag>`` (not Kueue-managed); afterwards its
    LWSs, its NodePool ``np-<tag>`` (and the nodes Karpenter bought), its Pool ``pool-<tag>``
    and the namespace are removed (a ``yield from`` in a fixture)."""
    tag = new_tag()
    make_namespace(sb, f"{prefix}-{tag}", managed=False)
    yield tag
    sb.kubectl("delete", "leaderworkersets.leaderworkerset.x-k8s.io", "--all", "-n", f"{prefix}-{tag}")
    delete_node_pool(sb, f"np-{tag}")
    sb.kubectl("delete", "pools.lws-gatekeeper.io", f"pool-{tag}", "--ignore-not-found")
    sb.kubectl("delete", "namespace", f"{prefix}-{tag}", "--wait=false")


@contextlib.asynccontextmanager
async def as_the_chart(sb: Sandbox, tmp_path: Path) -> AsyncIterator[None]:
    """The sandbox's gatekeeper run as the chart's ServiceAccount, with the RBAC ``helm template
    --set-json karpenter.instanceTypes=...`` makes (and the chart's flag checked); afterwards
    the admin's gatekeeper again, and nothing in the log may say it was refused anything."""
    from tests.e2e.conftest import Cluster, gatekeeper_running_as
    from tests.e2e.test_chart import gatekeepers, installed, template
    from tests.e2e.test_policies import user_kubeconfig

    helm = build.build_all(["helm"])["helm"].bin / "helm"
    values = ["--set-json", f"karpenter.instanceTypes={json.dumps(list(GPU_TYPES))}"]
    rendered = template(helm, "lws-gatekeeper", GATEKEEPER_NAMESPACE, *values)
    args = next(o for o in rendered if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert any(a.startswith("--karpenter-instance-types=") for a in args["args"])
    objects = gatekeepers(rendered)
    cluster = Cluster(kubeconfig=sb.kubeconfig, kind="sandbox", own=sb)
    with installed(cluster, objects):
        kubeconfig = await user_kubeconfig(cluster, GATEKEEPER_NAMESPACE, "lws-gatekeeper", tmp_path)
        # With Karpenter's instance types, as the chart.
        with gatekeeper_running_as(sb, kubeconfig=kubeconfig):
            yield
