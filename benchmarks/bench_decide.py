"""How long one whole pass of the ``pools`` controller's decision takes, snapshot in, actions out.

``bench_core`` times the planner alone; this times ``core.backends.pools.decide``, what
the controller runs on every debounced event, and then ``plan_writes``, which turns its
actions into the pass's writes: reading every LWS, pod and record, telling
admitted groups from waiting ones (and, since rolling updates are admitted again,
comparing each admitted group's recorded demand and revision with its LWS's), then
planning. Scenarios, on 2,000 nodes of 8 GPUs in one pool:

* steady: 500 LWSs of 4 groups x 4 pods x 2 GPUs, 1,000 groups admitted and Running,
  1,000 waiting gated;
* rolling: the same, with every LWS's templates changed to 4 GPUs per pod and every
  admitted group half-way through its update (old pods Running, new pods gated);
* preempting: steady, in a Pool with ``spec.preemption.withinPool: LowerPriority``, the
  first PREEMPTORS LWSs of a higher PriorityClass: every pass chooses the victims of their
  waiting groups (the pass that preempts, the costliest), printed also as a ratio to steady;
* cohort: steady, the nodes and LWSs split over COHORT_POOLS Pools of one ``spec.cohort``, each
  quota full: every waiting group is tried in each other pool of the cohort and borrows nothing
  (the pass a full cohort pays on every event), printed also as a ratio to steady.

Objects carry a UID, resourceVersion and generation as the API server's do: a pass reads
a pod's requests and an LWS's demand once per version, so the first pass is slower than
the next (both are printed). Run: ``.venv/bin/python benchmarks/bench_decide.py``
"""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gatekeeper.core.backends.pools import PassInputs, Snapshot, decide, plan_writes
from gatekeeper.core.kube.keys import (
    GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    POOL_LABEL,
    REVISION_LABEL,
    SCHEDULING_GATE,
    WORKER_INDEX_LABEL,
)
from gatekeeper.core.kube.parsed import parse_each
from gatekeeper.core.model.groups import DemandMemo
from gatekeeper.core.model.nodes import RequestsMemo, parse_node
from gatekeeper.core.model.pool import parse_pool
from gatekeeper.core.model.record import record_name
from gatekeeper.core.writes.plan import Memory, walk

NODES = 2_000
LWSS = 500
REPLICAS = 4
SIZE = 4
ADMITTED_PER_LWS = 2
PREEMPTORS = 10
COHORT_POOLS = 10
RUNS = 5
GPU = "nvidia.com/gpu"
POOL = "shared"


def lws(i: int, gpus: int, klass: str = "") -> dict[str, Any]:
    container = {
        "name": "vllm",
        "resources": {"requests": {"cpu": "4", "memory": "32Gi"}, "limits": {GPU: gpus}},
    }
    template: dict[str, Any] = {"spec": {"containers": [container]}}
    if klass:
        template["spec"]["priorityClassName"] = klass
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": f"vllm-{i:03d}",
            "namespace": "bench",
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"vllm-{i}")),
            "labels": {POOL_LABEL: POOL},
            "generation": 2 if gpus == 4 else 1,
            "creationTimestamp": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
        },
        "spec": {
            "replicas": REPLICAS,
            "leaderWorkerTemplate": {"size": SIZE, "workerTemplate": template},
        },
    }


def pod(
    obj: dict[str, Any], group: int, worker: int, *, revision: str, gpus: int, node: str | None
) -> dict[str, Any]:
    name = obj["metadata"]["name"]
    spec: dict[str, Any] = {
        "containers": [
            {"name": "vllm", "resources": {"requests": {"cpu": "4", "memory": "32Gi"}, "limits": {GPU: gpus}}}
        ]
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return {
        "metadata": {
            "name": f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}",
            "namespace": "bench",
            "uid": f"{name}-{group}-{worker}-{revision}",
            "resourceVersion": "1",
            "labels": {
                LWS_NAME_LABEL: name,
                GROUP_INDEX_LABEL: str(group),
                WORKER_INDEX_LABEL: str(worker),
                POOL_LABEL: POOL,
                REVISION_LABEL: revision,
            },
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def record(obj: dict[str, Any], group: int, admitted: bool) -> dict[str, Any]:
    meta = obj["metadata"]
    status: dict[str, Any] = {
        "pool": POOL,
        "conditions": [
            {
                "type": "Admitted",
                "status": "True" if admitted else "False",
                "reason": "Admitted" if admitted else "WaitingForQuota",
            }
        ],
    }
    if admitted:
        status |= {
            "pods": SIZE,
            "demand": {"cpu": "16", "memory": "128Gi", GPU: str(2 * SIZE)},
            "templateRevision": "r1",
        }
    return {
        "metadata": {"name": record_name(meta["name"], meta["uid"], group), "namespace": "bench"},
        "spec": {"leaderWorkerSet": meta["name"], "leaderWorkerSetUID": meta["uid"], "groupIndex": group},
        "status": status,
    }


def _pool_of(i: int, cohort: bool) -> str:
    """The pool of LWS ``i`` (of nodes ``2i`` and ``2i+1``, where its admitted pods run)."""
    return f"{POOL}-{i % COHORT_POOLS}" if cohort else POOL


def _split(lwss: list[dict[str, Any]], pods: list[dict[str, Any]], records: list[dict[str, Any]]) -> None:
    """Each LWS, its pods and its records moved to its pool of the cohort."""
    index = {o["metadata"]["name"]: i for i, o in enumerate(lwss)}
    for obj in [*lwss, *pods]:
        name = obj["metadata"]["labels"].get(LWS_NAME_LABEL, obj["metadata"]["name"])
        obj["metadata"]["labels"][POOL_LABEL] = _pool_of(index[name], True)
    for r in records:
        r["status"]["pool"] = _pool_of(index[r["spec"]["leaderWorkerSet"]], True)


def snapshot(rolling: bool, preempting: bool = False, cohort: bool = False) -> Snapshot:
    nodes = [
        parse_node(
            {
                "metadata": {"name": f"gpu-{i:05d}", "labels": {"pool": _pool_of(i // 2, cohort)}},
                "status": {
                    "allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110", GPU: "8"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
        for i in range(NODES)
    ]
    lwss, pods, records = [], [], []
    slot = 0
    for i in range(LWSS):
        obj = lws(i, 4 if rolling else 2, "production" if preempting and i < PREEMPTORS else "")
        lwss.append(obj)
        for group in range(REPLICAS):
            admitted = group < ADMITTED_PER_LWS
            records.append(record(obj, group, admitted))
            for worker in range(SIZE):
                if admitted and rolling and worker == 0:
                    pods.append(pod(obj, group, worker, revision="r2", gpus=4, node=None))
                elif admitted:
                    pods.append(pod(obj, group, worker, revision="r1", gpus=2, node=f"gpu-{slot // 4:05d}"))
                    slot += 1
                else:
                    pods.append(
                        pod(obj, group, worker, revision="r2" if rolling else "r1", gpus=2, node=None)
                    )
    # Quota for exactly the admitted groups: a pass in steady state admits nothing.
    names = [_pool_of(i, True) for i in range(COHORT_POOLS)] if cohort else [POOL]
    quota = {GPU: str(LWSS * ADMITTED_PER_LWS * SIZE * 2 // len(names))}
    objs: list[dict[str, Any]] = [
        {
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"pool": name}, "namespaceSelector": {}, "quota": quota},
        }
        for name in names
    ]
    for pool in objs:
        if preempting:
            pool["spec"]["preemption"] = {"withinPool": "LowerPriority"}
        if cohort:
            pool["spec"]["cohort"] = "bench"
    if cohort:
        _split(lwss, pods, records)
    bound = [p for p in pods if p["spec"].get("nodeName")]
    pools = parse_each(objs, parse_pool)
    snap = Snapshot(lwss=lwss, pods=pods, bound_pods=bound, nodes=nodes, pools=pools, records=records)
    return replace(snap, priorities={"production": 1000}, now=datetime.now(UTC)) if preempting else snap


def main() -> None:
    medians: dict[str, float] = {}
    for name, rolling, preempting, cohort in (
        ("steady", False, False, False),
        ("rolling", True, False, False),
        ("preempting", False, True, False),
        ("cohort", False, False, True),
    ):
        snap = snapshot(rolling, preempting, cohort)
        demands, requests = DemandMemo(), RequestsMemo()  # owned by the loop, as in the controller
        began = time.perf_counter()
        decide(snap, demands, requests)
        first = time.perf_counter() - began
        times, planning = [], []
        for _ in range(RUNS):
            began = time.perf_counter()
            actions = decide(snap, demands, requests)
            times.append(time.perf_counter() - began)
            began = time.perf_counter()
            plan = plan_writes(actions, PassInputs(snap, Memory(), datetime.now(UTC), time.monotonic()))
            planning.append(time.perf_counter() - began)
        print(
            f"decide, {name}: {len(snap.lwss)} LWSs, {len(snap.pods)} pods, {len(snap.records)} records, "
            f"{NODES} nodes: first pass {first * 1000:.0f} ms, "
            f"then median {statistics.median(times) * 1000:.0f} ms "
            f"(admit {len(actions.admit)}, waiting {len(actions.waiting)}, held for a template change "
            f"{len(actions.held_changed)}, ungate {len(actions.ungate)}); "
            f"planning its {sum(1 for _ in walk(plan))} writes: "
            f"median {statistics.median(planning) * 1000:.0f} ms"
            + (
                f"; preempting {len(actions.preempting)} groups' victims "
                f"({len(actions.give_back)} given back)"
                if preempting
                else ""
            )
        )
        medians[name] = statistics.median(times)
        if preempting or cohort:
            print(f"decide, {name} against steady: {medians[name] / medians['steady']:.2f}x")


if __name__ == "__main__":
    main()
