"""The node-fit AdmissionCheck on the real Kueue: quota is not placement, so admission waits for room.

Why this exists: Kueue admits a Workload when its quota fits, even when no node can hold
its pods (``test_kueue_sandbox.py::test_kueue_admits_by_quota_even_when_no_node_fits``:
the pods are ungated and stay Unschedulable, holding the quota). A ClusterQueue that
requires an AdmissionCheck with ``controllerName: lws-gatekeeper.io/node-fit`` waits
for the gatekeeper to say the pods fit. These tests run Kueue's OWN LWS integration
(the LWS carries ``kueue.x-k8s.io/queue-name``; the gatekeeper's ``kueue`` backend is not
involved) on the session's Kueue sandbox, on their own fake nodes and queues.
What they observe is printed (run with ``-s``).
"""

from __future__ import annotations

import re
import time
from typing import Any

from gatekeeper_lab.sandbox.cluster import Sandbox, fake_node
from tests.e2e.kueue_support import (
    KUEUE_GATE,
    NODE_FIT_CONTROLLER,
    QUEUE_LABEL,
    Queue,
    check_state,
    condition,
    get,
    is_true,
    lws,
    make_node_fit_check,
    make_queue,
    new_tag,
    pods,
    wait,
    workloads,
)

WORKLOADS = "workloads.kueue.x-k8s.io"


def _describe(wl: dict[str, Any], check: str) -> str:
    status = wl.get("status", {})
    state = check_state(wl, check)
    lines = [
        f"Workload {wl['metadata']['name']} (owner "
        f"{', '.join(o['kind'] + '/' + o['name'] for o in wl['metadata'].get('ownerReferences', [])[:1])})",
        f"  check {check}: {state.get('state')} since {state.get('lastTransitionTime')}: "
        f"{state.get('message')!r}",
    ]
    for cond in status.get("conditions", []):
        lines.append(f"  {cond['type']}={cond['status']} ({cond.get('reason')}): {cond.get('message')}")
    return "\n".join(lines)


def _describe_pods(sb: Sandbox, ns: str) -> str:
    lines = []
    for pod in pods(sb, ns):
        gates = [g["name"] for g in pod["spec"].get("schedulingGates", [])]
        lines.append(
            f"  pod {pod['metadata']['name']}: {pod.get('status', {}).get('phase')}, node "
            f"{pod['spec'].get('nodeName')}, gates {gates}"
        )
    return "\n".join(lines)


def _queue_with_check(sb: Sandbox, *, gpus: int, nodes: int, gpus_per_node: int) -> tuple[Queue, str]:
    """A node-fit AdmissionCheck and a queue that requires it; ``make_queue`` waits for it to be Active."""
    tag = new_tag()
    check = f"node-fit-{tag}"
    make_node_fit_check(sb, check)
    q = make_queue(sb, gpus=gpus, nodes=nodes, gpus_per_node=gpus_per_node, admission_checks=[check], tag=tag)
    return q, check


def _one_workload(sb: Sandbox, ns: str, owner: str) -> dict[str, Any] | None:
    found = [
        w
        for w in workloads(sb, ns)
        if any(o["name"] == owner for o in w["metadata"].get("ownerReferences", []))
    ]
    return found[0] if len(found) == 1 else None


def test_the_node_fit_admission_check_is_active_and_so_is_its_cluster_queue(kueue_sandbox: Sandbox) -> None:
    sb = kueue_sandbox
    q, check = _queue_with_check(sb, gpus=2, nodes=1, gpus_per_node=2)
    ac = get(sb, "admissionchecks.kueue.x-k8s.io", check)
    active = condition(ac, "Active")
    print(f"\nAdmissionCheck {check} ({ac['spec']['controllerName']}): Active={active.get('status')} "
          f"({active.get('reason')}): {active.get('message')}")  # fmt: skip
    assert ac["spec"]["controllerName"] == NODE_FIT_CONTROLLER
    assert active["status"] == "True" and active["reason"] == "NodeFitActive"
    assert active["message"], "the condition says in words what the check does"
    cq = get(sb, "clusterqueues.kueue.x-k8s.io", q.cluster_queue)
    print(f"ClusterQueue {q.cluster_queue}: {condition(cq, 'Active')}")
    assert is_true(cq, "Active")


def test_kueue_lws_group_waits_gated_until_its_pods_fit_a_node_then_runs(kueue_sandbox: Sandbox) -> None:
    """Quota 4 GPUs over 4 nodes of 1 GPU; a group of 2 pods x 2 GPUs: quota fits, no node does."""
    sb = kueue_sandbox
    q, check = _queue_with_check(sb, gpus=4, nodes=4, gpus_per_node=1)
    ns = q.namespace
    sb.apply([lws("big", ns, {QUEUE_LABEL: q.local_queue}, replicas=1, size=2, gpus_per_pod=2)])

    def pending_with_reason() -> dict[str, Any] | None:
        wl = _one_workload(sb, ns, "big")
        if wl is None or not is_true(wl, "QuotaReserved"):
            return None
        state = check_state(wl, check)
        return wl if state.get("state") == "Pending" and state.get("message") else None

    wl = wait(
        "the group's Workload: quota reserved, node-fit check Pending with a reason", pending_with_reason
    )
    name = wl["metadata"]["name"]
    print("\nWith the node-fit check, before any node has room:\n" + _describe(wl, check))
    assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("leader", 1), ("worker", 1)]
    message = check_state(wl, check)["message"]
    assert "can never fit" in message and "needs 2 nvidia.com/gpu" in message, message
    assert f"flavor {q.flavor}" in message and "has 1 nvidia.com/gpu" in message, message
    pending = r'^lws_gatekeeper_check_workloads\{check="node-fit",state="Pending"\} ([1-9][0-9.]*)$'
    wait("the check's Pending Workloads counted", lambda: re.search(pending, sb.metrics(), re.M))

    # It stays so: not Admitted, both pods gated (unlike without the check, where Kueue admits
    # and ungates them and they stay Unschedulable).
    wait("the group's 2 pods", lambda: len(pods(sb, ns)) == 2)
    for _ in range(6):
        wl = get(sb, WORKLOADS, name, "-n", ns)
        assert not is_true(wl, "Admitted"), _describe(wl, check)
        assert check_state(wl, check)["state"] == "Pending"
        both = pods(sb, ns)
        assert all(KUEUE_GATE in {g["name"] for g in p["spec"].get("schedulingGates", [])} for p in both)
        assert not any(p["spec"].get("nodeName") for p in both)
        time.sleep(1)
    print(_describe_pods(sb, ns))

    # Room appears: 2 nodes of 2 GPUs with the flavor's labels.
    sb.create_nodes([fake_node(f"kq-{q.flavor}-big-{i}", gpus=2, labels=q.labels) for i in range(2)])

    def ready_and_admitted() -> dict[str, Any] | None:
        now = get(sb, WORKLOADS, name, "-n", ns)
        return now if check_state(now, check).get("state") == "Ready" and is_true(now, "Admitted") else None

    admitted = wait("the node-fit check Ready and the Workload Admitted", ready_and_admitted)
    print("\nAfter 2 nodes of 2 GPUs joined the flavor:\n" + _describe(admitted, check))
    assert (
        check_state(admitted, check)["message"]
        == f"all 2 pods fit the free room of the nodes of flavor {q.flavor}"
    )

    def running() -> list[dict[str, Any]] | None:
        now = pods(sb, ns)
        return now if len(now) == 2 and all(p["status"].get("phase") == "Running" for p in now) else None

    ran = wait("both pods Running", running)
    print(_describe_pods(sb, ns))
    assert {p["spec"]["nodeName"] for p in ran} == {f"kq-{q.flavor}-big-0", f"kq-{q.flavor}-big-1"}


def test_two_groups_competing_for_room_for_one_the_second_waits_until_the_first_leaves(
    kueue_sandbox: Sandbox,
) -> None:
    """Quota for both (8 GPUs), nodes for one (2 nodes of 2 GPUs); groups of 2 pods x 2 GPUs."""
    sb = kueue_sandbox
    q, check = _queue_with_check(sb, gpus=8, nodes=2, gpus_per_node=2)
    ns = q.namespace
    labels = {QUEUE_LABEL: q.local_queue}
    sb.apply([lws("first", ns, labels, replicas=1, size=2, gpus_per_pod=2)])
    sb.apply([lws("second", ns, labels, replicas=1, size=2, gpus_per_pod=2)])

    def settled() -> tuple[dict[str, Any], dict[str, Any]] | None:
        one, two = _one_workload(sb, ns, "first"), _one_workload(sb, ns, "second")
        if (
            one is None
            or two is None
            or not (is_true(one, "QuotaReserved") and is_true(two, "QuotaReserved"))
        ):
            return None
        states = {check_state(w, check).get("state") for w in (one, two)}
        if states != {"Ready", "Pending"} or not any(is_true(w, "Admitted") for w in (one, two)):
            return None
        # Kueue writes the check as Pending with an empty message when it reserves quota;
        # the gatekeeper's verdict and its message follow in a later write.
        if not all(check_state(w, check).get("message") for w in (one, two)):
            return None
        return (one, two) if check_state(one, check)["state"] == "Ready" else (two, one)

    winner, loser = wait("both quota-reserved, one Ready and Admitted, one Pending", settled)
    print("\nTwo groups, room for one:\n" + _describe(winner, check) + "\n" + _describe(loser, check))
    assert not is_true(loser, "Admitted")
    message = check_state(loser, check)["message"]
    assert message.startswith("waits for node room: a pod of pod set "), message
    assert message.endswith(
        f"needs 2 nvidia.com/gpu; none of the 2 nodes of flavor {q.flavor} has any nvidia.com/gpu free"
    ), message
    winner_owner = winner["metadata"]["ownerReferences"][0]["name"]
    loser_owner = loser["metadata"]["ownerReferences"][0]["name"]

    def winner_running() -> bool:
        mine = [
            p
            for p in pods(sb, ns)
            if p["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/name") == winner_owner
        ]
        return len(mine) == 2 and all(p["status"].get("phase") == "Running" for p in mine)

    wait(f"the pods of {winner_owner} Running", winner_running)
    for pod in pods(sb, ns):
        if pod["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/name") == loser_owner:
            assert KUEUE_GATE in {g["name"] for g in pod["spec"].get("schedulingGates", [])}, pod["spec"]
    print(_describe_pods(sb, ns))

    sb.kubectl("delete", "leaderworkerset", winner_owner, "-n", ns, "--wait=false")

    def loser_admitted() -> dict[str, Any] | None:
        wl = _one_workload(sb, ns, loser_owner)
        if wl is None or check_state(wl, check).get("state") != "Ready" or not is_true(wl, "Admitted"):
            return None
        return wl

    after = wait(
        f"{loser_owner}'s check Ready and its Workload Admitted after {winner_owner} is deleted",
        loser_admitted,
        timeout=120,
    )
    print(f"\nAfter deleting {winner_owner}:\n" + _describe(after, check))

    def loser_running() -> bool:
        now = pods(sb, ns)
        return len(now) == 2 and all(
            p["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/name") == loser_owner
            and p["status"].get("phase") == "Running"
            for p in now
        )

    wait(f"the pods of {loser_owner} Running", loser_running)
    print(_describe_pods(sb, ns))
