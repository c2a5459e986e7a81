"""What half-placed groups cost with Karpenter: the same burst without and with the gatekeeper.

Why this exists: what a half-placed group costs is a figure users ask for. With an
autoscaler, a group that is never whole costs money: the nodes bought for its pods serve
nothing. This runs one burst on the sandbox's real Karpenter (KWOK provider, no static node)
twice, without and with the gatekeeper, and prints for each: node-seconds bought,
node-seconds of nodes that held only pods of groups that never became whole, the groups that
ran (were whole at some sample), and the time from the burst to the last group becoming
whole.

The burst: a NodePool of 8-GPU instance types (g4dn.metal) whose limit (48 GPUs, 6 nodes)
is below the demand (LWS ``a``: 3 groups of 2 pods, ``b``: 2 groups of 3; one 8-GPU pod per
node: 12 nodes), ``startupPolicy: LeaderReady`` as vLLM; and the offerings run out
part-way: once the NodePool has ``--cut-at`` NodeClaims (3) its limit drops to 32 GPUs
(4 nodes), or ``--cut-after`` seconds after the burst if that comes first. With the
gatekeeper the Pool names the NodePool and has ``admissionTimeout`` (``--timeout``), so a
group that gets only some of its nodes is given back. Each run is
watched for ``--window`` seconds, sampled every 2 s (the node-seconds have that grain).

Usage: python benchmarks/bench_karpenter.py [--window 150] [--cut-at 3] [--cut-after 20]
       [--timeout 30s] [--dir DIR]. It starts its own sandbox and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gatekeeper.core.kube.keys import (
    GATEKEEPER_API_VERSION,
    GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    POOL_KIND,
    POOL_LABEL,
)
from gatekeeper_lab.sandbox.cluster import Sandbox, default_dir
from gatekeeper_lab.sandbox.karpenter import NODE_CLASS, NODE_CLASS_GROUP, NODE_CLASS_KIND

NODE_POOL = "bench-gpu"
POOL = "bench-karpenter"
LABEL = "lws-gatekeeper.io/bench-nodes"
GPUS_PER_POD = 8
LIMIT_GPUS = 48
CUT_GPUS = 32
BURST = {"a": (2, 3), "b": (3, 2)}
"""LWS name -> (size, replicas)."""
SAMPLE_SECONDS = 2.0


def node_pool(limit: int) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": NODE_POOL},
        "spec": {
            "template": {
                "metadata": {"labels": {LABEL: "gpu"}},
                "spec": {
                    "nodeClassRef": {"group": NODE_CLASS_GROUP, "kind": NODE_CLASS_KIND, "name": NODE_CLASS},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": ["g4dn.metal"],
                        },
                    ],
                    "taints": [{"key": LABEL, "value": "gpu", "effect": "NoSchedule"}],
                    "expireAfter": "Never",
                },
            },
            "limits": {"nvidia.com/gpu": str(limit)},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10s"},
        },
    }


def pool(timeout: str) -> dict[str, Any]:
    return {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": POOL_KIND,
        "metadata": {"name": POOL},
        "spec": {
            "nodeSelector": {LABEL: "gpu"},
            "tolerations": [_toleration()],
            "namespaceSelector": {},
            "nodePools": [NODE_POOL],
            "admissionTimeout": timeout,
        },
    }


def _toleration() -> dict[str, str]:
    return {"key": LABEL, "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


def lws(name: str, namespace: str, size: int, replicas: int, opted_in: bool) -> dict[str, Any]:
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(GPUS_PER_POD)}
    template = {
        "spec": {
            "containers": [{"name": "c", "image": "vllm", "resources": {"requests": res, "limits": res}}],
            "nodeSelector": {LABEL: "gpu"},
            "tolerations": [_toleration()],
        }
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {POOL_LABEL: POOL} if opted_in else {}},
        "spec": {
            "replicas": replicas,
            "startupPolicy": "LeaderReady",
            "leaderWorkerTemplate": {"size": size, "leaderTemplate": template, "workerTemplate": template},
        },
    }


def _items(sb: Sandbox, *args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(sb.kubectl("get", *args, "-o", "json").stdout)["items"]
    return found


def _claims(sb: Sandbox) -> list[dict[str, Any]]:
    return _items(sb, "nodeclaims.karpenter.sh", "-l", f"karpenter.sh/nodepool={NODE_POOL}")


@dataclass
class Run:
    """What one run saw."""

    name: str
    node_seconds: float = 0.0
    wasted: float = 0.0
    """Node-seconds of nodes whose pods all belong to groups that never became whole."""
    whole_at: dict[tuple[str, int], float] = field(default_factory=dict)
    """Group -> seconds after the burst it was first seen whole."""
    node_groups: list[tuple[float, list[set[tuple[str, int]]]]] = field(default_factory=list)
    """Per sample: its length and, per node of the NodePool, the groups of its pods."""
    peak_nodes: int = 0
    give_backs: int = 0


def _sample(sb: Sandbox, namespace: str, run: Run, since: float, dt: float) -> None:
    claims = _claims(sb)
    nodes = {str(c.get("status", {}).get("nodeName") or c["metadata"]["name"]) for c in claims}
    run.peak_nodes = max(run.peak_nodes, len(claims))
    run.node_seconds += dt * len(claims)
    on: dict[str, set[tuple[str, int]]] = {n: set() for n in nodes}
    bound: dict[tuple[str, int], int] = {}
    for pod in _items(sb, "pods", "-n", namespace):
        labels = pod["metadata"].get("labels", {})
        key = (str(labels.get(LWS_NAME_LABEL)), int(labels.get(GROUP_INDEX_LABEL, -1)))
        node = pod["spec"].get("nodeName")
        if (
            node
            and pod.get("status", {}).get("phase") == "Running"
            and not pod["metadata"].get("deletionTimestamp")
        ):
            bound[key] = bound.get(key, 0) + 1
        if node in on:
            on[node].add(key)
    now = time.monotonic() - since
    for key, count in bound.items():
        if count == BURST[key[0]][0]:
            run.whole_at.setdefault(key, now)
    run.node_groups.append((dt, list(on.values())))


def _fresh(sb: Sandbox, namespace: str) -> None:
    sb.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", "--timeout=180s")
    sb.kubectl("delete", "nodepools.karpenter.sh", NODE_POOL, "--ignore-not-found", "--wait=false")
    deadline = time.monotonic() + 300
    while _claims(sb):
        if time.monotonic() > deadline:
            raise TimeoutError("the NodePool's nodes were not removed within 300 s")
        time.sleep(2)
    sb.apply([node_pool(LIMIT_GPUS)])
    sb.kubectl("create", "namespace", namespace)
    deadline = time.monotonic() + 60
    while sb.kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode:
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {namespace} has no default service account")
        time.sleep(1)


def one_run(sb: Sandbox, name: str, opted_in: bool, args: argparse.Namespace) -> Run:
    namespace = f"bench-karpenter-{name}"
    _fresh(sb, namespace)
    run = Run(name)
    start = time.monotonic()
    sb.apply([lws(n, namespace, size, replicas, opted_in) for n, (size, replicas) in BURST.items()])
    cut = False
    last = start
    while time.monotonic() - start < args.window:
        if not cut and (len(_claims(sb)) >= args.cut_at or time.monotonic() - start >= args.cut_after):
            sb.kubectl(
                "patch", "nodepools.karpenter.sh", NODE_POOL, "--type=merge",
                "-p", json.dumps({"spec": {"limits": {"nvidia.com/gpu": str(CUT_GPUS)}}}),
            )  # fmt: skip
            cut = True
        if time.monotonic() - last >= SAMPLE_SECONDS:
            now = time.monotonic()
            _sample(sb, namespace, run, start, now - last)
            last = now
        else:
            time.sleep(0.2)  # the cut is watched closely, the rest sampled every 2 s
    ran = set(run.whole_at)
    for dt, per_node in run.node_groups:
        run.wasted += dt * sum(1 for groups in per_node if groups and not (groups & ran))
    if opted_in:
        events = _items(sb, "events", "-n", namespace, "--field-selector=reason=AdmissionTimeout")
        run.give_backs = sum(int(e.get("count") or 1) for e in events)
    sb.kubectl("delete", "namespace", namespace, "--wait=false")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=150.0)
    parser.add_argument("--cut-at", type=int, default=3)
    parser.add_argument("--cut-after", type=float, default=20.0)
    parser.add_argument("--timeout", default="30s")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    sb = Sandbox(args.dir or default_dir("bench-karpenter"), say=print)
    sb.up(nodes=0, with_karpenter=True)
    try:
        without = one_run(sb, "without", False, args)
        sb.apply([pool(args.timeout)])
        with_gk = one_run(sb, "with", True, args)
        sb.kubectl("delete", "pools.lws-gatekeeper.io", POOL, "--ignore-not-found")
    finally:
        sb.down()
    groups = sum(r for _, r in BURST.values())
    print(
        f"\nburst: {groups} groups ({', '.join(f'{n}: {r} of size {s}' for n, (s, r) in BURST.items())}), "
        f"one {GPUS_PER_POD}-GPU pod per g4dn.metal node; NodePool limit {LIMIT_GPUS} GPUs, "
        f"cut to {CUT_GPUS} at {args.cut_at} NodeClaims (or {args.cut_after:.0f} s); "
        f"watched {args.window:.0f} s"
    )
    print(
        f"{'run':10} {'node-s bought':>14} {'node-s on never-whole groups':>29} {'groups ran':>11} "
        f"{'last whole at':>14} {'peak nodes':>11} {'give-backs':>11}"
    )
    for r in (without, with_gk):
        last = f"{max(r.whole_at.values()):.0f} s" if r.whole_at else "-"
        print(
            f"{r.name:10} {r.node_seconds:14.0f} {r.wasted:29.0f} {len(r.whole_at):>5}/{groups:<5} "
            f"{last:>14} {r.peak_nodes:11} {r.give_backs if r.name == 'with' else '-':>11}"
        )


if __name__ == "__main__":
    main()
