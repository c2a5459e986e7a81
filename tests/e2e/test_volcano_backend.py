"""The real Volcano scheduler against Kubernetes 1.37: what the ``volcano`` backend builds on.

Why this exists: the ``volcano`` backend hands the quota decision to Volcano's Queues and
reads it back from PodGroups. These tests run on a sandbox of their own with Volcano's
scheduler (``volcano_sandbox``: ``sandbox up --with-volcano``, v1.10.0 built from its
module, against kube-apiserver v1.37.2) and prove the facts the backend relies on, with
PodGroups and pods written by the test: Volcano places whole PodGroups within their
Queue's capability and says why the others wait; and it reserves no room in a Queue for
pods that carry a scheduling gate (``DeductSchGatedResources`` in its proportion plugin),
which is why the backend must not let two of its PodGroups wait gated in one Queue.

Each test makes its own nodes (with more GPUs than the Queue, so that the Queue, not the
nodes, is what limits), under a random tag and a taint its pods tolerate, and its own
Queue and namespace.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gatekeeper.core.keys import VOLCANO_API_VERSION, VOLCANO_GROUP_ANNOTATION
from gatekeeper.sandbox.cluster import Sandbox, fake_node
from gatekeeper.sandbox.volcano import SCHEDULER_NAME
from tests.e2e.kueue_support import items, make_namespace, new_tag, wait

GPU = "nvidia.com/gpu"
TAINT = "lws-gatekeeper.io/test-nodes"


def _setup(sb: Sandbox, tag: str, *, nodes: int, gpus_per_node: int, queue_gpus: int) -> str:
    """Nodes, a Queue with ``queue_gpus`` GPUs of capability, a namespace; returns the namespace."""
    sb.create_nodes(
        [
            fake_node(
                f"{tag}-{i}",
                gpus=gpus_per_node,
                labels={TAINT: tag},
                taints=[{"key": TAINT, "value": tag, "effect": "NoSchedule"}],
            )
            for i in range(nodes)
        ]
    )
    sb.apply(
        [
            {
                "apiVersion": VOLCANO_API_VERSION,
                "kind": "Queue",
                "metadata": {"name": tag},
                "spec": {"weight": 1, "reclaimable": False, "capability": {GPU: str(queue_gpus)}},
            }
        ]
    )
    make_namespace(sb, tag, managed=False)
    return tag


def _gang(tag: str, name: str, *, size: int, gated: bool) -> list[dict[str, Any]]:
    """One PodGroup of ``size`` one-GPU pods in Queue ``tag``, and its pods."""
    objs: list[dict[str, Any]] = [
        {
            "apiVersion": VOLCANO_API_VERSION,
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": tag},
            "spec": {"queue": tag, "minMember": size, "minResources": {GPU: str(size)}},
        }
    ]
    for i in range(size):
        spec: dict[str, Any] = {
            "schedulerName": SCHEDULER_NAME,
            "nodeSelector": {TAINT: tag},
            "tolerations": [{"key": TAINT, "operator": "Equal", "value": tag, "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "1"}}}],
        }
        if gated:
            spec["schedulingGates"] = [{"name": "example.com/hold"}]
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{i}",
                    "namespace": tag,
                    "annotations": {VOLCANO_GROUP_ANNOTATION: name},
                },
                "spec": spec,
            }
        )
    return objs


def _phases(sb: Sandbox, ns: str) -> dict[str, str]:
    return {
        pg["metadata"]["name"]: pg.get("status", {}).get("phase", "")
        for pg in items(sb, "podgroups.scheduling.volcano.sh", "-n", ns)
    }


def _events(sb: Sandbox, ns: str, name: str) -> list[str]:
    return [
        f"{e.get('reason')}: {e.get('message')}"
        for e in items(sb, "events", "-n", ns, f"--field-selector=involvedObject.name={name}")
    ]


def test_volcano_places_whole_podgroups_within_the_queue_and_says_why_the_rest_waits(
    volcano_sandbox: Sandbox,
) -> None:
    """Queue of 4 GPUs on 12 GPUs of nodes, three gangs of 2: two run whole, one waits."""
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=3, gpus_per_node=4, queue_gpus=4)
    for name in ("a", "b", "c"):
        sb.apply(_gang(ns, name, size=2, gated=False))

    def two_running() -> dict[str, str] | None:
        phases = _phases(sb, ns)
        return phases if Counter(phases.values()) == Counter({"Running": 2, "Pending": 1}) else None

    phases = wait("2 PodGroups Running, 1 Pending", two_running)
    pods = items(sb, "pods", "-n", ns)
    bound = Counter(
        p["metadata"]["annotations"][VOLCANO_GROUP_ANNOTATION] for p in pods if p["spec"].get("nodeName")
    )
    running = {n for n, phase in phases.items() if phase == "Running"}
    assert bound == Counter(dict.fromkeys(running, 2)), "each running PodGroup is placed whole, no other pod"
    (waiting,) = set(phases) - running
    said = wait(f"Volcano's reason on {waiting}", lambda: _events(sb, ns, waiting))
    assert "Unschedulable: queue resource quota insufficient" in said, said


def test_volcano_reserves_no_queue_room_for_gated_pods(volcano_sandbox: Sandbox) -> None:
    """Same Queue and gangs, every pod gated: Volcano puts all three PodGroups Inqueue.

    Volcano v1.10 deducts the requests of scheduling-gated pods from the room an Inqueue
    PodGroup holds in its Queue, so gated PodGroups never stop each other. The volcano
    backend therefore offers Volcano one waiting group per Queue at a time.
    """
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=3, gpus_per_node=4, queue_gpus=4)
    for name in ("a", "b", "c"):
        sb.apply(_gang(ns, name, size=2, gated=True))
    wait(
        "3 PodGroups Inqueue (6 GPUs in a Queue of 4)",
        lambda: Counter(_phases(sb, ns).values()) == Counter({"Inqueue": 3}),
    )
    assert not [p for p in items(sb, "pods", "-n", ns) if p["spec"].get("nodeName")], (
        "gated pods stay unbound"
    )
