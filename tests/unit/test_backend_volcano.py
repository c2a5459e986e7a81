"""The ``volcano`` backend's decision: one PodGroup per group, offered one at a time per Queue,
gates lifted for a whole group once Volcano put its PodGroup Inqueue and it fits the nodes.

Table tests on plain dicts; the real Volcano is in ``tests/e2e/test_volcano_backend.py``.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from core_builders import gpu_nodes, lws, lws_pod, lws_statefulsets, record

from gatekeeper.core.backends.volcano import (
    VolcanoSnapshot,
    decide_volcano,
    new_pod_group,
    plan_writes,
    pod_group_name,
    volcano_pod_patch,
    volcano_state,
)
from gatekeeper.core.backends.volcano.keys import POD_GROUP_PLURAL, VOLCANO_API_VERSION
from gatekeeper.core.backends.volcano.podgroup import MAX_MESSAGE, min_member, min_resources
from gatekeeper.core.kube.keys import (
    GROUP_INDEX_LABEL,
    HOLD_FINALIZER,
    LWS_NAME_LABEL,
    LWS_UID_ANNOTATION,
    POOL_LABEL,
)
from gatekeeper.core.kube.objects import index_by_key
from gatekeeper.core.model.claims import read_claim_book
from gatekeeper.core.model.groups import DemandMemo, GroupState, lws_groups, pods_by_group
from gatekeeper.core.writes.plan import Memory, walk

UID = "7a0c2a77-0000-4000-8000-000000000001"
QUEUE = "q-gpu"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = "2026-01-01T00:00:09Z"
QUOTA = "queue resource quota insufficient"
"""What Volcano's proportion plugin says (an Event) of a PodGroup its Queue has no room for."""
GANG = "2/2 tasks in gang unschedulable"


GPU = "nvidia.com/gpu"


def vllm(replicas: int = 3, size: int = 2, leader_ready: bool = False) -> dict[str, Any]:
    obj = (
        lws("vllm")
        .uid(UID)
        .pool(QUEUE)
        .replicas(replicas)
        .size(size)
        .leader(gpu_limit=1)
        .worker(gpu_limit=1)
        .obj()
    )
    if leader_ready:
        obj["spec"]["startupPolicy"] = "LeaderReady"
    return obj


def rec(lws_obj: dict[str, Any], index: int, **kwargs: Any) -> dict[str, Any]:
    obj = record(lws_obj, index, **kwargs)
    obj["metadata"]["uid"] = f"rec-uid-{index}"
    return obj


def group_pods(index: int, size: int = 2, *, gated: bool = True, bound: bool = False) -> list[dict[str, Any]]:
    return [
        lws_pod(
            "vllm", index, w, pool=QUEUE, gated=gated, node_name=f"n{index * size + w}" if bound else None
        )
        for w in range(size)
    ]


def pg(lws_obj: dict[str, Any], index: int, phase: str | None, **status: Any) -> dict[str, Any]:
    """The PodGroup of group ``index`` as the backend makes it, with Volcano's ``status``."""
    state = _state(lws_obj, index)
    obj = new_pod_group(state, lws_obj, f"rec-uid-{index}")
    if phase is not None:
        obj["status"] = {"phase": phase, **status}
    return obj


def _state(lws_obj: dict[str, Any], index: int) -> GroupState:
    wide = copy.deepcopy(lws_obj)
    wide["spec"]["replicas"] = index + 1  # a group scaled away had its PodGroup made as this one
    groups = lws_groups("default", "vllm", wide, pods_by_group([]), {}, lambda *_: set(), DemandMemo())
    return groups[index].state


def event(
    name: str, message: str, *, warning: bool = False, at: str = "2026-01-01T00:00:01Z"
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "default"},
        "involvedObject": {"kind": "PodGroup", "namespace": "default", "name": name},
        "type": "Warning" if warning else "Normal",
        "reason": "Unschedulable",
        "message": message,
        "lastTimestamp": at,
    }


Objs = list[dict[str, Any]]


def snap(
    lws_obj: dict[str, Any],
    records: Objs,
    pgs: Objs,
    pods: Objs,
    *,
    nodes: int = 8,
    events: Objs | None = None,
) -> VolcanoSnapshot:
    return VolcanoSnapshot(
        lwss=[lws_obj],
        pods=pods,
        records=records,
        pod_groups=pgs,
        events=events or [],
        nodes=gpu_nodes(nodes),
        statefulsets=lws_statefulsets([lws_obj], list(pods)),
    )


def test_a_podgroup_has_the_whole_groups_demand_the_lws_size_and_its_record_for_owner() -> None:
    obj = pg(vllm(size=4), 1, None)
    assert obj["apiVersion"] == VOLCANO_API_VERSION and obj["kind"] == "PodGroup"
    assert obj["metadata"]["name"] == pod_group_name("vllm", 1) == "vllm-1-gk"
    assert obj["spec"] == {
        "queue": QUEUE,
        "minMember": 4,
        "minResources": {"nvidia.com/gpu": "4", "pods": "4"},
    }
    assert obj["metadata"]["labels"] == {LWS_NAME_LABEL: "vllm", GROUP_INDEX_LABEL: "1", POOL_LABEL: QUEUE}
    assert obj["metadata"]["annotations"] == {LWS_UID_ANNOTATION: UID}
    (owner,) = obj["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("GroupAdmission", "rec-uid-1")


def test_under_leader_ready_volcano_places_the_leader_alone_but_reserves_the_whole_group() -> None:
    obj = pg(vllm(size=4, leader_ready=True), 0, None)
    assert obj["spec"]["minMember"] == 1 == min_member(vllm(leader_ready=True))
    assert obj["spec"]["minResources"] == {"nvidia.com/gpu": "4", "pods": "4"}


def test_a_long_lws_name_still_gives_a_valid_podgroup_name() -> None:
    name = pod_group_name("x" * 300, 12)
    assert len(name) == 253 and name.endswith("-12-gk")


def test_new_groups_get_records_first() -> None:
    acts = decide_volcano(snap(vllm(), [], [], group_pods(0) + group_pods(1)))
    assert [g.key.index for g in acts.create_records] == [0, 1, 2]
    assert not acts.create_pod_groups and not acts.ungate


def test_devices_asked_through_dra_claims_are_in_the_pod_groups_min_resources() -> None:
    """Volcano's minResources carries the devices the claims ask, counted by their DeviceClass;
    with no template to count from, the group is refused first."""
    obj = vllm(replicas=1)
    worker = obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    worker["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    worker["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    acts = decide_volcano(snap(obj, [rec(obj, 0)], [], group_pods(0)))
    assert not acts.create_pod_groups and not acts.ungate
    [st] = acts.statuses
    assert st.reason == "InvalidSpec" and "ResourceClaimTemplate one-gpu is not in namespace" in st.message
    template = {
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}},
    }
    book = read_claim_book([{"metadata": {"name": "gpu"}, "spec": {"extendedResourceName": GPU}}], [template])
    acts = decide_volcano(replace(snap(obj, [rec(obj, 0)], [], group_pods(0)), claim_book=book))
    [(group, _)] = acts.create_pod_groups
    assert min_resources(group.demand)[GPU] == "2"  # the leader's limit, and the worker's claim


def test_only_the_first_waiting_group_of_a_queue_is_offered_to_volcano() -> None:
    obj = vllm()
    recs = [rec(obj, i) for i in range(3)]
    acts = decide_volcano(snap(obj, recs, [], group_pods(0) + group_pods(1)))
    assert [(g.key.index, uid) for g, uid in acts.create_pod_groups] == [(0, "rec-uid-0")]
    said = {st.group.key.index: st.message for st in acts.statuses}
    assert "one PodGroup at a time" in said[1] and "one PodGroup at a time" in said[2]
    writes = [
        w
        for w in walk(plan_writes(acts, snap(obj, recs, [], []), Memory(), NOW))
        if w.resource == POD_GROUP_PLURAL
    ]
    assert [w.name for w in writes] == ["vllm-0-gk"]


@pytest.mark.parametrize(
    ("status", "events", "reason", "words"),
    [
        ({}, [], "WaitingForVolcano", "(PodGroup vllm-0-gk, Pending)"),
        ({}, [event("vllm-0-gk", QUOTA)], "Unschedulable", QUOTA),
        (
            {"conditions": [{"type": "Unschedulable", "status": "True", "reason": "Gang", "message": GANG}]},
            [event("vllm-0-gk", QUOTA)],
            "Unschedulable",
            f"{QUOTA}; {GANG}",
        ),
        ({}, [event("vllm-0-gk", "old"), event("vllm-0-gk", "newer", at=LATER)], "Unschedulable", "newer"),
        # As Volcano writes them: the gang plugin's Warning after the enqueue action's words.
        ({}, [event("vllm-0-gk", GANG, warning=True, at=LATER), event("vllm-0-gk", QUOTA)], "Unschedulable", QUOTA),  # noqa: E501
        (
            {"conditions": [{"type": "Unschedulable", "status": "True", "reason": "Gang", "message": GANG}]},
            [],
            "Gang",
            GANG,
        ),
        ({}, [event("other-0-gk", "not ours")], "WaitingForVolcano", "(PodGroup vllm-0-gk, Pending)"),
    ],
)  # fmt: skip
def test_a_pending_podgroup_keeps_every_gate_and_the_record_says_why_in_volcanos_words(
    status: dict[str, Any], events: list[dict[str, Any]], reason: str, words: str
) -> None:
    obj = vllm()
    recs = [rec(obj, i) for i in range(3)]
    acts = decide_volcano(snap(obj, recs, [pg(obj, 0, "Pending", **status)], group_pods(0), events=events))
    assert not acts.ungate and not acts.create_pod_groups, "the Queue is busy with group 0"
    st = next(s for s in acts.statuses if s.group.key.index == 0)
    assert (st.admitted, st.reason) == (False, reason)
    assert words in st.message and f"Volcano Queue {QUEUE}" in st.message


def test_inqueue_and_the_whole_group_fits_lifts_every_gate_of_the_group_together() -> None:
    obj = vllm()
    recs = [rec(obj, i) for i in range(3)]
    acts = decide_volcano(snap(obj, recs, [pg(obj, 0, "Inqueue")], group_pods(0)))
    assert sorted(u.pod for u in acts.ungate) == ["vllm-0", "vllm-0-1"]
    st = next(s for s in acts.statuses if s.group.key.index == 0)
    assert st.admitted and st.reason == "Inqueue"
    assert not acts.create_pod_groups, "group 0's pods were gated at the pass's start: next pass"
    plan = plan_writes(acts, snap(obj, recs, [pg(obj, 0, "Inqueue")], group_pods(0)), Memory(), NOW)
    assert sorted(w.name for w in walk(plan) if w.tag == "ungate") == ["vllm-0", "vllm-0-1"]


def test_inqueue_but_the_nodes_are_full_keeps_the_gates_and_says_so() -> None:
    obj = vllm()
    recs = [rec(obj, i) for i in range(3)]
    acts = decide_volcano(snap(obj, recs, [pg(obj, 0, "Inqueue")], group_pods(0), nodes=1))
    assert not acts.ungate
    st = next(s for s in acts.statuses if s.group.key.index == 0)
    assert (st.admitted, st.reason) == (False, "NoNodeFitsNow")
    assert "does not fit the nodes now" in st.message


def test_once_a_groups_gates_are_lifted_the_next_group_is_offered() -> None:
    obj = vllm()
    recs = [rec(obj, 0, admitted=True), rec(obj, 1), rec(obj, 2)]
    pods = group_pods(0, gated=False, bound=True) + group_pods(1)
    acts = decide_volcano(snap(obj, recs, [pg(obj, 0, "Running")], pods))
    assert [g.key.index for g, _ in acts.create_pod_groups] == [1]


def test_leader_ready_leader_goes_only_when_the_whole_group_fits_and_workers_follow() -> None:
    obj = vllm(size=4, leader_ready=True)
    recs = [rec(obj, i) for i in range(3)]
    leader = group_pods(0, size=1)
    # Inqueue, but only 3 one-GPU nodes: the 4 pods of the group do not fit, the leader waits.
    acts = decide_volcano(snap(obj, recs, [pg(obj, 0, "Inqueue")], leader, nodes=3))
    assert not acts.ungate
    acts = decide_volcano(snap(obj, recs, [pg(obj, 0, "Inqueue")], leader, nodes=4))
    assert [u.pod for u in acts.ungate] == ["vllm-0"]
    # The leader runs; its workers come gated and go through at once (their room is reserved).
    recs[0] = rec(obj, 0, admitted=True)
    running = [lws_pod("vllm", 0, 0, pool=QUEUE, gated=False, node_name="n0", phase="Running")]
    workers = [lws_pod("vllm", 0, w, pool=QUEUE) for w in (1, 2, 3)]
    acts = decide_volcano(snap(obj, recs, [pg(obj, 0, "Running")], running + workers, nodes=1))
    assert sorted(u.pod for u in acts.ungate) == ["vllm-0-1", "vllm-0-2", "vllm-0-3"]


def test_a_group_scaled_away_keeps_its_record_until_its_last_pod_is_gone() -> None:
    obj = vllm(replicas=1)
    recs = [rec(obj, 0, admitted=True), rec(obj, 1, admitted=True, finalizers=[HOLD_FINALIZER], version="7")]
    running = group_pods(0, gated=False, bound=True)
    leaving = [lws_pod("vllm", 1, 0, pool=QUEUE, gated=False, node_name="n5", phase="Running", deleting=True)]
    acts = decide_volcano(snap(obj, recs, [pg(obj, 0, "Running"), pg(obj, 1, "Running")], running + leaving))
    assert not acts.release
    acts = decide_volcano(snap(obj, recs, [pg(obj, 0, "Running"), pg(obj, 1, "Running")], running))
    assert acts.release == (("default", recs[1]["metadata"]["name"]),)
    plan = plan_writes(acts, snap(obj, recs, [], running), Memory(), NOW)
    assert [(str(w.op), w.name) for w in walk(plan) if w.tag in ("unhold", "release")] == [
        ("json-patch", recs[1]["metadata"]["name"]),
        ("delete", recs[1]["metadata"]["name"]),
    ], "its finalizer removed, then deleted"


def test_volcanos_words_are_bounded_and_a_malformed_status_reads_as_not_evaluated() -> None:
    long = {
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "Unschedulable", "status": "True", "message": "x" * 5000}],
        }
    }
    assert len(volcano_state(long).message) == MAX_MESSAGE
    for bad in ({"status": "nope"}, {"status": {"phase": 7, "conditions": "x"}}, {}):
        state = volcano_state(bad)
        assert (state.admitted, state.phase) == (False, "Pending")


def test_one_unreadable_lws_never_stops_another() -> None:
    good = vllm()
    bad = lws("broken").uid("b" * 36).pool(QUEUE).obj()
    bad["spec"]["replicas"] = "many"
    acts = decide_volcano(
        VolcanoSnapshot(lwss=[bad, good], pods=[], records=[], pod_groups=[], nodes=gpu_nodes(4))
    )
    assert [g.key.name for g in acts.create_records] == ["broken", "vllm", "vllm", "vllm"] or [
        g.key.name for g in acts.create_records if g.key.name == "vllm"
    ] == ["vllm"] * 3
    assert index_by_key([good])


@pytest.mark.parametrize(
    ("pod", "group"),
    [
        (lws_pod("vllm", 3, 1, pool=QUEUE), "vllm-3-gk"),
        # A leader before LWS's own webhook gave it its group-index label: read from its name.
        ({"metadata": {"name": "vllm-7", "labels": {LWS_NAME_LABEL: "vllm"}}, "spec": {}}, "vllm-7-gk"),
    ],
)  # fmt: skip
def test_the_webhook_hands_an_opted_in_lws_pod_to_volcano_with_its_podgroup(
    pod: dict[str, Any], group: str
) -> None:
    ops = volcano_pod_patch(pod)
    assert ops[0] == {"op": "add", "path": "/spec/schedulerName", "value": "volcano"}
    assert ops[1]["value"] in (group, {"scheduling.k8s.io/group-name": group})


@pytest.mark.parametrize(
    "pod",
    [
        {"metadata": {"name": "web-1", "labels": {POOL_LABEL: QUEUE}}, "spec": {}},  # no LWS's
        {"metadata": {"name": "vllm-x", "labels": {LWS_NAME_LABEL: "vllm"}}, "spec": {}},  # no index
        {
            "metadata": {"name": "vllm-9999999999", "labels": {LWS_NAME_LABEL: "vllm"}},
            "spec": {},
        },  # unbounded
        {"metadata": {"name": "v-1", "labels": {LWS_NAME_LABEL: "v", GROUP_INDEX_LABEL: "-1"}}, "spec": {}},
    ],
)
def test_a_pod_that_is_no_lws_groups_is_not_handed_to_volcano(pod: dict[str, Any]) -> None:
    assert volcano_pod_patch(pod) == []


def test_the_highest_priority_waiting_group_of_a_queue_is_offered_first_then_the_oldest_lws() -> None:
    low = lws("batch").uid("b" * 36).pool(QUEUE).size(1).leader(gpu_limit=1).age(10).obj()
    high = (
        lws("chat")
        .uid("c" * 36)
        .pool(QUEUE)
        .size(1)
        .leader(gpu_limit=1)
        .priority_class("urgent")
        .age(10)
        .obj()
    )
    old = lws("aaa").uid("a" * 36).pool(QUEUE).size(1).leader(gpu_limit=1).age(50).obj()
    lwss = [low, high, old]
    recs = [rec(o, 0) for o in lwss]

    def offered(priorities: dict[str, int]) -> list[str]:
        snap = VolcanoSnapshot(
            lwss=lwss, pods=[], records=recs, pod_groups=[], nodes=gpu_nodes(4), priorities=priorities
        )
        return [g.key.name for g, _ in decide_volcano(snap).create_pod_groups]

    assert offered({"urgent": 1000}) == ["chat"]
    assert offered({}) == ["batch"], "no class known: the oldest LWS first"


def _low_and_high() -> tuple[dict[str, Any], dict[str, Any]]:
    low = (
        lws("batch")
        .uid("b" * 36)
        .pool(QUEUE)
        .size(1)
        .leader(gpu_limit=1)
        .priority_class("bulk")
        .age(50)
        .obj()
    )
    high = (
        lws("chat")
        .uid("c" * 36)
        .pool(QUEUE)
        .size(1)
        .leader(gpu_limit=1)
        .priority_class("urgent")
        .age(10)
        .obj()
    )
    return low, high  # fmt: skip


def _offer(lws_obj: dict[str, Any], phase: str) -> dict[str, Any]:
    obj = new_pod_group(_state_of(lws_obj), lws_obj, "rec-uid-0")
    obj["metadata"]["uid"] = f"pg-uid-{lws_obj['metadata']['name']}"
    obj["status"] = {"phase": phase}
    return obj


def _state_of(lws_obj: dict[str, Any]) -> GroupState:
    name = lws_obj["metadata"]["name"]
    return lws_groups("default", name, lws_obj, pods_by_group([]), {}, lambda *_: set(), DemandMemo())[
        0
    ].state


@pytest.mark.parametrize(
    ("low_phase", "low_started", "priorities", "withdrawn"),
    [
        ("Pending", False, {"bulk": 10, "urgent": 1000}, True),
        (None, False, {"bulk": 10, "urgent": 1000}, True),  # not evaluated by Volcano yet
        ("Pending", False, {"bulk": 1000, "urgent": 1000}, False),  # same priority: no churn
        ("Pending", False, {"bulk": 1000, "urgent": 10}, False),  # the waiting one is lower
        ("Inqueue", False, {"bulk": 10, "urgent": 1000}, False),  # Volcano let it in: it goes
        ("Pending", True, {"bulk": 10, "urgent": 1000}, False),  # started: its room is its own
    ],
)
def test_an_offer_volcano_has_not_let_in_is_withdrawn_for_a_higher_priority_group_of_the_queue(
    low_phase: str | None, low_started: bool, priorities: dict[str, int], withdrawn: bool
) -> None:
    low, high = _low_and_high()
    offer = _offer(low, low_phase or "Pending")
    if low_phase is None:
        del offer["status"]
    recs = [rec(low, 0, admitted=low_started), rec(high, 0)]
    low_pod = lws_pod(
        "batch", 0, 0, pool=QUEUE, gated=not low_started, node_name="n0" if low_started else None
    )
    pods = [low_pod, lws_pod("chat", 0, 0, pool=QUEUE)]
    snapshot = VolcanoSnapshot(
        lwss=[low, high], pods=pods, records=recs, pod_groups=[offer], nodes=gpu_nodes(4),
        priorities=priorities, statefulsets=lws_statefulsets([low, high], pods),
    )  # fmt: skip
    acts = decide_volcano(snapshot)
    assert not acts.create_pod_groups, "the Queue holds the offer this pass: the next one offers"
    if not withdrawn:
        assert not acts.withdraw_pod_groups
        return
    assert acts.withdraw_pod_groups == (("default", "batch-0-gk", "pg-uid-batch"),)
    said = next(st for st in acts.statuses if st.group.key.name == "batch")
    assert not said.admitted and not acts.ungate
    assert said.message == (
        f"group 0 waits in Volcano Queue {QUEUE}: its PodGroup batch-0-gk is withdrawn for group 0 "
        "of LWS chat, of a higher priority"
    )
    deletes = [w for w in walk(plan_writes(acts, snapshot, Memory(), NOW)) if w.op.value == "delete"]
    assert [(w.resource, w.name, w.uid) for w in deletes] == [
        (POD_GROUP_PLURAL, "batch-0-gk", "pg-uid-batch")
    ]
    # The next pass, the offer gone: the higher-priority group is offered first.
    after = VolcanoSnapshot(
        lwss=[low, high], pods=pods, records=recs, pod_groups=[], nodes=gpu_nodes(4),
        priorities=priorities, statefulsets=lws_statefulsets([low, high], pods),
    )  # fmt: skip
    assert [g.key.name for g, _ in decide_volcano(after).create_pod_groups] == ["chat"]


@pytest.mark.parametrize(
    ("extra", "reason", "words"),
    [
        ("forged", "NotMadeByLeaderWorkerSet", "pod forged was not made by LeaderWorkerSet vllm"),
        ("beyond", "BeyondGroupSize", "pod vllm-0-2 (worker 2) is beyond the group's size 2"),
        ("asks more", "NotAsAdmitted", "pod vllm-0-1 asks 2 nvidia.com/gpu, more than its role (worker)"),
    ],
)
def test_only_the_pods_the_lws_said_are_let_through_on_an_inqueue_podgroup(
    extra: str, reason: str, words: str
) -> None:
    """The same membership as the other backends: the owner chain by UID, the LWS's size,
    what each role was admitted with."""
    obj = vllm()
    recs = [rec(obj, i) for i in range(3)]
    pods = group_pods(0)
    if extra == "forged":
        forged = lws_pod("vllm", 0, 1, pool=QUEUE, gpu_limit=4)
        forged["metadata"].update(name="forged", uid="forged-uid", ownerReferences=[])
        pods.append(forged)
    elif extra == "beyond":
        pods.append(lws_pod("vllm", 0, 2, pool=QUEUE))
    else:
        pods[1] = lws_pod("vllm", 0, 1, pool=QUEUE, gpu_limit=2)
    acts = decide_volcano(snap(obj, recs, [pg(obj, 0, "Inqueue")], pods))
    let_through = sorted(u.pod for u in acts.ungate)
    assert let_through == (["vllm-0"] if extra == "asks more" else ["vllm-0", "vllm-0-1"])
    st = next(s for s in acts.statuses if s.group.key.index == 0)
    assert (st.admitted, st.reason, st.warning) == (True, reason, True)
    assert words in st.message and st.message.startswith("group 0 admitted by Volcano Queue"), st.message


# ----- a group whose own pod stays not as admitted is given back ---------------------------


def _departed(
    made_ago: float, *, given_back: bool = False, leader: bool = True, podgroup: bool = True
) -> Any:
    """Group 0 Inqueue, its leader let through and bound; its worker made ``made_ago`` seconds
    before the pass from a worker StatefulSet edited to ask 2 GPUs. ``given_back``: its record
    says so (retry at NOW + 60 s)."""
    from dataclasses import replace
    from datetime import timedelta

    obj = vllm(replicas=1)
    pods = [lws_pod("vllm", 0, 0, pool=QUEUE, gated=False, node_name="n0")] if leader else []
    worker = lws_pod("vllm", 0, 1, pool=QUEUE, gpu_limit=2)
    worker["metadata"]["creationTimestamp"] = (NOW - timedelta(seconds=made_ago)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    pods.append(worker)
    r = rec(obj, 0, admitted=not given_back)
    if given_back:
        r["status"]["conditions"][0].update(reason="NotAsAdmitted", message="group 0 was given back")
        r["status"].update(retryAt="2026-01-01T00:01:00Z", retries=1)
    group = pg(obj, 0, "Inqueue")
    group["metadata"]["uid"] = "pg-uid-0"
    return replace(snap(obj, [r], [group] if podgroup else [], pods), now=NOW)


def test_within_the_grace_the_group_keeps_its_podgroup_and_the_pass_looks_again() -> None:
    from datetime import timedelta

    acts = decide_volcano(_departed(made_ago=2))
    [st] = acts.statuses
    assert (st.admitted, st.reason) == (True, "NotAsAdmitted")
    assert acts.stop == () and acts.withdraw_pod_groups == ()
    assert acts.look_again == NOW + timedelta(seconds=3)


def test_past_the_grace_the_group_is_given_back_its_pods_stopped_after_its_record() -> None:
    snapshot = _departed(made_ago=6)
    acts = decide_volcano(snapshot)
    [st] = acts.statuses
    assert (st.admitted, st.reason, st.warning, st.retries, st.retry_at) == (
        False, "NotAsAdmitted", True, 1, "2026-01-01T00:01:00Z",
    )  # fmt: skip
    assert st.message.startswith(
        "group 0 was given back, retried in 60 s: pod vllm-0-1 asks 2 nvidia.com/gpu"
    )
    assert acts.stop == (("default", "vllm-0"),) and acts.ungate == ()
    assert acts.retire_pod_groups == (), "the Queue's room stays while its pods run"
    _, second, third = plan_writes(acts, snapshot, Memory(), NOW)
    [record] = [w for w in second if w.resource == "groupadmissions"]
    assert record.body["retries"] == 1 and record.body["conditions"][0]["reason"] == "NotAsAdmitted"
    assert [(w.op.value, w.name) for w in third] == [("delete", "vllm-0")]


@pytest.mark.parametrize(
    ("leader", "podgroup", "stop", "withdraw"),
    [(True, True, True, False), (False, True, False, True), (False, False, False, False)],
    ids=["its-leader-runs", "none-left-its-podgroup-goes", "podgroup-gone-waits-its-retry"],
)
def test_a_given_back_group_stops_its_pods_then_gives_its_podgroup_back(
    leader: bool, podgroup: bool, stop: bool, withdraw: bool
) -> None:
    acts = decide_volcano(_departed(made_ago=30, given_back=True, leader=leader, podgroup=podgroup))
    assert bool(acts.stop) is stop and bool(acts.retire_pod_groups) is withdraw
    assert acts.withdraw_pod_groups == ()
    assert acts.ungate == () and acts.create_pod_groups == ()
    [st] = acts.statuses
    assert (st.admitted, st.reason, st.message) == (False, "NotAsAdmitted", "group 0 was given back")


def test_a_given_back_group_is_offered_again_after_its_retry() -> None:
    from dataclasses import replace
    from datetime import timedelta

    snapshot = _departed(made_ago=90, given_back=True, leader=False, podgroup=False)
    acts = decide_volcano(replace(snapshot, now=NOW + timedelta(seconds=61)))
    assert [g.key.index for g, _ in acts.create_pod_groups] == [0]


def test_groups_past_the_namespaces_record_cap_get_no_record() -> None:
    capped = replace(snap(vllm(), [], [], []), max_records_per_namespace=2)
    acts = decide_volcano(capped)
    assert [g.key.index for g in acts.create_records] == [0, 1]
    assert [g.key.index for g in acts.over_cap] == [2]
