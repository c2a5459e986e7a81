"""The real Karpenter in the sandbox: it buys a node for a Pending GPU pod, and none for a gated one.

Why this exists: autoscaled pools rest on two facts about Karpenter, and these tests check
them against the real one (v1.14.1, KWOK cloud provider) on a sandbox of its own with no
static nodes (``karpenter_sandbox``): a GPU pod that no node can take makes Karpenter
launch a node of the right instance type, which KWOK makes Ready and the pod binds to;
and a pod the gatekeeper holds with its scheduling gate makes it launch nothing, because
Karpenter acts only on pods the scheduler found unschedulable. What they measure is
printed (run with ``-s``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gatekeeper.core.kube.keys import GATEKEEPER_API_VERSION, POOL_KIND, POOL_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.cluster import Sandbox
from tests.e2e.karpenter_support import (
    TEST_LABEL,
    delete_node_pool,
    gpu_pod,
    node_claims,
    node_pool,
    nodes,
    ready,
    toleration,
    wait_bound,
)
from tests.e2e.kueue_support import get, items, lws, make_namespace, new_tag, wait

#: How long a gated group is watched for a NodeClaim that must not come. Karpenter batches
#: Pending pods for 1-3 s (the sandbox's batch flags) and launched for the ungated pod
#: below in a few seconds, so 20 s is several times what a launch takes.
QUIET_SECONDS = 20


@pytest.fixture
def tag(karpenter_sandbox: Sandbox) -> Iterator[str]:
    """A tag for this test's NodePool and namespace; the NodePool (and its nodes) go after."""
    tag = new_tag()
    make_namespace(karpenter_sandbox, f"karp-{tag}", managed=False)
    yield tag
    delete_node_pool(karpenter_sandbox, f"np-{tag}")
    karpenter_sandbox.kubectl("delete", "namespace", f"karp-{tag}", "--wait=false")


def test_karpenter_launches_a_gpu_node_for_an_unschedulable_pod(karpenter_sandbox: Sandbox, tag: str) -> None:
    sb, ns, pool = karpenter_sandbox, f"karp-{tag}", f"np-{tag}"
    sb.apply([node_pool(pool, tag, gpu_limit=4)])
    assert not nodes(sb, pool), "the sandbox has no static nodes for this NodePool"

    start = time.monotonic()
    sb.apply([gpu_pod("one-gpu", ns, tag, gpus=1)])
    claim = wait("a NodeClaim of the NodePool", lambda: node_claims(sb, pool), timeout=60)[0]
    claimed = time.monotonic() - start
    pod = wait_bound(sb, ns, "one-gpu")
    bound = time.monotonic() - start

    node = get(sb, "node", pod["spec"]["nodeName"])
    labels = node["metadata"]["labels"]
    print(
        f"\nNodeClaim {claim['metadata']['name']} after {claimed:.1f}s; "
        f"pod bound to {node['metadata']['name']} "
        f"({labels.get('node.kubernetes.io/instance-type')}, {labels.get('karpenter.sh/capacity-type')}) "
        f"after {bound:.1f}s"
    )
    assert labels["karpenter.sh/nodepool"] == pool
    assert labels[TEST_LABEL] == tag
    # The cheapest type that holds one GPU, on the only capacity type the NodePool allows.
    assert labels["node.kubernetes.io/instance-type"] == "g4dn.xlarge"
    assert labels["karpenter.sh/capacity-type"] == "on-demand"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert ready(node)
    assert len(node_claims(sb, pool)) == 1, "one pod of one GPU needs one node"


def test_a_gated_group_makes_karpenter_buy_nothing(karpenter_sandbox: Sandbox, tag: str) -> None:
    sb, ns, pool = karpenter_sandbox, f"karp-{tag}", f"np-{tag}"
    sb.apply([node_pool(pool, tag, gpu_limit=4)])
    # A gatekeeper Pool over the NodePool's nodes with the default node fit (Required): no
    # such node exists, so the group waits gated (NoMatchingNode) and holds nothing.
    gk_pool = f"pool-{tag}"
    sb.apply(
        [
            {
                "apiVersion": GATEKEEPER_API_VERSION,
                "kind": POOL_KIND,
                "metadata": {"name": gk_pool},
                "spec": {
                    "nodeSelector": {TEST_LABEL: tag},
                    "tolerations": [toleration(tag)],
                    "namespaceSelector": {},
                },
            }
        ]
    )
    try:
        sb.apply([lws("gated", ns, {POOL_LABEL: gk_pool}, replicas=1, size=2, gpus_per_pod=1)])

        def gated_pods() -> list[str] | None:
            found = items(sb, "pods", "-n", ns)
            names = [
                p["metadata"]["name"]
                for p in found
                if any(g.get("name") == SCHEDULING_GATE for g in p["spec"].get("schedulingGates", []))
            ]
            return names if len(names) == 2 and len(found) == 2 else None

        held = wait("both pods of the group gated", gated_pods, timeout=60)
        start = time.monotonic()
        while time.monotonic() - start < QUIET_SECONDS:
            claims = node_claims(sb, pool)
            assert not claims, f"Karpenter launched {[c['metadata']['name'] for c in claims]} for gated pods"
            time.sleep(1)
        pods = items(sb, "pods", "-n", ns)
        assert sorted(p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")) == sorted(held)
        print(f"\n{len(held)} gated pods, 0 NodeClaims in {QUIET_SECONDS}s")

        # The same NodePool does launch for the same pod without the gate: the quiet above
        # was the gate's doing, not a NodePool that cannot launch.
        start = time.monotonic()
        sb.apply([gpu_pod("ungated", ns, tag, gpus=1)])
        wait("a NodeClaim for the ungated pod", lambda: node_claims(sb, pool), timeout=60)
        print(f"the ungated pod got a NodeClaim after {time.monotonic() - start:.1f}s")
        wait_bound(sb, ns, "ungated")
        assert len(node_claims(sb, pool)) == 1, "nothing was bought for the gated group meanwhile"
    finally:
        sb.kubectl(
            "delete", "leaderworkersets.leaderworkerset.x-k8s.io", "gated", "-n", ns, "--ignore-not-found"
        )
        sb.kubectl("delete", "pools.lws-gatekeeper.io", gk_pool, "--ignore-not-found")
