"""With the ``kueue`` backend, the charge follows the pods too: a group's Workload (and so
Kueue's quota) stays while a pod let through on it lives, found by the toleration that
names its group (``lws-gatekeeper.io/charged-to``), whatever its labels say now.

The pool label is removed from a running group's pods (the policy that refuses it is
turned off for the namespace, to show the gatekeeper's own hold), its LWS is deleted with
``--cascade=orphan`` and a second LWS is made on the same LocalQueue, whose ClusterQueue
has quota for one group while the nodes have room for two. GPUs bound in the namespace
are sampled every second."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from gatekeeper.core.kube.keys import LWS_NAME_LABEL, POOL_LABEL, POOL_TAINT_KEY, SCHEDULING_GATE
from gatekeeper_lab.sandbox.cluster import POLICIES_LABEL, POLICIES_OFF, Sandbox
from tests.e2e import attack_table
from tests.e2e.attack_support import GUARD
from tests.e2e.conftest import orphaning
from tests.e2e.kueue_support import (
    lws,
    make_queue,
    new_tag,
    pods,
    records,
    settled,
    wait,
    workloads,
)
from tests.e2e.record_watch import conditions_seen
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


@contextlib.contextmanager
def _guard_off(sb: Sandbox) -> Iterator[None]:
    """The StatefulSet guard unregistered for the block, then registered again as it was."""
    live = json.loads(sb.kubectl("get", GUARD, "-o", "json").stdout)
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
        live["metadata"].pop(key, None)
    sb.kubectl("delete", GUARD)
    try:
        yield
    finally:
        sb.kubectl("create", "-f", "-", input=json.dumps(live))


def _asks_two(pod: dict[str, Any]) -> bool:
    limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
    return str(limits.get("nvidia.com/gpu")) == "2" and not pod["metadata"].get("deletionTimestamp")


def test_a_hand_edited_worker_statefulset_gives_its_group_back(
    kueue_sandbox: Sandbox, kueue_attack_watch: Watch
) -> None:
    """The tenant's hand-edited worker StatefulSet (``hand_edited_worker``), on a
    ClusterQueue of 2 GPUs: its Workload goes once its pods stopped, and after its retry a
    new Workload is admitted."""
    sb = kueue_sandbox
    q = make_queue(sb, gpus=2, nodes=4, gpus_per_node=2, managed=False)
    kueue_attack_watch.pool(q.labels, 2)
    body = lws("lws", q.namespace, {POOL_LABEL: q.local_queue}, replicas=1, size=2, gpus_per_pod=1)
    wait_for = "its new Workload admitted"

    def first_workload() -> list[str]:
        return [w["metadata"]["uid"] for w in workloads(sb, q.namespace)]

    before = hand_edited_worker(sb, q.namespace, body, first_workload, wait_for, "kueue")
    assert first_workload() != before, "a new Workload"


def hand_edited_worker(
    sb: Sandbox,
    ns: str,
    body: dict[str, Any],
    admission: Callable[[], object],
    what: str,
    backend: str,
) -> object:
    """The tenant (``dev``, with ``edit``) edits its admitted group's worker StatefulSet to
    ask 2 GPUs a pod, with the StatefulSet guard off, and deletes the worker; its LWS says
    ``restartPolicy: None``, so the LWS controller does not restart the group. The worker
    made from the edited template stays gated; its leader would hold its GPU for a group
    that cannot be whole, so the group is given back: its pods stop, then its admission goes
    (the quota back only once no pod of it runs), and after its retry the group, made again
    from the LWS, is admitted anew and runs whole. ``admission()`` names the group's
    admission (its Workload or PodGroup), which must change; returns it as it was."""
    body["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "None"
    sb.apply([body])
    wait("the group running whole", lambda: settled(sb, ns, running=1, gated=0, size=2))
    before = admission()
    dev = f"system:serviceaccount:{ns}:dev"
    sb.kubectl("create", "serviceaccount", "dev", "-n", ns)
    sb.kubectl(
        "create", "rolebinding", "dev-edit", "--clusterrole=edit", f"--serviceaccount={ns}:dev", "-n", ns
    )  # fmt: skip
    res = "/spec/template/spec/containers/0/resources"
    two = dict(body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"])
    two = {k: {**v, "nvidia.com/gpu": "2"} for k, v in two.items()}
    patch = json.dumps([{"op": "replace", "path": f"{res}/{k}", "value": v} for k, v in two.items()])
    seen: dict[str, dict[str, Any]] = {}
    peak, given_back = 0, {}
    with _guard_off(sb), conditions_seen(sb, ns) as said:
        sb.kubectl(f"--as={dev}", "patch", "sts/lws-0", "--type=json", "-p", patch, "-n", ns)
        sb.kubectl(f"--as={dev}", "delete", "pod", "lws-0-1", "-n", ns, "--wait=false", "--ignore-not-found")
        until = time.monotonic() + 90
        while time.monotonic() < until and not given_back:
            peak = max(peak, _gpus_bound(sb, ns))
            seen.update({p["metadata"]["name"]: p for p in pods(sb, ns) if _asks_two(p)})
            # Every state the records passed through (the watch), not the one left: a group
            # given back says so only until its retry, a second or two later.
            given_back = next(
                (c for c in list(said) if c.get("reason") == "NotAsAdmitted" and c.get("status") == "False"),
                {},
            )
            time.sleep(1)
    assert peak <= 2, f"{peak} GPUs bound on a quota of 2"
    assert "lws-0-1" in seen, "no pod of 2 GPUs was made from the edited template"
    for name, p in seen.items():
        assert SCHEDULING_GATE in {g["name"] for g in p["spec"].get("schedulingGates", [])}, (
            f"{name} let through"
        )
        assert not p["spec"].get("nodeName"), f"{name} bound"
    assert given_back, "the group was not given back"
    message = str(given_back.get("message"))
    assert message.startswith("group 0 was given back, retried in "), message
    assert "pod lws-0-1 asks " in message, message
    wait(
        f"the group made again, {what}, running whole",
        lambda: (
            settled(sb, ns, running=1, gated=0, size=2)
            and not any(_asks_two(p) for p in pods(sb, ns))
            and admission() != before
        ),
        timeout=150,
    )
    attack_table.add(
        f"{backend}: dev: worker StatefulSet's template edited to 2 GPUs, its pod deleted (no-guard, "
        f"restartPolicy None; peak {peak} of 2 GPUs)",
        "contained",
        f"a pod of 2 GPUs made, gated; record: {message}; its pods stopped, then its admission given "
        f"back; {what} after its retry, the group whole again",
    )
    return before
