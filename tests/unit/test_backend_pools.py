"""One pass of the controller, snapshot in, actions out: records first, whole groups, nothing twice."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from core_builders import (
    GPU,
    LWSBuilder,
    bound_pod,
    gpu_nodes,
    lws,
    lws_pod,
    lws_statefulsets,
    node,
    pool,
    read_pools,
    record,
)

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools import Actions, Snapshot, decide
from gatekeeper.core.kube.keys import ADMITTED, GROUP_INDEX_LABEL, LWS_NAME_LABEL
from gatekeeper.core.kube.quantity import format_amount
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import DemandMemo
from gatekeeper.core.model.nodes import Node
from gatekeeper.core.model.record import new_record, record_name

ON_DEMAND = "on-demand"
NS = "default"


def uid_of(name: str, incarnation: int = 0) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}/{incarnation}"))


def gpu_lws(
    name: str = "vllm",
    *,
    pool_name: str = ON_DEMAND,
    size: int = 2,
    replicas: int = 2,
    gpus: int = 1,
    age: int = 0,
    incarnation: int = 0,
) -> LWSBuilder:
    """An opted-in LWS whose every pod needs ``gpus`` GPUs (as limits, like the vLLM example)."""
    return (
        lws(name)
        .pool(pool_name)
        .uid(uid_of(name, incarnation))
        .size(size)
        .replicas(replicas)
        .worker(gpu_limit=gpus)
        .age(age)
    )


def quota_pool(name: str = ON_DEMAND, gpus: int = 4) -> dict[str, Any]:
    return pool(name).quota(gpu=gpus).obj()


@dataclass
class Scene:
    """A snapshot under construction; ``snap()`` freezes it."""

    lwss: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    bound: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    pools: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    priorities: dict[str, int] = field(default_factory=dict)
    memo: DemandMemo = field(default_factory=DemandMemo)
    """Demands remembered from one pass to the next, as the loop that owns it does."""

    def snap(self) -> Snapshot:
        bound = self.bound + [p for p in self.pods if p["spec"].get("nodeName") and p not in self.bound]
        return Snapshot(
            lwss=self.lwss,
            pods=self.pods,
            bound_pods=bound,
            nodes=self.nodes,
            pools=read_pools(self.pools),
            records=self.records,
            priorities=self.priorities,
            statefulsets=lws_statefulsets(self.lwss, self.pods),
        )

    def decide(self) -> Actions:
        return decide(self.snap(), self.memo)


def seed_scene(replicas: int = 10) -> Scene:
    """The issue's cluster: four 1-GPU nodes in pool on-demand (quota 4 GPUs), vLLM with size 2."""
    return Scene(
        lwss=[gpu_lws(replicas=replicas).obj()],
        nodes=gpu_nodes(4, pool=ON_DEMAND),
        pools=[quota_pool()],
    )


def written(actions: Actions, before: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records after the I/O layer carried ``actions`` out (what the reconciler writes)."""
    records = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in before}
    for key in actions.release:
        del records[key]
    for group in actions.create_records:
        owner = {"metadata": {"name": group.key.name, "namespace": group.key.namespace, "uid": group.lws_uid}}
        records[(group.key.namespace, group.record)] = new_record(owner, group.key.index)
    for admit in actions.admit:
        g = admit.group
        total = g.demand.total if isinstance(g.demand, GroupDemand) else {}
        records[(g.key.namespace, g.record)]["status"] = {
            "pool": g.pool,
            "pods": len(admit.nodes),
            "demand": {r: format_amount(r, v) for r, v in sorted(total.items())},
            "placement": {str(i): n for i, n in enumerate(admit.nodes)},
            "conditions": [{"type": ADMITTED, "status": "True", "reason": "Admitted"}],
        }
    for wait in actions.waiting:
        g = wait.group
        records[(g.key.namespace, g.record)]["status"] = {
            "pool": g.pool,
            "conditions": [{"type": ADMITTED, "status": "False", "reason": str(wait.reason)}],
        }
    return list(records.values())


def keys(items: Sequence[Any]) -> list[tuple[str, int]]:
    """(LWS name, group index) of admissions / waiting statuses / group states."""
    out = []
    for item in items:
        group = getattr(item, "group", item)
        out.append((group.key.name, group.key.index))
    return out


def rec_name(lws_obj: dict[str, Any], index: int) -> tuple[str, str]:
    meta = lws_obj["metadata"]
    return (meta["namespace"], record_name(meta["name"], meta["uid"], index))


def seed_message(index: int) -> str:
    return (
        f"group {index} needs 2 nvidia.com/gpu on 2 nodes; "
        "pool on-demand has 0 free (4 of 4 held by 2 admitted groups)"
    )


# ----- a new LWS, and gates ------------------------------------------------------------


def test_new_lws_is_recorded_and_admitted_before_its_pods_exist() -> None:
    scene = seed_scene(replicas=2)
    actions = scene.decide()
    vllm = scene.lwss[0]
    assert [g.record for g in actions.create_records] == [rec_name(vllm, 0)[1], rec_name(vllm, 1)[1]]
    assert [g.key for g in actions.create_records] == [GroupKey(NS, "vllm", 0), GroupKey(NS, "vllm", 1)]
    assert keys(actions.admit) == [("vllm", 0), ("vllm", 1)]
    assert sorted(n for a in actions.admit for n in a.nodes) == ["n0", "n1", "n2", "n3"]
    assert all(a.summary == "2 nvidia.com/gpu" and a.group.pool == ON_DEMAND for a in actions.admit)
    assert all(a.group.pods == () and a.group.gated == () for a in actions.admit)
    assert actions.ungate == ()
    assert actions.waiting == ()
    assert actions.release == ()
    assert actions.held_invalid == ()
    assert actions.problems == ()
    status = actions.pools[ON_DEMAND]
    assert (status.used[GPU], status.free[GPU], status.admitted, status.waiting) == (4, 0, 2, 0)


def test_record_names_are_readable_and_short_enough() -> None:
    assert record_name("vllm", "3f2a9c1e-aaaa", 7) == "vllm-3f2a9-7"
    long_a, long_b = "a" * 250 + "x", "a" * 250 + "y"
    name_a, name_b = record_name(long_a, "3f2a9c1e", 12), record_name(long_b, "3f2a9c1e", 12)
    assert len(name_a) <= 253 and len(name_b) <= 253
    assert name_a != name_b
    assert name_a.endswith("-3f2a9-12")


def admitted_scene() -> Scene:
    """vLLM with 3 groups: 0 and 1 admitted by earlier passes, 2 waiting; pods of all three exist."""
    vllm = gpu_lws(replicas=3).obj()
    return Scene(
        lwss=[vllm],
        nodes=gpu_nodes(4, pool=ON_DEMAND),
        pools=[quota_pool()],
        records=[
            record(vllm, 0, admitted=True, placement={"0": "n0", "1": "n1"}),
            record(vllm, 1, admitted=True, placement={"0": "n2", "1": "n3"}),
            record(vllm, 2, admitted=False),
        ],
        pods=[
            lws_pod("vllm", 0, 0, pool=ON_DEMAND),
            lws_pod("vllm", 0, 1, pool=ON_DEMAND),
            # Leader of group 1 already ungated and running; its worker (LeaderReady) just appeared.
            lws_pod("vllm", 1, 0, pool=ON_DEMAND, gated=False, node_name="n2", phase="Running"),
            lws_pod("vllm", 1, 1, pool=ON_DEMAND),
            lws_pod("vllm", 2, 0, pool=ON_DEMAND),
            lws_pod("vllm", 2, 1, pool=ON_DEMAND),
        ],
    )


def test_gated_pods_of_admitted_groups_are_ungated_and_only_those() -> None:
    actions = admitted_scene().decide()
    assert actions.ungate == ((NS, "vllm-0"), (NS, "vllm-0-1"), (NS, "vllm-1-1"))
    assert actions.admit == ()
    assert actions.create_records == ()
    assert actions.release == ()
    assert keys(actions.waiting) == [("vllm", 2)]
    assert actions.waiting[0].reason is Reason.WAITING_FOR_QUOTA
    assert actions.waiting[0].group.gated == ("vllm-2", "vllm-2-1")


def test_terminating_pods_of_admitted_groups_are_left_alone() -> None:
    scene = admitted_scene()
    scene.pods[0] = lws_pod("vllm", 0, 0, pool=ON_DEMAND, deleting=True)
    actions = scene.decide()
    assert (NS, "vllm-0") not in actions.ungate
    assert (NS, "vllm-0-1") in actions.ungate


def test_pods_without_lws_labels_are_ignored() -> None:
    scene = admitted_scene()
    stray = lws_pod("vllm", 0, 0, pool=ON_DEMAND)
    stray["metadata"]["name"] = "hand-made"
    del stray["metadata"]["labels"][LWS_NAME_LABEL]
    del stray["metadata"]["labels"][GROUP_INDEX_LABEL]
    no_index = lws_pod("vllm", 0, 0, pool=ON_DEMAND)
    no_index["metadata"]["name"] = "no-index"
    del no_index["metadata"]["labels"][GROUP_INDEX_LABEL]
    bad_index = lws_pod("vllm", 0, 0, pool=ON_DEMAND)
    bad_index["metadata"]["name"] = "bad-index"
    bad_index["metadata"]["labels"][GROUP_INDEX_LABEL] = "zero"
    negative = lws_pod("vllm", 0, 0, pool=ON_DEMAND)
    negative["metadata"]["name"] = "negative"
    negative["metadata"]["labels"][GROUP_INDEX_LABEL] = "-1"
    no_labels = lws_pod("vllm", 0, 0, pool=ON_DEMAND)
    no_labels["metadata"] = {"name": "no-labels", "namespace": NS, "labels": None}
    no_meta: dict[str, Any] = {"spec": {"schedulingGates": [{"name": "x"}]}, "status": None}
    baseline = admitted_scene().decide()
    scene.pods += [stray, no_index, bad_index, negative, no_labels, no_meta]
    actions = scene.decide()
    assert actions == baseline
    assert all(w.group.key.index >= 0 for w in actions.waiting)


# ----- the seed scenario, over several passes --------------------------------------------


def test_seed_scenario_admits_exactly_groups_0_and_1() -> None:
    actions = seed_scene().decide()
    assert keys(actions.admit) == [("vllm", 0), ("vllm", 1)]
    assert len(actions.create_records) == 10
    assert [w.group.key.index for w in actions.waiting] == list(range(2, 10))
    for position, wait in enumerate(actions.waiting, start=1):
        assert wait.reason is Reason.WAITING_FOR_QUOTA
        assert wait.message == seed_message(wait.group.key.index)
        assert wait.position == position
    assert actions.waiting[1].message == (
        "group 3 needs 2 nvidia.com/gpu on 2 nodes; "
        "pool on-demand has 0 free (4 of 4 held by 2 admitted groups)"
    )
    assert (
        actions.pools[ON_DEMAND].describe()
        == "pool on-demand: 4/4 nvidia.com/gpu held; 2 admitted, 8 waiting"
    )


def test_second_pass_admits_nothing_more() -> None:
    scene = seed_scene()
    first = scene.decide()
    scene.records = written(first, [])
    second = scene.decide()
    assert second.admit == ()
    assert second.create_records == ()
    assert second.release == ()
    assert second.ungate == ()
    assert [(w.group.key.index, w.message) for w in second.waiting] == [
        (w.group.key.index, w.message) for w in first.waiting
    ]
    status = second.pools[ON_DEMAND]
    assert (status.used[GPU], status.admitted, status.waiting, status.stranded) == (4, 2, 8, ())


def test_admitted_groups_hold_quota_even_without_placement_or_pods() -> None:
    """A record that says Admitted=True counts, whatever else it lacks: never admit twice."""
    scene = seed_scene()
    vllm = scene.lwss[0]
    scene.records = [record(vllm, 0, admitted=True), record(vllm, 1, admitted=True)]
    actions = scene.decide()
    assert actions.admit == ()
    assert {g.key.index for g in actions.create_records} == set(range(2, 10))
    assert actions.pools[ON_DEMAND].used[GPU] == 4


def test_third_pass_lets_the_pods_of_admitted_groups_through() -> None:
    scene = seed_scene()
    scene.records = written(scene.decide(), [])
    scene.records = written(scene.decide(), scene.records)
    scene.pods = [lws_pod("vllm", g, w, pool=ON_DEMAND) for g in range(10) for w in range(2)]
    actions = scene.decide()
    assert actions.ungate == tuple((NS, n) for n in ("vllm-0", "vllm-0-1", "vllm-1", "vllm-1-1"))
    assert actions.admit == ()
    assert len(actions.waiting) == 8


# ----- release -----------------------------------------------------------------------------


def scaled_down_scene(pods_of_2_and_3: list[dict[str, Any]]) -> Scene:
    """vLLM scaled from 4 to 2 groups, all four admitted earlier (pool of 8 GPUs)."""
    vllm = gpu_lws(replicas=2).obj()
    return Scene(
        lwss=[vllm],
        nodes=gpu_nodes(8, pool=ON_DEMAND),
        pools=[quota_pool(gpus=8)],
        records=[record(vllm, i, admitted=True) for i in range(4)],
        pods=pods_of_2_and_3,
    )


def group_pods(group: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [lws_pod("vllm", group, w, pool=ON_DEMAND, **kwargs) for w in range(2)]


RUNNING: dict[str, Any] = {"gated": False, "phase": "Running", "node_name": "n7"}


@pytest.mark.parametrize(
    ("pods", "released"),
    [
        pytest.param([], [2, 3], id="pods-gone"),
        pytest.param(group_pods(2, **RUNNING) + group_pods(3, **RUNNING), [], id="pods-running"),
        pytest.param(
            group_pods(2, deleting=True, **RUNNING) + group_pods(3, deleting=True, **RUNNING),
            [],
            id="pods-terminating",
        ),
        pytest.param(
            group_pods(2, gated=False, phase="Succeeded") + group_pods(3, gated=False, phase="Failed"),
            [2, 3],
            id="pods-finished",
        ),
        pytest.param(group_pods(3, deleting=True, **RUNNING), [2], id="only-group-3-left"),
        pytest.param(
            [
                lws_pod("vllm", 2, 0, pool=ON_DEMAND, deleting=True, **RUNNING),
                lws_pod("vllm", 2, 1, pool=ON_DEMAND, gated=False, phase="Failed"),
            ],
            [3],
            id="one-pod-of-group-2-left",
        ),
    ],
)
def test_scaled_away_groups_are_released_once_their_pods_are_gone(
    pods: list[dict[str, Any]], released: list[int]
) -> None:
    scene = scaled_down_scene(pods)
    actions = scene.decide()
    vllm = scene.lwss[0]
    assert actions.release == tuple(rec_name(vllm, i) for i in released)
    assert actions.admit == ()
    assert actions.create_records == ()
    assert actions.waiting == ()
    kept = 4 - len(released)
    assert actions.pools[ON_DEMAND].used[GPU] == 2 * kept  # kept groups still hold their quota


def test_scaled_away_groups_that_were_waiting_are_never_admitted() -> None:
    """Groups 2 and 3 waited when vLLM was scaled down; their gated pods are being deleted."""
    vllm = gpu_lws(replicas=2).obj()
    scene = Scene(
        lwss=[vllm],
        nodes=gpu_nodes(8, pool=ON_DEMAND),
        pools=[quota_pool(gpus=8)],
        records=[record(vllm, 0, admitted=True), record(vllm, 1, admitted=True)]
        + [record(vllm, i, admitted=False) for i in (2, 3)],
        pods=group_pods(2, deleting=True) + group_pods(3, deleting=True),
    )
    actions = scene.decide()
    assert actions.admit == ()
    assert actions.waiting == ()
    assert actions.create_records == ()
    assert actions.release == (rec_name(vllm, 2), rec_name(vllm, 3))  # they held nothing


def test_records_of_a_deleted_lws_are_released() -> None:
    gone = gpu_lws("gone").obj()
    vllm = gpu_lws(replicas=2).obj()
    scene = Scene(
        lwss=[vllm],
        nodes=gpu_nodes(4, pool=ON_DEMAND),
        pools=[quota_pool()],
        records=[record(gone, 0, admitted=True), record(gone, 1, admitted=False)]
        + [record(vllm, i, admitted=True) for i in range(2)],
    )
    actions = scene.decide()
    assert actions.release == (rec_name(gone, 0), rec_name(gone, 1))
    assert actions.admit == ()
    assert actions.pools[ON_DEMAND].used[GPU] == 4


def test_an_lws_being_deleted_gets_no_new_admission() -> None:
    vllm = gpu_lws(replicas=3).deleting().obj()
    scene = Scene(
        lwss=[vllm],
        nodes=gpu_nodes(8, pool=ON_DEMAND),
        pools=[quota_pool(gpus=8)],
        records=[
            record(vllm, 0, admitted=True),
            record(vllm, 1, admitted=True),
            record(vllm, 2, admitted=False),
        ],
        pods=group_pods(0, **RUNNING) + group_pods(2),
    )
    actions = scene.decide()
    assert actions.admit == ()
    assert actions.create_records == ()
    assert actions.waiting == ()
    # Group 0 still runs: it keeps its record; group 1 has no pods left; group 2 held nothing.
    assert actions.release == (rec_name(vllm, 1), rec_name(vllm, 2))
    assert actions.pools[ON_DEMAND].used[GPU] == 2


@pytest.mark.parametrize("admitted", [True, False, None])
def test_surge_group_with_live_pods_stays_wanted(admitted: bool | None) -> None:
    """Rolling update with maxSurge: group 2 exists beyond replicas=2 while its pods live."""
    vllm = gpu_lws(replicas=2).obj()
    records = [record(vllm, 0, admitted=True), record(vllm, 1, admitted=True)]
    if admitted is not None:
        records.append(record(vllm, 2, admitted=admitted))
    scene = Scene(
        lwss=[vllm],
        nodes=gpu_nodes(6, pool=ON_DEMAND),
        pools=[quota_pool(gpus=6)],
        records=records,
        pods=group_pods(2),
    )
    actions = scene.decide()
    assert actions.release == ()
    if admitted:
        assert actions.ungate == ((NS, "vllm-2"), (NS, "vllm-2-1"))
        assert actions.admit == ()
    else:
        assert keys(actions.admit) == [("vllm", 2)]
        assert actions.admit[0].group.gated == ("vllm-2", "vllm-2-1")
    assert keys(actions.create_records) == ([("vllm", 2)] if admitted is None else [])


def test_recreated_lws_gets_new_records_and_the_old_ones_are_released() -> None:
    old = gpu_lws(replicas=2, incarnation=0).obj()
    new = gpu_lws(replicas=2, incarnation=1).obj()
    assert old["metadata"]["uid"][:5] != new["metadata"]["uid"][:5]
    scene = Scene(
        lwss=[new],
        nodes=gpu_nodes(4, pool=ON_DEMAND),
        pools=[quota_pool()],
        records=[record(old, 0, admitted=True), record(old, 1, admitted=True)],
    )
    actions = scene.decide()
    assert actions.release == (rec_name(old, 0), rec_name(old, 1))
    assert [(NS, g.record) for g in actions.create_records] == [rec_name(new, 0), rec_name(new, 1)]
    assert all(g.lws_uid == new["metadata"]["uid"] for g in actions.create_records)
    assert keys(actions.admit) == [("vllm", 0), ("vllm", 1)]  # the old records hold nothing now


def test_recreated_lws_whose_uid_prefix_collides_does_not_inherit_admissions() -> None:
    """Same name, same first five UID characters: the record's spec UID tells them apart."""
    old = gpu_lws(replicas=2).uid("abcde111-0000").obj()
    new = gpu_lws(replicas=2).uid("abcde222-0000").obj()
    assert rec_name(old, 0) == rec_name(new, 0)
    scene = Scene(
        lwss=[new],
        nodes=gpu_nodes(2, pool=ON_DEMAND),
        pools=[quota_pool(gpus=2)],
        # The old incarnation's group 0 was admitted; its pods are being deleted with it.
        records=[record(old, 0, admitted=True), record(old, 1, admitted=False)],
        pods=[
            lws_pod(
                "vllm", 0, w, pool=ON_DEMAND, deleting=True, gated=False, phase="Running", node_name=f"n{w}"
            )
            for w in range(2)
        ],
    )
    actions = scene.decide()
    assert actions.ungate == ()
    assert actions.release == (rec_name(old, 0), rec_name(old, 1))
    assert [(NS, g.record) for g in actions.create_records] == [rec_name(new, 0), rec_name(new, 1)]
    # The old reservation is not carried over; the old pods still fill the nodes until they go.
    assert actions.pools[ON_DEMAND].used.get(GPU, 0) == 0
    assert [w.reason for w in actions.waiting] == [Reason.WAITING_FOR_NODES] * 2


# ----- bad input ---------------------------------------------------------------------------


def bad_lws(**kwargs: Any) -> LWSBuilder:
    return gpu_lws("bad", pool_name="a", **kwargs)


@dataclass(frozen=True)
class BadCase:
    lws: Callable[[], dict[str, Any]]
    pool_a: Callable[[], dict[str, Any]]
    reason: Reason
    message: str


GOOD_POOL_A = lambda: pool("a").quota(gpu=2).obj()  # noqa: E731

BAD_CASES = {
    "pool-not-found": BadCase(
        lambda: gpu_lws("bad", pool_name="nope").obj(),
        GOOD_POOL_A,
        Reason.POOL_NOT_FOUND,
        "group 0 names pool nope, which does not exist",
    ),
    "pool-invalid": BadCase(
        lambda: bad_lws().obj(),
        lambda: {**pool("a").obj(), "spec": {"nodeSelector": {"pool": "a"}, "queueingStrategy": "Sometimes"}},
        Reason.POOL_NOT_FOUND,
        "group 0 waits: pool a is invalid: Pool a: spec.queueingStrategy: 'Sometimes' is not one of",
    ),
    "exceeds-quota": BadCase(
        lambda: bad_lws(size=3).obj(),
        GOOD_POOL_A,
        Reason.EXCEEDS_QUOTA,
        "group 0 needs 3 nvidia.com/gpu on 3 nodes, more than pool a's quota of 2; it can never be admitted",
    ),
    "resource-not-in-quota": BadCase(
        lambda: bad_lws().worker(limits={"amd.com/gpu": 1}).obj(),
        GOOD_POOL_A,
        Reason.RESOURCE_NOT_IN_QUOTA,
        "group 0 requests amd.com/gpu, which pool a's quota does not list; it can never be admitted",
    ),
    "invalid-spec": BadCase(
        lambda: bad_lws().size("two").obj(),
        GOOD_POOL_A,
        Reason.INVALID_SPEC,
        "group 0 cannot be admitted: LeaderWorkerSet default/bad: spec.leaderWorkerTemplate.size: "
        "expected an integer, got 'two'",
    ),
}


@pytest.mark.parametrize("second_pass", [False, True], ids=["first-pass", "second-pass"])
@pytest.mark.parametrize("case", BAD_CASES.values(), ids=BAD_CASES.keys())
def test_bad_input_is_reported_and_blocks_nobody_else(case: BadCase, second_pass: bool) -> None:
    bad = case.lws()
    good = gpu_lws("good", pool_name="b", replicas=1).obj()
    scene = Scene(
        lwss=[bad, good],
        nodes=gpu_nodes(2, prefix="a", pool="a") + gpu_nodes(2, prefix="b", pool="b"),
        pools=[case.pool_a(), pool("b").obj()],
        pods=[lws_pod("bad", g, w, pool="a") for g in range(2) for w in range(2)],
    )
    if second_pass:
        scene.records = written(scene.decide(), [])
    actions = scene.decide()
    assert keys(actions.admit) == ([] if second_pass else [("good", 0)])
    assert actions.ungate == ()
    assert all(a.group.key.name == "good" for a in actions.admit)
    assert keys(actions.waiting) == [("bad", 0), ("bad", 1)]
    for wait in actions.waiting:
        assert wait.reason is case.reason
        assert wait.position == 0  # permanent: not really in the queue
    assert actions.waiting[0].message.startswith(case.message)
    assert actions.waiting[1].message.startswith(case.message.replace("group 0", "group 1", 1))
    if case.reason is Reason.POOL_NOT_FOUND and "invalid" in case.message:
        assert "a" in actions.invalid_pools
        assert "spec.queueingStrategy" in actions.invalid_pools["a"]
        assert "a" not in actions.pools
    else:
        assert actions.invalid_pools == {}
    assert actions.pools["b"].admitted == 1


def test_unreadable_bound_pod_is_reported_not_fatal() -> None:
    scene = seed_scene(replicas=2)
    weird = bound_pod("weird", "n0", cpu="lots")
    scene.bound = [weird]
    actions = scene.decide()
    assert len(actions.problems) == 1
    assert "other/weird" in actions.problems[0]
    assert keys(actions.admit) == [("vllm", 0), ("vllm", 1)]


def test_lws_without_a_name_is_reported_not_fatal() -> None:
    scene = seed_scene(replicas=2)
    scene.lwss.append({"metadata": {"namespace": NS}, "spec": {}})
    actions = scene.decide()
    assert actions.problems == ("a LeaderWorkerSet without metadata.name was ignored",)
    assert keys(actions.admit) == [("vllm", 0), ("vllm", 1)]


def test_unreadable_replicas_keep_admitted_groups_and_admit_none() -> None:
    vllm = gpu_lws(replicas=2).obj()
    vllm["spec"]["replicas"] = "two"
    scene = Scene(
        lwss=[vllm],
        nodes=gpu_nodes(8, pool=ON_DEMAND),
        pools=[quota_pool(gpus=8)],
        records=[record(vllm, 0, admitted=True, demand={GPU: "2"}, pods=2), record(vllm, 1, admitted=False)],
        pods=group_pods(1),
    )
    actions = scene.decide()
    assert actions.admit == ()
    assert actions.release == ()
    assert keys(actions.held_invalid) == [("vllm", 0)]
    assert "spec.replicas" in actions.held_invalid[0].message
    assert [(k, w.reason) for k, w in zip(keys(actions.waiting), actions.waiting, strict=True)] == [
        (("vllm", 1), Reason.INVALID_SPEC)
    ]
    assert actions.pools[ON_DEMAND].used[GPU] == 2


# ----- admitted group whose LWS became unreadable ------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "held_gpus", "summary"),
    [
        pytest.param({GPU: "2", "cpu": "500m"}, 2, "500m cpu, 2 nvidia.com/gpu", id="demand-recorded"),
        pytest.param(None, 0, "nothing recorded", id="no-demand-recorded"),
    ],
)
def test_admitted_group_keeps_its_reservation_when_its_demand_becomes_invalid(
    recorded: dict[str, str] | None, held_gpus: int, summary: str
) -> None:
    vllm = gpu_lws(replicas=2).worker(cpu="lots", gpu_limit=1).obj()  # edited into garbage
    other = gpu_lws("other", replicas=2, age=10).obj()
    scene = Scene(
        lwss=[vllm, other],
        nodes=gpu_nodes(4, pool=ON_DEMAND),
        pools=[quota_pool()],
        records=[
            record(vllm, 0, admitted=True, demand=recorded, pods=2, placement={"0": "n0", "1": "n1"}),
            record(vllm, 1, admitted=False),
        ],
        pods=[
            lws_pod("vllm", 0, 0, pool=ON_DEMAND, gated=False, node_name="n0", phase="Running"),
            lws_pod("vllm", 0, 1, pool=ON_DEMAND),  # recreated worker, from the garbage template
        ],
    )
    actions = scene.decide()
    # Kept: not released, not rewritten as waiting (that would flip Admitted to False).
    assert actions.release == ()
    assert ("vllm", 0) not in keys(actions.waiting)
    assert keys(actions.held_invalid) == [("vllm", 0)]
    held = actions.held_invalid[0]
    assert held.reason is Reason.INVALID_SPEC
    assert held.message.startswith(f"group 0 keeps its admission into pool {ON_DEMAND} ({summary})")
    assert (
        "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].resources.requests[cpu]" in held.message
    )
    # Its new pods cannot be checked against the reservation: they stay gated.
    assert actions.ungate == ()
    # Its waiting sibling is reported as invalid, like any group of an unreadable LWS.
    assert (("vllm", 1), Reason.INVALID_SPEC) in [
        (k, w.reason) for k, w in zip(keys(actions.waiting), actions.waiting, strict=True)
    ]
    # It still holds its recorded quota: the other LWS gets what is left, no more.
    status = actions.pools[ON_DEMAND]
    assert status.used[GPU] == held_gpus + 2 * len(actions.admit)
    assert keys(actions.admit) == [("other", 0)]
    if held_gpus:
        other_1 = next(w for w in actions.waiting if w.group.key == GroupKey(NS, "other", 1))
        assert other_1.message == (
            "group 1 needs 2 nvidia.com/gpu on 2 nodes; "
            "pool on-demand has 0 free (4 of 4 held by 2 admitted groups)"
        )


# ----- order, nodes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("priorities", "first"),
    [
        pytest.param({"high": 1000}, "new", id="priority-class-wins"),
        pytest.param({}, "old", id="unknown-class-is-priority-0"),
        pytest.param({"high": -5}, "old", id="lower-class-waits"),
    ],
)
def test_priority_class_comes_before_age(priorities: dict[str, int], first: str) -> None:
    old = gpu_lws("old", replicas=1, age=0).obj()
    new = gpu_lws("new", replicas=1, age=3600).priority_class("high").obj()
    scene = Scene(
        lwss=[old, new],
        nodes=gpu_nodes(2, pool=ON_DEMAND),
        pools=[quota_pool(gpus=2)],
        priorities=priorities,
    )
    actions = scene.decide()
    assert keys(actions.admit) == [(first, 0)]
    assert [w.reason for w in actions.waiting] == [Reason.WAITING_FOR_QUOTA]


def test_quota_fits_but_nodes_do_not() -> None:
    """Two free GPUs, one on each node: a pod that needs two waits for nodes, not for quota."""
    big = gpu_lws("big", size=1, replicas=1, gpus=2).obj()
    scene = Scene(
        lwss=[big],
        nodes=[node(f"n{i}").labels(pool=ON_DEMAND).alloc(gpu=2).parsed() for i in range(2)],
        pools=[quota_pool(gpus=2)],
        bound=[bound_pod("train-0", "n0", gpu=1), bound_pod("train-1", "n1", gpu=1)],
    )
    actions = scene.decide()
    assert actions.admit == ()
    assert len(actions.waiting) == 1
    wait = actions.waiting[0]
    assert wait.reason is Reason.WAITING_FOR_NODES
    assert wait.message == (
        "group 0 fits pool on-demand's quota but not its nodes: pod leader needs 2 nvidia.com/gpu; "
        "the largest free on any pool node is 1 (2 free in all, on 2 nodes)"
    )


# ----- determinism and size ----------------------------------------------------------------


def busy_scene() -> Scene:
    scene = admitted_scene()
    scene.lwss += [gpu_lws("other", replicas=3, age=5).obj(), gpu_lws("bad", pool_name="nope").obj()]
    scene.records.append(record(gpu_lws("gone").obj(), 0, admitted=True))
    scene.pods += [*group_pods(3), lws_pod("other", 0, 0, pool=ON_DEMAND)]
    scene.nodes += gpu_nodes(4, prefix="m", pool=ON_DEMAND)
    scene.pools = [quota_pool(gpus=8), pool("spare").obj()]
    scene.bound = [bound_pod("x", "m0", gpu=1)]
    return scene


def test_decide_is_deterministic_and_ignores_list_order() -> None:
    scene = busy_scene()
    first, again = scene.decide(), scene.decide()
    assert first == again
    shuffled = random.Random(7)
    for _ in range(5):
        for objs in (scene.lwss, scene.pods, scene.records, scene.pools, scene.bound):
            shuffled.shuffle(objs)
        shuffled.shuffle(scene.nodes)
        assert scene.decide() == first
    assert first.admit and first.ungate and first.waiting and first.release


def test_many_lwss_in_one_pass() -> None:
    """500 LWSs x 20 groups of 2 GPUs on 200 nodes of 8 GPUs, half of them with records and pods."""
    lwss = [
        gpu_lws(f"lws-{i:03d}", replicas=20, age=i, pool_name=ON_DEMAND if i % 5 else "spare").obj()
        for i in range(500)
    ]
    nodes = gpu_nodes(200, gpus=8, pool=ON_DEMAND) + gpu_nodes(50, gpus=8, prefix="s", pool="spare")
    records: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for i, obj in enumerate(lwss[:250]):
        name = obj["metadata"]["name"]
        pool_name = obj["metadata"]["labels"]["lws-gatekeeper.io/pool"]
        for g in range(20):
            records.append(record(obj, g, admitted=(i < 20 and g < 20), pool=pool_name))
            pods += [lws_pod(name, g, w, pool=pool_name) for w in range(2)]
    scene = Scene(
        lwss=lwss,
        nodes=nodes,
        pools=[pool(ON_DEMAND).obj(), pool("spare").obj()],
        records=records,
        pods=pods,
    )
    actions = scene.decide()
    total = sum(len(a.nodes) for a in actions.admit)
    assert len(actions.create_records) == 250 * 20
    assert len(actions.ungate) == 20 * 20 * 2
    status = actions.pools[ON_DEMAND]
    assert status.used[GPU] <= status.quota[GPU] == 1600
    assert total > 0
    assert len(actions.admit) + len(actions.waiting) == 500 * 20 - 20 * 20


# ----- a template change (rolling update) of an admitted group ----------------------------

OLD, NEW = "rev-1", "rev-2"


def changed_scene(
    group_0: list[dict[str, Any]],
    *,
    new_gpus: int = 2,
    quota: int = 8,
    group_1: list[dict[str, Any]] | None = None,
    recorded_1: bool = True,
) -> Scene:
    """vLLM (2 groups of 2 pods) was admitted with 1 GPU per pod at revision rev-1; its
    templates now ask ``new_gpus`` per pod. Group 1 runs its old pods unless told otherwise."""
    vllm = gpu_lws(replicas=2, gpus=new_gpus).obj()
    old = {GPU: "2"}
    if group_1 is None:
        group_1 = [
            lws_pod(
                "vllm",
                1,
                w,
                pool=ON_DEMAND,
                gated=False,
                node_name=f"n{2 + w}",
                phase="Running",
                revision=OLD,
            )
            for w in (0, 1)
        ]
    return Scene(
        lwss=[vllm],
        nodes=gpu_nodes(4, gpus=2, pool=ON_DEMAND),
        pools=[quota_pool(gpus=quota)],
        records=[
            record(vllm, 0, admitted=True, demand=old, pods=2, revision=OLD),
            record(vllm, 1, admitted=True, demand=old if recorded_1 else None, pods=2, revision=OLD),
        ],
        pods=group_0 + group_1,
    )


def old_pod(worker: int, **kwargs: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {"gated": False, "node_name": f"n{worker}", "phase": "Running"}
    return lws_pod("vllm", 0, worker, pool=ON_DEMAND, revision=OLD, **(defaults | kwargs))


def new_pod(worker: int, **kwargs: Any) -> dict[str, Any]:
    return lws_pod("vllm", 0, worker, pool=ON_DEMAND, revision=NEW, gpu_limit=2, **kwargs)


@dataclass
class ChangeCase:
    group_0: list[dict[str, Any]]
    ungate: tuple[str, ...] = ()
    admit: tuple[int, ...] = ()
    held: bool = False
    """Group 0 reported as TemplateChanged (new pods wait for old ones)."""
    waits: Reason | None = None
    used: int = 4
    """GPUs the pool counts as used after the pass."""
    quota: int = 8


CHANGE_CASES = {
    "not-updated-yet-keeps-its-old-reservation": ChangeCase([old_pod(0), old_pod(1)]),
    "an-old-pod-restarting-goes-through": ChangeCase(
        [old_pod(0), old_pod(1, gated=True, node_name=None, phase="Pending")], ungate=("vllm-0-1",)
    ),
    "new-leader-waits-while-old-worker-terminates": ChangeCase(
        [old_pod(1, deleting=True), new_pod(0)], held=True
    ),
    "new-pods-alone-are-admitted-again-when-they-fit": ChangeCase(
        [new_pod(0), new_pod(1)], admit=(0,), used=2 + 4
    ),
    "new-pods-alone-wait-when-they-do-not-fit": ChangeCase(
        [new_pod(0), new_pod(1)], waits=Reason.WAITING_FOR_QUOTA, used=2, quota=4
    ),
    "no-pods-at-all-keeps-the-reservation": ChangeCase([]),
    "pods-without-revision-label-count-as-old": ChangeCase(
        [lws_pod("vllm", 0, 0, pool=ON_DEMAND, gpu_limit=2)], ungate=("vllm-0",)
    ),
}


@pytest.mark.parametrize("case", list(CHANGE_CASES.values()), ids=list(CHANGE_CASES))
def test_a_template_change_is_admitted_again_never_let_through_on_the_old_reservation(
    case: ChangeCase,
) -> None:
    actions = changed_scene(case.group_0, quota=case.quota).decide()
    assert actions.ungate == tuple((NS, p) for p in case.ungate)
    assert [k for k in keys(actions.admit)] == [("vllm", i) for i in case.admit]
    assert actions.release == ()
    assert actions.pools[ON_DEMAND].used.get(GPU, 0) == case.used
    held = [h for h in actions.held_changed if h.group.key.index == 0]
    assert bool(held) == case.held
    if held:
        assert held[0].reason is Reason.TEMPLATE_CHANGED
        assert held[0].message == (
            "group 0's LeaderWorkerSet changed: it now needs 4 nvidia.com/gpu for 2 pods "
            "(admitted with 2 nvidia.com/gpu for 2); it keeps its admission while its 1 old pod "
            "remains, and its 1 new pod waits to be admitted again when they are gone"
        )
    waits = [w for w in actions.waiting if w.group.key.index == 0]
    assert [w.reason for w in waits] == ([case.waits] if case.waits else [])
    if waits:
        assert waits[0].message.endswith(
            "; it was admitted with 2 nvidia.com/gpu before its LeaderWorkerSet's templates "
            "changed, and gave that back when its last old pod went"
        ), waits[0].message
    # Group 1, not yet updated, keeps holding its old reservation and is never reported.
    assert ("vllm", 1) not in keys(actions.waiting) + keys(actions.admit) + keys(actions.held_changed)
    assert actions.revisions == ()


def test_two_growing_groups_on_one_pool_do_not_deadlock() -> None:
    """Each held 2 of 4 GPUs and now needs 4: holding the old while waiting for more would
    leave both stuck forever. Released as they re-plan, one is admitted and the other waits."""
    group_1 = [lws_pod("vllm", 1, w, pool=ON_DEMAND, revision=NEW, gpu_limit=2) for w in (0, 1)]
    scene = changed_scene([new_pod(0), new_pod(1)], quota=4, group_1=group_1)
    actions = scene.decide()
    assert keys(actions.admit) == [("vllm", 0)]
    assert [(w.group.key.index, w.reason) for w in actions.waiting] == [(1, Reason.WAITING_FOR_QUOTA)]
    assert actions.pools[ON_DEMAND].used[GPU] == 4
    # The next pass, with the records as the reconciler writes them: nothing twice, no leak.
    scene.records = written(actions, scene.records)
    again = scene.decide()
    assert again.admit == ()
    assert again.pools[ON_DEMAND].used[GPU] == 4
    assert set(again.ungate) == {(NS, "vllm-0"), (NS, "vllm-0-1")}


def test_a_new_revision_with_the_same_demand_goes_through_and_is_recorded() -> None:
    """A new image: same demand, other revision. Its pods go through; the record follows."""
    group_0 = [lws_pod("vllm", 0, w, pool=ON_DEMAND, revision=NEW) for w in (0, 1)]
    scene = changed_scene(group_0, new_gpus=1)
    actions = scene.decide()
    assert actions.ungate == ((NS, "vllm-0"), (NS, "vllm-0-1"))
    assert actions.held_changed == ()
    assert actions.revisions == ((NS, rec_name(scene.lwss[0], 0)[1], NEW),)


def test_a_record_that_does_not_say_its_demand_lets_pods_through_as_before() -> None:
    group_1 = [lws_pod("vllm", 1, w, pool=ON_DEMAND, revision=NEW, gpu_limit=2) for w in (0, 1)]
    actions = changed_scene([old_pod(0), old_pod(1)], group_1=group_1, recorded_1=False).decide()
    assert (NS, "vllm-1") in actions.ungate and (NS, "vllm-1-1") in actions.ungate
    assert actions.held_changed == ()


def test_a_demand_is_computed_once_per_lws_generation() -> None:
    """The demand is remembered by (uid, generation); an edit of the spec is a new generation."""
    vllm = gpu_lws(replicas=1, gpus=1).obj()
    vllm["metadata"]["generation"] = 1
    scene = Scene(lwss=[vllm], nodes=gpu_nodes(4, gpus=2, pool=ON_DEMAND), pools=[quota_pool(gpus=8)])
    assert scene.decide().pools[ON_DEMAND].used[GPU] == 2
    vllm["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"]["limits"][
        GPU
    ] = 2
    assert scene.decide().pools[ON_DEMAND].used[GPU] == 2, "same generation: the demand read before"
    vllm["metadata"]["generation"] = 2
    assert scene.decide().pools[ON_DEMAND].used[GPU] == 4


def test_a_record_that_said_template_changed_says_admitted_again_once_nothing_waits() -> None:
    """The LWS was rolled back while new pods waited: the group simply holds its admission."""
    scene = changed_scene([old_pod(0), old_pod(1)], new_gpus=1)
    scene.records[0]["status"]["conditions"][0]["reason"] = "TemplateChanged"
    scene.records[0]["status"]["demandSummary"] = "2 nvidia.com/gpu"
    actions = scene.decide()
    assert actions.restore_admitted == (
        (
            NS,
            rec_name(scene.lwss[0], 0)[1],
            "group 0 holds its admission into pool on-demand: 2 nvidia.com/gpu",
        ),
    )
    assert actions.held_changed == ()
    # While new pods wait, it keeps saying TemplateChanged: nothing to restore.
    held = changed_scene([old_pod(1, deleting=True), new_pod(0)])
    held.records[0]["status"]["conditions"][0]["reason"] = "TemplateChanged"
    assert held.decide().restore_admitted == ()


@pytest.mark.parametrize(
    "pods",
    [
        pytest.param([lws_pod("gone", 0, w, pool=ON_DEMAND, **RUNNING) for w in range(2)], id="running"),
        pytest.param(
            [lws_pod("gone", 0, w, pool=ON_DEMAND, deleting=True, **RUNNING) for w in range(2)],
            id="terminating",
        ),
    ],
)
def test_a_deleted_lws_keeps_its_reservation_until_its_pods_are_gone(pods: list[dict[str, Any]]) -> None:
    """An LWS gone from the gatekeeper's view (its label removed) while its records
    remain had them released at once while its pods still ran: the pool then admitted another
    group onto GPUs still in use. (A deleted LWS's records, deleted by Kubernetes' garbage
    collector and held by their finalizer: ``test_hold.py``.)"""
    gone = gpu_lws("gone").obj()
    waiting = gpu_lws("next", replicas=1, age=10).obj()
    scene = Scene(
        lwss=[waiting],
        nodes=gpu_nodes(4, pool=ON_DEMAND),
        pools=[quota_pool(gpus=2)],
        records=[record(gone, 0, admitted=True, demand={GPU: "2"}, pods=2), record(gone, 1, admitted=False)],
        pods=pods,
    )
    actions = scene.decide()
    assert actions.release == (rec_name(gone, 1),), "the admitted group's record stays while its pods live"
    assert actions.admit == (), "its quota is still held"
    assert actions.pools[ON_DEMAND].used[GPU] == 2
    scene.pods = []
    after = scene.decide()
    assert rec_name(gone, 0) in after.release
    assert keys(after.admit) == [("next", 0)]
