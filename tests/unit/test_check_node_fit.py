"""The node-fit AdmissionCheck's decision: Ready only when every pod of a Workload fits free node room."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from core_builders import bound_pod, node
from workload_builders import FLAVOR, KUEUE, NS, WorkloadBuilder, workload

from gatekeeper.core.checks.node_fit import CheckUpdate, NodeFitActions, decide_node_fit
from gatekeeper.core.kube.keys import NODE_FIT_ACTIVE_MESSAGE as ACTIVE_MESSAGE
from gatekeeper.core.kube.keys import NODE_FIT_ACTIVE_REASON as ACTIVE_REASON
from gatekeeper.core.kube.keys import NODE_FIT_CONTROLLER
from gatekeeper.core.model.nodes import Node

CHECK = "node-fit"


# ----- builders -------------------------------------------------------------------------


def admission_check(
    name: str = CHECK, controller: str = NODE_FIT_CONTROLLER, *, active: bool = True
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": KUEUE,
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": controller},
    }
    if active:
        obj["status"] = {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": ACTIVE_REASON,
                    "message": ACTIVE_MESSAGE,
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }
            ]
        }
    return obj


def flavor(
    name: str = FLAVOR, *, tolerations: list[dict[str, Any]] | None = None, **labels: str
) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": labels or {"pool": "a"}}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def gpu_nodes(count: int, gpus: int = 1, prefix: str = "n", **labels: str) -> list[Node]:
    """``count`` ready nodes of ``gpus`` GPUs, 8 CPUs, 32Gi, labelled ``pool=a`` unless told otherwise."""
    labels = labels or {"pool": "a"}
    return [
        node(f"{prefix}{i}").labels(**labels).alloc(gpu=gpus, cpu="8", memory="32Gi").parsed()
        for i in range(count)
    ]


def member(
    name: str,
    node_name: str,
    *,
    gpus: int = 1,
    namespace: str = NS,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner_uid: str | None = None,
) -> dict[str, Any]:
    """A bound pod of some Workload (found by the given labels, annotations or owner)."""
    pod = bound_pod(name, node_name, namespace=namespace, gpu=gpus, cpu="1", memory="1Gi")
    meta = pod["metadata"]
    meta["uid"] = f"pod-uid-{name}"
    meta["labels"] = labels or {}
    meta["annotations"] = annotations or {}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": owner_uid}]
    return pod


@dataclass
class Scene:
    workloads: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=lambda: [admission_check()])
    flavors: list[dict[str, Any]] = field(default_factory=lambda: [flavor()])
    nodes: list[Node] = field(default_factory=list)
    bound: list[dict[str, Any]] = field(default_factory=list)

    def decide(self) -> NodeFitActions:
        return decide_node_fit(self.workloads, self.checks, self.flavors, self.nodes, self.bound)


def states(actions: NodeFitActions) -> dict[str, str]:
    return {u.workload: u.state for u in actions.updates}


def message(actions: NodeFitActions, wl: str) -> str:
    return next(u.message for u in actions.updates if u.workload == wl)


def lws_group(
    name: str, *, size: int = 2, gpus: int = 1, state: str = "Pending", age: int = 0
) -> WorkloadBuilder:
    """A Workload as Kueue's LWS integration makes it: pod sets ``leader`` (1) and ``worker`` (size-1)."""
    return (
        workload(name)
        .pod_set("leader", 1, gpus=gpus)
        .pod_set("worker", size - 1, gpus=gpus)
        .age(age)
        .reserved()
        .check(state)
    )


# ----- the AdmissionCheck objects -------------------------------------------------------


def test_only_our_admission_checks_that_are_not_active_yet_are_activated() -> None:
    scene = Scene(
        checks=[
            admission_check("ours-new", active=False),
            admission_check("ours-done"),
            admission_check("theirs", "kueue.x-k8s.io/provisioning-request", active=False),
        ]
    )
    assert scene.decide().activate == ("ours-new",)


# ----- one Workload ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "busy", "state", "words"),
    [
        pytest.param(
            gpu_nodes(2, gpus=2),
            0,
            "Ready",
            "all 2 pods fit the free room of the nodes of flavor gpu-a",
            id="fits",
        ),
        pytest.param(
            gpu_nodes(2, gpus=2),
            1,
            "Pending",
            "waits for node room: a pod of pod set leader needs 2 nvidia.com/gpu; the most free on any node "
            "of flavor gpu-a is 1 nvidia.com/gpu (2 free in all, on 2 nodes)",
            id="does-not-fit-now",
        ),
        pytest.param(
            gpu_nodes(4, gpus=1),
            0,
            "Pending",
            "can never fit, even on empty nodes: a pod of pod set leader needs 2 nvidia.com/gpu; "
            "the largest node of flavor gpu-a has 1 nvidia.com/gpu",
            id="never-fits",
        ),
        pytest.param(
            [],
            0,
            "Pending",
            "can never fit: no node of flavor gpu-a accepts the pods of pod set leader",
            id="no-nodes",
        ),
    ],
)
def test_a_workload_is_ready_only_when_all_its_pods_fit(
    nodes: list[Node], busy: int, state: str, words: str
) -> None:
    bound = [bound_pod(f"other-{n.name}", n.name, gpu=busy) for n in nodes if busy]
    scene = Scene(workloads=[lws_group("wl", gpus=2).obj()], nodes=nodes, bound=bound)
    actions = scene.decide()
    assert actions.updates == (CheckUpdate(NS, "wl", CHECK, state, message(actions, "wl")),)
    assert message(actions, "wl").startswith(words), message(actions, "wl")
    assert (actions.ready, actions.pending) == ((1, 0) if state == "Ready" else (0, 1))


def test_the_message_says_how_many_pods_were_placed_before_the_one_that_does_not_fit() -> None:
    scene = Scene(workloads=[lws_group("wl", size=3, gpus=1).obj()], nodes=gpu_nodes(2))
    text = message(scene.decide(), "wl")
    assert text.startswith("can never fit, even on empty nodes: a pod of pod set "), text
    assert "with the workload's other 2 pods placed on the empty nodes of flavor gpu-a" in text


def test_workloads_without_quota_reserved_finished_evicted_or_in_retry_are_left_alone() -> None:
    scene = Scene(
        workloads=[
            workload("queued").pod_set("main", 1).check().obj(),
            workload("finished").pod_set("main", 1).reserved().condition("Finished", "True").check().obj(),
            workload("retry").pod_set("main", 1).reserved().check("Retry").obj(),
            workload("evicted").pod_set("main", 1).reserved().condition("Evicted", "True").check().obj(),
            workload("no-check").pod_set("main", 1).reserved().obj(),
            workload("theirs").pod_set("main", 1).reserved().check(name="provisioning").obj(),
        ],
        nodes=gpu_nodes(2),
    )
    assert scene.decide().updates == ()


# ----- unchanged state ------------------------------------------------------------------


def test_an_unchanged_state_and_message_is_not_rewritten() -> None:
    first = Scene(workloads=[lws_group("wl", gpus=2).obj()], nodes=gpu_nodes(4)).decide()
    (update,) = first.updates
    again = Scene(workloads=[lws_group("wl", gpus=2, state="Pending").obj()], nodes=gpu_nodes(4))
    again.workloads[0]["status"]["admissionChecks"][0]["message"] = update.message
    assert again.decide().updates == ()
    ready = Scene(workloads=[lws_group("wl", state="Ready").obj()], nodes=gpu_nodes(4))
    assert ready.decide().updates == ()
    assert ready.decide().ready == 1


def test_a_pending_check_whose_numbers_changed_gets_the_new_message() -> None:
    scene = Scene(workloads=[lws_group("wl", gpus=2).obj()], nodes=gpu_nodes(4))
    scene.workloads[0]["status"]["admissionChecks"][0]["message"] = "old words"
    (update,) = scene.decide().updates
    assert update.state == "Pending" and update.message != "old words"


# ----- several Workloads ----------------------------------------------------------------


def test_two_workloads_competing_for_the_same_room_the_older_gets_it() -> None:
    scene = Scene(
        workloads=[lws_group("young", age=10).obj(), lws_group("old", age=20).obj()],
        nodes=gpu_nodes(2),
    )
    actions = scene.decide()
    assert states(actions) == {"old": "Ready", "young": "Pending"}
    assert message(actions, "young").startswith("waits for node room: a pod of pod set ")
    assert message(actions, "young").endswith(
        "needs 1 nvidia.com/gpu; none of the 2 nodes of flavor gpu-a has any nvidia.com/gpu free"
    )


def test_higher_priority_comes_first_then_age_then_name() -> None:
    high = lws_group("b-high", age=10).priority(100).obj()
    low_old = lws_group("a-low", age=20).obj()
    assert states(Scene(workloads=[low_old, high], nodes=gpu_nodes(2)).decide()) == {
        "b-high": "Ready",
        "a-low": "Pending",
    }
    same = [lws_group("b", age=5).obj(), lws_group("a", age=5).obj()]
    assert states(Scene(workloads=same, nodes=gpu_nodes(2)).decide()) == {"a": "Ready", "b": "Pending"}


def test_a_smaller_workload_after_one_that_does_not_fit_still_gets_the_room() -> None:
    scene = Scene(
        workloads=[lws_group("big", size=3, age=20).obj(), lws_group("small", size=2, age=10).obj()],
        nodes=gpu_nodes(2),
    )
    assert states(scene.decide()) == {"big": "Pending", "small": "Ready"}


def test_a_ready_workload_holds_room_for_its_pods_that_are_not_bound_yet() -> None:
    ready = lws_group("ready", state="Ready", age=30).obj()
    waiting = workload("next").pod_set("main", 1).age(10).reserved().check().obj()
    # Nothing of "ready" bound yet: it holds n1 and n2, a stranger sits on n0; "next" waits.
    stranger = bound_pod("stranger", "n0", gpu=1)
    held = Scene(workloads=[ready, waiting], nodes=gpu_nodes(3), bound=[stranger]).decide()
    assert states(held) == {"next": "Pending"}
    assert (held.ready, held.pending) == (1, 1)
    # Its leader is bound on n0: it holds only room for its worker, so "next" fits.
    leader = member(
        "ready-0",
        "n0",
        annotations={"kueue.x-k8s.io/pod-group-name": "ready", "kueue.x-k8s.io/role-hash": "leader"},
    )
    partly = Scene(workloads=[ready, waiting], nodes=gpu_nodes(3), bound=[leader]).decide()
    assert states(partly) == {"next": "Ready"}
    assert (partly.ready, partly.pending) == (2, 0)


def test_a_ready_workload_whose_room_was_taken_still_holds_what_is_left() -> None:
    ready = lws_group("ready", state="Ready", age=30).obj()
    waiting = workload("next").pod_set("main", 1).age(10).reserved().check().obj()
    strangers = [bound_pod(f"s{i}", f"n{i}", gpu=1) for i in range(2)]
    assert states(Scene(workloads=[ready, waiting], nodes=gpu_nodes(3), bound=strangers).decide()) == {
        "next": "Pending"
    }


# ----- pods of a Workload ---------------------------------------------------------------


def test_kueue_lws_workload_pods_are_found_by_their_pod_group_annotation() -> None:
    """Kueue's LWS integration: pod sets leader/worker; pods annotated with the pod group and role."""
    wl = lws_group("leaderworkerset-vllm-0-abcde", size=3, gpus=1).obj()
    group = {"kueue.x-k8s.io/pod-group-name": "leaderworkerset-vllm-0-abcde"}
    # Two of its three pods are bound already (after an eviction, say): only the third is placed.
    bound = [
        member("vllm-0", "n0", annotations={**group, "kueue.x-k8s.io/role-hash": "leader"}),
        member("vllm-0-1", "n1", annotations={**group, "kueue.x-k8s.io/role-hash": "worker"}),
    ]
    actions = Scene(workloads=[wl], nodes=gpu_nodes(3), bound=bound).decide()
    assert states(actions) == {"leaderworkerset-vllm-0-abcde": "Ready"}
    # Without those pods counted as its own, the three would need three free nodes.
    strangers = [member(p["metadata"]["name"], p["spec"]["nodeName"]) for p in bound]
    actions = Scene(workloads=[wl], nodes=gpu_nodes(3), bound=strangers).decide()
    assert states(actions) == {"leaderworkerset-vllm-0-abcde": "Pending"}


def test_job_pods_are_found_by_the_workloads_owner() -> None:
    wl = workload("job-train-1").owner("Job", "train", "job-uid").pod_set("main", 2).reserved().check().obj()
    bound = [member("train-a", "n0", owner_uid="job-uid")]
    assert states(Scene(workloads=[wl], nodes=gpu_nodes(2), bound=bound).decide()) == {"job-train-1": "Ready"}
    other = [member("train-a", "n0", owner_uid="another-job")]
    assert states(Scene(workloads=[wl], nodes=gpu_nodes(2), bound=other).decide()) == {
        "job-train-1": "Pending"
    }


def test_the_gatekeepers_own_workload_pods_are_found_by_lws_name_and_group_index() -> None:
    lws_labels = {"leaderworkerset.sigs.k8s.io/name": "vllm", "leaderworkerset.sigs.k8s.io/group-index": "1"}
    wl = lws_group("vllm-1", size=2).labels(**lws_labels).obj()
    leader = member("vllm-1", "n0", labels={**lws_labels, "leaderworkerset.sigs.k8s.io/worker-index": "0"})
    assert states(Scene(workloads=[wl], nodes=gpu_nodes(2), bound=[leader]).decide()) == {"vllm-1": "Ready"}
    group0 = {**lws_labels, "leaderworkerset.sigs.k8s.io/group-index": "0"}
    not_ours = member("vllm-0", "n0", labels={**group0, "leaderworkerset.sigs.k8s.io/worker-index": "0"})
    assert states(Scene(workloads=[wl], nodes=gpu_nodes(2), bound=[not_ours]).decide()) == {
        "vllm-1": "Pending"
    }


def test_counts_come_from_the_admission_when_kueue_admitted_part_of_a_pod_set() -> None:
    wl = workload("partial").pod_set("main", 4).reserved(counts={"main": 2}).check().obj()
    actions = Scene(workloads=[wl], nodes=gpu_nodes(2)).decide()
    assert states(actions) == {"partial": "Ready"}
    assert message(actions, "partial") == "all 2 pods fit the free room of the nodes of flavor gpu-a"
    full = workload("full").pod_set("main", 4).reserved().check().obj()
    assert states(Scene(workloads=[full], nodes=gpu_nodes(2)).decide()) == {"full": "Pending"}


# ----- flavors --------------------------------------------------------------------------


def test_the_flavors_node_labels_narrow_the_nodes() -> None:
    nodes = gpu_nodes(2, gpus=1, prefix="a", pool="a") + gpu_nodes(2, gpus=4, prefix="b", pool="b")
    on_a = lws_group("on-a", gpus=2).obj()
    actions = Scene(workloads=[on_a], nodes=nodes).decide()
    assert states(actions) == {"on-a": "Pending"}
    assert "the largest node of flavor gpu-a has 1 nvidia.com/gpu" in message(actions, "on-a")
    on_b = lws_group("on-b", gpus=2).flavor("gpu-b").reserved().obj()
    scene = Scene(workloads=[on_b], nodes=nodes, flavors=[flavor(), flavor("gpu-b", pool="b")])
    assert states(scene.decide()) == {"on-b": "Ready"}


def test_the_flavors_tolerations_let_pods_onto_its_tainted_nodes() -> None:
    tainted = [
        node(f"t{i}").labels(pool="a").alloc(gpu=1).taint("dedicated", "gpu", "NoSchedule").parsed()
        for i in range(2)
    ]
    wl = lws_group("wl").obj()
    actions = Scene(workloads=[wl], nodes=tainted).decide()
    assert states(actions) == {"wl": "Pending"}
    assert message(actions, "wl").startswith("can never fit: no node of flavor gpu-a accepts")
    tolerating = flavor(
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    )
    assert states(Scene(workloads=[wl], nodes=tainted, flavors=[tolerating]).decide()) == {"wl": "Ready"}


def test_a_missing_flavor_keeps_the_check_pending_and_says_so() -> None:
    actions = Scene(workloads=[lws_group("wl").obj()], flavors=[], nodes=gpu_nodes(2)).decide()
    assert states(actions) == {"wl": "Pending"}
    assert message(actions, "wl") == (
        "cannot be checked: its pod set leader is assigned flavor gpu-a, which does not exist"
    )
    assert actions.problems


def test_every_node_fit_check_of_a_workload_gets_the_same_answer() -> None:
    wl = lws_group("wl").check("Pending", name="second").obj()
    checks = [admission_check(), admission_check("second")]
    actions = Scene(workloads=[wl], checks=checks, nodes=gpu_nodes(2)).decide()
    assert sorted((u.check, u.state) for u in actions.updates) == [("node-fit", "Ready"), ("second", "Ready")]
