"""What topology-aware admission costs a pass: ``core.backends.pools.decide`` with the groups'
LWSs requiring (or preferring) one rack, against the same pass with no topology (today's flat fit).

The cluster: NODES nodes of 8 GPUs in one Pool with ``spec.topology.levels`` [block, rack,
host], BLOCK nodes a block, RACK nodes a rack; LWSS LWSs of REPLICAS groups of SIZE pods of
2 GPUs (groups of 8 GPUs). Scenarios:

* steady: half the groups admitted and bound (the nodes full), the quota exactly theirs, the
  other half waiting gated: a pass admits nothing (the pass a full pool pays on every event);
* placing: a quarter admitted and bound (half the nodes full, rack by rack), the quota large:
  the pass admits every waiting group that finds room (a quarter of them), the rest wait for
  nodes (the costliest pass: each admission changes the room the next group sees).

Each is run flat (no annotation), with ``lws-gatekeeper.io/topology-required`` on the rack
level, with ``-preferred``, and with a hard topology spread constraint in the template (each
group's pods one a host: maxSkew 1 over the hostname, LWS's group key in ``matchLabelKeys``);
the figures are the median of RUNS passes after a first, and
each topology pass as a ratio to the flat one of the same scenario.
Run: ``.venv/bin/python benchmarks/bench_topology.py``
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from gatekeeper.core.backends.pools import Snapshot, decide
from gatekeeper.core.kube.keys import (
    GROUP_INDEX_LABEL,
    GROUP_KEY_LABEL,
    LWS_NAME_LABEL,
    POOL_LABEL,
    SCHEDULING_GATE,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    WORKER_INDEX_LABEL,
)
from gatekeeper.core.kube.parsed import parse_each
from gatekeeper.core.model.groups import DemandMemo
from gatekeeper.core.model.nodes import RequestsMemo, parse_node
from gatekeeper.core.model.pool import parse_pool
from gatekeeper.core.model.record import record_name

NODES = 5_000
BLOCK = 500
RACK = 20
LWSS = 2_500
REPLICAS = 4
SIZE = 4
RUNS = 3
GPU = "nvidia.com/gpu"
POOL = "shared"
LEVELS = ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]
SPREAD = "spread"
"""The kind of LWS whose template spreads each group's pods one a host."""


def node(i: int) -> dict[str, Any]:
    name = f"gpu-{i:05d}"
    labels = {
        "pool": POOL,
        LEVELS[0]: f"b{i // BLOCK}",
        LEVELS[1]: f"r{i // RACK}",
        LEVELS[2]: name,
    }
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110", GPU: "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def lws(i: int, annotation: str) -> dict[str, Any]:
    container = {"name": "vllm", "resources": {"requests": {"cpu": "4"}, "limits": {GPU: 2}}}
    meta: dict[str, Any] = {
        "name": f"vllm-{i:04d}",
        "namespace": "bench",
        "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"vllm-{i}")),
        "labels": {POOL_LABEL: POOL},
        "generation": 1,
        "creationTimestamp": f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
    }
    template: dict[str, Any] = {"spec": {"containers": [container]}}
    if annotation == SPREAD:
        template["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": LEVELS[2],
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {LWS_NAME_LABEL: meta["name"]}},
                "matchLabelKeys": [GROUP_KEY_LABEL],
            }
        ]
    elif annotation:
        meta["annotations"] = {annotation: LEVELS[1]}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": {"replicas": REPLICAS, "leaderWorkerTemplate": {"size": SIZE, "workerTemplate": template}},
    }


def pod(obj: dict[str, Any], group: int, worker: int, node_name: str | None) -> dict[str, Any]:
    name = obj["metadata"]["name"]
    spec: dict[str, Any] = {
        "containers": [{"name": "vllm", "resources": {"requests": {"cpu": "4"}, "limits": {GPU: 2}}}]
    }
    if node_name:
        spec["nodeName"] = node_name
    else:
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return {
        "metadata": {
            "name": f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}",
            "namespace": "bench",
            "uid": f"{name}-{group}-{worker}",
            "resourceVersion": "1",
            "labels": {
                LWS_NAME_LABEL: name,
                GROUP_INDEX_LABEL: str(group),
                WORKER_INDEX_LABEL: str(worker),
                POOL_LABEL: POOL,
            },
        },
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def record(obj: dict[str, Any], group: int, host: int) -> dict[str, Any]:
    meta = obj["metadata"]
    status: dict[str, Any] = {
        "pool": POOL,
        "pods": SIZE,
        "demand": {"cpu": str(4 * SIZE), GPU: str(2 * SIZE)},
        "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted"}],
    }
    if "annotations" in meta:
        status["domain"] = {LEVELS[0]: f"b{host // BLOCK}", LEVELS[1]: f"r{host // RACK}"}
    return {
        "metadata": {"name": record_name(meta["name"], meta["uid"], group), "namespace": "bench"},
        "spec": {"leaderWorkerSet": meta["name"], "leaderWorkerSetUID": meta["uid"], "groupIndex": group},
        "status": status,
    }


def snapshot(admitted_share: float, quota_full: bool, annotation: str) -> Snapshot:
    """The first ``admitted_share`` of all groups admitted and bound, group ``n`` on node ``n``
    (its 4 pods of 2 GPUs fill the node's 8)."""
    nodes = [parse_node(node(i)) for i in range(NODES)]
    groups = LWSS * REPLICAS
    admitted = int(groups * admitted_share)
    lwss, pods, records = [], [], []
    for i in range(LWSS):
        obj = lws(i, annotation)
        lwss.append(obj)
        for group in range(REPLICAS):
            n = i * REPLICAS + group
            on = n < admitted
            for worker in range(SIZE):
                pods.append(pod(obj, group, worker, f"gpu-{n:05d}" if on else None))
            if on:
                records.append(record(obj, group, n))
    quota = {GPU: str(admitted * SIZE * 2 if quota_full else NODES * 8)}
    spec = {
        "nodeSelector": {"pool": POOL},
        "namespaceSelector": {},
        "quota": quota,
        "topology": {"levels": LEVELS},
    }
    pools = parse_each([{"metadata": {"name": POOL}, "spec": spec}], parse_pool)
    bound = [p for p in pods if p["spec"].get("nodeName")]
    return Snapshot(lwss=lwss, pods=pods, bound_pods=bound, nodes=nodes, pools=pools, records=records)


def timed(snap: Snapshot) -> tuple[float, float, int, int]:
    """(first pass, median of RUNS, admitted, waiting), in seconds."""
    demands, requests = DemandMemo(), RequestsMemo()
    began = time.perf_counter()
    decide(snap, demands, requests)
    first = time.perf_counter() - began
    times = []
    for _ in range(RUNS):
        began = time.perf_counter()
        actions = decide(snap, demands, requests)
        times.append(time.perf_counter() - began)
    return first, statistics.median(times), len(actions.admit), len(actions.waiting)


def main() -> None:
    for scenario, share, full in (("steady", 0.5, True), ("placing", 0.25, False)):
        flat = 0.0
        for kind, annotation in (
            ("flat", ""),
            ("required rack", TOPOLOGY_REQUIRED_ANNOTATION),
            ("preferred rack", TOPOLOGY_PREFERRED_ANNOTATION),
            ("spread over hosts", SPREAD),
        ):
            first, median, admit, waiting = timed(snapshot(share, full, annotation))
            flat = flat or median
            print(
                f"decide, {scenario}, {kind}: {NODES} nodes in {NODES // BLOCK} blocks of "
                f"{BLOCK // RACK} racks, {LWSS * REPLICAS} groups ({LWSS * REPLICAS * SIZE} pods): "
                f"first pass {first * 1000:.0f} ms, then median {median * 1000:.0f} ms "
                f"(admit {admit}, waiting {waiting}); against flat {median / flat:.2f}x"
            )


if __name__ == "__main__":
    main()
