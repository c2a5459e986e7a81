"""The demo's Karpenter part (``lws-gatekeeper demo --karpenter``): the seed's first case.

Why this exists: the LWS gang-scheduling issue opens with an autoscaled pool, in its
reporter's words: "the cluster has 2 nodes (which host one replica of the model). Then due
to traffic increase, the Horizontal Autoscaler set the replicas to 3 ... However, the
on-demand pool only has 2 nodes available. If the controller schedules 2 new leader pods to
the 2 new nodes, then the 2 worker pods will be pending." This replays it with the real
Karpenter (the sandbox's, KWOK provider, no static node): a NodePool that may buy 4 one-GPU
nodes, an LWS of 1 replica of size 2 (``startupPolicy: LeaderReady``, so workers come after
their leader runs, as with vLLM) scaled to 3 through its scale subresource, as the HPA
would. Without the gatekeeper Karpenter buys 2 nodes for the 2 new leaders and both new
groups are half-placed; with it (a Pool naming the NodePool) exactly one more whole group
runs, the third waits gated and no node is bought for it. ``run`` prints each part's pods,
NodeClaims and a verdict, and returns the verdicts (the e2e test checks them).

Called by ``cli.demo`` and by ``tests/e2e/test_demo_karpenter.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gatekeeper.core.kube.keys import (
    GATEKEEPER_API_VERSION,
    GROUP_INDEX_LABEL,
    POOL_KIND,
    POOL_LABEL,
    SCHEDULING_GATE,
)
from gatekeeper_lab.sandbox.cluster import Sandbox
from gatekeeper_lab.sandbox.karpenter import NODE_CLASS, NODE_CLASS_GROUP, NODE_CLASS_KIND
from gatekeeper_lab.sandbox.kwok import READY_DELAY_ANNOTATION

__all__ = ["Verdict", "run", "run_demo"]

NODE_POOL = "demo-gpu"
POOL = "demo-karpenter"
NODES_LABEL = "lws-gatekeeper.io/demo-nodes"
"""The label and taint of the demo NodePool's nodes (only the demo's pods go there)."""
GPU_LIMIT = 4
SIZE = 2
WITHOUT = "karpenter-without"
WITH = "karpenter-with"
LOAD_SECONDS = 8
"""How long a pod takes to turn Ready once bound: vLLM loads its weights first (minutes on a
real node). It is what makes the reporter's case: both new leaders are placed on the two
nodes Karpenter bought before either is Ready and its worker exists. With pods Ready at
once, a new leader's worker may be made soon enough to take the second new node first (CI
saw that: 2 whole groups, the third's leader Pending)."""
SETTLE_SECONDS = 10.0
"""A part has settled when its pods and NodeClaims have not changed for this long."""


@dataclass(frozen=True)
class Verdict:
    """What one part ended with."""

    whole: int
    """Groups with all their pods bound and Running."""
    half_placed: int
    """Groups with some but not all of their pods bound."""
    waiting: int
    """Groups whose pods all carry the gate (under LeaderReady, a waiting group's worker is
    not made before its leader runs: only its leader is there)."""
    gated: int
    """Pods carrying the gate."""
    nodes_bought: int
    """NodeClaims of the demo NodePool."""
    seconds: float
    """From the scale to 3 until the part settled."""

    def line(self) -> str:
        return (
            f"{self.whole} whole groups, {self.half_placed} half-placed, {self.waiting} waiting gated "
            f"({self.gated} pods), "
            f"{self.nodes_bought} nodes bought (limit {GPU_LIMIT}); "
            f"settled {self.seconds:.0f} s after the scale"
        )


def node_pool() -> dict[str, Any]:
    """The on-demand NodePool: the sandbox's GPU types, at most ``GPU_LIMIT`` GPUs."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": NODE_POOL},
        "spec": {
            "template": {
                "metadata": {"labels": {NODES_LABEL: "on-demand"}},
                "spec": {
                    "nodeClassRef": {"group": NODE_CLASS_GROUP, "kind": NODE_CLASS_KIND, "name": NODE_CLASS},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                    ],
                    "taints": [{"key": NODES_LABEL, "value": "on-demand", "effect": "NoSchedule"}],
                    "expireAfter": "Never",
                },
            },
            "limits": {"nvidia.com/gpu": str(GPU_LIMIT)},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10s"},
        },
    }


def pool() -> dict[str, Any]:
    """The Pool whose nodes the NodePool buys."""
    return {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": POOL_KIND,
        "metadata": {"name": POOL},
        "spec": {
            "nodeSelector": {NODES_LABEL: "on-demand"},
            "tolerations": [_toleration()],
            "namespaceSelector": {},
            "nodePools": [NODE_POOL],
        },
    }


def _toleration() -> dict[str, str]:
    return {"key": NODES_LABEL, "operator": "Equal", "value": "on-demand", "effect": "NoSchedule"}


def lws(namespace: str, *, opted_in: bool) -> dict[str, Any]:
    """vLLM-like: 1 replica of size 2, one GPU per pod, on the NodePool's nodes."""
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    template = {
        "metadata": {"annotations": {READY_DELAY_ANNOTATION: f"{LOAD_SECONDS}s"}},
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.8.5",
                    "resources": {"requests": res, "limits": res},
                }
            ],
            "nodeSelector": {NODES_LABEL: "on-demand"},
            "tolerations": [_toleration()],
        },
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": "vllm",
            "namespace": namespace,
            "labels": {POOL_LABEL: POOL} if opted_in else {},
        },
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderReady",
            "leaderWorkerTemplate": {"size": SIZE, "leaderTemplate": template, "workerTemplate": template},
        },
    }


def _get(sb: Sandbox, *args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(sb.kubectl("get", *args, "-o", "json").stdout)["items"]
    return found


def _claims(sb: Sandbox) -> list[dict[str, Any]]:
    return _get(sb, "nodeclaims.karpenter.sh", "-l", f"karpenter.sh/nodepool={NODE_POOL}")


def _gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == SCHEDULING_GATE for g in pod["spec"].get("schedulingGates", []))


def _state(sb: Sandbox, namespace: str) -> tuple[dict[str, list[dict[str, Any]]], int]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for pod in _get(sb, "pods", "-n", namespace):
        groups.setdefault(pod["metadata"]["labels"].get(GROUP_INDEX_LABEL, "?"), []).append(pod)
    return groups, len(_claims(sb))


def _verdict(groups: dict[str, list[dict[str, Any]]], claims: int, seconds: float) -> Verdict:
    whole = half = waiting = gated = 0
    for pods in groups.values():
        bound = [p for p in pods if p["spec"].get("nodeName")]
        running = [p for p in bound if p.get("status", {}).get("phase") == "Running"]
        gated += sum(1 for p in pods if _gated(p))
        if len(running) == SIZE:
            whole += 1
        elif bound:
            half += 1
        elif pods and all(_gated(p) for p in pods):
            waiting += 1
    return Verdict(whole, half, waiting, gated, claims, seconds)


def _wait(what: str, probe: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"demo: {what} not within {timeout:.0f} s")
        time.sleep(1)


def _settle(sb: Sandbox, namespace: str, timeout: float = 150) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Wait until the pods (node, phase, gate) and NodeClaims stand still for ``SETTLE_SECONDS``."""
    deadline = time.monotonic() + timeout
    last: object = None
    since = time.monotonic()
    while True:
        groups, claims = _state(sb, namespace)
        seen = (
            sorted(
                (
                    p["metadata"]["name"],
                    p["spec"].get("nodeName"),
                    p.get("status", {}).get("phase"),
                    _gated(p),
                )
                for pods in groups.values()
                for p in pods
            ),
            claims,
        )
        if seen != last:
            last, since = seen, time.monotonic()
        elif time.monotonic() - since >= SETTLE_SECONDS:
            return groups, claims
        if time.monotonic() > deadline:
            return groups, claims
        time.sleep(1)


def _fresh(sb: Sandbox, namespace: str) -> None:
    sb.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", "--timeout=120s")
    sb.kubectl("create", "namespace", namespace)
    _wait(
        f"namespace {namespace}'s default service account",
        lambda: sb.kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0,
        60,
    )


def _fresh_node_pool(sb: Sandbox) -> None:
    """The NodePool made again with no node: every part starts from Karpenter having bought nothing."""
    sb.kubectl("delete", "nodepools.karpenter.sh", NODE_POOL, "--ignore-not-found", "--wait=false")
    _wait("Karpenter removing the demo NodePool's nodes", lambda: not _claims(sb), 180)
    sb.apply([node_pool()])


def _part(sb: Sandbox, namespace: str, *, opted_in: bool, say: Callable[[str], None]) -> Verdict:
    _fresh_node_pool(sb)
    _fresh(sb, namespace)
    sb.apply([lws(namespace, opted_in=opted_in)])
    say(f"$ kubectl apply -f lws.yaml -n {namespace}    # 1 replica of size {SIZE}")

    def first_group_runs() -> bool:
        groups, _ = _state(sb, namespace)
        return _verdict(groups, 0, 0).whole == 1

    start = time.monotonic()
    _wait("group 0 Running", first_group_runs, 150)
    took = time.monotonic() - start
    say(f"  group 0 Running after {took:.1f} s on {len(_claims(sb))} nodes Karpenter bought")
    start = time.monotonic()
    sb.kubectl("scale", "leaderworkersets.leaderworkerset.x-k8s.io", "vllm", "-n", namespace, "--replicas=3")
    say("$ kubectl scale lws/vllm --replicas=3    # as the HPA does: the scale subresource")
    groups, claims = _settle(sb, namespace)
    verdict = _verdict(groups, claims, time.monotonic() - start - SETTLE_SECONDS)
    out = sb.kubectl("get", "pods", "-n", namespace, "-o", "wide").stdout
    say("\n".join("    " + line for line in out.rstrip().splitlines()))
    out = sb.kubectl("get", "nodeclaims.karpenter.sh").stdout
    say("$ kubectl get nodeclaims\n" + "\n".join("    " + line for line in out.rstrip().splitlines()))
    say(f"  verdict: {verdict.line()}")
    return verdict


def run(sb: Sandbox, say: Callable[[str], None] = print) -> tuple[Verdict, Verdict]:
    """Both parts on a sandbox that runs Karpenter; (without, with) the gatekeeper."""
    start = time.monotonic()
    setting = f"NodePool {NODE_POOL}: at most {GPU_LIMIT} one-GPU nodes, none bought yet"
    say(f"\n=== K1. The autoscaled case WITHOUT the gatekeeper: {setting} ===")
    without = _part(sb, WITHOUT, opted_in=False, say=say)
    sb.kubectl("delete", "namespace", WITHOUT, "--wait=false")
    say(f"\n=== K2. The same WITH the gatekeeper: a Pool naming NodePool {NODE_POOL} ===")
    sb.apply([pool()])
    with_gk = _part(sb, WITH, opted_in=True, say=say)
    out = sb.kubectl("get", "groupadmissions", "-n", WITH).stdout
    say("\n$ kubectl get groupadmissions\n" + "\n".join("    " + line for line in out.rstrip().splitlines()))
    say("\n=== Side by side, after the scale to 3 ===")
    say(f"  without: {without.line()}")
    say(f"  with:    {with_gk.line()}")
    say(f"\nThe Karpenter demo took {time.monotonic() - start:.0f} s.")
    return without, with_gk


def run_demo(directory: Path, say: Callable[[str], None] = print) -> tuple[Verdict, Verdict]:
    """Start (or reuse) the Karpenter demo's sandbox (no static node) and replay the case."""
    sb = Sandbox(directory, say=say)
    sb.up(nodes=0, with_karpenter=True)
    verdicts = run(sb, say)
    say(
        f"\nThe sandbox keeps running: export KUBECONFIG={sb.kubeconfig} PATH={sb.bin_dir}:$PATH\n"
        f"Stop it with: lws-gatekeeper sandbox down --dir {sb.dir}"
    )
    return verdicts
