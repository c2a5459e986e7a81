"""The ``kueue`` backend against the real Kueue: a Workload per group, whole groups or nothing.

Why this exists: with ``--backend=kueue`` the gatekeeper hands admission to Kueue's
ClusterQueues and keeps only its gate. These tests run on the session's sandbox with
Kueue (``kueue_sandbox``), whose gatekeeper runs that backend, and prove what a Kueue
user relies on: groups admitted whole within their ClusterQueue's quota and on its
flavor's nodes, two reserved pools side by side, priority and preemption of whole
groups, scale up and down, LeaderReady, a missing LocalQueue reported, and a gatekeeper
killed mid scale-up that admits nothing twice. The LWSs here are not labelled for
Kueue's own integration (``kueue.x-k8s.io/queue-name``), and their namespaces are not
managed by Kueue: Kueue only ever sees the gatekeeper's Workloads.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest

from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.cluster import Sandbox, fake_node
from tests.e2e import attack_table
from tests.e2e.kueue_support import (
    Queue,
    condition,
    container,
    get,
    group_of,
    group_states,
    is_true,
    items,
    lws,
    make_namespace,
    make_node_fit_check,
    make_queue,
    new_tag,
    pods,
    records,
    settled,
    wait,
    workloads,
)
from tests.e2e.test_why import run_why
from tests.e2e.watch import Watch

GPU = "nvidia.com/gpu"
NEVER_FIT_RETRY = 2
"""Seconds before a Workload that can never fit is made again, in the Kueue sandbox (conftest)."""


def _opted_in(q: Queue) -> dict[str, str]:
    return {POOL_LABEL: q.local_queue}


def _lws_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/name"])


def _show(sb: Sandbox, ns: str) -> None:
    print(sb.kubectl("get", "workloads.kueue.x-k8s.io,groupadmissions,pods", "-n", ns, "-o", "wide").stdout)


def test_whole_groups_within_quota_on_the_flavors_nodes_rest_gated(kueue_sandbox: Sandbox) -> None:
    """The LWS issue's case under Kueue: 4 one-GPU nodes, groups of 2, scale 0 -> 4 -> 1 -> 3."""
    sb = kueue_sandbox
    q = make_queue(sb, gpus=4, nodes=4, gpus_per_node=1, managed=False)
    sb.apply([lws("vllm", q.namespace, _opted_in(q), replicas=4, size=2, gpus_per_pod=1)])
    try:
        wait(
            "2 whole groups Running, 2 whole groups gated",
            lambda: settled(sb, q.namespace, running=2, gated=2, size=2),
        )
    finally:
        _show(sb, q.namespace)
    # Groups 0 and 1 admitted, group 2 waiting in Kueue; group 3 waits without a Workload
    # (it could not fit either): one made in the window of two is given back a moment later.
    wls = wait("3 Workloads", lambda: (lambda w: w if len(w) == 3 else None)(workloads(sb, q.namespace)))
    for wl in wls:
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("leader", 1), ("worker", 1)]
        assert wl["spec"]["queueName"] == q.local_queue
        assert wl["metadata"]["ownerReferences"][0]["kind"] == "GroupAdmission"
    admitted = {
        w["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
        for w in wls
        if is_true(w, "Admitted")
    }
    running = {g for g, c in group_states(sb, q.namespace).items() if c["running"]}
    assert admitted == running, "exactly the groups whose Workload Kueue admitted run"
    for pod in pods(sb, q.namespace):
        if group_of(pod) in running:
            assert q.labels.items() <= (pod["spec"].get("nodeSelector") or {}).items(), (
                "steered to the flavor"
            )
    recs = records(sb, q.namespace)
    assert sorted(r["spec"]["groupIndex"] for r in recs) == [0, 1, 2, 3]

    def quota_said() -> list[dict[str, Any]] | None:
        waiting = [r for r in records(sb, q.namespace) if not is_true(r, "Admitted")]
        said = [
            r for r in waiting if "insufficient unused quota" in condition(r, "Admitted").get("message", "")
        ]
        # Kueue writes its reason on the workloads it tried; one queued behind may stay unread.
        return waiting if len(waiting) == 2 and said else None

    for r in wait("the waiting records to carry Kueue's reason", quota_said):
        print(condition(r, "Admitted"))
    assert all(r["status"]["workload"] == r["metadata"]["name"] for r in recs)

    # Scale down to 1: the Workloads of groups 1..3 go; group 0 stays admitted (Kueue may have
    # admitted any two of the four; if it was not one of them, group 0 is admitted now).
    sb.kubectl("scale", "leaderworkerset", "vllm", "-n", q.namespace, "--replicas=1")
    wait("1 whole group Running", lambda: settled(sb, q.namespace, running=1, gated=0, size=2))
    wait(
        "1 Workload and 1 record left",
        lambda: len(workloads(sb, q.namespace)) == 1 and len(records(sb, q.namespace)) == 1,
    )
    # Scale up to 3: 2 run (4 GPUs), 1 waits gated.
    sb.kubectl("scale", "leaderworkerset", "vllm", "-n", q.namespace, "--replicas=3")
    try:
        wait("2 Running, 1 gated", lambda: settled(sb, q.namespace, running=2, gated=1, size=2))
    finally:
        _show(sb, q.namespace)
    assert len(workloads(sb, q.namespace)) == 3


def test_leader_ready_workers_are_counted_before_they_exist(kueue_sandbox: Sandbox) -> None:
    sb = kueue_sandbox
    q = make_queue(sb, gpus=4, nodes=2, gpus_per_node=2, managed=False)
    sb.apply(
        [
            lws(
                "lr",
                q.namespace,
                _opted_in(q),
                replicas=2,
                size=3,
                gpus_per_pod=1,
                startup_policy="LeaderReady",
            )
        ]
    )
    try:
        wait(
            "1 whole group of 3 Running, the other's leader gated",
            lambda: _leader_ready_settled(sb, q.namespace),
        )
    finally:
        _show(sb, q.namespace)
    wls = workloads(sb, q.namespace)
    assert sorted(w["spec"]["podSets"][1]["count"] for w in wls) == [2, 2], (
        "workers counted before they exist"
    )
    assert sum(is_true(w, "Admitted") for w in wls) == 1


def _leader_ready_settled(sb: Sandbox, ns: str) -> bool:
    groups = group_states(sb, ns)
    # LeaderReady: the waiting group's workers are never created, its leader stays gated.
    whole = [g for g, c in groups.items() if c == Counter(running=3)]
    held = [g for g, c in groups.items() if c == Counter(gated=1)]
    return len(whole) == 1 and len(held) == 1 and len(groups) == 2


def test_two_reserved_pools_as_two_cluster_queues(kueue_sandbox: Sandbox) -> None:
    """Two ClusterQueues over two sets of nodes: each LWS runs within its own pool, on its nodes."""
    sb = kueue_sandbox
    ns = f"two-pools-{new_tag()}"
    make_namespace(sb, ns, managed=False)
    a = make_queue(sb, gpus=2, nodes=2, gpus_per_node=1, namespace=ns)
    b = make_queue(sb, gpus=4, nodes=2, gpus_per_node=2, namespace=ns)
    sb.apply(
        [
            lws("in-a", ns, _opted_in(a), replicas=2, size=2, gpus_per_pod=1),
            lws("in-b", ns, _opted_in(b), replicas=3, size=2, gpus_per_pod=1),
        ]
    )
    try:
        wait(
            "pool a: 1 Running, 1 gated",
            lambda: settled(sb, ns, running=1, gated=1, size=2, lws_name="in-a"),
        )
        wait(
            "pool b: 2 Running, 1 gated",
            lambda: settled(sb, ns, running=2, gated=1, size=2, lws_name="in-b"),
        )
    finally:
        _show(sb, ns)
    nodes_of = {q.labels["kueue-test-pool"]: q for q in (a, b)}
    for pod in pods(sb, ns):
        node = pod["spec"].get("nodeName")
        if not node:
            continue
        pool = get(sb, "node", node)["metadata"]["labels"]["kueue-test-pool"]
        owner = pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/name"]
        assert nodes_of[pool] is (a if owner == "in-a" else b), f"{pod['metadata']['name']} ran on {node}"


def test_priority_preempts_whole_groups_and_the_victim_waits_whole(kueue_sandbox: Sandbox) -> None:
    sb = kueue_sandbox
    tag = new_tag()
    low, high = f"low-{tag}", f"high-{tag}"
    sb.apply(
        [
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": low},
                "value": 10,
            },
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": high},
                "value": 1000,
            },
        ]
    )
    q = make_queue(
        sb, gpus=4, nodes=4, gpus_per_node=1, managed=False,
        preemption={"withinClusterQueue": "LowerPriority"},
    )  # fmt: skip
    sb.apply(
        [lws("batch", q.namespace, _opted_in(q), replicas=2, size=2, gpus_per_pod=1, priority_class=low)]
    )
    wait(
        "both low groups Running",
        lambda: settled(sb, q.namespace, running=2, gated=0, size=2, lws_name="batch"),
    )
    sb.apply(
        [lws("serve", q.namespace, _opted_in(q), replicas=1, size=2, gpus_per_pod=1, priority_class=high)]
    )
    try:
        wait(
            "the high group Running",
            lambda: settled(sb, q.namespace, running=1, gated=0, size=2, lws_name="serve"),
        )
        wait(
            "one low group Running, the preempted one gated whole",
            lambda: settled(sb, q.namespace, running=1, gated=1, size=2, lws_name="batch"),
        )
    finally:
        _show(sb, q.namespace)
    wls = {w["metadata"]["name"]: w for w in workloads(sb, q.namespace)}
    high_wl = next(
        w for w in wls.values() if w["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/name"] == "serve"
    )
    assert high_wl["spec"]["priority"] == 1000
    assert high_wl["spec"]["priorityClassRef"]["name"] == high
    victim = next(w for w in wls.values() if _lws_of(w) == "batch" and not is_true(w, "Admitted"))
    print("victim:", victim["status"].get("conditions"))
    assert not victim["status"].get("admission"), "the victim's quota was given back"
    assert condition(victim, "Requeued").get("status") == "True"
    rec = next(r for r in records(sb, q.namespace) if r["metadata"]["name"] == victim["metadata"]["name"])
    assert not is_true(rec, "Admitted")
    # Never more than the quota's GPUs held by pods at once, and no group half-running now.
    used = sum(
        int(c["resources"]["requests"].get(GPU, 0))
        for p in pods(sb, q.namespace)
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
        for c in p["spec"]["containers"]
    )
    assert used <= 4
    # The high LWS goes: the preempted group comes back, whole.
    sb.kubectl("delete", "leaderworkerset", "serve", "-n", q.namespace)
    wait(
        "both low groups Running again",
        lambda: settled(sb, q.namespace, running=2, gated=0, size=2, lws_name="batch"),
    )


def test_a_missing_local_queue_is_reported_and_nothing_runs(kueue_sandbox: Sandbox) -> None:
    sb = kueue_sandbox
    ns = f"no-queue-{new_tag()}"
    make_namespace(sb, ns, managed=False)
    sb.apply([lws("lost", ns, {POOL_LABEL: "no-such-queue"}, replicas=1, size=2, gpus_per_pod=1)])

    def reported() -> dict[str, Any] | None:
        recs = records(sb, ns)
        if len(recs) == 1 and "no-such-queue" in condition(recs[0], "Admitted").get("message", ""):
            return recs[0]
        return None

    rec = wait("the record to say the LocalQueue is missing", reported)
    cond = condition(rec, "Admitted")
    print(cond)
    assert cond["status"] == "False"
    events = items(sb, "events", "-n", ns, "--field-selector", "involvedObject.kind=LeaderWorkerSet")
    ours = [e for e in events if e.get("source", {}).get("component") == "lws-gatekeeper"]
    assert any("no-such-queue" in e["message"] for e in ours), [e["message"] for e in ours]
    time.sleep(2)
    assert group_states(sb, ns) == {"0": Counter(gated=2)}
    # Fixed by pointing the LWS at a LocalQueue that exists: its Workload is made again there.
    q = make_queue(sb, gpus=2, nodes=2, gpus_per_node=1, namespace=ns)
    sb.kubectl("label", "leaderworkerset", "lost", "-n", ns, f"{POOL_LABEL}={q.local_queue}", "--overwrite")
    try:
        wait("the group Running in its LocalQueue", lambda: settled(sb, ns, running=1, gated=0, size=2))
    finally:
        _show(sb, ns)
    [wl] = workloads(sb, ns)
    assert wl["spec"]["queueName"] == q.local_queue


def test_gatekeeper_killed_mid_scale_up_admits_nothing_twice(kueue_sandbox: Sandbox) -> None:
    sb = kueue_sandbox
    q = make_queue(sb, gpus=6, nodes=6, gpus_per_node=1, managed=False)
    sb.apply([lws("burst", q.namespace, _opted_in(q), replicas=1, size=2, gpus_per_pod=1)])
    wait("group 0 Running", lambda: settled(sb, q.namespace, running=1, gated=0, size=2))
    sb.kubectl("scale", "leaderworkerset", "burst", "-n", q.namespace, "--replicas=8")
    time.sleep(1.0)  # mid-way: some Workloads made, some groups ungated, some not
    sb.stop("gatekeeper", kill=True)
    mid = len(workloads(sb, q.namespace))
    time.sleep(2.0)
    sb.start_gatekeeper()
    try:
        wait(
            "3 whole groups Running, 5 gated",
            lambda: settled(sb, q.namespace, running=3, gated=5, size=2),
            timeout=120,
        )
    finally:
        _show(sb, q.namespace)
    print(f"Workloads when the gatekeeper was killed: {mid}")

    # The 3 admitted groups and the lowest waiting one keep a Workload, none twice; those of
    # the window behind it are given back once Kueue finds one of them inadmissible.
    wls = wait("4 Workloads", lambda: (lambda w: w if len(w) == 4 else None)(workloads(sb, q.namespace)))
    indices = [w["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] for w in wls]
    assert sorted(indices) == ["0", "1", "2", "3"], "one Workload per group offered, none twice"
    assert sorted(i for i, w in zip(indices, wls, strict=True) if is_true(w, "Admitted")) == ["0", "1", "2"]
    assert len(records(sb, q.namespace)) == 8


@pytest.mark.parametrize("size", [2])
def test_lws_without_our_label_is_left_to_kueues_own_integration(kueue_sandbox: Sandbox, size: int) -> None:
    """Kueue's own LWS integration runs beside the backend: no record, no Workload of ours."""
    sb = kueue_sandbox
    q = make_queue(sb, gpus=2, nodes=2, gpus_per_node=1, managed=True)
    sb.apply(
        [
            lws(
                "theirs",
                q.namespace,
                {"kueue.x-k8s.io/queue-name": q.local_queue},
                replicas=2,
                size=size,
                gpus_per_pod=1,
            )
        ]
    )
    wait("1 whole group Running (Kueue's gate holds the other)", lambda: _kueue_settled(sb, q.namespace))
    assert records(sb, q.namespace) == []
    wls = workloads(sb, q.namespace)
    assert len(wls) == 2
    assert all(POOL_LABEL not in w["metadata"].get("labels", {}) for w in wls)
    assert all(w["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet" for w in wls)


def _kueue_settled(sb: Sandbox, ns: str) -> bool:
    ps = [p for p in pods(sb, ns) if not p["metadata"].get("deletionTimestamp")]
    running = [p for p in ps if p.get("status", {}).get("phase") == "Running"]
    held = [p for p in ps if p["spec"].get("schedulingGates")]
    assert not any(SCHEDULING_GATE in {g["name"] for g in p["spec"].get("schedulingGates", [])} for p in ps)
    return len(ps) == 4 and len(running) == 2 and len(held) == 2


def test_a_group_that_can_never_fit_gives_its_quota_back_and_stays_gated(kueue_sandbox: Sandbox) -> None:
    """Quota for 4 GPUs over 4 one-GPU nodes, pods of 2 GPUs: Kueue alone would admit; node fit says no.

    Its Workload is deleted so that it holds no quota (Pending it would hold it for ever),
    the record says why, and a group that fits, queued after it, runs. Its Workload is made
    again after the delay (2 s here, doubling) and queues; once nodes that fit it join and
    the quota is free, it runs and its retry count is gone.
    """
    sb = kueue_sandbox
    check = f"node-fit-{new_tag()}"
    make_node_fit_check(sb, check)
    q = make_queue(sb, gpus=4, nodes=4, gpus_per_node=1, managed=False, admission_checks=[check])
    sb.apply([lws("wide", q.namespace, _opted_in(q), replicas=1, size=2, gpus_per_pod=2)])

    def explained() -> dict[str, Any] | None:
        recs = records(sb, q.namespace)
        return recs[0] if recs and condition(recs[0], "Admitted").get("reason") == "NodesTooSmall" else None

    record = wait("the record to say the group can never fit", explained)
    said = condition(record, "Admitted")
    print(said["message"])
    retries = record["status"]["retries"]
    assert retries >= 1 and record["status"]["retryAt"]
    assert "can never fit, even on empty nodes" in said["message"], said
    delay = NEVER_FIT_RETRY << (retries - 1)
    assert said["message"].endswith(
        f"its Workload is deleted so that it holds no quota, and made again in {delay} s"
    ), said
    wait("no Workload while it waits: no quota held", lambda: workloads(sb, q.namespace) == [])
    assert group_states(sb, q.namespace) == {"0": Counter(gated=2)}

    sb.apply([lws("narrow", q.namespace, _opted_in(q), replicas=1, size=2, gpus_per_pod=1)])
    try:
        wait(
            "the narrow group Running whole, the wide one still gated",
            lambda: (
                settled(sb, q.namespace, running=1, gated=0, size=2, lws_name="narrow")
                and group_states(sb, q.namespace, "wide") == {"0": Counter(gated=2)}
            ),
        )
    finally:
        _show(sb, q.namespace)
    # After its delay its Workload is made again; now it waits for the quota narrow holds.
    remade = wait(
        "the wide group's Workload made again, queued",
        lambda: [w for w in workloads(sb, q.namespace) if _lws_of(w) == "wide"],
    )
    assert not is_true(remade[0], "QuotaReserved")

    # Nodes that fit it join the flavor, and the narrow group leaves: at its next retry the
    # wide group is admitted and runs whole; its record forgets the retries.
    sb.kubectl("delete", "leaderworkerset", "narrow", "-n", q.namespace, "--wait=false")
    sb.create_nodes([fake_node(f"kq-{q.flavor}-big-{i}", gpus=2, labels=q.labels) for i in range(2)])
    try:
        wait(
            "the wide group Running whole on the new nodes",
            lambda: settled(sb, q.namespace, running=1, gated=0, size=2, lws_name="wide"),
            timeout=150,
        )
    finally:
        _show(sb, q.namespace)
    wide = next(r for r in records(sb, q.namespace) if r["spec"]["leaderWorkerSet"] == "wide")
    assert is_true(wide, "Admitted")
    assert "retries" not in wide["status"] and "retryAt" not in wide["status"], wide["status"]


def test_admitted_pods_get_the_flavors_tolerations(kueue_sandbox: Sandbox) -> None:
    """The flavor's nodes are tainted; its toleration is added to the pods when the gate is lifted."""
    sb = kueue_sandbox
    tag = new_tag()
    taint = {"key": "example.com/reserved", "value": tag, "effect": "NoSchedule"}
    q = make_queue(sb, gpus=2, nodes=2, gpus_per_node=1, managed=False, taint=taint, tag=tag)
    sb.apply([lws("tol", q.namespace, _opted_in(q), replicas=1, size=2, gpus_per_pod=1)])
    try:
        wait(
            "the group Running on the tainted nodes",
            lambda: settled(sb, q.namespace, running=1, gated=0, size=2),
        )
    finally:
        _show(sb, q.namespace)
    for pod in pods(sb, q.namespace):
        assert {**taint, "operator": "Equal"} in pod["spec"]["tolerations"]
        assert get(sb, "node", pod["spec"]["nodeName"])["spec"]["taints"][0]["key"] == taint["key"]


def test_rolling_update_to_bigger_pods_gets_a_new_workload_within_quota(kueue_sandbox: Sandbox) -> None:
    """Two groups of 2 x 1 GPU run on a ClusterQueue of 6 GPUs; the LWS is changed to 2 x 2 GPUs.

    Each replaced group's old Workload goes and a new one, for 4 GPUs, is made: Kueue admits
    one (4 of 6) and the other waits whole. At no moment do running pods hold more GPUs than
    the quota, and no new pod runs on an old Workload.
    """
    sb = kueue_sandbox
    q = make_queue(sb, gpus=6, nodes=4, gpus_per_node=2, managed=False)
    sb.apply([lws("grow", q.namespace, _opted_in(q), replicas=2, size=2, gpus_per_pod=1)])
    wait("2 whole groups Running", lambda: settled(sb, q.namespace, running=2, gated=0, size=2))
    old = {w["metadata"]["uid"] for w in workloads(sb, q.namespace)}
    peak = 0

    def running_gpus() -> int:
        total = 0
        for pod in pods(sb, q.namespace):
            if pod.get("status", {}).get("phase") == "Running" and pod["spec"].get("nodeName"):
                total += sum(int(c["resources"]["limits"].get(GPU, "0")) for c in pod["spec"]["containers"])
        return total

    def one_running_one_waiting() -> dict[str, Counter[str]] | None:
        nonlocal peak
        peak = max(peak, running_gpus())
        return settled(sb, q.namespace, running=1, gated=1, size=2)

    sb.apply([lws("grow", q.namespace, _opted_in(q), replicas=2, size=2, gpus_per_pod=2)])
    try:
        wait("1 group Running at 2 GPUs per pod, 1 gated whole", one_running_one_waiting, timeout=120)

        def new_workloads() -> list[dict[str, Any]] | None:
            wls = workloads(sb, q.namespace)
            fresh = [w for w in wls if w["metadata"]["uid"] not in old]
            return wls if len(wls) == 2 and len(fresh) == 2 else None

        wls = wait("both groups on new Workloads", new_workloads)
    finally:
        _show(sb, q.namespace)
    assert peak <= 6, f"running pods held {peak} GPUs on a quota of 6"
    assert running_gpus() == 4
    for wl in wls:
        for ps in wl["spec"]["podSets"]:
            [ctr] = ps["template"]["spec"]["containers"]
            assert ctr["resources"]["requests"][GPU] == "2"
    assert sorted(is_true(w, "Admitted") for w in wls) == [False, True]
    waiting = next(r for r in records(sb, q.namespace) if not is_true(r, "Admitted"))
    print(condition(waiting, "Admitted"))

    # One group fewer: the waiting one (if it was not the one kept) runs on the quota freed.
    sb.kubectl("scale", "leaderworkerset", "grow", "-n", q.namespace, "--replicas=1")
    wait("1 whole group Running", lambda: settled(sb, q.namespace, running=1, gated=0, size=2))
    assert running_gpus() == 4


def test_a_pod_its_lws_did_not_make_is_never_let_through_on_the_groups_workload(
    kueue_sandbox: Sandbox,
    kueue_attack_watch: Watch,
) -> None:
    """A bare pod that claims admitted group 0 by its labels (and asks 2 GPUs) stays gated
    while Kueue has admitted the group's Workload; the record and a Warning Event say so,
    and the group keeps running."""
    sb = kueue_sandbox
    q = make_queue(sb, gpus=4, nodes=4, gpus_per_node=1, managed=False)
    kueue_attack_watch.pool(q.labels, 4)
    sb.apply([lws("vllm", q.namespace, _opted_in(q), replicas=1, size=2, gpus_per_pod=1)])
    wait("group 0 Running", lambda: settled(sb, q.namespace, running=1, gated=0, size=2))
    forged = {
        "apiVersion": "v1",
        "kind": "Pod",
        # The LWS pod webhook wants the size annotation on any pod with the LWS labels, and a
        # worker's ordinal in its name: named as a worker of group 0 would be.
        "metadata": {
            "name": "vllm-0-7",
            "namespace": q.namespace,
            "labels": {
                **_opted_in(q),
                "leaderworkerset.sigs.k8s.io/name": "vllm",
                "leaderworkerset.sigs.k8s.io/group-index": "0",
                "leaderworkerset.sigs.k8s.io/worker-index": "7",
            },
            "annotations": {"leaderworkerset.sigs.k8s.io/size": "2"},
        },
        "spec": {"containers": [container("c", 2)]},
    }
    sb.apply([forged])
    try:
        said = wait(
            "the record names the forged pod",
            lambda: (lambda c: c if "vllm-0-7" in c.get("message", "") else None)(
                condition(records(sb, q.namespace)[0], "Admitted")
            ),
        )
    finally:
        _show(sb, q.namespace)
    assert (said["status"], said["reason"]) == ("True", "NotMadeByLeaderWorkerSet"), said
    assert "pod vllm-0-7 was not made by LeaderWorkerSet vllm" in said["message"], said
    events = items(sb, "events", "-n", q.namespace, "--field-selector", "reason=NotMadeByLeaderWorkerSet")
    assert events and events[0]["type"] == "Warning", events
    time.sleep(5)  # a few passes more: still gated, and the group still whole
    pod = get(sb, "pod", "vllm-0-7", "-n", q.namespace)
    assert SCHEDULING_GATE in {g["name"] for g in pod["spec"].get("schedulingGates", [])}, pod["spec"]
    assert group_states(sb, q.namespace)["0"] == Counter(running=2, gated=1)
    attack_table.add(
        "a bare pod claiming admitted group 0 (kueue backend)", "contained", f"stays gated: {said['message']}"
    )


def test_why_names_the_cluster_queue_its_holders_and_kueues_words(kueue_sandbox: Sandbox) -> None:
    """``kubectl lws-gatekeeper why`` with the kueue backend: the pool is the ClusterQueue."""
    sb = kueue_sandbox
    q = make_queue(sb, gpus=4, nodes=4, gpus_per_node=1, managed=False)
    sb.apply([lws("vllm", q.namespace, _opted_in(q), replicas=3, size=2, gpus_per_pod=1)])
    wait("2 whole groups Running, 1 gated", lambda: settled(sb, q.namespace, running=2, gated=1, size=2))

    def answer() -> dict[str, Any] | None:
        out = run_why(sb.kubeconfig, sb.bin_dir, "lws/vllm", "-n", q.namespace, "-o", "json")
        assert out.returncode != 2, out.stderr  # read (0: every group admitted, 1: one waits)
        got: dict[str, Any] = json.loads(out.stdout)
        view = got["pool_view"] or {}
        # Kueue writes the ClusterQueue's usage after it admits, so the usage may lag the Workloads.
        used = (view.get("used") or {}).get("nvidia.com/gpu")
        held = len(view.get("admitted", [])) == 2 and len(view.get("waiting", [])) == 1
        return got if held and used == "4" else None

    got = wait("the ClusterQueue holds 2 groups, uses 4 GPUs and 1 group waits", answer)
    assert [(g["group"], g["state"]) for g in got["groups"]] == [
        (0, "admitted"),
        (1, "admitted"),
        (2, "waiting"),
    ]
    view = got["pool_view"]
    assert (view["kind"], view["name"], view["quota"]["nvidia.com/gpu"], view["used"]["nvidia.com/gpu"]) == (
        "ClusterQueue",
        q.cluster_queue,
        "4",
        "4",
    ), view
    assert got["groups"][2]["reason"] != "" and got["groups"][2]["message"], got["groups"][2]
    assert "2 nvidia.com/gpu must be freed" in got["next_group"], got["next_group"]
