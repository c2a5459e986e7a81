"""The admission planner: whole groups or nothing, in queue order, with a reason for every wait."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import pytest
from core_builders import GPU, bound_pod, groups, lws, node, pool, waiting

from gatekeeper.core.admission.queue import AdmittedGroup, WaitingGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.planner import Plan, plan
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey, InvalidDemand
from gatekeeper.core.model.nodes import Node, node_usage
from gatekeeper.core.model.pool import Pool

ON_DEMAND = "on-demand"


def gpu_pool_nodes(*gpus: int, pool_name: str = "a") -> list[Node]:
    return [node(f"n{i}").labels(pool=pool_name).alloc(gpu=g).parsed() for i, g in enumerate(gpus)]


def size2(gpus: int = 1) -> GroupDemand:
    return lws("vllm").size(2).worker(gpu_limit=gpus).demand()


def admitted_keys(result: Plan) -> list[GroupKey]:
    return [a.key for a in result.admit]


def run(
    pools: list[Pool],
    nodes: list[Node],
    waiting_groups: list[WaitingGroup],
    admitted: list[AdmittedGroup] | None = None,
    usage: dict[str, dict[str, int]] | None = None,
) -> Plan:
    return plan(pools, nodes, usage or {}, admitted or [], waiting_groups)


# ----- the seed scenario --------------------------------------------------------------


def seed() -> tuple[list[Pool], list[Node], GroupDemand, list[WaitingGroup]]:
    pools = [pool(ON_DEMAND).parsed()]
    nodes = gpu_pool_nodes(1, 1, 1, 1, pool_name=ON_DEMAND)
    demand = lws("vllm").size(2).replicas(10).worker(gpu_limit=1).demand()
    return pools, nodes, demand, groups("vllm", 10, demand, pool=ON_DEMAND)


def seed_message(index: int) -> str:
    return (
        f"group {index} needs 2 nvidia.com/gpu on 2 nodes; "
        "pool on-demand has 0 free (4 of 4 held by 2 admitted groups)"
    )


def test_seed_scenario_admits_exactly_groups_0_and_1() -> None:
    pools, nodes, _, queue = seed()
    result = run(pools, nodes, queue)
    assert admitted_keys(result) == [GroupKey("default", "vllm", 0), GroupKey("default", "vllm", 1)]
    placed = [n for a in result.admit for n in a.nodes]
    assert sorted(placed) == ["n0", "n1", "n2", "n3"]
    assert [w.key.index for w in result.waiting] == list(range(2, 10))
    for position, w in enumerate(result.waiting, start=1):
        assert w.reason is Reason.WAITING_FOR_QUOTA
        assert w.message == seed_message(w.key.index)
        assert w.position == position
    status = result.pools[ON_DEMAND]
    assert (status.quota[GPU], status.used[GPU], status.free[GPU]) == (4, 4, 0)
    assert (status.admitted, status.waiting, status.inadmissible, status.nodes) == (2, 8, 0, 4)
    assert status.describe().startswith("pool on-demand: 4/4 nvidia.com/gpu,")
    assert status.describe().endswith("held; 2 admitted, 8 waiting")


@pytest.mark.parametrize("pods_bound", [True, False], ids=["pods-bound", "pods-not-bound-yet"])
def test_seed_scenario_next_pass_admits_nothing_more(pods_bound: bool) -> None:
    pools, nodes, demand, queue = seed()
    first = run(pools, nodes, queue)
    admitted, pods = [], []
    for a in first.admit:
        bound = frozenset(range(demand.pod_count)) if pods_bound else frozenset()
        admitted.append(AdmittedGroup(a.key, a.pool, demand, nodes=dict(enumerate(a.nodes)), bound=bound))
        if pods_bound:
            pods += [bound_pod(f"{a.key.name}-{a.key.index}-{i}", n, gpu=1) for i, n in enumerate(a.nodes)]
    second = run(pools, nodes, queue, admitted, node_usage(pods))
    assert second.admit == ()
    assert [w.message for w in second.waiting] == [seed_message(i) for i in range(2, 10)]
    assert second.pools[ON_DEMAND].stranded == ()


def test_unbound_pods_of_admitted_groups_hold_node_room() -> None:
    # Quota allows 8 GPUs but the nodes only have 4: the two admitted groups' pods
    # are ungated but not bound yet, so their room must still be held.
    pools = [pool(ON_DEMAND).quota(gpu=8).parsed()]
    nodes = gpu_pool_nodes(1, 1, 1, 1, pool_name=ON_DEMAND)
    demand = size2()
    admitted = [AdmittedGroup(GroupKey("default", "vllm", i), ON_DEMAND, demand) for i in range(2)]
    result = run(pools, nodes, groups("vllm", 3, demand, pool=ON_DEMAND)[2:], admitted)
    assert result.admit == ()
    assert result.waiting[0].reason is Reason.WAITING_FOR_NODES


def test_bound_pods_are_not_counted_twice() -> None:
    nodes = gpu_pool_nodes(1, 1, 1, 1)
    demand = size2()
    usage = node_usage([bound_pod("vllm-0", "n0", gpu=1), bound_pod("vllm-0-1", "n1", gpu=1)])
    held = AdmittedGroup(
        GroupKey("default", "vllm", 0), "a", demand, {0: "n0", 1: "n1"}, bound=frozenset({0, 1})
    )
    result = run([pool("a").parsed()], nodes, [waiting("vllm", 1, demand)], [held], usage)
    assert result.admit[0].nodes == ("n2", "n3")


def test_admitted_group_without_room_is_stranded() -> None:
    nodes = gpu_pool_nodes(1)
    demand = size2()
    held = AdmittedGroup(GroupKey("default", "vllm", 0), "a", demand)
    result = run([pool("a").quota(gpu=2).parsed()], nodes, [], [held])
    assert result.pools["a"].stranded == (GroupKey("default", "vllm", 0),)


def test_waiting_group_already_admitted_is_ignored() -> None:
    demand = size2()
    held = AdmittedGroup(GroupKey("default", "vllm", 0), "a", demand)
    result = run([pool("a").parsed()], gpu_pool_nodes(1, 1, 1, 1), groups("vllm", 2, demand), [held])
    assert admitted_keys(result) == [GroupKey("default", "vllm", 1)]
    assert result.waiting == ()


# ----- order --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queue", "expected"),
    [
        pytest.param(
            [waiting("old", 0, size2(), age=0), waiting("new", 0, size2(), age=10, priority=100)],
            ["new", "old"],
            id="priority-first",
        ),
        pytest.param(
            [waiting("young", 0, size2(), age=10), waiting("aged", 0, size2(), age=5)],
            ["aged", "young"],
            id="then-age",
        ),
        pytest.param(
            [waiting("b", 0, size2()), waiting("a", 0, size2(), namespace="z"), waiting("a", 0, size2())],
            ["a", "b", "a"],
            id="then-namespace-and-name",
        ),
        pytest.param(
            [waiting("x", 2, size2()), waiting("x", 0, size2()), waiting("x", 1, size2())],
            ["x", "x", "x"],
            id="then-group-index",
        ),
    ],
)
def test_queue_order(queue: list[WaitingGroup], expected: list[str]) -> None:
    # Room for nothing (an admitted group holds the whole quota): waiting order is queue order.
    held = AdmittedGroup(GroupKey("default", "holder", 0), "a", size2())
    result = run([pool("a").quota(gpu=2).parsed()], gpu_pool_nodes(1, 1), queue, [held])
    assert [w.key.name for w in result.waiting] == expected
    assert [w.position for w in result.waiting] == list(range(1, len(queue) + 1))
    if expected == ["x", "x", "x"]:
        assert [w.key.index for w in result.waiting] == [0, 1, 2]


def test_queue_order_admits_the_first_in_line() -> None:
    queue = [waiting("low", 0, size2(), age=0), waiting("high", 0, size2(), age=99, priority=10)]
    result = run([pool("a").parsed()], gpu_pool_nodes(1, 1), queue)
    assert admitted_keys(result) == [GroupKey("default", "high", 0)]


def test_naive_creation_times_count_as_utc() -> None:
    early = WaitingGroup(GroupKey("d", "naive", 0), "a", size2(), created=datetime(2024, 1, 1))
    late = waiting("aware", 0, size2())
    result = run([pool("a").parsed()], gpu_pool_nodes(1, 1), [late, early])
    assert admitted_keys(result) == [GroupKey("d", "naive", 0)]


# ----- queueing strategies ------------------------------------------------------------


def strategy_case(strict: bool) -> Plan:
    # 4 one-GPU nodes, 2 held by an admitted group. A big group (4 GPUs) is first in
    # line and waits for quota; a small group (2 GPUs) behind it would fit.
    builder = pool("a").quota(gpu=4)
    if strict:
        builder.strict()
    held = AdmittedGroup(GroupKey("default", "old", 0), "a", size2())
    big = lws("big").size(4).worker(gpu_limit=1).demand()
    queue = [waiting("big", 0, big, age=1), waiting("small", 0, size2(), age=2)]
    return run([builder.parsed()], gpu_pool_nodes(1, 1, 1, 1), queue, [held])


def test_best_effort_fifo_lets_a_smaller_group_pass() -> None:
    result = strategy_case(strict=False)
    assert admitted_keys(result) == [GroupKey("default", "small", 0)]
    assert result.waiting[0].reason is Reason.WAITING_FOR_QUOTA
    assert result.waiting[0].message == (
        "group 0 needs 4 nvidia.com/gpu on 4 nodes; pool a has 2 free (2 of 4 held by 1 admitted group)"
    )


def test_strict_fifo_holds_everything_behind_the_first_waiter() -> None:
    result = strategy_case(strict=True)
    assert result.admit == ()
    assert [(w.key.name, w.reason) for w in result.waiting] == [
        ("big", Reason.WAITING_FOR_QUOTA),
        ("small", Reason.BLOCKED_BY_STRICT_FIFO),
    ]
    assert result.waiting[1].message == "group 0 waits behind default/big group 0: pool a is StrictFIFO"
    assert result.waiting[1].position == 2


def test_strict_fifo_is_held_by_a_node_fit_wait_too() -> None:
    # Two 2-GPU nodes half used by someone else, two 1-GPU nodes: 1+1+1+1 free.
    nodes = gpu_pool_nodes(2, 2, 1, 1)
    usage = {"n0": {GPU: 1}, "n1": {GPU: 1}}
    wide = lws("wide").size(2).worker(gpu_limit=2).demand()
    queue = [waiting("wide", 0, wide, age=0), waiting("narrow", 0, size2(), age=1)]
    best_effort = run([pool("a").quota(gpu=4).parsed()], nodes, queue, usage=usage)
    strict = run([pool("a").quota(gpu=4).strict().parsed()], nodes, queue, usage=usage)
    assert admitted_keys(best_effort) == [GroupKey("default", "narrow", 0)]
    assert strict.admit == ()
    assert [w.reason for w in strict.waiting] == [Reason.WAITING_FOR_NODES, Reason.BLOCKED_BY_STRICT_FIFO]


def test_strict_fifo_is_not_blocked_by_a_group_that_can_never_fit() -> None:
    queue = [
        waiting("huge", 0, lws("huge").size(8).worker(gpu_limit=1).demand(), age=0),
        waiting("broken", 0, InvalidDemand("LeaderWorkerSet default/broken: spec.x: bad"), age=1),
        waiting("amd", 0, lws("amd").worker(limits={"amd.com/gpu": 1}).demand(), age=2),
        waiting("ok", 0, size2(), age=3),
    ]
    result = run([pool("a").quota(gpu=4).strict().parsed()], gpu_pool_nodes(1, 1, 1, 1), queue)
    assert admitted_keys(result) == [GroupKey("default", "ok", 0)]
    assert [w.reason for w in result.waiting] == [
        Reason.EXCEEDS_QUOTA,
        Reason.INVALID_SPEC,
        Reason.RESOURCE_NOT_IN_QUOTA,
    ]
    assert all(w.position == 0 and w.reason.permanent for w in result.waiting)
    status = result.pools["a"]
    assert (status.admitted, status.waiting, status.inadmissible) == (1, 0, 3)


def test_strict_fifo_block_stays_in_its_pool() -> None:
    pools = [pool("a").quota(gpu=1).strict().parsed(), pool("b").parsed()]
    nodes = [*gpu_pool_nodes(1, 1), node("b0").labels(pool="b").alloc(gpu=2).parsed()]
    queue = [waiting("x", 0, size2(), pool="a", age=0), waiting("y", 0, size2(), pool="b", age=1)]
    result = run(pools, nodes, queue)
    assert admitted_keys(result) == [GroupKey("default", "y", 0)]
    assert result.admit[0].nodes == ("b0", "b0")


# ----- every reason -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pools", "nodes", "demand", "reason", "message"),
    [
        pytest.param(
            [pool("b").parsed()],
            gpu_pool_nodes(1, 1),
            size2(),
            Reason.POOL_NOT_FOUND,
            "group 0 names pool a, which does not exist",
            id="missing-pool",
        ),
        pytest.param(
            [pool("a").parsed()],
            gpu_pool_nodes(1, 1),
            InvalidDemand(
                "LeaderWorkerSet default/x: spec.leaderWorkerTemplate.size: must be at least 1, got 0"
            ),
            Reason.INVALID_SPEC,
            "group 0 cannot be admitted: LeaderWorkerSet default/x: spec.leaderWorkerTemplate.size: "
            "must be at least 1, got 0",
            id="invalid-spec",
        ),
        pytest.param(
            [pool("a").quota(gpu=4).parsed()],
            gpu_pool_nodes(1, 1),
            lws("x").worker(limits={"amd.com/gpu": 1}).demand(),
            Reason.RESOURCE_NOT_IN_QUOTA,
            "group 0 requests amd.com/gpu, which pool a's quota does not list; it can never be admitted",
            id="resource-not-in-explicit-quota",
        ),
        pytest.param(
            [pool("a").parsed()],
            gpu_pool_nodes(1, 1),
            lws("x").worker(limits={"amd.com/gpu": 1}).demand(),
            Reason.RESOURCE_NOT_IN_QUOTA,
            "group 0 requests amd.com/gpu, which no node of pool a has; it can never be admitted",
            id="resource-no-pool-node-has",
        ),
        pytest.param(
            [pool("a").quota(gpu=4).parsed()],
            gpu_pool_nodes(8, 8),
            lws("x").size(3).worker(gpu_limit=2).demand(),
            Reason.EXCEEDS_QUOTA,
            "group 0 needs 6 nvidia.com/gpu on 3 nodes, more than pool a's quota of 4; "
            "it can never be admitted",
            id="larger-than-quota",
        ),
        pytest.param(
            [pool("a").parsed()],
            gpu_pool_nodes(1, 1, 1, 1),
            lws("x").size(5).worker(gpu_limit=1).demand(),
            Reason.EXCEEDS_QUOTA,
            "group 0 needs 5 nvidia.com/gpu on 5 nodes, more than all nodes of pool a together, 4; "
            "it can never be admitted",
            id="larger-than-all-pool-nodes",
        ),
        pytest.param(
            [pool("a").quota(gpu=4).parsed()],
            [],
            size2(),
            Reason.NO_MATCHING_NODE,
            "group 0 can never be placed: pool a has no nodes",
            id="pool-without-nodes",
        ),
        pytest.param(
            [pool("a").quota(gpu=4).parsed()],
            gpu_pool_nodes(1, 1),
            lws("x").worker(spec={"containers": [{"name": "c"}], "nodeSelector": {"zone": "b"}}).demand(),
            Reason.NO_MATCHING_NODE,
            "group 0 can never be placed: pod leader matches none of pool a's 2 nodes "
            "(check its nodeSelector, node affinity and tolerations)",
            id="selector-matches-no-pool-node",
        ),
        pytest.param(
            [pool("a").quota(gpu=4).parsed()],
            [node("t").labels(pool="a").alloc(gpu=1).taint("dedicated", "infer").parsed()],
            size2(),
            Reason.NO_MATCHING_NODE,
            "group 0 can never be placed: pod leader matches none of pool a's 1 node "
            "(check its nodeSelector, node affinity and tolerations)",
            id="untolerated-taint",
        ),
        pytest.param(
            [pool("a").quota(gpu=64).parsed()],
            gpu_pool_nodes(8, 8),
            lws("x").size(2).worker(gpu_limit=16).demand(),
            Reason.NODES_TOO_SMALL,
            "group 0 can never be placed: pod leader needs 16 nvidia.com/gpu; "
            "the largest node of pool a has 8",
            id="pod-larger-than-any-node",
        ),
        pytest.param(
            [pool("a").parsed()],
            gpu_pool_nodes(8, *[1] * 8),
            lws("x").size(2).worker(gpu_limit=8).demand(),
            Reason.NODES_TOO_SMALL,
            "group 0 can never be placed: pod worker needs 8 nvidia.com/gpu, "
            "and with the group's other 1 pod on pool a's empty nodes, no node has more than 1 left",
            id="group-larger-than-the-pool-can-ever-place",
        ),
        pytest.param(
            [pool("a").quota(gpu=4).parsed()],
            gpu_pool_nodes(1, 1, 1, 1, 2),
            lws("x").size(2).worker(gpu_limit=2).demand(),
            Reason.NODES_TOO_SMALL,
            "group 0 can never be placed: pod worker needs 2 nvidia.com/gpu, "
            "and with the group's other 1 pod on pool a's empty nodes, no node has more than 1 left",
            id="only-one-node-big-enough",
        ),
        pytest.param(
            [pool("a").quota(gpu=4).parsed()],
            [*gpu_pool_nodes(1, 1), node("n9").labels(pool="a").alloc(gpu=2).cordon().parsed()],
            lws("x").size(2).worker(gpu_limit=1).demand(),
            None,
            None,
            id="cordoned-node-is-not-never",
        ),
    ],
)
def test_reasons(
    pools: list[Pool],
    nodes: list[Node],
    demand: GroupDemand | InvalidDemand,
    reason: Reason | None,
    message: str | None,
) -> None:
    result = run(pools, nodes, [waiting("x", 0, demand)])
    if reason is None:
        assert admitted_keys(result) == [GroupKey("default", "x", 0)]
        return
    assert result.admit == ()
    (only,) = result.waiting
    assert (only.reason, only.message) == (reason, message)
    assert only.reason.permanent
    assert only.position == 0


def test_waits_for_nodes_when_free_gpus_are_spread_1_1_1_1() -> None:
    # Quota has 4 free GPUs, every node has 1 free, each pod needs 2. Node n4 (2 GPUs)
    # proves the group could fit an empty pool, so this is a wait, not "never".
    nodes = gpu_pool_nodes(1, 1, 1, 1, 2, 2)
    demand = lws("wide").size(2).worker(gpu_limit=2).demand()
    held = AdmittedGroup(GroupKey("default", "other", 0), "a", size2(2), nodes={0: "n4", 1: "n5"})
    result = run([pool("a").quota(gpu=8).parsed()], nodes, [waiting("wide", 0, demand)], [held])
    (only,) = result.waiting
    assert only.reason is Reason.WAITING_FOR_NODES
    assert not only.reason.permanent
    assert only.message == (
        "group 0 fits pool a's quota but not its nodes: pod leader needs 2 nvidia.com/gpu; "
        "the largest free on any pool node is 1 (4 free in all, on 4 nodes)"
    )
    assert only.position == 1


def test_waits_for_nodes_after_placing_part_of_the_group() -> None:
    nodes = gpu_pool_nodes(2, 2, 1, 1)
    usage = {"n1": {GPU: 1}}
    result = run([pool("a").quota(gpu=8).parsed()], nodes, [waiting("w", 0, size2(2))], usage=usage)
    (only,) = result.waiting
    assert only.reason is Reason.WAITING_FOR_NODES
    assert only.message.endswith("(3 free in all, on 3 nodes), after placing the group's other 1 pod")


def test_foreign_pods_count_for_nodes_but_not_for_quota() -> None:
    nodes = gpu_pool_nodes(1, 1, 1, 1)
    usage = node_usage([bound_pod("someone-else", "n0", gpu=1)])
    result = run([pool("a").parsed()], nodes, groups("vllm", 2, size2()), usage=usage)
    assert [a.nodes for a in result.admit] == [("n1", "n2")]
    (second,) = result.waiting
    assert second.reason is Reason.WAITING_FOR_NODES
    assert "pod worker needs 1 nvidia.com/gpu; the largest free on any pool node is 0" in second.message
    assert result.pools["a"].free[GPU] == 2


def test_waits_for_a_cordoned_node_rather_than_never() -> None:
    nodes = [node("big").labels(pool="a").alloc(gpu=8).cordon().parsed(), *gpu_pool_nodes(1)]
    result = run(
        [pool("a").quota(gpu=8).parsed()], nodes, [waiting("x", 0, lws("x").worker(gpu_limit=8).demand())]
    )
    assert result.waiting[0].reason is Reason.WAITING_FOR_NODES


def test_implicit_quota_counts_only_schedulable_nodes_but_never_uses_all() -> None:
    nodes = [*gpu_pool_nodes(1, 1), node("c").labels(pool="a").alloc(gpu=2).ready("False").parsed()]
    result = run(
        [pool("a").parsed()], nodes, [waiting("x", 0, lws("x").size(3).worker(gpu_limit=1).demand())]
    )
    assert result.waiting[0].reason is Reason.WAITING_FOR_QUOTA
    assert result.pools["a"].quota[GPU] == 2


def test_never_reasons_are_permanent_and_waits_are_not() -> None:
    transient = {
        Reason.WAITING_FOR_QUOTA,
        Reason.WAITING_FOR_NODES,
        Reason.WAITING_FOR_GANG,
        Reason.BLOCKED_BY_STRICT_FIFO,
        Reason.TEMPLATE_CHANGED,
        Reason.NOT_MADE_BY_LWS,
        Reason.BEYOND_GROUP_SIZE,
        Reason.NOT_AS_ADMITTED,
        Reason.WAITING_FOR_RESERVATION,
        Reason.HUB_UNREACHABLE,
        Reason.KARPENTER_UNAVAILABLE,
        Reason.ADMISSION_TIMEOUT,
        Reason.PREEMPTED,
        Reason.STRANDED,
    }
    assert {r for r in Reason if not r.permanent} == transient


def test_best_effort_admits_many_shapes_in_one_pass() -> None:
    nodes = gpu_pool_nodes(8, 4, 2, 1, 1)
    queue = [
        waiting("eight", 0, lws("eight").worker(gpu_limit=8).demand(), age=0),
        waiting("eight", 1, lws("eight").worker(gpu_limit=8).demand(), age=0),
        waiting("four", 0, lws("four").size(2).worker(gpu_limit=2).demand(), age=1),
        waiting("ones", 0, lws("ones").size(3).worker(gpu_limit=1).demand(), age=2),
        waiting("ones", 1, lws("ones").size(3).worker(gpu_limit=1).demand(), age=2),
    ]
    result = run([pool("a").parsed()], nodes, queue)
    assert {(a.key.name, a.key.index): a.nodes for a in result.admit} == {
        ("eight", 0): ("n0",),
        ("four", 0): ("n2", "n1"),
        ("ones", 0): ("n3", "n4", "n1"),
    }
    assert [(w.key.name, w.key.index, w.reason) for w in result.waiting] == [
        ("eight", 1, Reason.WAITING_FOR_NODES),
        ("ones", 1, Reason.WAITING_FOR_QUOTA),
    ]
    assert result.waiting[0].message == (
        "group 1 fits pool a's quota but not its nodes: pod leader needs 8 nvidia.com/gpu; "
        "the largest free on any pool node is 4 (8 free in all, on 4 nodes)"
    )


def test_why_and_duplicate_pools() -> None:
    pools, nodes, _, queue = seed()
    result = run(pools, nodes, queue)
    why = result.why(GroupKey("default", "vllm", 5))
    assert why is not None
    assert why.reason is Reason.WAITING_FOR_QUOTA
    assert result.why(GroupKey("default", "vllm", 0)) is None
    with pytest.raises(ValueError, match="two pools are named on-demand"):
        run(pools * 2, nodes, queue)


def test_ten_thousand_groups_on_five_thousand_nodes() -> None:
    nodes = [node(f"n{i:04d}").labels(pool="a").alloc(gpu=1).parsed() for i in range(5000)]
    demand = size2()
    queue = [waiting(f"lws-{k // 10:04d}", k % 10, demand, age=k // 10) for k in range(10_000)]
    result = run([pool("a").parsed()], nodes, queue)
    assert len(result.admit) == 2500
    assert [a.key for a in result.admit] == [w.key for w in sorted(queue, key=lambda w: (w.created, w.key))][
        :2500
    ]
    used = Counter(n for a in result.admit for n in a.nodes)
    assert len(used) == 5000
    assert set(used.values()) == {1}
    assert len(result.waiting) == 7500
    assert {w.reason for w in result.waiting} == {Reason.WAITING_FOR_QUOTA}
    assert result.waiting[-1].message.endswith(
        "pool a has 0 free (5000 of 5000 held by 2500 admitted groups)"
    )
    assert result.pools["a"].free[GPU] == 0


# ----- an autoscaled pool (nodeFit: QuotaOnly) ---------------------------------------------


def test_quota_only_pool_without_nodes_admits_up_to_its_quota() -> None:
    """No node yet (the autoscaler adds them when pods are Pending): the quota alone decides."""
    pools = [pool("auto").quota(gpu=4).quota_only().parsed()]
    result = run(pools, [], groups("vllm", 3, size2(), pool="auto"))
    assert [k.index for k in admitted_keys(result)] == [0, 1]
    assert all(a.nodes == ("", "") for a in result.admit), "no node to plan on: Pending for new nodes"
    [third] = result.waiting
    assert third.reason is Reason.WAITING_FOR_QUOTA
    assert result.pools["auto"].stranded == ()


def test_quota_only_pool_places_what_fits_and_leaves_the_rest_to_new_nodes() -> None:
    nodes = gpu_pool_nodes(1, pool_name="auto")
    pools = [pool("auto").quota(gpu=8).quota_only().parsed()]
    result = run(pools, nodes, groups("vllm", 2, size2(), pool="auto"))
    assert [a.nodes for a in result.admit] == [("n0", ""), ("", "")]


def test_quota_only_pool_admits_pods_larger_than_any_node_it_has_now() -> None:
    nodes = gpu_pool_nodes(1, 1, pool_name="auto")
    required = run(
        [pool("auto").quota(gpu=8).parsed()], nodes, [waiting("big", 0, size2(gpus=4), pool="auto")]
    )
    assert required.waiting[0].reason is Reason.NODES_TOO_SMALL
    auto = run(
        [pool("auto").quota(gpu=8).quota_only().parsed()],
        nodes,
        [waiting("big", 0, size2(gpus=4), pool="auto")],
    )
    assert admitted_keys(auto) == [GroupKey("default", "big", 0)]


def test_quota_only_pool_still_refuses_what_its_quota_never_holds() -> None:
    pools = [pool("auto").quota(gpu=4).quota_only().parsed()]
    result = run(pools, [], [waiting("huge", 0, size2(gpus=3), pool="auto")])
    assert result.waiting[0].reason is Reason.EXCEEDS_QUOTA
