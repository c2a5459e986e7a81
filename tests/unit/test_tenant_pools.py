"""The ``pools`` backend's tenant boundary: steering to the pool's nodes, who may use a pool."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from core_builders import (
    ctr,
    gpu_nodes,
    lws,
    lws_pod,
    lws_statefulsets,
    node,
    pod_spec,
    pool,
    read_pools,
    waiting,
)

from gatekeeper.core.admission.members import split_members
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools import PassInputs, Snapshot, decide, plan_writes
from gatekeeper.core.backends.pools.planner import plan
from gatekeeper.core.model.charge import charge_toleration
from gatekeeper.core.model.pool import parse_pool
from gatekeeper.core.model.record import new_record
from gatekeeper.core.writes.plan import Memory, Op, walk

TAINT = {"key": "dedicated", "operator": "Equal", "value": "a", "effect": "NoSchedule"}


def _pool(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"nodeSelector": {"pool": "p"}, **spec}}


@pytest.mark.parametrize(
    ("selector", "labels", "admits"),
    [
        (None, {"kubernetes.io/metadata.name": "x"}, False),  # absent: no namespace
        ({}, None, True),  # {}: every namespace, even one not seen yet
        ({}, {}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "a"}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
        ({"matchLabels": {"team": "a"}}, None, False),
        (
            {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["x"]}]},
            {"kubernetes.io/metadata.name": "x"},
            True,
        ),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, {"team": "a"}, False),
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, {"team": "a"}, True),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {}, True),
    ],
)
def test_namespace_selector_means_what_a_cluster_queues_does(
    selector: dict[str, Any] | None, labels: dict[str, str] | None, admits: bool
) -> None:
    spec = {} if selector is None else {"namespaceSelector": selector}
    assert parse_pool(_pool(**spec)).admits(labels) is admits


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"namespaceSelector": {"matchLabels": {"a": 1}}}, r"spec\.namespaceSelector\.matchLabels"),
        (
            {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}},
            r"unsupported operator 'Gt'",
        ),
        (
            {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
            r"values: required for In and NotIn",
        ),
        ({"namespaceSelector": {"matchNames": ["a"]}}, r"unknown field 'matchNames'"),
        ({"tolerations": [{"key": "a", "operator": "Lt"}]}, r"spec\.tolerations\[0\]\.operator: 'Lt'"),
        ({"tolerations": {"key": "a"}}, r"spec\.tolerations: expected a list"),
    ],
)
def test_a_bad_namespace_selector_or_toleration_makes_the_pool_invalid(
    spec: dict[str, Any], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        parse_pool(_pool(**spec))


def test_a_namespace_the_pool_does_not_admit_waits_with_a_permanent_reason() -> None:
    team_pool = pool("a").namespaces({"matchLabels": {"team": "a"}}).parsed()
    demand = lws("x").size(2).worker(gpu_limit=1).demand()
    result = plan(
        [team_pool],
        gpu_nodes(2),
        {},
        [],
        [waiting("x", 0, demand, namespace="team-b"), waiting("y", 0, demand, namespace="team-a")],
        {"team-a": {"team": "a"}, "team-b": {"team": "b"}},
    )
    assert [a.key.namespace for a in result.admit] == ["team-a"]
    [wait] = result.waiting
    assert wait.reason is Reason.NAMESPACE_NOT_ALLOWED and wait.reason.permanent
    assert wait.message == "group 0 waits: namespace team-b may not use pool a"


def test_the_fit_places_pods_with_the_pools_tolerations() -> None:
    tainted = [node(f"n{i}").labels(pool="a").alloc(gpu=1).taint("dedicated", "a").parsed() for i in range(2)]
    demand = lws("x").size(2).worker(gpu_limit=1).demand()
    without = plan([pool("a").parsed()], tainted, {}, [], [waiting("x", 0, demand)])
    assert [w.reason for w in without.waiting] == [Reason.NO_MATCHING_NODE]
    steered = plan([pool("a").tolerations(TAINT).parsed()], tainted, {}, [], [waiting("x", 0, demand)])
    assert [sorted(a.nodes) for a in steered.admit] == [["n0", "n1"]]


def test_a_pod_that_selects_a_pool_key_with_another_value_fits_nowhere() -> None:
    """Its own value stays (the ungate write leaves it), so it can never land on the pool."""
    spec = pod_spec(ctr(gpu_limit=1), node_selector={"pool": "b"})
    demand = lws("x").size(1).worker(spec).demand()
    nodes = [node("n0").labels(pool="a").alloc(gpu=1).parsed()]
    result = plan([pool("a").parsed()], nodes, {}, [], [waiting("x", 0, demand)])
    assert [w.reason for w in result.waiting] == [Reason.NO_MATCHING_NODE]


def _snap(pods: list[dict[str, Any]], records: list[dict[str, Any]], pools: list[dict[str, Any]]) -> Snapshot:
    vllm = lws("vllm").pool("a").uid("u-1").size(2).replicas(1).worker(gpu_limit=1).obj()
    return Snapshot(
        lwss=[vllm],
        pods=pods,
        bound_pods=[],
        nodes=[node(f"n{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(2)],
        pools=read_pools(pools),
        records=records,
        statefulsets=lws_statefulsets([vllm], pods),
    )


def _ungates(snap: Snapshot) -> dict[str, list[dict[str, Any]]]:
    actions = decide(snap)
    plan_ = plan_writes(actions, PassInputs(snap, Memory(), datetime(2026, 12, 1, tzinfo=UTC), 1.0))
    return {w.name: list(w.body) for w in walk(plan_) if w.tag == "ungate" and w.op is Op.JSON_PATCH}


def test_admitting_a_group_steers_its_pods_to_the_pool_in_the_write_that_ungates_them() -> None:
    pods = [lws_pod("vllm", 0, w) for w in (0, 1)]
    pods[1]["spec"]["nodeSelector"] = {"zone": "z1"}
    writes = _ungates(_snap(pods, [], [pool("a").tolerations(TAINT).obj()]))
    assert writes["vllm-0"][2:] == [
        {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "a"}},
        {"op": "add", "path": "/spec/tolerations", "value": [TAINT, charge_toleration("u-1", 0)]},
    ]
    assert writes["vllm-0-1"][2] == {"op": "add", "path": "/spec/nodeSelector/pool", "value": "a"}
    assert [op["op"] for op in writes["vllm-0"][:2]] == ["test", "remove"]


def _admitted_record(pool_name: str = "a") -> dict[str, Any]:
    vllm = lws("vllm").pool("a").uid("u-1").obj()
    rec = new_record(vllm, 0)
    rec["metadata"]["resourceVersion"] = "7"
    rec["status"] = {
        "pool": pool_name,
        "demand": {"nvidia.com/gpu": "2"},
        "pods": 2,
        "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""}],
    }
    return rec


def test_a_later_pod_of_an_admitted_group_is_steered_too() -> None:
    pods = [lws_pod("vllm", 0, 0, gated=False, node_name="n0", phase="Running"), lws_pod("vllm", 0, 1)]
    writes = _ungates(_snap(pods, [_admitted_record()], [pool("a").obj()]))
    assert list(writes) == ["vllm-0-1"]
    assert writes["vllm-0-1"][2] == {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "a"}}


def test_an_admitted_groups_pods_stay_gated_while_its_pool_is_gone_or_invalid() -> None:
    pods = [lws_pod("vllm", 0, 0, gated=False, node_name="n0", phase="Running"), lws_pod("vllm", 0, 1)]
    assert _ungates(_snap(pods, [_admitted_record()], [])) == {}
    bad = pool("a").obj()
    bad["spec"]["queueingStrategy"] = "Sometimes"
    assert _ungates(_snap(pods, [_admitted_record()], [bad])) == {}


# ----- membership by the owner chain ------------------------------------------------------


def _forged(ns: str = "default", owner: dict[str, Any] | None = None) -> dict[str, Any]:
    pod = lws_pod("vllm", 0, 1, gpu_limit=4)
    pod["metadata"].update(name="forged", namespace=ns, uid="forged-uid")
    pod["metadata"]["ownerReferences"] = [owner] if owner else []
    return pod


@pytest.mark.parametrize(
    ("make", "member"),
    [
        (lambda: lws_pod("vllm", 0, 0), True),  # the leader: leader StatefulSet, owned by the LWS
        (lambda: lws_pod("vllm", 0, 1), True),  # a worker: its group's StatefulSet, owned by the leader
        (lambda: _forged(), False),  # no owner at all
        # owned by the real leader StatefulSet, but not as its controller
        (lambda: _forged(owner={"kind": "StatefulSet", "uid": "sts/default/vllm", "name": "vllm"}), False),
        # a StatefulSet the LWS did not make
        (
            lambda: _forged(owner={"kind": "StatefulSet", "uid": "other", "name": "x", "controller": True}),
            False,
        ),
        # a ReplicaSet's pod
        (lambda: _forged(owner={"kind": "ReplicaSet", "uid": "sts/default/vllm", "controller": True}), False),
    ],
)
def test_a_pod_is_a_member_only_when_its_lws_made_it(make: Any, member: bool) -> None:
    vllm = lws("vllm").pool("a").uid("u-1").obj()
    pods = [lws_pod("vllm", 0, 0), lws_pod("vllm", 0, 1)]
    pod = make()
    kept, strangers = split_members(
        [*pods, pod] if pod["metadata"]["name"] == "forged" else pods,
        {("default", "vllm"): "u-1"},
        lws_statefulsets([vllm], pods),
    )
    assert (pod["metadata"]["name"] in [k["metadata"]["name"] for k in kept]) is member
    assert [s.pod for s in strangers] == ([] if member else ["forged"])


def test_a_pod_already_let_through_counts_though_its_chain_broke() -> None:
    """An old worker of a rolling update, terminating: its leader was replaced, and its
    worker StatefulSet went with the old leader. It is still the group's old pod."""
    vllm = lws("vllm").pool("a").uid("u-1").obj()
    leader = lws_pod("vllm", 0, 0)
    worker = lws_pod("vllm", 0, 1, gated=False, node_name="n1", phase="Running", deleting=True)
    leader_sts = lws_statefulsets([vllm], [])  # only the leader StatefulSet is left
    kept, strangers = split_members([leader, worker], {("default", "vllm"): "u-1"}, leader_sts)
    assert [k["metadata"]["name"] for k in kept] == ["vllm-0", "vllm-0-1"] and strangers == []
    gated_worker = lws_pod("vllm", 0, 1)
    kept, strangers = split_members([leader, gated_worker], {("default", "vllm"): "u-1"}, leader_sts)
    assert [s.pod for s in strangers] == ["vllm-0-1"], "a gated pod is judged"


def test_the_chain_is_checked_by_uid_so_another_lws_of_the_name_does_not_count() -> None:
    old = lws("vllm").pool("a").uid("u-old").obj()
    pods = [lws_pod("vllm", 0, 0)]
    kept, strangers = split_members(pods, {("default", "vllm"): "u-new"}, lws_statefulsets([old], pods))
    assert kept == [] and [s.pod for s in strangers] == ["vllm-0"]


def assert_held(snap: Snapshot, reason: Reason, message: str) -> None:
    """The pass lets none of the group's gated pods through; the record (still admitted)
    and a Warning Event give ``reason`` and ``message``."""
    actions = decide(snap)
    assert actions.ungate == ()
    [said] = actions.strangers
    assert (said.reason, said.message) == (reason, message)
    inputs = PassInputs(snap, Memory(), datetime(2026, 12, 1, tzinfo=UTC), 1.0)
    writes = list(walk(plan_writes(actions, inputs)))
    restate = [w.body["conditions"][0] for w in writes if w.tag == "restate"]
    assert [(c["reason"], c["status"]) for c in restate] == [(str(reason), "True")], "it keeps its admission"
    assert [(w.body.reason, w.body.warning) for w in writes if w.op is Op.EVENT] == [(str(reason), True)]
    assert not [w for w in writes if w.tag == "ungate"]


def test_a_forged_pod_of_an_admitted_group_stays_gated_and_the_record_and_an_event_say_so() -> None:
    pods = [lws_pod("vllm", 0, w, gated=False, node_name=f"n{w}", phase="Running") for w in (0, 1)]
    snap = _snap([*pods, _forged()], [_admitted_record()], [pool("a").obj()])
    assert_held(
        snap,
        Reason.NOT_MADE_BY_LWS,
        "group 0 holds its admission into pool a: 2 nvidia.com/gpu; pod forged was not made by "
        "LeaderWorkerSet vllm: it claims the group by its labels and stays gated",
    )


def test_once_the_forged_pod_is_gone_the_record_says_admitted_again() -> None:
    pods = [lws_pod("vllm", 0, w, gated=False, node_name=f"n{w}", phase="Running") for w in (0, 1)]
    rec = _admitted_record()
    rec["status"]["conditions"][0]["reason"] = "NotMadeByLeaderWorkerSet"
    actions = decide(_snap(pods, [rec], [pool("a").obj()]))
    assert actions.strangers == ()
    assert actions.restore_admitted == (("default", rec["metadata"]["name"], _restored_message()),)


def _restored_message() -> str:
    return "group 0 holds its admission into pool a: 2 nvidia.com/gpu"


def test_the_member_labels_policy_protects_every_label_the_gatekeeper_groups_by() -> None:
    import re

    from gatekeeper.core.kube.keys import (
        GROUP_INDEX_LABEL,
        LWS_NAME_LABEL,
        POOL_LABEL,
        REVISION_LABEL,
        WORKER_INDEX_LABEL,
    )
    from gatekeeper.render.admission import MEMBER_LABELS, load_policies

    [policy] = [
        o
        for o in load_policies([MEMBER_LABELS])
        if o["kind"] == "ValidatingAdmissionPolicy"
        and o["metadata"]["name"] == "lws-gatekeeper-member-labels"
    ]
    [listed] = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == "memberLabels"]
    assert set(re.findall(r"'([^']+)'", listed)) == {
        POOL_LABEL,
        LWS_NAME_LABEL,
        GROUP_INDEX_LABEL,
        WORKER_INDEX_LABEL,
        REVISION_LABEL,
    }


# ----- a group is what its LWS said ---------------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "strangers"),
    [
        ((1,), []),  # size 2: the one worker
        ((1, 2), [("vllm-0-2", 2)]),  # the worker StatefulSet scaled to 2
        ((1, 2, 3), [("vllm-0-2", 2), ("vllm-0-3", 3)]),
    ],
)
def test_a_worker_past_the_lws_size_is_no_member(workers: tuple[int, ...], strangers: list[Any]) -> None:
    vllm = lws("vllm").pool("a").uid("u-1").size(2).obj()
    pods = [lws_pod("vllm", 0, 0), *(lws_pod("vllm", 0, w) for w in workers)]
    kept, found = split_members(pods, {("default", "vllm"): "u-1"}, lws_statefulsets([vllm], pods), {
        ("default", "vllm"): 2
    })  # fmt: skip
    assert [(s.pod, s.worker) for s in found] == strangers
    assert all(s.size == 2 for s in found)
    assert len(kept) == len(pods) - len(strangers)


def test_a_pod_let_through_before_is_not_judged_by_the_size() -> None:
    vllm = lws("vllm").pool("a").uid("u-1").size(2).obj()
    pods = [lws_pod("vllm", 0, 0), lws_pod("vllm", 0, 2, gated=False, node_name="n1", phase="Running")]
    kept, found = split_members(pods, {("default", "vllm"): "u-1"}, lws_statefulsets([vllm], pods), {
        ("default", "vllm"): 2
    })  # fmt: skip
    assert found == [] and len(kept) == 2


def test_a_worker_statefulsets_pod_that_claims_to_be_the_leader_is_no_member() -> None:
    vllm = lws("vllm").pool("a").uid("u-1").size(2).obj()
    leader = lws_pod("vllm", 0, 0)
    fake = lws_pod("vllm", 0, 0)  # as the worker StatefulSet vllm-0 makes its pod 0
    fake["metadata"].update(name="vllm-0-0", uid="pod/default/vllm-0-0")
    fake["metadata"]["ownerReferences"][0].update(name="vllm-0", uid="sts/default/vllm-0")
    made = lws_statefulsets([vllm], [leader])
    kept, found = split_members([leader, fake], {("default", "vllm"): "u-1"}, made, {("default", "vllm"): 2})
    assert [s.pod for s in found] == ["vllm-0-0"] and [k["metadata"]["name"] for k in kept] == ["vllm-0"]


def test_an_admitted_groups_workers_past_its_size_stay_gated_and_the_record_and_an_event_say_so() -> None:
    pods = [lws_pod("vllm", 0, w, gated=False, node_name=f"n{w}", phase="Running") for w in (0, 1)]
    extra = [lws_pod("vllm", 0, w) for w in (2, 3)]
    assert_held(
        _snap([*pods, *extra], [_admitted_record()], [pool("a").obj()]),
        Reason.BEYOND_GROUP_SIZE,
        "group 0 holds its admission into pool a: 2 nvidia.com/gpu; pods vllm-0-2 (worker 2), "
        "vllm-0-3 (worker 3) are beyond the group's size 2 (LeaderWorkerSet vllm) and stay gated: a "
        "group is what its LeaderWorkerSet says; change the LeaderWorkerSet, not its StatefulSets",
    )


def test_a_new_group_is_admitted_with_its_size_and_its_extra_workers_stay_gated() -> None:
    pods = [lws_pod("vllm", 0, w) for w in (0, 1, 2)]
    actions = decide(_snap(pods, [], [pool("a").obj()]))
    [admit] = actions.admit
    assert sorted(actions.steer) == [("default", "vllm-0"), ("default", "vllm-0-1")]
    assert admit.group.gated == ("vllm-0", "vllm-0-1")
