"""Pods of a group Kueue admitted are made without the gate, on the flavor's nodes.

The decision is ``core/admission/pass_through.py`` (which pods) and
``core/backends/kueue/pass_through.py`` (which groups). With the ``kueue`` backend every
pod was born gated, even one made after Kueue admitted its group's Workload, and waited for
a pass to lift its gate. A LeaderReady group's workers are made only once its leader runs,
long after the admission: the webhook now makes them ungated, with the flavor's node labels
and tolerations and the mark that charges them to their group. A group Kueue has not
admitted still has every pod gated.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from gatekeeper.core.kube.keys import CHARGE_KEY, POOL_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.cluster import Sandbox
from tests.e2e.kueue_support import container, group_states, lws, make_queue, pods, wait

WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
TAINT = {"key": "example.com/gpu-pool", "value": "kq", "effect": "NoSchedule"}


def passed_through(sb: Sandbox) -> float:
    found = re.findall(r"^lws_gatekeeper_webhook_pass_through_total (\S+)$", sb.metrics(), re.M)
    return float(found[0]) if found else 0.0


def test_a_leader_ready_groups_workers_are_made_ungated_onto_the_flavor(kueue_sandbox: Sandbox) -> None:
    """Room for one group of 3 (LeaderReady): its 2 workers, made after its leader runs, are
    born ungated with the flavor's labels and toleration and the group's charge; the other
    group's leader stays gated and its workers are never made."""
    sb = kueue_sandbox
    q = make_queue(sb, gpus=3, nodes=3, gpus_per_node=1, managed=False, taint=TAINT)
    before = passed_through(sb)
    labels = {POOL_LABEL: q.local_queue}
    sb.apply(
        [lws("lr", q.namespace, labels, replicas=2, size=3, gpus_per_pod=1, startup_policy="LeaderReady")]
    )

    def settled() -> bool:
        groups = group_states(sb, q.namespace)
        whole = [g for g, c in groups.items() if c == Counter(running=3)]
        held = [g for g, c in groups.items() if c == Counter(gated=1)]
        return len(whole) == 1 and len(held) == 1 and len(groups) == 2

    wait("1 whole group of 3 Running, the other's leader gated", settled, timeout=120)
    found = pods(sb, q.namespace)
    workers = [
        p for p in found if p["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/worker-index") != "0"
    ]
    assert len(workers) == 2, [p["metadata"]["name"] for p in found]
    assert passed_through(sb) - before >= 2, "the workers were made without the gate"
    pool = re.escape(q.local_queue)
    waiting = rf'^lws_gatekeeper_waiting_groups\{{backend="kueue",pool="{pool}"\}} 1\.0$'
    wait("the waiting group counted by backend and queue", lambda: re.search(waiting, sb.metrics(), re.M))
    admitted = rf'^lws_gatekeeper_admissions_total\{{backend="kueue",pool="{pool}"\}} [1-9]'
    assert re.search(admitted, sb.metrics(), re.M), "the admission counted by backend and queue"
    for pod in workers:
        spec = pod["spec"]
        assert not [g for g in spec.get("schedulingGates", []) if g["name"] == SCHEDULING_GATE]
        assert spec["nodeSelector"].items() >= q.labels.items(), spec["nodeSelector"]
        keys = {t.get("key") for t in spec.get("tolerations", [])}
        assert {TAINT["key"], CHARGE_KEY} <= keys, spec.get("tolerations")
        assert pod["status"].get("phase") == "Running"
    gated = [p for p in found if p["spec"].get("schedulingGates")]
    assert (
        len(gated) == 1 and gated[0]["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    )


def test_a_tenants_pod_forged_onto_an_admitted_group_is_not_let_through(kueue_sandbox: Sandbox) -> None:
    """The webhook makes a pod ungated for a group Kueue admitted only when its owner chain
    leads to the LWS. A tenant (``edit`` in its namespace, impersonated) who writes a pod that
    names the group's worker StatefulSet as its controller, with the group's labels and the
    worker's requests, gets no pass-through: the pod is refused (the member-owners policy),
    or made gated."""
    sb = kueue_sandbox
    q = make_queue(sb, gpus=4, nodes=2, gpus_per_node=2, managed=False)
    body = lws("vllm", q.namespace, {POOL_LABEL: q.local_queue}, replicas=1, size=2, gpus_per_pod=1)
    sb.apply([body])
    wait("group 0 whole and Running", lambda: group_states(sb, q.namespace) == {"0": Counter(running=2)})
    worker = next(p for p in pods(sb, q.namespace) if p["metadata"]["labels"].get(WORKER_INDEX) == "1")
    sts = json.loads(sb.kubectl("get", "statefulset", "vllm-0", "-n", q.namespace, "-o", "json").stdout)
    sb.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "tenant-edit", "namespace": q.namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tenant"}],
            }
        ]
    )
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm-0", "uid": sts["metadata"]["uid"]}
    forged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "vllm-0-1",
            "namespace": q.namespace,
            "labels": dict(worker["metadata"]["labels"]),
            "annotations": dict(worker["metadata"].get("annotations") or {}),  # LWS's own webhook reads them
            "ownerReferences": [{**owner, "controller": True}],
        },
        "spec": {"containers": [container("main", 1)]},
    }
    # The tenant deletes the group's real worker and makes its own under its name before the
    # StatefulSet controller does (LWS's own webhook takes only an ordinal name).
    for _ in range(10):
        sb.kubectl("--as=tenant", "delete", "pod", "vllm-0-1", "-n", q.namespace, "--wait=false", check=False)
        made = sb.kubectl("--as=tenant", "create", "-f", "-", input=json.dumps(forged), check=False)
        print(made.returncode, made.stdout, made.stderr)
        if "AlreadyExists" not in made.stderr:
            break
    # The webhook's counter counts answers, not pods: a later admission step may still refuse
    # the pod. What must hold is that no such pod exists ungated.
    if made.returncode == 0:
        pod = json.loads(sb.kubectl("get", "pod", "vllm-0-1", "-n", q.namespace, "-o", "json").stdout)
        gates = [g["name"] for g in pod["spec"].get("schedulingGates", [])]
        assert SCHEDULING_GATE in gates, pod["spec"]
    else:
        assert "AlreadyExists" not in made.stderr, "the StatefulSet controller won every race"
        assert "forbidden" in made.stderr.lower() or "denied" in made.stderr.lower(), made.stderr
