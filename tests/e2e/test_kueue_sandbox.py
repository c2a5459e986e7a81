"""The real Kueue in the sandbox: it admits Jobs and, through its own LWS integration, LWS groups.

Why this exists: the ``kueue`` backend and the node-fit AdmissionCheck are built against
what Kueue really does. These tests run on the session's sandbox with Kueue
(``kueue_sandbox``, folder ``sandboxes/pytest-kueue``) and record what Kueue makes of
a Job and of LWS groups: its Workloads (names, pod sets, conditions), the scheduling
gate it holds pods with, and the gap the node-fit check closes (quota is not placement).
What they observe is printed (run with ``-s``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gatekeeper.render import parse_pools, render_stream
from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.cluster import Sandbox
from gatekeeper_lab.sandbox.kueue import MANAGED_NAMESPACE_LABEL
from tests.e2e.kueue_support import (
    KUEUE_API,
    KUEUE_GATE,
    QUEUE_LABEL,
    TOPOLOGY_GATE,
    make_queue,
)
from tests.e2e.kueue_support import (
    condition as _condition,
)
from tests.e2e.kueue_support import (
    get as _get,
)
from tests.e2e.kueue_support import (
    is_true as _is_true,
)
from tests.e2e.kueue_support import (
    pods as _pods,
)
from tests.e2e.kueue_support import (
    wait as _wait,
)
from tests.e2e.kueue_support import (
    workloads as _workloads,
)


def _queue_setup(
    sb: Sandbox, *, gpus: int, nodes: int, gpus_per_node: int
) -> tuple[str, str, dict[str, str]]:
    q = make_queue(sb, gpus=gpus, nodes=nodes, gpus_per_node=gpus_per_node)
    return q.namespace, q.local_queue, q.labels


def _describe_workload(wl: dict[str, Any]) -> str:
    """A Workload as the next engineer wants to read it: owner, pod sets, admission, conditions."""
    meta, spec, status = wl["metadata"], wl["spec"], wl.get("status", {})
    owners = [f"{o['kind']}/{o['name']}" for o in meta.get("ownerReferences", [])]
    lines = [
        f"Workload {meta['name']} (owner {', '.join(owners) or '-'}; queue {spec.get('queueName')}; "
        f"priority {spec.get('priority')}; created {meta['creationTimestamp']})",
        f"  labels: {meta.get('labels', {})}",
        f"  annotations: { {k: v for k, v in meta.get('annotations', {}).items() if 'kueue' in k} }",
    ]
    for ps in spec.get("podSets", []):
        containers = ps["template"]["spec"]["containers"]
        requests = [c.get("resources", {}).get("requests", {}) for c in containers]
        lines.append(f"  podSet {ps['name']}: count {ps['count']}, requests {requests}")
    admission = status.get("admission")
    if admission:
        for psa in admission.get("podSetAssignments", []):
            lines.append(
                f"  admitted podSet {psa['name']}: flavors {psa.get('flavors')}, "
                f"usage {psa.get('resourceUsage')}, count {psa.get('count')}"
            )
    for cond in status.get("conditions", []):
        lines.append(
            f"  {cond['type']}={cond['status']} ({cond.get('reason')}, {cond.get('lastTransitionTime')}): "
            f"{cond.get('message')}"
        )
    return "\n".join(lines)


def _describe_pod(pod: dict[str, Any]) -> str:
    meta, spec = pod["metadata"], pod["spec"]
    labels = {k: v for k, v in meta.get("labels", {}).items() if "kueue" in k}
    annotations = {k: v for k, v in meta.get("annotations", {}).items() if "kueue" in k}
    gates = [g["name"] for g in spec.get("schedulingGates", [])]
    return (
        f"pod {meta['name']} (group {_group(pod)}): phase {pod.get('status', {}).get('phase')}, "
        f"node {spec.get('nodeName')}, gates {gates}, nodeSelector {spec.get('nodeSelector')}\n"
        f"    kueue labels {labels}\n    kueue annotations {annotations}"
    )


def _container(name: str, gpus: int) -> dict[str, Any]:
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    return {"name": name, "image": "registry.example/fake:1", "resources": {"requests": res, "limits": res}}


def _lws(name: str, ns: str, lq: str, *, replicas: int, size: int, gpus_per_pod: int) -> dict[str, Any]:
    template = {"spec": {"containers": [_container("main", gpus_per_pod)]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: lq}},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "leaderTemplate": template, "workerTemplate": template},
        },
    }


def _pod_group(pod: dict[str, Any]) -> str | None:
    meta = pod["metadata"]
    name = {**meta.get("annotations", {}), **meta.get("labels", {})}.get("kueue.x-k8s.io/pod-group-name")
    return None if name is None else str(name)


def _group(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/group-index"))


def test_kueue_runs_with_its_version_and_webhooks_on_loopback(kueue_sandbox: Sandbox) -> None:
    sb = kueue_sandbox
    assert sb.running().get("kueue-controller") is True
    log = Path(sb.state()["processes"]["kueue-controller"]["log"]).read_text()
    version = build.load_pins()["kueue"].version
    assert f'"gitVersion":"{version}"' in log, "the manager logs the pinned version at start"
    port = sb.state()["ports"]["kueue_webhook"]
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        cfg = _get(sb, kind, f"kueue-{kind[: -len('webhookconfigurations')]}-webhook-configuration")
        urls = {h["clientConfig"]["url"].split("/")[2] for h in cfg["webhooks"]}
        assert urls == {f"127.0.0.1:{port}"}
        pod_hooks = [h for h in cfg["webhooks"] if h["name"] in ("mpod.kb.io", "vpod.kb.io")]
        assert [h["namespaceSelector"] for h in pod_hooks] == [
            {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}}
        ]
    crd = _get(sb, "crd", "workloads.kueue.x-k8s.io")
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == f"https://127.0.0.1:{port}/convert"
    # The conversion webhook really answers: a v1beta1 read of a v1beta2-stored object.
    sb.apply(
        [
            {
                "apiVersion": KUEUE_API,
                "kind": "ClusterQueue",
                "metadata": {"name": "conversion-probe"},
                "spec": {"namespaceSelector": {}},
            }
        ]
    )
    old = _get(sb, "clusterqueues.v1beta1.kueue.x-k8s.io", "conversion-probe")
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    sb.kubectl("delete", "clusterqueues.kueue.x-k8s.io", "conversion-probe")
    # Pods of namespaces that do not opt in never meet Kueue: not gated, not labelled.
    sb.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "not-managed", "namespace": "default", "labels": {QUEUE_LABEL: "lq"}},
                "spec": {"containers": [_container("main", 0)]},
            }
        ]
    )
    pod = _get(sb, "pod", "not-managed", "-n", "default")
    assert not pod["spec"].get("schedulingGates"), pod["spec"]
    assert not any("kueue" in k for k in pod["metadata"].get("annotations", {}))
    sb.kubectl("delete", "pod", "not-managed", "-n", "default", "--wait=false")


def test_kueue_admits_a_suspended_job_from_its_local_queue(kueue_sandbox: Sandbox) -> None:
    sb = kueue_sandbox
    ns, lq, labels = _queue_setup(sb, gpus=2, nodes=1, gpus_per_node=2)
    sb.apply(
        [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "train", "namespace": ns, "labels": {QUEUE_LABEL: lq}},
                "spec": {
                    "suspend": True,
                    "parallelism": 2,
                    "completions": 2,
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [_container("main", 1)]},
                    },
                },
            }
        ]
    )
    wl = _wait(
        "the Job's Workload to be Admitted",
        lambda: next((w for w in _workloads(sb, ns) if _is_true(w, "Admitted")), None),
    )
    print("\n" + _describe_workload(wl))
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert [ps["count"] for ps in wl["spec"]["podSets"]] == [2]
    job = _get(sb, "job", "train", "-n", ns)
    assert job["spec"]["suspend"] is False, "Kueue unsuspends an admitted Job"
    # KWOK's pod stage completes pods that do not restart, so the Job runs to its end.
    _wait("the Job Complete", lambda: _is_true(_get(sb, "job", "train", "-n", ns), "Complete"))
    done = _wait(
        "its Workload Finished",
        lambda: next((w for w in _workloads(sb, ns) if _is_true(w, "Finished")), None),
    )
    print(_describe_workload(done))
    pods = _pods(sb, ns)
    assert len(pods) == 2
    for pod in pods:
        print(_describe_pod(pod))
        # Kueue puts the flavor's node labels into the admitted pods' node selector.
        assert labels.items() <= (pod["spec"].get("nodeSelector") or {}).items()
        assert pod["status"]["phase"] == "Succeeded"


def test_kueue_lws_integration_admits_whole_groups_within_quota_and_gates_the_rest(
    kueue_sandbox: Sandbox,
) -> None:
    """4 GPUs of quota on 2 nodes of 2 GPUs; 3 groups of 2 one-GPU pods: 2 run, 1 waits gated."""
    sb = kueue_sandbox
    ns, lq, labels = _queue_setup(sb, gpus=4, nodes=2, gpus_per_node=2)
    sb.apply([_lws("vllm", ns, lq, replicas=3, size=2, gpus_per_pod=1)])
    lws = _get(sb, "leaderworkersets", "vllm", "-n", ns)
    print("\nLWS templates after Kueue's webhook:")
    for which in ("leaderTemplate", "workerTemplate"):
        meta = lws["spec"]["leaderWorkerTemplate"][which].get("metadata", {})
        print(f"  {which}: labels {meta.get('labels')}, annotations {meta.get('annotations')}")

    def settled() -> list[dict[str, Any]] | None:
        wls = _workloads(sb, ns)
        admitted = [w for w in wls if _is_true(w, "Admitted")]
        waiting = [w for w in wls if not _is_true(w, "QuotaReserved") and _condition(w, "QuotaReserved")]
        return wls if len(wls) == 3 and len(admitted) == 2 and len(waiting) == 1 else None

    wls = _wait("3 Workloads: 2 Admitted, 1 waiting for quota", settled)
    print("\nKueue's Workloads for the LWS's groups:")
    for wl in wls:
        print(_describe_workload(wl))
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("leader", 1), ("worker", 1)]
        assert wl["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet"

    def pods_settled() -> list[dict[str, Any]] | None:
        pods = _pods(sb, ns)
        running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        gated = [p for p in pods if p["spec"].get("schedulingGates")]
        return pods if len(pods) == 6 and len(running) == 4 and len(gated) == 2 else None

    pods = _wait("4 pods Running (2 whole groups), 2 gated (1 whole group)", pods_settled)
    print("\nPods:")
    for pod in pods:
        print(_describe_pod(pod))
    gated = [p for p in pods if p["spec"].get("schedulingGates")]
    # One whole group waits, but not necessarily the last: Kueue creates the groups'
    # Workloads in parallel and does not admit them in group-index order.
    assert len({_group(p) for p in gated}) == 1, "the waiting group is one whole group"
    print(f"waiting: group {_group(gated[0])} (of 0, 1, 2)")
    waiting_wl = next(w for w in wls if not _is_true(w, "Admitted"))
    assert {_pod_group(p) for p in gated} == {waiting_wl["metadata"]["name"]}, (
        "a pod group is named after its Workload"
    )
    for pod in gated:
        gates = {g["name"] for g in pod["spec"]["schedulingGates"]}
        assert KUEUE_GATE in gates, gates
        assert gates <= {KUEUE_GATE, TOPOLOGY_GATE}, gates
    running = [p for p in pods if not p["spec"].get("schedulingGates")]
    assert len({_group(p) for p in running}) == 2
    assert all(labels.items() <= (p["spec"].get("nodeSelector") or {}).items() for p in running)

    # Scaled down to 2, groups 0 and 1 stay. If group 1 was the one waiting, the quota that
    # group 2 (running, now removed) held goes to it: Kueue's Workloads follow the scale.
    sb.kubectl("scale", "leaderworkerset", "vllm", "-n", ns, "--replicas=2")

    def two_admitted() -> list[dict[str, Any]] | None:
        wls = _workloads(sb, ns)
        return wls if len(wls) == 2 and all(_is_true(w, "Admitted") for w in wls) else None

    after = _wait("2 Workloads left, both Admitted", two_admitted)
    assert sorted(w["metadata"]["annotations"]["kueue.x-k8s.io/component-workload-index"] for w in after) == [
        "0",
        "1",
    ]

    def four_running() -> bool:
        pods = _pods(sb, ns)
        return len(pods) == 4 and all(p["status"].get("phase") == "Running" for p in pods)

    _wait("the 4 pods of groups 0 and 1 Running", four_running)
    print("\nAfter scaling to 2 replicas:\n" + sb.kubectl("get", "workloads.kueue.x-k8s.io", "-n", ns).stdout)


def test_kueue_admits_by_quota_even_when_no_node_fits(kueue_sandbox: Sandbox) -> None:
    """Kueue's documented gap: quota for 2 GPUs per pod, but every node has 1 GPU. Admitted, Pending."""
    sb = kueue_sandbox
    ns, lq, _ = _queue_setup(sb, gpus=4, nodes=4, gpus_per_node=1)
    sb.apply([_lws("big", ns, lq, replicas=1, size=2, gpus_per_pod=2)])
    wl = _wait(
        "the group's Workload Admitted",
        lambda: next((w for w in _workloads(sb, ns) if _is_true(w, "Admitted")), None),
    )
    print("\n" + _describe_workload(wl))

    def unschedulable() -> list[dict[str, Any]] | None:
        pods = _pods(sb, ns)
        stuck = [p for p in pods if _condition(p, "PodScheduled").get("reason") == "Unschedulable"]
        return pods if len(pods) == 2 and len(stuck) == 2 else None

    pods = _wait("both pods ungated but Unschedulable", unschedulable)
    for pod in pods:
        print(_describe_pod(pod) + f"; {_condition(pod, 'PodScheduled').get('message')}")
        assert not pod["spec"].get("schedulingGates")


def test_rendered_kueue_objects_are_accepted_by_kueue(kueue_sandbox: Sandbox) -> None:
    """``lws-gatekeeper render --backend kueue`` output passes the API server and Kueue's webhooks."""
    example = Path(__file__).resolve().parents[2] / "examples" / "pools.yaml"
    stream = render_stream(parse_pools(example.read_text(), str(example)), "kueue")
    docs = [d for d in yaml.safe_load_all(stream) if d]
    for ns in sorted({d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")}):
        kueue_sandbox.kubectl("create", "namespace", ns, check=False)
    out = kueue_sandbox.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=render-e2e", "-f", "-",
        input=stream,
    ).stdout  # fmt: skip
    print(out)
    lines = out.splitlines()
    assert len(lines) == len(docs)
    assert all(line.endswith("serverside-applied (server dry run)") for line in lines)
    kinds = sorted({line.split("/")[0].split(".")[0] for line in lines})
    assert kinds == ["clusterqueue", "localqueue", "resourceflavor"]
