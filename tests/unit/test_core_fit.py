"""Node fit: every pod of a group placed at once on free room, or a precise reason why not."""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import GPU, bound_pod, ctr, gpu_nodes, lws, node, pod_spec

from gatekeeper.core.admission.fit import Misfit, NodeTable, fit_group
from gatekeeper.core.kube.selectors import NodeConstraints, NodeSelectorTerm, Requirement, Toleration
from gatekeeper.core.model.demand import PodDemand
from gatekeeper.core.model.nodes import Node, node_usage


def pods(*gpus: int, constraints: NodeConstraints | None = None) -> list[PodDemand]:
    """A group whose pods need these many GPUs each (first is the leader)."""
    constraints = constraints or NodeConstraints()
    return [PodDemand("leader" if i == 0 else "worker", {GPU: g}, constraints) for i, g in enumerate(gpus)]


def nodes_with(*gpus: int) -> list[Node]:
    return [node(f"n{i}").alloc(gpu=g).parsed() for i, g in enumerate(gpus)]


def test_spread_capacity_does_not_hold_a_pod_needing_two() -> None:
    result = fit_group(nodes_with(1, 1, 1, 1), {}, pods(2, 2))
    assert isinstance(result, Misfit)
    assert (result.role, result.resource, result.needed, result.largest) == ("leader", GPU, 2, 1)
    assert (result.total, result.spread, result.eligible, result.placed) == (4, 4, 4, 0)


def test_group_on_one_gpu_nodes() -> None:
    assert fit_group(nodes_with(1, 1, 1, 1), {}, pods(1, 1)) == ("n0", "n1")


def test_best_fit_keeps_big_nodes_free() -> None:
    assert fit_group(nodes_with(8, 2, 4), {}, pods(2)) == ("n1",)
    assert fit_group(nodes_with(8, 2, 4), {}, pods(3)) == ("n2",)


def test_largest_pods_are_placed_first() -> None:
    # In pod order, 1 -> n1 (best fit), 2 -> n0, then the last 2 finds no room;
    # largest first places 2 -> n1, 2 -> n0, 1 -> n0.
    assert fit_group(nodes_with(3, 2), {}, pods(1, 2, 2)) == ("n0", "n1", "n0")


def test_placement_needs_every_pod_at_once() -> None:
    result = fit_group(nodes_with(2, 1), {}, pods(2, 2))
    assert isinstance(result, Misfit)
    assert (result.placed, result.largest, result.total) == (1, 1, 1)


def test_foreign_pods_hold_room() -> None:
    nodes = nodes_with(1, 1)
    usage = node_usage([bound_pod("theirs", "n0", gpu=1), bound_pod("old", "n1", gpu=1, phase="Succeeded")])
    assert fit_group(nodes, usage, pods(1)) == ("n1",)
    assert isinstance(fit_group(nodes, usage, pods(1, 1)), Misfit)


def test_pod_slots_count() -> None:
    full = [node("n0").alloc(gpu=1, pods=1).parsed()]
    usage = node_usage([bound_pod("daemon", "n0", cpu="10m")])
    result = fit_group(full, usage, pods(1))
    assert isinstance(result, Misfit)
    assert (result.resource, result.largest) == ("pods", 0)


def test_no_single_node_has_everything() -> None:
    nodes = [node("a").alloc(gpu=2, cpu="1").parsed(), node("b").alloc(gpu=0, cpu="8").parsed()]
    result = fit_group(nodes, {}, [PodDemand("leader", {GPU: 2, "cpu": 4000})])
    assert isinstance(result, Misfit)
    assert result.resource is None
    assert result.eligible == 2


@pytest.mark.parametrize(
    ("builder", "usable"),
    [
        (node("n").alloc(gpu=1), True),
        (node("n").alloc(gpu=1).cordon(), False),
        (node("n").alloc(gpu=1).ready("False"), False),
        (node("n").alloc(gpu=1).ready("Unknown"), True),
    ],
)
def test_only_schedulable_nodes_take_pods(builder: Any, usable: bool) -> None:
    result = fit_group([builder.parsed()], {}, pods(1))
    assert (result == ("n",)) is usable


TOLERATE_GPU = (Toleration(key="nvidia.com/gpu", operator="Exists"),)


@pytest.mark.parametrize(
    ("taint", "tolerations", "fits"),
    [
        (("nvidia.com/gpu", "", "NoSchedule"), (), False),
        (("nvidia.com/gpu", "", "NoExecute"), (), False),
        (("nvidia.com/gpu", "", "PreferNoSchedule"), (), True),
        (("nvidia.com/gpu", "", "NoSchedule"), TOLERATE_GPU, True),
        (("nvidia.com/gpu", "a100", "NoSchedule"), (Toleration("nvidia.com/gpu", "Equal", "a100"),), True),
        (("nvidia.com/gpu", "h100", "NoSchedule"), (Toleration("nvidia.com/gpu", "Equal", "a100"),), False),
        (
            ("nvidia.com/gpu", "", "NoSchedule"),
            (Toleration("nvidia.com/gpu", "Exists", effect="NoExecute"),),
            False,
        ),
        (("dedicated", "x", "NoSchedule"), (Toleration(operator="Exists"),), True),
        (("node.kubernetes.io/not-ready", "", "NoExecute"), (), True),
        (("node.kubernetes.io/unreachable", "", "NoSchedule"), (), False),
    ],
)
def test_taints_and_tolerations(
    taint: tuple[str, str, str], tolerations: tuple[Toleration, ...], fits: bool
) -> None:
    nodes = [node("n").alloc(gpu=1).taint(*taint).parsed()]
    result = fit_group(nodes, {}, pods(1, constraints=NodeConstraints(tolerations=tolerations)))
    assert (result == ("n",)) is fits
    if not fits:
        assert isinstance(result, Misfit)
        assert result.eligible == 0


def _affinity(*terms: NodeSelectorTerm) -> NodeConstraints:
    return NodeConstraints(affinity=terms)


LABELLED = [
    node("small").labels(gpu="a10", mem="24").alloc(gpu=1).parsed(),
    node("big").labels(gpu="h100", mem="80").alloc(gpu=1).parsed(),
    node("plain").alloc(gpu=1).parsed(),
]


@pytest.mark.parametrize(
    ("constraints", "placed"),
    [
        (NodeConstraints(node_selector=(("gpu", "h100"),)), "big"),
        (_affinity(NodeSelectorTerm((Requirement("gpu", "In", ("h100", "a100")),))), "big"),
        (_affinity(NodeSelectorTerm((Requirement("gpu", "NotIn", ("a10", "h100")),))), "plain"),
        (_affinity(NodeSelectorTerm((Requirement("gpu", "DoesNotExist"),))), "plain"),
        (
            _affinity(NodeSelectorTerm((Requirement("gpu", "Exists"), Requirement("mem", "Gt", ("40",))))),
            "big",
        ),
        (_affinity(NodeSelectorTerm((Requirement("mem", "Lt", ("40",)),))), "small"),
        (_affinity(NodeSelectorTerm(fields=(Requirement("metadata.name", "In", ("plain",)),))), "plain"),
        (
            _affinity(
                NodeSelectorTerm((Requirement("gpu", "In", ("v100",)),)),
                NodeSelectorTerm((Requirement("gpu", "In", ("a10",)),)),
            ),
            "small",
        ),
        (_affinity(NodeSelectorTerm()), None),
        (_affinity(NodeSelectorTerm((Requirement("mem", "Gt", ("x",)),))), None),
    ],
)
def test_node_selector_and_affinity(constraints: NodeConstraints, placed: str | None) -> None:
    result = fit_group(LABELLED, {}, pods(1, constraints=constraints))
    if placed is None:
        assert isinstance(result, Misfit)
        assert result.eligible == 0
    else:
        assert result == (placed,)


def test_affinity_parsed_from_template() -> None:
    spec = pod_spec(
        ctr(gpu_limit=1),
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}
                    ]
                }
            }
        },
    )
    demand = lws("x").worker(spec=spec).demand()
    assert fit_group(LABELLED, {}, demand.pods) == ("big",)


def test_failed_placement_changes_nothing() -> None:
    table = NodeTable(nodes_with(2, 1))
    table.add_view("p", lambda _n: True)
    assert isinstance(table.place("p", pods(2, 2)), Misfit)
    assert table.free_of("n0")[GPU] == 2
    assert table.version == 0
    assert table.place("p", pods(2, 1)) == ("n0", "n1")
    assert table.free_of("n0")[GPU] == 0
    assert table.version == 1


def test_trial_placement_is_rolled_back() -> None:
    table = NodeTable(nodes_with(2))
    table.add_view("p", lambda _n: True)
    assert table.place("p", pods(2), keep=False) == ("n0",)
    assert table.free_of("n0") == {GPU: 2, "cpu": 32000, "memory": 256 * 2**30, "pods": 110}
    assert table.version == 0


def test_placements_in_one_pass_see_each_other() -> None:
    table = NodeTable(gpu_nodes(4))
    table.add_view("a", lambda _n: True)
    assert table.place("a", pods(1, 1)) == ("n0", "n1")
    assert table.place("a", pods(1, 1)) == ("n2", "n3")
    assert isinstance(table.place("a", pods(1)), Misfit)


def test_reserve_prefers_the_recorded_node() -> None:
    table = NodeTable(nodes_with(1, 1, 1))
    table.add_view("p", lambda _n: True)
    assert table.reserve("p", pods(1)[0], preferred="n2") == "n2"
    assert table.reserve("p", pods(1)[0], preferred="n2") == "n0"  # n2 is full now
    assert table.reserve("p", pods(1)[0], preferred="gone") == "n1"
    assert table.reserve("p", pods(1)[0]) is None


def test_hypothetical_table_sees_empty_schedulable_nodes() -> None:
    nodes = [node("n").alloc(gpu=8).cordon().taint("node.kubernetes.io/unschedulable").parsed()]
    usage = {"n": {GPU: 8}}
    assert isinstance(fit_group(nodes, usage, pods(8)), Misfit)
    table = NodeTable(nodes, usage, hypothetical=True)
    table.add_view("p", lambda _n: True)
    assert table.place("p", pods(8), keep=False) == ("n",)


def test_overlapping_views_share_node_room() -> None:
    table = NodeTable(gpu_nodes(2))
    table.add_view("a", lambda _n: True)
    table.add_view("b", lambda n: n.name == "n1")
    assert table.place("b", pods(1)) == ("n1",)
    assert table.place("a", pods(1)) == ("n0",)
    assert isinstance(table.place("a", pods(1)), Misfit)
