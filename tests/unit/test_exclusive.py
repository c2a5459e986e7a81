"""LWS exclusive placement in the pools planner: a group goes whole into one domain of its key
that no other LWS group of its namespace holds, or waits, gated, with the reason."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from core_builders import GPU, bound_pod, lws, node, pool, waiting

from gatekeeper.core.admission.exclusive import Occupant, occupants, without
from gatekeeper.core.admission.queue import AdmittedGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.planner import Admission, Plan, Waiting, plan
from gatekeeper.core.kube.keys import EXCLUSIVE_TOPOLOGY_ANNOTATION, GROUP_KEY_LABEL
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.lws import exclusive_topology
from gatekeeper.core.model.nodes import Node, bound_pod_view, node_usage

RACK = "topology.example.com/rack"


def racks(*shape: tuple[str, int, int]) -> list[Node]:
    """Nodes of pool ``a``: (rack, nodes, GPUs each); nodes named ``<rack>-<i>``."""
    return [
        node(f"{rack}-{i}").labels(pool="a").label(RACK, rack).alloc(gpu=gpus).parsed()
        for rack, count, gpus in shape
        for i in range(count)
    ]


def group(pods: int, gpus: int) -> GroupDemand:
    return lws("m").size(pods).worker(gpu_limit=gpus).demand()


def lws_pod(name: str, node_name: str, namespace: str, gpus: int, exclusive: str = "") -> dict[str, Any]:
    """A bound pod of another LWS group (LWS's group key label; its exclusive annotation)."""
    pod = bound_pod(name, node_name, namespace=namespace, gpu=gpus)
    pod["metadata"]["labels"] = {GROUP_KEY_LABEL: f"hash-{name}"}
    if exclusive:
        pod["metadata"]["annotations"] = {EXCLUSIVE_TOPOLOGY_ANNOTATION: exclusive}
    return pod


def run(
    nodes: list[Node],
    groups: list[Any],
    *,
    bound: Sequence[dict[str, Any]] = (),
    admitted: Sequence[AdmittedGroup] = (),
    quota: int = 64,
) -> Plan:
    pools = [pool("a").quota(gpu=quota).parsed()]
    return plan(pools, nodes, node_usage(bound), admitted, groups, occupants=occupants(bound))


def domains_of(result: Plan) -> list[set[str]]:
    return [{n.rsplit("-", 1)[0] for n in a.nodes} for a in result.admit]


def waits(result: Plan) -> dict[int, Waiting]:
    return {w.key.index: w for w in result.waiting}


def test_the_lws_example_three_groups_two_racks_admits_two_one_rack_each() -> None:
    """The LWS project's exclusive-placement example on two racks of two 8-GPU nodes, quota 32:
    the GPUs add up for all three groups, the domains hold two."""
    nodes = racks(("r1", 2, 8), ("r2", 2, 8))
    demand = group(4, 2)
    result = run(nodes, [waiting("m", i, demand, exclusive=RACK) for i in range(3)], quota=32)
    assert [a.key.index for a in result.admit] == [0, 1]
    assert sorted(map(sorted, domains_of(result))) == [["r1"], ["r2"]]
    third = waits(result)[2]
    assert third.reason is Reason.WAITING_FOR_NODES
    assert "no topology.example.com/rack domain has room for it alone" in third.message
    assert "each of the 2 domains holds another group of this namespace" in third.message


def test_without_the_annotation_the_same_groups_are_all_admitted() -> None:
    """What the scheduler cannot honour: the third group admitted on room spread over racks."""
    nodes = racks(("r1", 2, 8), ("r2", 2, 8))
    result = run(nodes, [waiting("m", i, group(4, 2)) for i in range(3)], quota=32)
    assert [a.key.index for a in result.admit] == [0, 1, 2]


def test_a_group_larger_than_any_domain_can_never_be_placed() -> None:
    nodes = racks(("r1", 1, 8), ("r2", 1, 8))
    result = run(nodes, [waiting("m", 0, group(3, 4), exclusive=RACK)])
    (only,) = result.waiting
    assert only.reason is Reason.NODES_TOO_SMALL
    assert "needs 12 nvidia.com/gpu, and the largest of pool a's 2 domains has 8" in only.message


def test_nodes_without_the_key_are_no_domain() -> None:
    nodes = [node(f"n{i}").labels(pool="a").alloc(gpu=8).parsed() for i in range(2)]
    result = run(nodes, [waiting("m", 0, group(1, 1), exclusive=RACK)])
    (only,) = result.waiting
    assert only.reason is Reason.NODES_TOO_SMALL
    assert "names node label topology.example.com/rack, and no node of pool a has it" in only.message


@pytest.mark.parametrize(
    ("namespace", "exclusive", "racks_used"),
    [
        pytest.param("default", "", {"r2"}, id="same-namespace-pod-holds-its-rack"),
        pytest.param("default", RACK, {"r2"}, id="same-namespace-exclusive-pod-holds-its-rack"),
        pytest.param("other", RACK, {"r1"}, id="other-namespace-does-not"),
    ],
)
def test_a_bound_pod_of_another_lws_group(namespace: str, exclusive: str, racks_used: set[str]) -> None:
    """Best fit would choose r1 (the smaller free room): a pod of another group of the
    namespace there sends the group to r2; another namespace's pod does not."""
    nodes = racks(("r1", 1, 8), ("r2", 2, 8))
    bound = [lws_pod("p", "r1-0", namespace, 1, exclusive)]
    result = run(nodes, [waiting("m", 0, group(2, 2), exclusive=RACK)], bound=bound)
    assert domains_of(result) == [racks_used]


def test_an_exclusive_group_keeps_the_namespaces_other_groups_out_of_its_rack() -> None:
    """Its pods' anti-affinity holds both ways: a plain group of the namespace goes elsewhere,
    and waits when elsewhere has no room; another namespace's plain group may come in."""
    nodes = racks(("r1", 1, 8), ("r2", 1, 2))
    bound = [lws_pod("x", "r1-0", "default", 2, RACK)]
    plain = group(2, 1)
    result = run(nodes, [waiting("p", 0, plain), waiting("p", 1, plain)], bound=bound)
    assert domains_of(result) == [{"r2"}]
    assert waits(result)[1].reason is Reason.WAITING_FOR_NODES
    assert (
        "its nodes have the room, but only in topology.example.com/rack domains" in waits(result)[1].message
    )
    elsewhere = run(nodes, [waiting("p", 0, plain, namespace="other")], bound=bound)
    assert len(elsewhere.admit) == 1


def test_best_fit_keeps_the_large_domain_for_the_large_group() -> None:
    nodes = racks(("big", 2, 8), ("small", 1, 8))
    small, large = group(2, 4), group(4, 4)
    result = run(
        nodes,
        [waiting("s", 0, small, exclusive=RACK, age=0), waiting("l", 0, large, exclusive=RACK, age=1)],
    )
    assert [(a.key.name, domains_of(Plan((a,), (), {}))[0]) for a in result.admit] == [
        ("s", {"small"}),
        ("l", {"big"}),
    ]


def test_an_admitted_groups_unbound_pods_hold_their_rack() -> None:
    nodes = racks(("r1", 1, 8), ("r2", 1, 8))
    held = AdmittedGroup(
        GroupKey("default", "m", 0), "a", group(2, 2), nodes={0: "r1-0", 1: "r1-0"}, exclusive=RACK
    )
    result = run(nodes, [waiting("m", 1, group(2, 2), exclusive=RACK)], admitted=[held])
    assert domains_of(result) == [{"r2"}]


def test_groups_placed_earlier_in_the_pass_hold_their_rack() -> None:
    """A plain group of the namespace admitted first takes r1: the exclusive group after it
    may not share it."""
    nodes = racks(("r1", 1, 8), ("r2", 1, 8))
    result = run(
        nodes, [waiting("p", 0, group(1, 1), age=0), waiting("m", 0, group(2, 2), exclusive=RACK, age=1)]
    )
    assert [isinstance(a, Admission) for a in result.admit] == [True, True]
    assert domains_of(result) == [{"r1"}, {"r2"}]


def test_occupants_are_live_bound_lws_pods() -> None:
    pods = [
        lws_pod("a", "n1", "ns", 1, RACK),
        lws_pod("b", "n1", "ns", 1),
        lws_pod("c", "n2", "ns", 1) | {"status": {"phase": "Succeeded"}},
        bound_pod("d", "n3", namespace="ns", gpu=1),  # no LWS group's pod
        lws_pod("e", "", "ns", 1),  # not bound
    ]
    assert occupants(pods) == {"n1": Counter({Occupant("ns", RACK): 1, Occupant("ns", ""): 1})}


def test_without_frees_only_the_pods_gone() -> None:
    """Preemption's simulation: a node keeps an occupant while another of its pods is there."""
    a0, a1, b = (
        lws_pod("a", "n1", "ns", 1, RACK),
        lws_pod("a1", "n1", "ns", 1, RACK),
        lws_pod("b", "n2", "ns", 1),
    )
    found = occupants([a0, a1, b])
    assert without(found, [a0]) == {
        "n1": Counter({Occupant("ns", RACK): 1}),
        "n2": Counter({Occupant("ns", ""): 1}),
    }
    assert without(found, [a0, a1]) == {"n2": Counter({Occupant("ns", ""): 1})}
    assert without(found, []) == found and found["n1"][Occupant("ns", RACK)] == 2, (
        "found itself is not changed"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ""),
        ("kubernetes.io/hostname", "kubernetes.io/hostname"),
        ("rack", "rack"),
        ("cloud.google.com/gke-nodepool", "cloud.google.com/gke-nodepool"),
        ("", ValueError),
        ("Bad Prefix/rack", ValueError),
        ("a/" + "x" * 64, ValueError),
        (7, ValueError),
    ],
)
def test_exclusive_topology_is_a_node_label_key(value: Any, expected: Any) -> None:
    obj = lws("m").obj()
    if value is not None:
        obj["metadata"]["annotations"] = {EXCLUSIVE_TOPOLOGY_ANNOTATION: value}
    if expected is ValueError:
        with pytest.raises(ValueError, match="is not a node label key"):
            exclusive_topology(obj)
    else:
        assert exclusive_topology(obj) == expected


def test_gpus_add_up_message_names_the_largest_open_domain() -> None:
    nodes = racks(("r1", 1, 8), ("r2", 1, 4), ("r3", 1, 8))
    bound = [lws_pod("x", "r1-0", "default", 1)]
    result = run(
        nodes, [waiting("m", 0, group(2, 3), exclusive=RACK)], bound=[*bound, bound_pod("y", "r3-0", gpu=6)]
    )
    (only,) = result.waiting
    assert only.reason is Reason.WAITING_FOR_NODES
    assert "needs 6 nvidia.com/gpu in one domain; of 3 domains, 1 hold" in only.message
    assert "at most 4 free" in only.message
    assert GPU in only.message


def test_the_bound_pod_view_keeps_what_occupants_read() -> None:
    """Bound pods not of an opted-in LWS are cached as ``bound_pod_view``: an exclusive LWS the
    gatekeeper does not gate still holds its domains."""
    pod = lws_pod("a", "n1", "ns", 1, RACK)
    assert occupants([bound_pod_view(pod)]) == occupants([pod]) == {"n1": Counter({Occupant("ns", RACK): 1})}
