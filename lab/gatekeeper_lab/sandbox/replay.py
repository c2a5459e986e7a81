"""Replay the LWS gang-scheduling issue (``scenarios/seed-vllm``) on a cluster.

Why this exists: the reporter's steps (apply, scale to 0, to 4, to 0, to 10) are the
project's acceptance test and its demo. Both run the same replay from here and judge
each step with ``observe.summarize``, so what the demo prints is what the tests assert.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import anyio
import kr8s.asyncio
import yaml
from kr8s.asyncio.objects import new_class

from gatekeeper.core.kube.keys import (
    GROUP_INDEX_LABEL,
    LWS_API_VERSION,
    LWS_KIND,
    LWS_NAME_LABEL,
    WORKER_INDEX_LABEL,
)
from gatekeeper_lab.sandbox.observe import Verdict, summarize

__all__ = [
    "SEED_STEPS",
    "LeaderWorkerSet",
    "StepResult",
    "isolate",
    "list_raw",
    "load_scenario",
    "replay",
    "settle",
]

LeaderWorkerSet = new_class(
    kind=LWS_KIND,
    version=LWS_API_VERSION,
    namespaced=True,
    scalable=True,
    plural="leaderworkersets",
)

#: The reporter's steps: (what they typed, replicas after it).
SEED_STEPS: tuple[tuple[str, int], ...] = (
    ("kubectl apply -f lws.yaml", 2),
    ("kubectl scale --replicas=0 lws/vllm", 0),
    ("kubectl scale --replicas=4 lws/vllm", 4),
    ("kubectl scale --replicas=0 lws/vllm", 0),
    ("kubectl scale --replicas=10 lws/vllm", 10),
)


def load_scenario(name: str = "seed-vllm") -> dict[str, Any]:
    """The scenario's objects: ``lws``, ``nodes`` (a list) and ``pool``."""
    base = resources.files("gatekeeper_lab.sandbox").joinpath("scenarios", name)
    nodes = yaml.safe_load(base.joinpath("nodes.yaml").read_text())
    return {
        "lws": yaml.safe_load(base.joinpath("lws.yaml").read_text()),
        "nodes": nodes["items"] if nodes.get("kind") == "List" else [nodes],
        "pool": yaml.safe_load(base.joinpath("pool.yaml").read_text()),
    }


def isolate(lws: Mapping[str, Any], node_labels: Mapping[str, str], taint_key: str | None) -> dict[str, Any]:
    """A copy of ``lws`` whose pods only go to nodes with ``node_labels`` (and tolerate their taint)."""
    out = copy.deepcopy(dict(lws))
    lwt = out["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        if key not in lwt:
            continue
        spec = lwt[key].setdefault("spec", {})
        spec.setdefault("nodeSelector", {}).update(node_labels)
        if taint_key:
            spec.setdefault("tolerations", []).append(
                {"key": taint_key, "operator": "Exists", "effect": "NoSchedule"}
            )
    return out


@dataclass
class StepResult:
    """One replayed step and what the cluster showed after it."""

    command: str
    replicas: int
    verdict: Verdict
    seconds: float


async def list_raw(api: kr8s.asyncio.Api, kind: str, **selectors: Any) -> list[dict[str, Any]]:
    """List objects as plain dicts (``namespace=``, ``label_selector=`` as kr8s takes them)."""
    return [o async for o in api.get(kind, raw=True, **selectors) if isinstance(o, dict)]


async def _pods(api: kr8s.asyncio.Api, namespace: str, lws_name: str) -> list[dict[str, Any]]:
    return await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: lws_name})


def _ready(pod: Mapping[str, Any]) -> bool:
    conds = {c.get("type"): c for c in pod.get("status", {}).get("conditions", [])}
    return bool(conds.get("Ready", {}).get("status") == "True")


def _settled(pod: Mapping[str, Any]) -> bool:
    """A pod is done moving: Ready, or gated, or found unschedulable by the scheduler.

    Volcano's scheduler says ``Schedulable`` (not bound) of a pod that would fit a node
    but whose gang as a whole did not: it waits as an ``Unschedulable`` one does.
    """
    if _ready(pod):
        return True
    conds = {c.get("type"): c for c in pod.get("status", {}).get("conditions", [])}
    sched = conds.get("PodScheduled", {})
    return sched.get("status") == "False" and sched.get("reason") in (
        "Unschedulable",
        "SchedulingGated",
        "Schedulable",
    )


def _leader_ready_complete(live: list[dict[str, Any]], groups: int, size: int) -> bool:
    """Under LeaderReady: every group has its leader, and each Ready leader its ``size`` pods.

    LWS creates a group's workers only once its leader is Ready, so a group whose leader
    waits has one pod, not ``size``.
    """
    per_group: dict[str, list[dict[str, Any]]] = {}
    for p in live:
        per_group.setdefault(str(p["metadata"].get("labels", {}).get(GROUP_INDEX_LABEL)), []).append(p)
    leaders = [p for p in live if str(p["metadata"].get("labels", {}).get(WORKER_INDEX_LABEL, "")) == "0"]
    if len(leaders) != groups:
        return False
    return all(
        len(per_group[str(p["metadata"]["labels"].get(GROUP_INDEX_LABEL))]) == size
        for p in leaders
        if _ready(p)
    )


async def settle(
    api: kr8s.asyncio.Api,
    namespace: str,
    lws_name: str,
    *,
    expected_pods: int,
    size: int,
    timeout: float = 180,
    stable_for: float = 3.0,
    leader_ready: bool = False,
    source: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None,
) -> Verdict:
    """Wait until the LWS has ``expected_pods`` pods, each settled, unchanged for ``stable_for`` s.

    The pods are listed every half second, or read from ``source`` (a watch the caller keeps:
    at thousands of pods, listing them twice a second is a load of its own on the machine).

    With ``leader_ready`` (the LWS's ``startupPolicy: LeaderReady``) a group whose leader
    is not Ready has no workers yet: the LWS is settled when each of its
    ``expected_pods // size`` groups has a leader and each Ready leader its workers.
    """
    deadline = time.monotonic() + timeout
    last: tuple[Any, ...] | None = None
    since = time.monotonic()
    pods: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        pods = await (source() if source is not None else _pods(api, namespace, lws_name))
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if leader_ready:
            complete = len(pods) == len(live) and _leader_ready_complete(live, expected_pods // size, size)
        else:
            complete = len(pods) == expected_pods and len(live) == expected_pods
        done = complete and all(_settled(p) for p in live)
        snapshot = tuple(
            sorted(
                (
                    p["metadata"]["name"],
                    p.get("spec", {}).get("nodeName", ""),
                    p.get("status", {}).get("phase", ""),
                    _settled(p),
                )
                for p in pods
            )
        )
        if snapshot != last:
            last, since = snapshot, time.monotonic()
        elif done and time.monotonic() - since >= stable_for:
            return summarize(pods, size)
        await anyio.sleep(0.5)
    states = sorted(
        f"{p['metadata']['name']}:{p.get('status', {}).get('phase')}:{p.get('spec', {}).get('nodeName', '-')}"
        for p in pods
    )
    raise TimeoutError(
        f"LWS {namespace}/{lws_name} did not settle in {timeout:.0f}s: "
        f"expected {expected_pods} settled pods, have {len(pods)}: {states}"
    )


async def replay(
    api: kr8s.asyncio.Api,
    namespace: str,
    lws_obj: Mapping[str, Any],
    *,
    steps: tuple[tuple[str, int], ...] = SEED_STEPS,
    on_step: Callable[[StepResult], Awaitable[None]] | None = None,
    stable_for: float = 3.0,
) -> list[StepResult]:
    """Run the steps against ``lws_obj`` in ``namespace``; return what each step left behind.

    A step is judged once its pods are settled and unchanged for ``stable_for`` seconds
    (longer where groups are let in one after another, as the volcano backend does).
    """
    body = copy.deepcopy(dict(lws_obj))
    body.setdefault("metadata", {})["namespace"] = namespace
    name = body["metadata"]["name"]
    size = int(body["spec"]["leaderWorkerTemplate"].get("size", 1))
    results: list[StepResult] = []
    lws: Any = None
    for command, replicas in steps:
        start = time.monotonic()
        if lws is None:
            body["spec"]["replicas"] = replicas
            lws = await LeaderWorkerSet(body, api=api)
            await lws.create()
        else:
            await lws.scale(replicas)
        verdict = await settle(
            api, namespace, name, expected_pods=replicas * size, size=size, stable_for=stable_for
        )
        result = StepResult(command, replicas, verdict, time.monotonic() - start)
        results.append(result)
        if on_step is not None:
            await on_step(result)
    return results
