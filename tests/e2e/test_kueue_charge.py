"""With the ``kueue`` backend, the charge follows the pods too: a group's Workload (and so
Kueue's quota) stays while a pod let through on it lives, found by the toleration that
names its group (``lws-gatekeeper.io/charged-to``), whatever its labels say now.

The pool label is removed from a running group's pods (the policy that refuses it is
turned off for the namespace, to show the gatekeeper's own hold), its LWS is deleted with
``--cascade=orphan`` and a second LWS is made on the same LocalQueue, whose ClusterQueue
has quota for one group while the nodes have room for two. GPUs bound in the namespace
are sampled every second."""

from __future__ import annotations

import json
import time
from typing import Any

from gatekeeper.core.kube.keys import LWS_NAME_LABEL, POOL_LABEL, POOL_TAINT_KEY
from gatekeeper_lab.sandbox.cluster import POLICIES_LABEL, POLICIES_OFF, Sandbox
from tests.e2e import attack_table
from tests.e2e.conftest import orphaning
from tests.e2e.kueue_support import lws, make_queue, new_tag, pods, records, settled, wait, workloads
from tests.e2e.watch import Watch


def _gpus_bound(sb: Sandbox, ns: str) -> int:
    def gpus(pod: dict[str, Any]) -> int:
        return sum(
            int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
            for c in pod["spec"]["containers"]
        )

    return sum(
        gpus(p)
        for p in pods(sb, ns)
        if p["spec"].get("nodeName") and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
    )


def test_unlabelled_orphans_keep_their_workloads_quota(
    kueue_sandbox: Sandbox, kueue_attack_watch: Watch
) -> None:
    sb = kueue_sandbox
    q = make_queue(sb, gpus=2, nodes=4, gpus_per_node=1, managed=False)
    kueue_attack_watch.pool(q.labels, 2)
    opted = {POOL_LABEL: q.local_queue}
    sb.apply([lws("first", q.namespace, opted, replicas=1, size=2, gpus_per_pod=1)])
    wait("A running whole", lambda: settled(sb, q.namespace, running=1, gated=0, size=2, lws_name="first"))

    sb.kubectl("label", "namespace", q.namespace, f"{POLICIES_LABEL}={POLICIES_OFF}")
    sb.kubectl("label", "pod", "first-0", "first-0-1", f"{POOL_LABEL}-", "-n", q.namespace)
    for args in orphaning("first", q.namespace):
        sb.kubectl(*args)
    sb.apply([lws("second", q.namespace, opted, replicas=1, size=2, gpus_per_pod=1)])
    wait("B gated whole", lambda: settled(sb, q.namespace, running=0, gated=1, size=2, lws_name="second"))
    peak, until = 0, time.monotonic() + 15
    while time.monotonic() < until:
        peak = max(peak, _gpus_bound(sb, q.namespace))
        time.sleep(1)
    assert peak <= 2, f"{peak} GPUs bound on a ClusterQueue of quota 2"
    assert settled(sb, q.namespace, running=0, gated=1, size=2, lws_name="second"), "B waits"
    held = [w for w in workloads(sb, q.namespace) if w["metadata"]["labels"][LWS_NAME_LABEL] == "first"]
    assert len(held) == 1, "A's Workload stays and holds its quota while its unlabelled pods run"

    sb.kubectl(
        "delete", "statefulsets,pods", "-n", q.namespace, "-l", f"{LWS_NAME_LABEL}=first", "--wait=false"
    )
    wait("B running whole", lambda: settled(sb, q.namespace, running=1, gated=0, size=2, lws_name="second"))
    wait(
        "A's record and Workload to go",
        lambda: (
            all(r["spec"]["leaderWorkerSet"] == "second" for r in records(sb, q.namespace))
            and len(workloads(sb, q.namespace)) == 1
        ),
    )
    attack_table.add(
        f"kueue: pool label removed from running pods, LWS deleted --cascade=orphan, another LWS "
        f"created (peak {peak} of 2 GPUs)",
        "contained",
        "A's Workload kept while its pods ran; B waited on Kueue, admitted once they were gone",
    )


def test_a_flavor_closed_by_the_pool_taint_takes_only_admitted_groups(
    kueue_sandbox: Sandbox, kueue_attack_watch: Watch
) -> None:
    """The flavor's nodes are tainted with the reserved key ``lws-gatekeeper.io/pool`` and its
    tolerations tolerate it: the gatekeeper adds them to an admitted group's pods as it lifts
    their gates (an update the policy lws-gatekeeper-closed-pools lets only the gatekeeper
    make), and a pod that tolerates the taint by itself is refused."""
    sb = kueue_sandbox
    tag = new_tag()
    taint = {"key": POOL_TAINT_KEY, "value": f"gpu-{tag}", "effect": "NoSchedule"}  # the flavor's name
    q = make_queue(sb, gpus=2, nodes=3, gpus_per_node=1, managed=False, taint=taint, tag=tag)
    kueue_attack_watch.pool(q.labels, 2)
    assert q.flavor == taint["value"]
    sb.apply([lws("closed", q.namespace, {POOL_LABEL: q.local_queue}, replicas=1, size=2, gpus_per_pod=1)])
    wait("the group running whole", lambda: settled(sb, q.namespace, running=1, gated=0, size=2))
    assert all({**taint, "operator": "Equal"} in p["spec"]["tolerations"] for p in pods(sb, q.namespace))
    intruder = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "intruder", "namespace": q.namespace},
        "spec": {
            "tolerations": [{**taint, "operator": "Equal"}],
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    refused = sb.kubectl("create", "-f", "-", input=json.dumps(intruder), check=False)
    assert refused.returncode != 0, refused.stdout
    assert "of closed pools' nodes" in refused.stderr, refused.stderr
    peak, until = 0, time.monotonic() + 5
    while time.monotonic() < until:
        peak = max(peak, _gpus_bound(sb, q.namespace))
        time.sleep(1)
    assert peak <= 2, f"{peak} GPUs bound on a ClusterQueue of quota 2"
    attack_table.add(
        f"kueue, flavor closed by the pool taint: a pod tolerating it (peak {peak} of 2 GPUs)",
        "refused",
        refused.stderr.strip().splitlines()[-1],
    )
