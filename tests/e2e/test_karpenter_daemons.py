"""A Karpenter pool counts the DaemonSets' pods on the nodes it would buy.

A NodePool may buy at most 4 GPUs of the sandbox's types (the 1-GPU type has 4 cpu, 3.9 for
pods; the 8-GPU type is over the limit). A DaemonSet whose pods go to the NodePool's nodes
asks 3 cpu each: a group of two pods of 1 GPU and 1 cpu fits the 1-GPU type alone, not
beside it, so the gatekeeper holds the group gated (it would otherwise be admitted and
Karpenter, which counts the DaemonSet too, would buy nothing for it) and Karpenter buys no
node. With the DaemonSet gone, the group is admitted and runs whole on two nodes bought
for it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.cluster import Sandbox
from tests.e2e.karpenter_support import TEST_LABEL, node_claims, node_pool, pool_over, scene, toleration
from tests.e2e.kueue_support import items, lws, records, wait

QUIET_SECONDS = 15


@pytest.fixture
def tag(karpenter_sandbox: Sandbox) -> Iterator[str]:
    yield from scene(karpenter_sandbox, "kdaemon")


def _daemon_set(name: str, ns: str, tag: str, cpu: str) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "agent",
                            "image": "agent",
                            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
                        }
                    ],
                    "nodeSelector": {TEST_LABEL: tag},
                    "tolerations": [toleration(tag)],
                },
            },
        },
    }


def test_a_group_that_fits_a_node_only_without_its_daemon_sets_waits_and_nothing_is_bought(
    karpenter_sandbox: Sandbox, tag: str
) -> None:
    sb, ns, np_name, pool = karpenter_sandbox, f"kdaemon-{tag}", f"np-{tag}", f"pool-{tag}"
    sb.apply([node_pool(np_name, tag, gpu_limit=4), _daemon_set("agent", ns, tag, cpu="3")])
    sb.apply([pool_over(pool, tag, [np_name])])
    sb.apply([lws("vllm", ns, {POOL_LABEL: pool}, replicas=1, size=2, gpus_per_pod=1)])

    def held() -> dict[str, object] | None:
        recs = records(sb, ns)
        if len(recs) != 1:
            return None
        said = next(
            (c for c in recs[0].get("status", {}).get("conditions", []) if c["type"] == "Admitted"), None
        )
        return said if said is not None and said["status"] == "False" else None

    said = wait("the group held: its pods fit no node the NodePool may buy beside the DaemonSet", held, 60)
    print(f"\ngroup 0: {said['reason']}: {said['message']}")
    quiet_from = time.monotonic()
    while time.monotonic() - quiet_from < QUIET_SECONDS:
        assert node_claims(sb, np_name) == [], "Karpenter bought a node for a group that cannot run"
        pods = items(sb, "pods", "-n", ns, "-l", "leaderworkerset.sigs.k8s.io/name=vllm")
        assert all(
            any(g.get("name") == SCHEDULING_GATE for g in p["spec"].get("schedulingGates", [])) for p in pods
        ), "a pod let through"
        time.sleep(1)

    sb.kubectl("delete", "daemonset", "agent", "-n", ns)

    def running() -> bool:
        pods = items(sb, "pods", "-n", ns, "-l", "leaderworkerset.sigs.k8s.io/name=vllm")
        return len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods)

    wait("the group admitted and Running once the DaemonSet is gone", running, 180)
    assert len(node_claims(sb, np_name)) == 2, "two 1-GPU nodes bought for the group"
