"""``core.admission.pass_through`` and ``core.backends.pools.pass_through``: which new pods
the webhook may make without the gate, for the groups the ``pools`` backend admitted.

Table tests on plain dicts; the webhook with the real API server is in
``tests/e2e/test_pass_through.py``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from core_builders import lws, lws_pod, lws_statefulsets, pool, read_pools, record

from gatekeeper.core.admission.pass_through import Table, lift_for, patch_for
from gatekeeper.core.backends.pools.pass_through import Written, as_known, build, written_after
from gatekeeper.core.model.charge import charge_toleration
from gatekeeper.core.model.groups import DemandMemo
from gatekeeper.webhook.pass_through import PassThrough

VLLM = lws("vllm").uid("u-1").pool("a").replicas(2).size(2).leader(gpu_limit=1).worker(gpu_limit=1).obj()
POOL = pool("a").selector(pool="a").tolerations({"key": "gpu", "operator": "Exists"}).obj()


def _admitted(index: int, reason: str = "Admitted", **kw: Any) -> dict[str, Any]:
    kw.setdefault("demand", {"nvidia.com/gpu": "2"})
    r = record(VLLM, index, admitted=True, pods=2, **kw)
    r["status"]["conditions"][0]["reason"] = reason
    return r


def _new(group: int, worker: int, **kw: Any) -> dict[str, Any]:
    """A pod as the StatefulSet controller sends it to the webhook: not gated yet."""
    return lws_pod("vllm", group, worker, gated=False, **kw)


def _table(
    records: list[dict[str, Any]],
    pods: list[dict[str, Any]] | None = None,
    lwss: list[dict[str, Any]] | None = None,
) -> Table:
    pods = pods if pods is not None else [_new(0, 0), _new(1, 0)]
    lwss = lwss if lwss is not None else [VLLM]
    return build(
        lwss, records, pods, lws_statefulsets(lwss, pods), read_pools([POOL]).ok, DemandMemo().demand
    )


def _sts(table: Table, pods: list[dict[str, Any]]) -> Any:
    by = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in lws_statefulsets([VLLM], pods)}
    return lambda ns, name: by.get((ns, name))


def test_a_pod_of_an_admitted_group_is_made_with_the_pools_selector_and_tolerations() -> None:
    pods = [_new(0, 0)]
    table = _table([_admitted(0)], pods)
    for pod in (_new(0, 0), _new(0, 1)):
        ops = patch_for(pod, "default", table, _sts(table, pods))
        assert ops is not None, pod["metadata"]["name"]
        assert {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "a"}} in ops
        assert {
            "op": "add",
            "path": "/spec/tolerations",
            "value": [{"key": "gpu", "operator": "Exists"}, charge_toleration("u-1", 0)],
        } in ops, "the pool's tolerations, and the mark that charges the pod to its group"
        assert not [op for op in ops if "schedulingGates" in op["path"]]


def test_a_pod_not_yet_labelled_by_lws_is_told_apart_by_its_statefulset() -> None:
    """Our webhook may run before LWS's pod webhook: a leader then has no group index label
    (the StatefulSet's ordinal is it), a worker no worker index."""
    pods = [_new(0, 0), _new(1, 0)]
    table = _table([_admitted(1)], pods)
    leader = _new(1, 0)
    del leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
    del leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"]
    assert patch_for(leader, "default", table, _sts(table, pods)) is None, "no index at all: gated"
    leader["metadata"]["labels"]["apps.kubernetes.io/pod-index"] = "1"
    assert patch_for(leader, "default", table, _sts(table, pods)) is not None
    worker = _new(1, 1)
    del worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"]
    worker["metadata"]["labels"]["apps.kubernetes.io/pod-index"] = "1"
    assert patch_for(worker, "default", table, _sts(table, pods)) is not None
    wrong = _new(0, 0)
    wrong["metadata"]["labels"]["apps.kubernetes.io/pod-index"] = "0"
    wrong["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] = "1"  # claims group 1
    assert patch_for(wrong, "default", table, _sts(table, pods)) is None, "ordinal 0 is not group 1"
    forged_worker = _new(1, 1)
    forged_worker["metadata"]["ownerReferences"][0]["uid"] = "sts/default/vllm-0"  # group 0's StatefulSet
    assert patch_for(forged_worker, "default", table, _sts(table, pods)) is None


@pytest.mark.parametrize(
    ("why", "records", "pod"),
    [
        ("no record", [], _new(0, 0)),
        ("waiting", [record(VLLM, 0, admitted=False)], _new(0, 0)),
        ("template changed", [_admitted(0, "TemplateChanged")], _new(0, 0)),
        ("a stranger's claim", [_admitted(0, "NotMadeByLeaderWorkerSet")], _new(0, 0)),
        ("another group", [_admitted(1)], _new(0, 0)),
        ("an earlier LWS of the name", [_admitted(0, uid="u-old")], _new(0, 0)),
        ("another namespace", [_admitted(0)], lws_pod("vllm", 0, 0, gated=False, namespace="other")),
        ("asks more than admitted", [_admitted(0)], lws_pod("vllm", 0, 0, gated=False, gpu_limit=2)),
        ("recorded demand differs", [_admitted(0, demand={"nvidia.com/gpu": "4"})], _new(0, 0)),
    ],
)
def test_anything_else_is_gated(why: str, records: list[dict[str, Any]], pod: dict[str, Any]) -> None:
    table = _table(records)
    assert patch_for(pod, pod["metadata"]["namespace"], table, _sts(table, [pod])) is None, why


def test_a_forged_owner_is_gated() -> None:
    table = _table([_admitted(0)])
    leader = _new(0, 0)
    leader["metadata"]["ownerReferences"][0]["uid"] = "someone-elses"
    assert patch_for(leader, "default", table, _sts(table, [])) is None
    bare = _new(0, 0)
    bare["metadata"]["ownerReferences"] = []
    assert patch_for(bare, "default", table, _sts(table, [])) is None


def test_a_worker_waits_for_the_pass_to_have_seen_its_leader_and_its_statefulset() -> None:
    no_leader = _table([_admitted(0)], pods=[])
    assert patch_for(_new(0, 1), "default", no_leader, _sts(no_leader, [_new(0, 0)])) is None
    # The informer has seen the leader since the pass: that is enough.
    leader = _new(0, 0)
    live = {"vllm-0": leader}
    sts = _sts(no_leader, [leader])
    assert patch_for(_new(0, 1), "default", no_leader, sts, lambda ns, n: live.get(n)) is not None
    impostor = _new(0, 0)
    impostor["metadata"]["ownerReferences"] = []
    assert patch_for(_new(0, 1), "default", no_leader, sts, lambda ns, n: {"vllm-0": impostor}.get(n)) is None
    table = _table([_admitted(0)], [_new(0, 0)])
    assert patch_for(_new(0, 1), "default", table, lambda ns, name: None) is None, "StatefulSet not seen"
    # The leader was replaced since: its worker StatefulSet is owned by a new pod.
    newer = _new(0, 0)
    newer["metadata"]["uid"] = "a-new-leader"
    sts = {s["metadata"]["name"]: s for s in lws_statefulsets([VLLM], [newer])}
    sts["vllm-0"]["metadata"]["ownerReferences"][0]["uid"] = "a-new-leader"
    assert patch_for(_new(0, 1), "default", table, lambda ns, name: sts.get(name)) is None


def test_a_group_beyond_replicas_or_an_unreadable_pool_is_not_in_the_table() -> None:
    fewer = copy.deepcopy(VLLM)
    fewer["spec"]["replicas"] = 1
    assert set(_table([_admitted(0), _admitted(1)], lwss=[fewer])) == {("default", "vllm", 0)}
    bad_pool = copy.deepcopy(POOL)
    bad_pool["spec"]["queueingStrategy"] = "Sometimes"
    pods = [_new(0, 0)]
    table = build(
        [VLLM],
        [_admitted(0)],
        pods,
        lws_statefulsets([VLLM], pods),
        read_pools([bad_pool]).ok,
        DemandMemo().demand,
    )
    assert table == {}


def test_the_webhooks_holder_uses_the_table_only_while_it_may() -> None:
    leading = [True]
    holder = PassThrough(lambda: leading[0])
    pods = [_new(0, 0)]
    table = _table([_admitted(0)], pods)
    assert holder.patch(_new(0, 0), "default") is None, "nothing published yet"
    holder.publish(table, _sts(table, pods))
    assert holder.patch(_new(0, 0), "default") is not None
    leading[0] = False
    assert holder.patch(_new(0, 0), "default") is None, "a replica that may not write gates"
    leading[0] = True
    holder.clear()
    assert holder.patch(_new(0, 0), "default") is None and len(holder) == 0


def test_a_pod_without_the_opt_in_label_is_not_touched() -> None:
    table = _table([_admitted(0)])
    pod = _new(0, 0)
    del pod["metadata"]["labels"]["lws-gatekeeper.io/pool"]
    assert patch_for(pod, "default", table, _sts(table, [])) is None


def _at(obj: dict[str, Any], version: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = version
    return out


WAITING = _at(record(VLLM, 0, admitted=False, demand={"nvidia.com/gpu": "2"}, pods=2), "10")
ADMITTED_11 = _at(_admitted(0), "11")
KEY = ("default", WAITING["metadata"]["name"])


@pytest.mark.parametrize(
    ("why", "informer", "written", "expect", "kept"),
    [
        ("the informer behind our admission", [WAITING], Written("10", ADMITTED_11, 0.0), "11", True),
        ("the informer caught up", [ADMITTED_11], Written("10", ADMITTED_11, 0.0), "11", False),
        ("someone wrote since", [_at(WAITING, "12")], Written("10", ADMITTED_11, 0.0), "12", False),
        ("made here, not seen yet", [], Written("", ADMITTED_11, 0.0, made_unseen=True), "11", True),
        ("seen once, then deleted", [], Written("10", ADMITTED_11, 0.0), None, False),
        ("too old to trust", [WAITING], Written("10", ADMITTED_11, -61.0), "10", False),
    ],
)
def test_a_record_is_known_as_this_leader_wrote_it_until_the_informer_shows_another_version(
    why: str, informer: list[dict[str, Any]], written: Written, expect: str | None, kept: bool
) -> None:
    records, still = as_known(informer, {KEY: written}, now=0.0)
    versions = [r["metadata"]["resourceVersion"] for r in records]
    assert versions == ([expect] if expect else []), why
    assert (KEY in still) is kept, why


def test_a_group_given_back_stays_out_of_the_table_while_the_informer_still_shows_it_admitted() -> None:
    given_back = _at(record(VLLM, 0, admitted=False, demand={"nvidia.com/gpu": "2"}, pods=2), "12")
    records, still = as_known([ADMITTED_11], {KEY: Written("11", given_back, 0.0)}, now=0.0)
    assert KEY in still, "kept until the informer shows the give-back"
    assert _table(records) == {}, "the give-back as written, not the admission the informer shows"
    assert set(_table([ADMITTED_11])) == {("default", "vllm", 0)}, "from the informer alone: still in"


def test_a_record_made_and_admitted_in_one_pass_is_known_admitted_until_the_informer_shows_it() -> None:
    made = written_after(None, None, _at(WAITING, "10"), 0.0, made=True)
    admitted = written_after(made, None, ADMITTED_11, 0.1)  # guarded by what the create returned
    assert (admitted.before, admitted.made_unseen) == ("10", True)
    records, still = as_known([], {KEY: admitted}, now=1.0)
    assert set(_table(records)) == {("default", "vllm", 0)}, "not listed yet: admitted as written"
    records, still = as_known([WAITING], still, now=1.0)
    assert set(_table(records)) == {("default", "vllm", 0)}, "listed at its creation: still admitted"
    assert still[KEY].made_unseen is False
    records, still = as_known([], still, now=1.0)
    assert records == [] and still == {}, "seen, then gone: deleted"


def test_a_group_given_back_leaves_the_published_table_at_once() -> None:
    holder = PassThrough()
    pods = [_new(0, 0), _new(1, 0)]
    table = dict(_table([_admitted(0), _admitted(1)], pods))
    holder.publish(table, _sts(table, pods))
    assert holder.patch(_new(0, 1), "default") is not None
    holder.withdraw(("default", "vllm", 0))
    assert holder.patch(_new(0, 1), "default") is None, "its pods are born gated from now on"
    assert holder.patch(_new(1, 1), "default") is not None, "other groups stay"
    holder.withdraw(("default", "vllm", 7))  # not in the table: nothing happens
    assert len(holder) == 1


# lift_for: a pod that exists gated, of a group admitted since it was made.


def _unlabelled(pod: dict[str, Any]) -> dict[str, Any]:
    del pod["metadata"]["labels"]["lws-gatekeeper.io/pool"]
    return pod


def test_a_gated_pod_of_an_admitted_group_is_lifted_and_steered_in_one_write() -> None:
    pods = [lws_pod("vllm", 0, 0), lws_pod("vllm", 0, 1)]
    table = _table([_admitted(0)], pods)
    for pod in pods:
        ops = lift_for(pod, table, _sts(table, pods))
        assert ops is not None, pod["metadata"]["name"]
        assert ops[:2] == [
            {"op": "test", "path": "/spec/schedulingGates/0/name", "value": "lws-gatekeeper.io/admission"},
            {"op": "remove", "path": "/spec/schedulingGates/0"},
        ]
        assert {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "a"}} in ops


def test_another_gate_stays_and_ours_is_found_where_it_is() -> None:
    pods = [lws_pod("vllm", 0, 0)]
    table = _table([_admitted(0)], pods)
    pod = copy.deepcopy(pods[0])
    pod["spec"]["schedulingGates"].insert(0, {"name": "example.com/other"})
    ops = lift_for(pod, table, _sts(table, pods))
    assert ops is not None
    assert {"op": "remove", "path": "/spec/schedulingGates/1"} in ops
    assert not [op for op in ops if op["path"] == "/spec/schedulingGates/0"]


@pytest.mark.parametrize(
    ("why", "pod", "records"),
    [
        ("not gated", lws_pod("vllm", 0, 0, gated=False), [_admitted(0)]),
        ("going", lws_pod("vllm", 0, 0, deleting=True), [_admitted(0)]),
        ("its group not admitted", lws_pod("vllm", 1, 0), [_admitted(0)]),
        ("admitted for a changed template", lws_pod("vllm", 0, 0), [_admitted(0, reason="TemplateChanged")]),
        ("asks more than the admitted demand", lws_pod("vllm", 0, 0, gpu_limit=2), [_admitted(0)]),
        ("not opted in", _unlabelled(lws_pod("vllm", 0, 0)), [_admitted(0)]),
        ("no admitted group at all", lws_pod("vllm", 0, 0), []),
    ],
)
def test_a_pod_that_is_not_certainly_an_admitted_member_is_left_to_the_pass(
    why: str, pod: dict[str, Any], records: list[dict[str, Any]]
) -> None:
    pods = [lws_pod("vllm", 0, 0), lws_pod("vllm", 1, 0)]
    table = _table(records, pods)
    assert lift_for(pod, table, _sts(table, pods)) is None, why


def test_a_worker_is_lifted_only_under_the_leader_its_statefulset_names() -> None:
    """A worker's StatefulSet is owned by its group's leader pod: a leader pod made again
    (a new UID) and not yet seen by the pass leaves its workers to the pass."""
    pods = [lws_pod("vllm", 0, 0), lws_pod("vllm", 0, 1)]
    table = _table([_admitted(0)], pods)
    worker = pods[1]
    assert lift_for(worker, table, _sts(table, pods)) is not None
    other_leader = copy.deepcopy(pods[0])
    other_leader["metadata"]["uid"] = "pod/default/vllm-0/again"
    live = {("default", "vllm-0"): other_leader}
    assert lift_for(worker, table, _sts(table, pods), lambda ns, n: live.get((ns, n))) is None


def test_a_group_admitted_before_its_leader_statefulset_existed_uses_the_one_the_informer_holds() -> None:
    """The pass admitted the group from the LWS's spec before the LWS controller made its
    leader StatefulSet: the webhook looks the StatefulSet up live, and only one named as
    the LWS and controlled by the admitted LWS will do."""
    leader = _new(0, 0)
    table = build([VLLM], [_admitted(0)], [], [], read_pools([POOL]).ok, DemandMemo().demand)
    assert table[("default", "vllm", 0)].leader_sts_uid == ""
    live = {s["metadata"]["name"]: s for s in lws_statefulsets([VLLM], [leader])}
    assert patch_for(leader, "default", table, lambda ns, n: live.get(n)) is not None
    assert patch_for(leader, "default", table, lambda ns, n: None) is None, "not made yet: gated"
    other = copy.deepcopy(live)
    other["vllm"]["metadata"]["ownerReferences"][0]["uid"] = "u-someone-else"
    assert patch_for(leader, "default", table, lambda ns, n: other.get(n)) is None, "another LWS's"


@pytest.mark.parametrize(
    ("labels", "through"),
    [
        ({"leaderworkerset.sigs.k8s.io/worker-index": "1"}, True),
        ({"leaderworkerset.sigs.k8s.io/worker-index": "1", "apps.kubernetes.io/pod-index": "1"}, True),
        ({"apps.kubernetes.io/pod-index": "1"}, True),  # not labelled by LWS's webhook yet
        ({"leaderworkerset.sigs.k8s.io/worker-index": "2"}, False),  # the worker StatefulSet scaled past size
        ({"apps.kubernetes.io/pod-index": "2"}, False),
        ({"leaderworkerset.sigs.k8s.io/worker-index": "1", "apps.kubernetes.io/pod-index": "2"}, False),
        ({"apps.kubernetes.io/pod-index": "0"}, False),  # ordinals started at 0: claims the leader's index
        ({}, False),
    ],
)
def test_a_worker_goes_through_only_with_an_index_its_group_has(
    labels: dict[str, str], through: bool
) -> None:
    pods = [_new(0, 0)]
    table = _table([_admitted(0)], pods)
    worker = _new(0, 1)
    worker["metadata"]["labels"].pop("leaderworkerset.sigs.k8s.io/worker-index")
    worker["metadata"]["labels"].update(labels)
    assert (patch_for(worker, "default", table, _sts(table, pods)) is not None) is through
