"""The ``kueue`` backend's decision: one Workload per group, gates follow Kueue's admission.

Table tests on plain dicts; the real Kueue is in ``tests/e2e/test_kueue_backend.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from core_builders import lws, lws_pod, lws_statefulsets, record

from gatekeeper.core.backends.kueue import (
    KueueActions,
    KueueSnapshot,
    clear_admission_status,
    decide_kueue,
    new_workload,
    plan_writes,
)
from gatekeeper.core.backends.kueue.workload import stale_spec
from gatekeeper.core.kube.keys import (
    DEMAND_HASH_ANNOTATION,
    GROUP_INDEX_LABEL,
    KUEUE_API_VERSION,
    LWS_NAME_LABEL,
    LWS_UID_ANNOTATION,
    POOL_LABEL,
    SCHEDULING_GATE,
    SPEC_HASH_ANNOTATION,
)
from gatekeeper.core.model.charge import charge_toleration
from gatekeeper.core.model.claims import read_claim_book
from gatekeeper.core.model.gating import Ungate, ungate_patch
from gatekeeper.core.model.record import record_name
from gatekeeper.core.writes.plan import MESSAGE_REFRESH_SECONDS, Memory, walk

UID = "1f0c2a77-0000-4000-8000-000000000001"
LQ = "lq-gpu"
FLAVOR = {
    "apiVersion": KUEUE_API_VERSION,
    "kind": "ResourceFlavor",
    "metadata": {"name": "h100"},
    "spec": {
        "nodeLabels": {"pool": "h100", "example.com/zone": "a"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}


GPU = "nvidia.com/gpu"


def vllm(replicas: int = 2, size: int = 2, **kwargs: Any) -> dict[str, Any]:
    b = lws("vllm").uid(UID).pool(LQ).replicas(replicas).size(size).leader(gpu_limit=1).worker(gpu_limit=1)
    for key, value in kwargs.items():
        getattr(b, key)(value)
    return b.obj()


def rec(lws_obj: dict[str, Any], index: int, **kwargs: Any) -> dict[str, Any]:
    """A record as the ``kueue`` backend writes it: its status names the group's Workload."""
    obj = record(lws_obj, index, **kwargs)
    obj["metadata"]["uid"] = f"rec-uid-{index}"
    if "status" in obj:
        obj["status"]["workload"] = obj["metadata"]["name"]
    return obj


def cond(kind: str, status: bool, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": "True" if status else "False", "reason": reason or kind,
            "message": message, "lastTransitionTime": "2025-01-01T00:00:00Z"}  # fmt: skip


def workload(
    lws_obj: dict[str, Any],
    index: int,
    *,
    conditions: list[dict[str, Any]] | None = None,
    flavors: dict[str, str] | None = None,
    checks: list[dict[str, Any]] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """Our Workload of group ``index``; ``flavors`` (pod set -> flavor) means Kueue assigned quota."""
    meta = lws_obj["metadata"]
    status: dict[str, Any] = {"conditions": conditions or []}
    if flavors is not None:
        status["admission"] = {
            "clusterQueue": "cq-gpu",
            "podSetAssignments": [
                {"name": ps, "flavors": {"nvidia.com/gpu": fl, "cpu": fl}} for ps, fl in flavors.items()
            ],
        }
    if checks is not None:
        status["admissionChecks"] = checks
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": record_name(meta["name"], meta["uid"], index),
            "namespace": "default",
            "resourceVersion": "7",
            "labels": {LWS_NAME_LABEL: meta["name"], GROUP_INDEX_LABEL: str(index), POOL_LABEL: LQ},
            "annotations": {LWS_UID_ANNOTATION: uid or meta["uid"]},
        },
        "spec": {"queueName": LQ},
        "status": status,
    }


ADMITTED = [cond("QuotaReserved", True), cond("Admitted", True)]
EVICTED = [
    cond("QuotaReserved", True),
    cond("Admitted", True),
    cond("Evicted", True, "Preempted", "Preempted to accommodate a workload (UID: x) due to prioritization"),
]


def decide(
    lwss: list[dict[str, Any]],
    pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
    records: list[dict[str, Any]] = (),  # type: ignore[assignment]
    workloads: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> KueueActions:
    made = lws_statefulsets(lwss, list(pods))  # the pods are the LWSs' own
    return decide_kueue(
        KueueSnapshot(lwss, list(pods), list(records), list(workloads), [FLAVOR], statefulsets=made)
    )


def names(items: Any) -> list[str]:
    return sorted(g.record if hasattr(g, "record") else g[0].record for g in items)


# ----- the Workload --------------------------------------------------------------------


def test_a_new_lws_gets_a_record_per_group_first() -> None:
    obj = vllm(replicas=2)
    acts = decide([obj], [lws_pod("vllm", 0, pool=LQ)])
    assert names(acts.create_records) == [record_name("vllm", UID, 0), record_name("vllm", UID, 1)]
    assert acts.create_workloads == () and acts.ungate == () and acts.stop == ()


def test_a_group_with_a_record_gets_its_workload_owned_by_the_record() -> None:
    obj = vllm(replicas=1)
    acts = decide([obj], records=[rec(obj, 0)])
    [(group, owner_uid)] = acts.create_workloads
    assert owner_uid == "rec-uid-0"
    [st] = acts.statuses
    assert (st.admitted, st.reason) == (False, "WaitingForKueue")
    wl = new_workload(group, obj, owner_uid)
    meta, spec = wl["metadata"], wl["spec"]
    assert meta["name"] == record_name("vllm", UID, 0)
    assert meta["labels"] == {LWS_NAME_LABEL: "vllm", GROUP_INDEX_LABEL: "0", POOL_LABEL: LQ}
    assert meta["annotations"][LWS_UID_ANNOTATION] == UID
    # No pods yet, so no template revision to note.
    assert set(meta["annotations"]) == {LWS_UID_ANNOTATION, SPEC_HASH_ANNOTATION, DEMAND_HASH_ANNOTATION}
    # Owned by the record, never by the LWS: Kueue's own LWS integration would adopt it.
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("GroupAdmission", "rec-uid-0", True)
    assert spec["queueName"] == LQ
    assert [(ps["name"], ps["count"]) for ps in spec["podSets"]] == [("leader", 1), ("worker", 1)]
    assert "priority" not in spec


@pytest.mark.parametrize(
    ("size", "leader", "expected"),
    [
        (1, True, [("leader", 1)]),
        (4, True, [("leader", 1), ("worker", 3)]),
        (3, False, [("leader", 1), ("worker", 2)]),
    ],
)
def test_pod_sets_count_workers_before_they_exist(size: int, leader: bool, expected: list[Any]) -> None:
    b = lws("big").uid(UID).pool(LQ).size(size).worker(gpu_limit=8)
    if leader:
        b.leader(cpu="2")
    obj = b.obj()
    acts = decide([obj], records=[rec(obj, 0)])
    wl = new_workload(acts.create_workloads[0][0], obj, "r")
    assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == expected
    leader_spec = wl["spec"]["podSets"][0]["template"]["spec"]
    want = obj["spec"]["leaderWorkerTemplate"]["leaderTemplate" if leader else "workerTemplate"]["spec"]
    assert leader_spec == want


def test_priority_class_is_carried_over_with_its_value() -> None:
    obj = (
        lws("p")
        .uid(UID)
        .pool(LQ)
        .size(2)
        .leader(gpu_limit=1)
        .worker(gpu_limit=1)
        .priority_class("high")
        .obj()
    )
    acts = decide([obj], records=[rec(obj, 0)])
    wl = new_workload(acts.create_workloads[0][0], obj, "r", {"high": 1000})
    assert wl["spec"]["priority"] == 1000
    assert wl["spec"]["priorityClassRef"] == {
        "group": "scheduling.k8s.io",
        "kind": "PriorityClass",
        "name": "high",
    }


def test_an_lws_kueue_cannot_read_gets_no_workload_and_says_why() -> None:
    obj = vllm(replicas=1)
    del obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    acts = decide([obj], records=[rec(obj, 0)])
    assert acts.create_workloads == ()
    [st] = acts.statuses
    assert (st.reason, st.warning) == ("InvalidSpec", True)
    assert "workerTemplate: missing" in st.message


def test_devices_asked_through_dra_claims_are_requests_kueue_counts_in_the_workload() -> None:
    """Kueue counts a Workload's pod-set requests, and no DRA claim unless its own alpha gate
    is on: the gatekeeper makes the claims' devices requests of the pod set (the claims
    dropped), so Kueue's quota counts what the gatekeeper counts; with no template to count
    from, the group is refused before any Workload."""
    obj = vllm(replicas=1)
    worker = obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    worker["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}]
    worker["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}
    acts = decide([obj], records=[rec(obj, 0)])
    assert acts.create_workloads == ()
    [st] = acts.statuses
    assert (st.reason, st.warning) == ("InvalidSpec", True)
    assert "ResourceClaimTemplate two-gpus is not in namespace default" in st.message
    gpu_class = {"metadata": {"name": "gpu"}, "spec": {"extendedResourceName": GPU}}
    template = {
        "metadata": {"name": "two-gpus", "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2}}]}
            }
        },
    }
    book = read_claim_book([gpu_class], [template])
    made = lws_statefulsets([obj], [])
    acts = decide_kueue(
        KueueSnapshot([obj], [], [rec(obj, 0)], [], [FLAVOR], statefulsets=made, claim_book=book)
    )
    [(group, _)] = acts.create_workloads
    wl = new_workload(group, obj, "uid", claim_book=book)
    leader, workers = wl["spec"]["podSets"]
    spec = workers["template"]["spec"]
    assert "resourceClaims" not in spec and "claims" not in spec["containers"][0]["resources"]
    assert spec["containers"][0]["resources"]["requests"] == {"cpu": "1", GPU: "2"}
    assert spec["containers"][0]["resources"]["limits"] == {GPU: "2"}
    assert leader["template"]["spec"]["containers"][0]["resources"]["limits"] == {GPU: 1}  # as written
    assert not stale_spec({**wl, "status": {}}, group, obj, {}, book)
    assert stale_spec({**wl, "status": {}}, group, obj, {}), "another count is another Workload"


# ----- admission, waiting, eviction ----------------------------------------------------


def test_an_admitted_workload_lifts_every_gate_with_the_flavor_labels() -> None:
    obj = vllm(replicas=1, size=3)
    pods = [lws_pod("vllm", 0, w, pool=LQ) for w in range(3)]
    wl = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    acts = decide([obj], pods, [rec(obj, 0, admitted=False)], [wl])
    assert sorted(u.pod for u in acts.ungate) == ["vllm-0", "vllm-0-1", "vllm-0-2"]
    assert {tuple(sorted(u.node_selector.items())) for u in acts.ungate} == {
        (("example.com/zone", "a"), ("pool", "h100"))
    }
    mark = charge_toleration(obj["metadata"]["uid"], 0)
    flavor = tuple(FLAVOR["spec"]["tolerations"])  # type: ignore[index]
    assert all(u.tolerations == (*flavor, mark) for u in acts.ungate)  # the flavor's, then the charge
    [st] = acts.statuses
    assert st.admitted and st.reason == "Admitted"
    assert "ClusterQueue cq-gpu, flavor h100" in st.message
    assert acts.stop == () and acts.clear_admission == ()


def test_workers_that_appear_later_go_through_at_once() -> None:
    obj = vllm(replicas=1, size=3)
    pods = [lws_pod("vllm", 0, 0, pool=LQ, gated=False, node_name="n1", phase="Running"),
            lws_pod("vllm", 0, 1, pool=LQ), lws_pod("vllm", 0, 2, pool=LQ)]  # fmt: skip
    wl = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    acts = decide([obj], pods, [rec(obj, 0, admitted=True)], [wl])
    assert sorted(u.pod for u in acts.ungate) == ["vllm-0-1", "vllm-0-2"]


def _forged_worker(gpus: int = 4) -> dict[str, Any]:
    """A pod that claims worker 1 of group 0 by its labels, made by a tenant (no owner)."""
    pod = lws_pod("vllm", 0, 1, pool=LQ, gpu_limit=gpus)
    pod["metadata"].update(name="forged", uid="forged-uid", ownerReferences=[])
    return pod


def test_a_forged_pod_of_an_admitted_group_stays_gated_and_the_record_and_an_event_say_so() -> None:
    obj = vllm(replicas=1, size=2)
    pods = [lws_pod("vllm", 0, w, pool=LQ, gated=False, node_name=f"n{w}", phase="Running") for w in (0, 1)]
    wl = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    made = lws_statefulsets([obj], pods)
    snap = KueueSnapshot([obj], [*pods, _forged_worker()], [rec(obj, 0, admitted=True)], [wl], [FLAVOR],
                         statefulsets=made)  # fmt: skip
    acts = decide_kueue(snap)
    assert acts.ungate == () and acts.stop == ()
    [st] = acts.statuses
    assert (st.admitted, st.reason, st.warning) == (True, "NotMadeByLeaderWorkerSet", True)
    assert st.message.endswith(
        "; pod forged was not made by LeaderWorkerSet vllm: it claims the group by its labels and stays gated"
    )
    assert st.message.startswith("group 0 admitted by Kueue: ClusterQueue cq-gpu, flavor h100")
    writes = list(walk(plan_writes(acts, snap, Memory(), datetime(2026, 12, 1, tzinfo=UTC))))
    [status] = [w for w in writes if w.resource == "groupadmissions"]
    cond_ = status.body["conditions"][0]
    assert (cond_["status"], cond_["reason"]) == ("True", "NotMadeByLeaderWorkerSet")
    assert status.tag == "status", "the group was admitted before: not counted as a new admission"
    events = [w.body for w in writes if w.op.name == "EVENT"]
    assert [(e.reason, e.warning) for e in events] == [("NotMadeByLeaderWorkerSet", True)]
    assert not [w for w in writes if w.tag == "ungate"]


def test_a_forged_pod_is_not_let_through_when_its_claimed_group_is_admitted() -> None:
    """The group's own pods go through; the forged one, gated with them, stays gated."""
    obj = vllm(replicas=1, size=3)
    pods = [lws_pod("vllm", 0, w, pool=LQ) for w in (0, 2)]
    wl = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    snap = KueueSnapshot([obj], [*pods, _forged_worker()], [rec(obj, 0, admitted=False)], [wl], [FLAVOR],
                         statefulsets=lws_statefulsets([obj], pods))  # fmt: skip
    acts = decide_kueue(snap)
    assert sorted(u.pod for u in acts.ungate) == ["vllm-0", "vllm-0-2"]


def test_once_the_forged_pod_is_gone_the_record_says_admitted_again() -> None:
    obj = vllm(replicas=1, size=2)
    pods = [lws_pod("vllm", 0, w, pool=LQ, gated=False, node_name=f"n{w}", phase="Running") for w in (0, 1)]
    wl = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    record_ = rec(obj, 0, admitted=True)
    record_["status"]["conditions"][0]["reason"] = "NotMadeByLeaderWorkerSet"
    [st] = decide([obj], pods, [record_], [wl]).statuses
    assert (st.admitted, st.reason, st.warning) == (True, "Admitted", False)


def test_a_waiting_workload_keeps_every_gate_and_passes_on_kueues_words() -> None:
    obj = vllm(replicas=1)
    pods = [lws_pod("vllm", 0, w, pool=LQ) for w in range(2)]
    said = "couldn't assign flavors to pod set leader: insufficient unused quota for nvidia.com/gpu"
    wl = workload(obj, 0, conditions=[cond("QuotaReserved", False, "Pending", said)])
    acts = decide([obj], pods, [rec(obj, 0)], [wl])
    assert acts.ungate == () and acts.stop == ()
    [st] = acts.statuses
    assert (st.admitted, st.reason, st.warning) == (False, "Pending", False)
    assert said in st.message and LQ in st.message


def test_a_missing_local_queue_is_a_warning() -> None:
    obj = vllm(replicas=1)
    wl = workload(
        obj, 0, conditions=[cond("QuotaReserved", False, "Inadmissible", "LocalQueue lq-gpu doesn't exist")]
    )
    [st] = decide([obj], [], [rec(obj, 0)], [wl]).statuses
    assert st.warning and "doesn't exist" in st.message


def test_quota_reserved_but_checks_pending_says_which_check_waits() -> None:
    obj = vllm(replicas=1)
    checks = [{"name": "node-fit", "state": "Pending", "message": "pod 1 (worker) needs 2 nvidia.com/gpu"}]
    wl = workload(obj, 0, conditions=[cond("QuotaReserved", True), cond("Admitted", False)],
                  flavors={"leader": "h100", "worker": "h100"}, checks=checks)  # fmt: skip
    acts = decide([obj], [lws_pod("vllm", 0, pool=LQ)], [rec(obj, 0)], [wl])
    assert acts.ungate == ()
    [st] = acts.statuses
    assert st.reason == "WaitingForAdmissionChecks"
    assert "node-fit is Pending: pod 1 (worker) needs 2 nvidia.com/gpu" in st.message


def test_an_evicted_group_is_stopped_whole_before_its_quota_goes_back() -> None:
    obj = vllm(replicas=1)
    running = [lws_pod("vllm", 0, w, pool=LQ, gated=False, node_name="n1", phase="Running") for w in range(2)]
    wl = workload(obj, 0, conditions=EVICTED, flavors={"leader": "h100", "worker": "h100"})
    acts = decide([obj], running, [rec(obj, 0, admitted=True)], [wl])
    assert sorted(acts.stop) == [("default", "vllm-0"), ("default", "vllm-0-1")]
    assert acts.clear_admission == () and acts.ungate == ()
    [st] = acts.statuses
    assert (st.admitted, st.reason) == (False, "Evicted") and "Preempted" in st.message
    # The LWS recreates the pods, gated by the webhook: now the reservation is given back.
    recreated = [lws_pod("vllm", 0, w, pool=LQ) for w in range(2)]
    acts = decide([obj], recreated, [rec(obj, 0, admitted=False)], [wl])
    assert acts.stop == () and acts.ungate == ()
    assert acts.clear_admission == (("default", wl["metadata"]["name"]),)


def test_terminating_pods_of_an_evicted_group_are_not_deleted_twice() -> None:
    obj = vllm(replicas=1)
    going = [lws_pod("vllm", 0, w, pool=LQ, gated=False, node_name="n1", deleting=True) for w in range(2)]
    wl = workload(obj, 0, conditions=EVICTED, flavors={"leader": "h100"})
    acts = decide([obj], going, [rec(obj, 0, admitted=True)], [wl])
    assert acts.stop == ()
    assert acts.clear_admission == (("default", wl["metadata"]["name"]),)


def test_ungated_pods_without_an_admitted_workload_are_stopped() -> None:
    """A Workload deleted by hand (or never admitted): nothing runs outside Kueue's say."""
    obj = vllm(replicas=1)
    running = [lws_pod("vllm", 0, w, pool=LQ, gated=False, node_name="n1", phase="Running") for w in range(2)]
    acts = decide([obj], running, [rec(obj, 0, admitted=True)], [])
    assert sorted(p for _, p in acts.stop) == ["vllm-0", "vllm-0-1"]
    assert [g.record for g, _ in acts.create_workloads] == [record_name("vllm", UID, 0)]


# ----- scale down, deletion, other incarnations -----------------------------------------


def test_scale_down_keeps_the_workload_until_the_last_pod_is_gone() -> None:
    obj = vllm(replicas=1)
    wls = [workload(obj, i, conditions=ADMITTED, flavors={"leader": "h100"}) for i in range(2)]
    recs = [rec(obj, i, admitted=True) for i in range(2)]
    leaving = [lws_pod("vllm", 1, w, pool=LQ, gated=False, node_name="n1", deleting=True) for w in range(2)]
    acts = decide([obj], leaving, recs, wls)
    assert acts.release == ()
    acts = decide([obj], [], recs, wls)
    assert acts.release == (("default", record_name("vllm", UID, 1)),)


def test_a_deleted_lws_releases_records_and_workloads() -> None:
    obj = vllm(replicas=2)
    acts = decide([], [], [rec(obj, 0), rec(obj, 1)], [workload(obj, 0), workload(obj, 1)])
    assert acts.release == tuple(("default", record_name("vllm", UID, i)) for i in range(2))


def test_a_workload_of_an_earlier_lws_of_the_same_name_is_not_taken() -> None:
    obj = vllm(replicas=1)
    old = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100"}, uid="another-uid")
    acts = decide([obj], [lws_pod("vllm", 0, pool=LQ)], [rec(obj, 0)], [old])
    assert acts.ungate == ()
    assert acts.release == ()  # the record is the current group's
    assert acts.delete_workloads == (("default", old["metadata"]["name"]),)
    assert acts.create_workloads == ()  # after the old one is gone, in a later pass


def test_the_same_snapshot_gives_the_same_actions() -> None:
    obj = vllm(replicas=3)
    pods = [lws_pod("vllm", i, w, pool=LQ) for i in range(3) for w in range(2)]
    recs = [rec(obj, i) for i in range(3)]
    wls = [
        workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"}),
        workload(obj, 1),
    ]
    assert decide([obj], pods, recs, wls) == decide([obj], list(reversed(pods)), recs, wls)


# ----- the writes ------------------------------------------------------------------------


def test_ungate_patch_removes_the_gate_and_adds_selector_and_tolerations_in_one_write() -> None:
    pod = lws_pod("vllm", 0, pool=LQ)
    pod["spec"]["schedulingGates"].insert(0, {"name": "other.example/gate"})
    ops = ungate_patch(pod, Ungate("default", "vllm-0", {"pool": "h100", "a/b": "c"}, ({"key": "gpu"},)))
    assert ops == [
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": SCHEDULING_GATE},
        {"op": "remove", "path": "/spec/schedulingGates/1"},
        {"op": "add", "path": "/spec/nodeSelector", "value": {"a/b": "c", "pool": "h100"}},
        {"op": "add", "path": "/spec/tolerations", "value": [{"key": "gpu"}]},
    ]


def test_ungate_patch_keeps_the_pods_own_selector() -> None:
    pod = lws_pod("vllm", 0, pool=LQ)
    pod["spec"]["nodeSelector"] = {"pool": "mine"}
    pod["spec"]["tolerations"] = [{"key": "gpu"}]
    ops = ungate_patch(pod, Ungate("default", "vllm-0", {"pool": "h100", "a/b": "c"}, ({"key": "gpu"},)))
    assert ops is not None
    assert ops[2:] == [{"op": "add", "path": "/spec/nodeSelector/a~1b", "value": "c"}]


def test_ungate_patch_of_a_pod_without_our_gate_is_none() -> None:
    assert ungate_patch(lws_pod("vllm", 0, pool=LQ, gated=False), Ungate("default", "vllm-0", {})) is None


def test_clear_admission_gives_the_quota_back_and_requeues() -> None:
    wl = workload(vllm(), 0, conditions=[*EVICTED, cond("PodsReady", True)], flavors={"leader": "h100"})
    wl["metadata"]["generation"] = 3
    status = clear_admission_status(wl, "2025-06-01T00:00:00Z")
    assert status["admission"] is None
    by_type = {c["type"]: c for c in status["conditions"]}
    assert (by_type["QuotaReserved"]["status"], by_type["QuotaReserved"]["reason"]) == ("False", "Pending")
    assert by_type["QuotaReserved"]["lastTransitionTime"] == "2025-06-01T00:00:00Z"
    assert (by_type["Admitted"]["status"], by_type["Requeued"]["status"]) == ("False", "True")
    assert by_type["Requeued"]["reason"] == "Preempted"
    assert {by_type[t]["observedGeneration"] for t in ("QuotaReserved", "Admitted", "Requeued")} == {3}
    assert by_type["Evicted"] == EVICTED[2] and by_type["PodsReady"]["status"] == "True"


# ----- the LWS changes under a Workload ---------------------------------------------------


def _made(obj: dict[str, Any], index: int, **kwargs: Any) -> dict[str, Any]:
    """Our Workload of group ``index`` as ``new_workload`` made it for ``obj`` (with its hashes)."""
    acts = decide([obj], records=[rec(obj, index)])
    group = next(g for g, _ in acts.create_workloads if g.key.index == index)
    wl = workload(obj, index, **kwargs)
    made = new_workload(group, obj, "rec-uid")
    wl["metadata"]["annotations"] = made["metadata"]["annotations"]
    wl["spec"] = made["spec"]
    return wl


@pytest.mark.parametrize(
    ("change", "remade"),
    [
        ("nothing", False),
        ("local queue", True),
        ("worker template", True),
        ("size", True),
    ],
)
def test_a_pending_workload_is_made_again_when_the_lws_asks_for_another(change: str, remade: bool) -> None:
    before = vllm(replicas=1)
    wl = _made(before, 0, conditions=[cond("QuotaReserved", False, "Pending", "insufficient quota")])
    after = vllm(replicas=1)
    if change == "local queue":
        after["metadata"]["labels"][POOL_LABEL] = "lq-other"
    elif change == "worker template":
        after["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = "vllm:2"
    elif change == "size":
        after["spec"]["leaderWorkerTemplate"]["size"] = 3
    acts = decide([after], [lws_pod("vllm", 0, pool=LQ)], [rec(after, 0)], [wl])
    assert acts.delete_workloads == ((("default", wl["metadata"]["name"]),) if remade else ())
    assert acts.create_workloads == ()  # made again once the old one is gone
    assert acts.release == ()


def test_an_admitted_workload_is_kept_when_the_lws_changes() -> None:
    before = vllm(replicas=1)
    wl = _made(before, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    after = vllm(replicas=1)
    after["metadata"]["labels"][POOL_LABEL] = "lq-other"
    acts = decide([after], [lws_pod("vllm", 0, pool=LQ)], [rec(after, 0, admitted=True)], [wl])
    assert acts.delete_workloads == ()
    assert [u.pod for u in acts.ungate] == ["vllm-0"]


def test_a_workload_without_a_spec_hash_is_not_made_again() -> None:
    obj = vllm(replicas=1)
    wl = workload(obj, 0, conditions=[cond("QuotaReserved", False, "Pending")])
    assert SPEC_HASH_ANNOTATION not in wl["metadata"]["annotations"]
    assert decide([obj], [], [rec(obj, 0)], [wl]).delete_workloads == ()


OLD, NEW = "rev-1", "rev-2"


def _grown_scene(pods: list[dict[str, Any]], *, gpus: int = 2) -> KueueActions:
    """Group 0 was admitted by Kueue for 1 GPU per pod, its pods at revision rev-1 (noted on
    its record); its LWS now asks ``gpus`` per pod."""
    before = vllm(replicas=1)
    wl = _made(before, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    after = (
        lws("vllm").uid(UID).pool(LQ).replicas(1).size(2).leader(gpu_limit=gpus).worker(gpu_limit=gpus).obj()
    )
    return decide([after], pods, [rec(after, 0, admitted=True, revision=OLD)], [wl])


def _old(worker: int, **kwargs: Any) -> dict[str, Any]:
    kw: dict[str, Any] = {"gated": False, "node_name": f"n{worker}", "phase": "Running"} | kwargs
    return lws_pod("vllm", 0, worker, pool=LQ, revision=OLD, **kw)


def _new(worker: int, **kwargs: Any) -> dict[str, Any]:
    kw: dict[str, Any] = {"gpu_limit": 2} | kwargs
    return lws_pod("vllm", 0, worker, pool=LQ, revision=NEW, **kw)


WAITS = (
    "its LeaderWorkerSet's templates changed its demand: its 1 new pod waits for its old ones to go, "
    "then it is queued again"
)
REMADE = (
    "group 0 waits: its LeaderWorkerSet's templates changed its demand to 4 nvidia.com/gpu; "
    "its old Workload is deleted and a new one is made for Kueue to admit"
)
RESTARTING = [_old(0), _old(1, gated=True, node_name=None, phase="Pending")]


@pytest.mark.parametrize(
    ("pods", "ungated", "deleted", "says"),
    [
        pytest.param([_old(0), _old(1)], [], False, None, id="not-updated-yet"),
        pytest.param(RESTARTING, ["vllm-0-1"], False, None, id="an-old-pod-restarting-goes-through"),
        pytest.param(
            [_old(1, deleting=True), _new(0)], [], False, WAITS, id="new-leader-waits-for-old-worker"
        ),
        pytest.param([_new(0), _new(1)], [], True, REMADE, id="only-new-pods-the-workload-is-made-again"),
        pytest.param([], [], False, None, id="no-pods-keeps-the-workload"),
    ],
)
def test_an_admitted_workload_is_made_again_when_the_demand_changes(
    pods: list[dict[str, Any]], ungated: list[str], deleted: bool, says: str | None
) -> None:
    acts = _grown_scene(pods)
    assert sorted(u.pod for u in acts.ungate) == ungated
    assert acts.delete_workloads == ((("default", record_name("vllm", UID, 0)),) if deleted else ())
    assert acts.create_workloads == (), "a new Workload only once the old one is gone"
    assert acts.stop == () and acts.release == ()
    [st] = acts.statuses
    assert (st.admitted, st.reason) == ((False, "TemplateChanged") if deleted else (True, "Admitted"))
    if says is None:
        assert "templates changed" not in st.message
    else:
        assert st.message.endswith(says), st.message


def test_an_admitted_workload_keeps_a_new_image_going() -> None:
    """Same demand, new revision: the new pods go through on the admitted Workload."""
    acts = _grown_scene([_new(0, gpu_limit=1), _new(1, gpu_limit=1)], gpus=1)
    assert sorted(u.pod for u in acts.ungate) == ["vllm-0", "vllm-0-1"]
    assert acts.delete_workloads == ()


def test_an_admitted_group_notes_the_revision_its_pods_run() -> None:
    """What tells a restarting old pod from a new one later, when the demand changes."""
    obj = vllm(replicas=1)
    wl = _made(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    pods = [lws_pod("vllm", 0, w, pool=LQ, revision=NEW, gated=False, node_name="n1") for w in (0, 1)]
    [st] = decide([obj], pods, [rec(obj, 0, admitted=True, revision=OLD)], [wl]).statuses
    assert (st.admitted, st.revision) == (True, NEW)
    waiting = decide([obj], [lws_pod("vllm", 0, pool=LQ, revision=NEW)], [rec(obj, 0)], [workload(obj, 0)])
    assert [(st.admitted, st.revision) for st in waiting.statuses] == [(False, None)]


def test_a_restarted_group_not_yet_updated_runs_on_its_workload() -> None:
    """Recreated whole (RecreateGroupOnPodRestart) from the old template while the LWS asks
    bigger pods: its pods carry the noted revision, so they go through on the Workload."""
    acts = _grown_scene([_old(w, gated=True, node_name=None, phase="Pending") for w in (0, 1)])
    assert sorted(u.pod for u in acts.ungate) == ["vllm-0", "vllm-0-1"]
    assert acts.delete_workloads == ()


# ----- a Workload that can never fit gives its quota back ---------------------------------

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NEVER = (
    "can never fit, even on empty nodes: a pod of pod set leader needs 2 nvidia.com/gpu; "
    "the largest node of flavor h100 has 1 nvidia.com/gpu"
)


def _never_scene(
    *, message: str = NEVER, record_status: dict[str, Any] | None = None, workload_there: bool = True
) -> KueueActions:
    obj = vllm(replicas=1)
    reserved = [cond("QuotaReserved", True), cond("Admitted", False, "NoReservation")]
    checks = [{"name": "node-fit", "state": "Pending", "message": message}]
    wls = [workload(obj, 0, conditions=reserved, flavors={"leader": "h100", "worker": "h100"}, checks=checks)]
    record_obj = rec(obj, 0, admitted=False)
    record_obj["status"] |= record_status or {}
    pods = [lws_pod("vllm", 0, w, pool=LQ) for w in (0, 1)]
    snap = KueueSnapshot(
        [obj],
        pods,
        [record_obj],
        wls if workload_there else [],
        [FLAVOR],
        statefulsets=lws_statefulsets([obj], pods),
        now=NOW,
    )
    return decide_kueue(snap)


@pytest.mark.parametrize(
    ("retries", "delay"),
    [(None, 60), (1, 120), (2, 240), (6, 1800)],
    ids=["first", "second", "third", "capped"],
)
def test_a_workload_that_can_never_fit_is_deleted_and_made_again_later(
    retries: int | None, delay: int
) -> None:
    """Pending, it would hold its quota for ever; deleted, the quota goes back at once."""
    acts = _never_scene(record_status={"retries": retries} if retries else None)
    assert acts.delete_workloads == (("default", record_name("vllm", UID, 0)),)
    assert acts.create_workloads == () and acts.ungate == ()
    [st] = acts.statuses
    assert (st.admitted, st.reason, st.warning) == (False, "NodesTooSmall", True)
    assert (
        st.message
        == f"group 0 {NEVER}; its Workload is deleted so that it holds no quota, and made again in {delay} s"
    )
    assert st.retries == (retries or 0) + 1
    assert st.retry_at == (NOW + timedelta(seconds=delay)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_no_node_for_its_pods_is_no_matching_node() -> None:
    [st] = _never_scene(
        message="can never fit: no node of flavor h100 accepts the pods of pod set leader"
    ).statuses
    assert st.reason == "NoMatchingNode"


def test_while_the_delay_runs_no_workload_is_made_and_the_record_keeps_its_words() -> None:
    said = {
        "conditions": [{"type": "Admitted", "status": "False", "reason": "NodesTooSmall", "message": "why"}]
    }
    later = (NOW + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    waiting = _never_scene(workload_there=False, record_status={"retryAt": later, "retries": 1, **said})
    assert waiting.create_workloads == ()
    assert [(s.reason, s.message, s.retries) for s in waiting.statuses] == [("NodesTooSmall", "why", None)]
    # A Workload still there (its deletion not seen yet) is deleted again, not counted again.
    again = _never_scene(record_status={"retryAt": later, "retries": 1, **said})
    assert again.delete_workloads and [s.retries for s in again.statuses] == [None]
    # Once the delay is over, a new Workload is made.
    earlier = (NOW - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    over = _never_scene(workload_there=False, record_status={"retryAt": earlier, "retries": 1, **said})
    assert [g.record for g, _ in over.create_workloads] == [record_name("vllm", UID, 0)]


def test_a_workload_that_waits_for_room_keeps_its_quota() -> None:
    """Room that frees as pods leave is worth waiting for, quota held (Kueue's model)."""
    acts = _never_scene(message="waits for node room: a pod of pod set leader needs 2 nvidia.com/gpu; ...")
    assert acts.delete_workloads == ()
    [st] = acts.statuses
    assert st.reason == "WaitingForAdmissionChecks"


def test_a_deleted_lws_keeps_its_workload_and_record_until_its_pods_are_gone() -> None:
    """Releasing the Workload while the pods of an LWS gone from view still run gives
    Kueue back quota that GPUs still use; it is released with the last pod, as on scale-down."""
    obj = vllm(replicas=1)
    wls = [workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100"})]
    recs = [rec(obj, 0, admitted=True)]
    running = [lws_pod("vllm", 0, w, pool=LQ, gated=False, node_name="n1", phase="Running") for w in range(2)]
    acts = decide([], running, recs, wls)
    assert acts.release == ()
    assert acts.stop == (), "its pods are not stopped either: they finish as the LWS's deletion decides"
    acts = decide([], [], recs, wls)
    assert acts.release == (("default", record_name("vllm", UID, 0)),)


def test_pods_and_records_are_deleted_by_uid_not_by_name_alone() -> None:
    """A pod deleted by name could be a new pod of the same name (StatefulSet pods
    reuse names); every delete of the plan names the UID it was decided on."""
    obj = vllm(replicas=1)
    running = [lws_pod("vllm", 0, w, pool=LQ, gated=False, node_name="n1", phase="Running") for w in range(2)]
    for i, pod in enumerate(running):
        pod["metadata"]["uid"] = f"pod-uid-{i}"
    gone = rec(vllm(replicas=1), 0, admitted=True)
    gone["metadata"]["uid"] = "rec-uid"
    snap = KueueSnapshot(
        [obj],
        running,
        [rec(obj, 0, admitted=True)],
        [],
        [FLAVOR],
        statefulsets=lws_statefulsets([obj], running),
    )
    plan = plan_writes(decide_kueue(snap), snap, Memory(), datetime(2026, 12, 1, tzinfo=UTC))
    stops = sorted((w.name, w.uid) for w in walk(plan) if w.tag == "stop")
    assert stops == [("vllm-0", "pod-uid-0"), ("vllm-0-1", "pod-uid-1")]
    snap = KueueSnapshot([], [], [gone], [], [FLAVOR])
    plan = plan_writes(decide_kueue(snap), snap, Memory(), datetime(2026, 12, 1, tzinfo=UTC))
    assert [(w.resource, w.uid) for w in walk(plan) if w.tag == "release"] == [
        ("workloads", None),
        ("groupadmissions", "rec-uid"),
    ]


def test_workers_past_the_lws_size_stay_gated_and_the_record_says_why() -> None:
    """A tenant scaled the group's worker StatefulSet past ``size - 1``: the LWS's own chain
    made the extra workers, and Kueue admitted a Workload of ``size`` pods."""
    obj = vllm(replicas=1, size=2)
    pods = [lws_pod("vllm", 0, 0, pool=LQ, gated=False, node_name="n0", phase="Running"),
            *(lws_pod("vllm", 0, w, pool=LQ) for w in (1, 2, 3))]  # fmt: skip
    wl = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    acts = decide([obj], pods, [rec(obj, 0, admitted=True)], [wl])
    assert [u.pod for u in acts.ungate] == ["vllm-0-1"]
    [st] = acts.statuses
    assert (st.admitted, st.reason, st.warning) == (True, "BeyondGroupSize", True)
    assert st.message.endswith(
        "; pods vllm-0-2 (worker 2), vllm-0-3 (worker 3) are beyond the group's size 2 (LeaderWorkerSet "
        "vllm) and stay gated: a group is what its LeaderWorkerSet says; change the LeaderWorkerSet, "
        "not its StatefulSets"
    )


def test_groups_past_the_namespaces_record_cap_get_no_record_and_no_workload() -> None:
    obj = vllm(replicas=4)
    made = lws_statefulsets([obj], [])
    snap = KueueSnapshot(
        [obj], [], [rec(obj, 0)], [], [FLAVOR], statefulsets=made, max_records_per_namespace=2
    )
    acts = decide_kueue(snap)
    assert [g.key.index for g in acts.create_records] == [1]
    assert [g.key.index for g in acts.over_cap] == [2, 3]
    assert not any(g.key.index > 1 for g, _ in acts.create_workloads)


def test_a_waiting_records_numbers_are_rewritten_at_most_once_a_refresh() -> None:
    """Kueue's words on a waiting Workload carry numbers that move with every admission
    around it ("3 more needed", then "2 more needed"); a pass that wrote them into the record
    each time made 6 status writes per group in a scale-up of 100 groups. As with ``pools``, a
    waiting record's message is rewritten at once on a new reason, and on new numbers only
    once ``MESSAGE_REFRESH_SECONDS`` have passed since its last write."""
    obj = vllm(replicas=1)
    pods = [lws_pod("vllm", 0, w, pool=LQ) for w in range(2)]
    said = "couldn't assign flavors to pod set leader: insufficient unused quota for nvidia.com/gpu, 2 more"
    wl = workload(obj, 0, conditions=[cond("QuotaReserved", False, "Pending", said)])
    old = rec(obj, 0, admitted=False)
    old["status"]["conditions"][0].update(reason="Pending", message=said.replace("2 more", "3 more"))
    old["status"]["workload"] = wl["metadata"]["name"]
    snap = KueueSnapshot([obj], pods, [old], [wl], [FLAVOR], statefulsets=lws_statefulsets([obj], pods))
    memory, now = Memory(), datetime(2026, 12, 1, tzinfo=UTC)
    key = f"default/{old['metadata']['name']}"

    def statuses(clock: float) -> list[Any]:
        plan = plan_writes(decide_kueue(snap), snap, memory, now, clock=clock)
        return [w for w in walk(plan) if w.resource == "groupadmissions" and w.op.value == "merge-status"]

    [first] = statuses(1000.0)  # never written by this leader: written
    assert first.body["conditions"][0]["message"].endswith(said)
    memory.apply(first.marks, 1000.0)
    assert memory.messages[key] == 1000.0
    assert statuses(1030.0) == [], "only the numbers changed, 30 s after the last write"
    [again] = statuses(1000.0 + MESSAGE_REFRESH_SECONDS)
    assert again.body["conditions"][0]["message"].endswith(said)
    # A new reason is written at once, however recent the last write.
    snap = KueueSnapshot([obj], pods, [old], [{**wl, "status": {}}], [FLAVOR], statefulsets=snap.statefulsets)
    [told] = statuses(1001.0)
    assert told.body["conditions"][0]["reason"] != "Pending"
