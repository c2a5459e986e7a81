"""The ``kueue`` backend with Kueue's Topology Aware Scheduling: Kueue chooses the rack, the
gatekeeper pins the group's pods to it.

Why this exists: with the ``kueue`` backend Kueue decides, so the domain a group goes into is
Kueue's choice too. An LWS asks it as Kueue's own LWS integration reads it (Kueue's
annotations on the templates); the gatekeeper writes that into its Workload's pod sets and,
once Kueue admits the Workload, lifts every gate with a node selector for the domain Kueue
assigned (``core.backends.kueue.topology``). The real Kueue, with a ``Topology`` of racks and
hosts, shows a group that fits the quota and two nodes but no single rack waiting gated, and
then running whole in the rack Kueue chose once one has room.
"""

from __future__ import annotations

import time
from typing import Any

from gatekeeper.core.kube.keys import (
    KUEUE_PODSET_GROUP_ANNOTATION,
    KUEUE_REQUIRED_TOPOLOGY_ANNOTATION,
    POOL_LABEL,
)
from gatekeeper_lab.sandbox.cluster import Sandbox
from tests.e2e.kueue_support import (
    container,
    group_states,
    is_true,
    lws,
    make_namespace,
    make_queue,
    new_tag,
    pods,
    records,
    wait,
    workloads,
)

HELD_SECONDS = 15
"""How long the group is watched waiting: past Kueue's 10 s batching of freed nodes."""
RACK = "topology.example.com/rack"
HOST = "kubernetes.io/hostname"


def _foreign(name: str, ns: str, node: str, gpus: int) -> dict[str, Any]:
    """Another team's pod on ``node``: Kueue's TAS counts it as usage it did not place."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeSelector": {HOST: node},
            "containers": [container("main", gpus)],
        },
    }


def _kueue_said(sb: Sandbox, ns: str) -> str | None:
    """The record's message once it passes on Kueue's evaluation of the Workload."""
    for record in records(sb, ns):
        for cond in record.get("status", {}).get("conditions", []):
            if (
                cond["type"] == "Admitted"
                and cond["status"] == "False"
                and "(Workload" in cond.get("message", "")
            ):
                return str(cond["message"])
    return None


def _running(sb: Sandbox, ns: str) -> int:
    return sum(p.get("status", {}).get("phase") == "Running" for p in pods(sb, ns))


def _show(sb: Sandbox, ns: str) -> None:
    print(sb.kubectl("get", "workloads.kueue.x-k8s.io,groupadmissions,pods", "-n", ns, "-o", "wide").stdout)


def test_kueue_chooses_the_rack_and_the_gatekeeper_pins_the_whole_group_there(kueue_sandbox: Sandbox) -> None:
    """Two racks of two 8-GPU nodes, 6 GPUs taken on one node of each: a group of two 6-GPU
    pods fits the quota and two nodes (one in each rack) but no rack. It waits gated, with
    Kueue's words; freed room in rack r2 lets Kueue admit it there, and every pod runs in r2."""
    sb = kueue_sandbox
    tag = new_tag()
    racks = [{RACK: "r1"}, {RACK: "r1"}, {RACK: "r2"}, {RACK: "r2"}]
    q = make_queue(sb, gpus=32, nodes=4, gpus_per_node=8, managed=False, tag=tag,
                   node_labels=racks, topology=[RACK, HOST])  # fmt: skip
    others = f"others-{tag}"
    make_namespace(sb, others, managed=False)
    sb.apply([_foreign("busy-r1", others, f"kq-{tag}-0", 6), _foreign("busy-r2", others, f"kq-{tag}-2", 6)])
    wait("the other team's pods Running", lambda: _running(sb, others) == 2)

    obj = lws("racked", q.namespace, {POOL_LABEL: q.local_queue}, replicas=1, size=2, gpus_per_pod=6)
    together = {KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK, KUEUE_PODSET_GROUP_ANNOTATION: "group"}
    for part in ("leaderTemplate", "workerTemplate"):
        template = dict(obj["spec"]["leaderWorkerTemplate"][part])
        template["metadata"] = {"annotations": together}
        obj["spec"]["leaderWorkerTemplate"][part] = template
    sb.apply([obj])
    try:
        [wl] = wait("the group's Workload", lambda: workloads(sb, q.namespace))
        asked = [ps.get("topologyRequest") for ps in wl["spec"]["podSets"]]
        assert asked == [{"required": RACK, "podSetGroupName": "group"}] * 2, asked
        # Kueue evaluates it and finds no rack with room for both pods: no quota reserved, and
        # the record carries Kueue's words. Watched across Kueue's retries (its TAS batches
        # freed nodes by 10 s).
        said = wait("Kueue's words on the record", lambda: _kueue_said(sb, q.namespace))
        deadline = time.monotonic() + HELD_SECONDS
        while time.monotonic() < deadline:
            assert group_states(sb, q.namespace).get("0", {}).get("gated") == 2, group_states(sb, q.namespace)
            [wl] = workloads(sb, q.namespace)
            assert not is_true(wl, "QuotaReserved"), wl.get("status")
            time.sleep(1)
        print("waiting:", said)

        sb.kubectl("delete", "pod", "busy-r2", "-n", others, "--wait=true")
        wait("the whole group Running", lambda: _running(sb, q.namespace) == 2, timeout=120)
    finally:
        _show(sb, q.namespace)
    in_r2 = {f"kq-{tag}-2", f"kq-{tag}-3"}
    placed = {p["metadata"]["name"]: p for p in pods(sb, q.namespace)}
    assert {p["spec"]["nodeName"] for p in placed.values()} == in_r2  # both 6-GPU pods, one a node
    [wl] = workloads(sb, q.namespace)
    assigned = wl["status"]["admission"]["podSetAssignments"]
    print("Kueue's assignment:", [psa.get("topologyAssignment") for psa in assigned])
    # Kueue assigns each pod set to hosts (its lowest level): each pod goes to the very host
    # Kueue chose for it, in rack r2, and the record says where.
    for name, pod in placed.items():
        assert pod["spec"]["nodeSelector"].get(HOST) == pod["spec"]["nodeName"], (name, pod["spec"])
    [record] = records(sb, q.namespace)
    said = next(c for c in record["status"]["conditions"] if c["type"] == "Admitted")
    assert said["status"] == "True", said
    hosts = {placed["racked-0"]["spec"]["nodeName"], placed["racked-0-1"]["spec"]["nodeName"]}
    for host in hosts:
        assert f"{HOST}={host}" in said["message"], said
    print("admitted:", said["message"])
