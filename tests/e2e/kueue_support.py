"""Helpers for end-to-end tests against the sandbox's real Kueue.

Why this exists: several test modules (Kueue itself, the ``kueue`` backend, the node-fit
AdmissionCheck, the benchmarks' checks) set up the same things: fake nodes of a flavor,
a ResourceFlavor, a ClusterQueue, a LocalQueue in a namespace, and poll Kueue objects
through kubectl. One sandbox with Kueue serves the whole session (``kueue_sandbox`` in
``conftest.py``); each test makes its own queues and nodes under a random tag.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from gatekeeper.core.kube.keys import SCHEDULING_GATE
from gatekeeper_lab.sandbox.cluster import Sandbox, fake_node
from gatekeeper_lab.sandbox.kueue import MANAGED_NAMESPACE_LABEL

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GATE = "kueue.x-k8s.io/admission"
#: Kueue adds it too (Topology Aware Scheduling is on by default); lifted at admission
#: for a Workload that asks no topology.
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
NODE_FIT_CONTROLLER = "lws-gatekeeper.io/node-fit"

T = TypeVar("T")


def get(sb: Sandbox, *args: str) -> Any:
    return json.loads(sb.kubectl("get", "-o", "json", *args).stdout)


def items(sb: Sandbox, *args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = get(sb, *args)["items"]
    return found


def wait(what: str, probe: Callable[[], T | None], timeout: float = 90) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            found: dict[str, Any] = cond
            return found
    return {}


def is_true(obj: dict[str, Any], kind: str) -> bool:
    return condition(obj, kind).get("status") == "True"


def new_tag() -> str:
    return "x" + uuid.uuid4().hex[:5]  # a letter first: never read as a number in YAML


@dataclass(frozen=True)
class Queue:
    """One reserved pool as Kueue sees it: nodes with ``labels``, a flavor, a ClusterQueue, a LocalQueue."""

    namespace: str
    local_queue: str
    cluster_queue: str
    flavor: str
    labels: dict[str, str]


def make_namespace(sb: Sandbox, name: str, *, managed: bool = True) -> None:
    labels = {MANAGED_NAMESPACE_LABEL: "true"} if managed else {}
    sb.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}])
    wait(f"the default service account of {name}", lambda: items(sb, "serviceaccounts", "-n", name))


def make_queue(
    sb: Sandbox,
    *,
    gpus: int,
    nodes: int,
    gpus_per_node: int,
    namespace: str | None = None,
    managed: bool = True,
    admission_checks: Sequence[str] = (),
    cohort: str | None = None,
    preemption: dict[str, Any] | None = None,
    tag: str | None = None,
    taint: dict[str, str] | None = None,
    node_labels: Sequence[dict[str, str]] = (),
    topology: Sequence[str] = (),
) -> Queue:
    """Fake nodes, a namespace (made unless given), a flavor on those nodes, a ClusterQueue, a LocalQueue.

    ``admission_checks`` names AdmissionCheck objects (made by the caller) the
    ClusterQueue requires; ``preemption`` is the ClusterQueue's ``spec.preemption``.
    ``taint`` (key, value, effect) taints the nodes, and the flavor carries the matching
    toleration (which Kueue, or the gatekeeper's kueue backend, adds to admitted pods).
    ``node_labels`` adds labels to each node in turn; ``topology`` (node label keys, widest
    first) makes a Kueue ``Topology`` of those levels that the flavor names, for Kueue's
    Topology Aware Scheduling.
    """
    tag = tag or new_tag()
    labels = {"kueue-test-pool": tag}
    taints = [taint] if taint else None
    sb.create_nodes(
        [
            fake_node(
                f"kq-{tag}-{i}",
                gpus=gpus_per_node,
                labels={**labels, **(node_labels[i] if i < len(node_labels) else {})},
                taints=taints,
            )
            for i in range(nodes)
        ]
    )
    flavor_spec: dict[str, Any] = {"nodeLabels": labels}
    if topology:
        levels = [{"nodeLabel": key} for key in topology]
        sb.apply([{"apiVersion": KUEUE_API, "kind": "Topology", "metadata": {"name": f"topo-{tag}"},
                   "spec": {"levels": levels}}])  # fmt: skip
        flavor_spec["topologyName"] = f"topo-{tag}"
    if taint:
        flavor_spec["tolerations"] = [{**taint, "operator": "Equal"}]
    ns = namespace or f"kueue-{tag}"
    flavor, cq, lq = f"gpu-{tag}", f"cq-{tag}", f"lq-{tag}"
    if namespace is None:
        make_namespace(sb, ns, managed=managed)
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {"name": "cpu", "nominalQuota": str(8 * nodes)},
                            {"name": "memory", "nominalQuota": f"{32 * nodes}Gi"},
                            {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                        ],
                    }
                ],
            }
        ],
    }
    if admission_checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": n} for n in admission_checks]}
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    sb.apply(
        [
            {
                "apiVersion": KUEUE_API,
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": flavor_spec,
            },
            {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": spec},
        ]
    )
    sb.apply(
        [
            {
                "apiVersion": KUEUE_API,
                "kind": "LocalQueue",
                "metadata": {"name": lq, "namespace": ns},
                "spec": {"clusterQueue": cq},
            }
        ]
    )
    wait(f"ClusterQueue {cq} Active", lambda: is_true(get(sb, "clusterqueues.kueue.x-k8s.io", cq), "Active"))
    wait(
        f"LocalQueue {lq} Active",
        lambda: is_true(get(sb, "localqueues.kueue.x-k8s.io", lq, "-n", ns), "Active"),
    )
    return Queue(namespace=ns, local_queue=lq, cluster_queue=cq, flavor=flavor, labels=labels)


def make_node_fit_check(sb: Sandbox, name: str) -> None:
    """An AdmissionCheck served by the gatekeeper's node-fit controller."""
    sb.apply(
        [
            {
                "apiVersion": KUEUE_API,
                "kind": "AdmissionCheck",
                "metadata": {"name": name},
                "spec": {"controllerName": NODE_FIT_CONTROLLER},
            }
        ]
    )


def container(name: str, gpus: int) -> dict[str, Any]:
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    return {"name": name, "image": "registry.example/fake:1", "resources": {"requests": res, "limits": res}}


def lws(
    name: str,
    ns: str,
    labels: dict[str, str],
    *,
    replicas: int,
    size: int,
    gpus_per_pod: int,
    priority_class: str | None = None,
    startup_policy: str | None = None,
) -> dict[str, Any]:
    """An LWS whose leader and workers each ask ``gpus_per_pod`` GPUs, 1 CPU and 1 GiB."""
    pod_spec: dict[str, Any] = {"containers": [container("main", gpus_per_pod)]}
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    template = {"spec": pod_spec}
    spec: dict[str, Any] = {
        "replicas": replicas,
        "leaderWorkerTemplate": {"size": size, "leaderTemplate": template, "workerTemplate": template},
    }
    if startup_policy:
        spec["startupPolicy"] = startup_policy
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": spec,
    }


def workloads(sb: Sandbox, ns: str) -> list[dict[str, Any]]:
    return sorted(items(sb, "workloads.kueue.x-k8s.io", "-n", ns), key=lambda w: w["metadata"]["name"])


def pods(sb: Sandbox, ns: str) -> list[dict[str, Any]]:
    return sorted(items(sb, "pods", "-n", ns), key=lambda p: p["metadata"]["name"])


def group_of(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/group-index"))


def check_state(workload: dict[str, Any], check: str) -> dict[str, Any]:
    """The workload's ``status.admissionChecks`` entry for ``check`` ({} when absent)."""
    for state in workload.get("status", {}).get("admissionChecks", []):
        if state.get("name") == check:
            found: dict[str, Any] = state
            return found
    return {}


def group_states(sb: Sandbox, ns: str, lws_name: str | None = None) -> dict[str, Counter[str]]:
    """Per group index: how many pods are running, gated (by the gatekeeper), pending."""
    out: dict[str, Counter[str]] = {}
    for pod in pods(sb, ns):
        if lws_name and pod["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/name") != lws_name:
            continue
        if pod["metadata"].get("deletionTimestamp"):
            continue
        gates = {g["name"] for g in pod["spec"].get("schedulingGates", [])}
        phase = pod.get("status", {}).get("phase")
        state = "gated" if SCHEDULING_GATE in gates else "running" if phase == "Running" else "pending"
        out.setdefault(group_of(pod), Counter())[state] += 1
    return out


def settled(
    sb: Sandbox, ns: str, *, running: int, gated: int, size: int, lws_name: str | None = None
) -> dict[str, Counter[str]] | None:
    """``running`` whole groups Running and ``gated`` whole groups gated, nothing in between."""
    groups = group_states(sb, ns, lws_name)
    whole = [g for g, c in groups.items() if c["running"] == size and sum(c.values()) == size]
    held = [g for g, c in groups.items() if c["gated"] == size and sum(c.values()) == size]
    if len(whole) == running and len(held) == gated and len(groups) == running + gated:
        return groups
    return None


def records(sb: Sandbox, ns: str) -> list[dict[str, Any]]:
    """The namespace's GroupAdmission records, by group index."""
    return sorted(items(sb, "groupadmissions", "-n", ns), key=lambda r: r["spec"]["groupIndex"])
