"""LWS's subgroup exclusive placement in the pools planner: each subgroup of a group alone in a
domain of its own, free of every other subgroup of the namespace, or the group waits gated."""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import bound_pod, lws, node, pool, waiting

from gatekeeper.core.admission.exclusive import occupants
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.admission.topology import NoRoom
from gatekeeper.core.backends.pools.planner import Plan, plan
from gatekeeper.core.kube.keys import (
    GROUP_KEY_LABEL,
    SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION,
    SUBGROUP_KEY_LABEL,
)
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.lws import Subgroups, TopologyRequest, subgroups
from gatekeeper.core.model.nodes import Node, node_usage

RACK, HOST = "topology.example.com/rack", "kubernetes.io/hostname"
PAIRS = Subgroups(HOST, ((0, 1), (2, 3)))
"""Two subgroups of two pods (prefill, decode), each alone on a host."""


def hosts(*shape: tuple[str, int, int]) -> list[Node]:
    """Nodes of pool ``a``: (rack, hosts, GPUs each), named ``<rack>-<i>``."""
    return [
        node(f"{rack}-{i}")
        .labels(pool="a")
        .label(RACK, rack)
        .label(HOST, f"{rack}-{i}")
        .alloc(gpu=gpus)
        .parsed()
        for rack, count, gpus in shape
        for i in range(count)
    ]


def group(pods: int, gpus: int) -> GroupDemand:
    return lws("m").size(pods).worker(gpu_limit=gpus).demand()


def subgroup_pod(name: str, node_name: str, namespace: str, gpus: int) -> dict[str, Any]:
    pod = bound_pod(name, node_name, namespace=namespace, gpu=gpus)
    pod["metadata"]["labels"] = {GROUP_KEY_LABEL: f"g-{name}", SUBGROUP_KEY_LABEL: f"s-{name}"}
    return pod


def run(
    nodes: list[Node], groups: list[Any], *, bound: list[dict[str, Any]] | None = None, **spec: Any
) -> Plan:
    built = pool("a").quota(gpu=256)
    if spec.get("levels"):
        built = built.levels(*spec["levels"])
    bound = bound or []
    return plan([built.parsed()], nodes, node_usage(bound), [], groups, occupants=occupants(bound))


def hosts_of(result: Plan, index: int = 0) -> list[str]:
    return list(result.admit[index].nodes)


def test_each_subgroup_gets_a_host_of_its_own() -> None:
    nodes = hosts(("r1", 3, 16))
    result = run(nodes, [waiting("m", 0, group(4, 4), subgroups=PAIRS)])
    placed = hosts_of(result)
    assert placed[0] == placed[1] and placed[2] == placed[3] and placed[0] != placed[2], placed


def test_the_gpus_add_up_but_no_two_free_hosts_the_second_group_waits() -> None:
    """Three hosts of 16 GPUs; a group is two subgroups of 8. The first takes two hosts; the
    second has 8 + 8 + 16 GPUs free, but only one host no subgroup holds."""
    nodes = hosts(("r1", 3, 16))
    groups = [waiting("m", i, group(4, 4), subgroups=PAIRS) for i in range(2)]
    result = run(nodes, groups)
    assert [a.key.index for a in result.admit] == [0]
    (second,) = result.waiting
    assert second.reason is Reason.WAITING_FOR_NODES
    assert "finds no kubernetes.io/hostname domain of its own (subgroup-exclusive-topology)" in second.message
    flat = run(nodes, [waiting("m", i, group(4, 4)) for i in range(2)])
    assert [a.key.index for a in flat.admit] == [0, 1], "without the annotation both are admitted"


@pytest.mark.parametrize(
    ("namespace", "admitted"),
    [
        pytest.param("default", False, id="same-namespace-subgroup-holds-its-host"),
        pytest.param("other", True, id="other-namespace"),
    ],
)
def test_a_bound_subgroup_pod_holds_its_host(namespace: str, admitted: bool) -> None:
    nodes = hosts(("r1", 2, 16))
    bound = [subgroup_pod("x", "r1-0", namespace, 1)]
    result = run(nodes, [waiting("m", 0, group(4, 4), subgroups=PAIRS)], bound=bound)
    assert bool(result.admit) is admitted


def test_a_failed_subgroup_gives_back_the_room_its_first_subgroups_took() -> None:
    """The group of three subgroups finds hosts for two, not the third: the room of the first two
    is not kept, so a later plain group of 32 GPUs still fits the two hosts."""
    nodes = hosts(("r1", 2, 16))
    three = Subgroups(HOST, ((0, 1), (2, 3), (4, 5)))
    groups = [waiting("m", 0, group(6, 4), subgroups=three), waiting("p", 0, group(2, 16), age=1)]
    result = run(nodes, groups)
    assert [a.key.name for a in result.admit] == ["p"]
    (waits,) = result.waiting
    assert waits.reason is Reason.NODES_TOO_SMALL, "two hosts can never hold three subgroups"
    assert "cannot hold it beside the others" in waits.message


def test_a_subgroup_larger_than_any_host_can_never_be_placed() -> None:
    result = run(hosts(("r1", 4, 8)), [waiting("m", 0, group(4, 8), subgroups=PAIRS)])
    (only,) = result.waiting
    assert only.reason is Reason.NODES_TOO_SMALL
    assert "subgroup-exclusive-topology puts each of its 2 subgroups" in only.message


def test_a_leader_excluded_from_the_subgroups_goes_anywhere() -> None:
    nodes = hosts(("r1", 2, 12))
    excluded = Subgroups(HOST, ((1, 2),), loose=(0,))
    result = run(nodes, [waiting("m", 0, group(3, 4), subgroups=excluded)])
    placed = hosts_of(result)
    assert placed[1] == placed[2]
    assert placed[0] == placed[1], "the loose leader goes beside its subgroup (best fit), held by none"


def test_with_a_required_rack_the_subgroups_share_one_rack_on_hosts_of_their_own() -> None:
    """Rack r1 has two hosts, r2 one big host: the group's rack is the one where its subgroups
    find two hosts, though r2 alone has the GPUs."""
    nodes = hosts(("r1", 2, 8), ("r2", 1, 32))
    request = TopologyRequest(RACK, required=True)
    result = run(
        nodes, [waiting("m", 0, group(4, 4), subgroups=PAIRS, topology=request)], levels=[RACK, HOST]
    )
    placed = hosts_of(result)
    assert result.admit[0].domain == ((RACK, "r1"),)
    assert {placed[0], placed[2]} == {"r1-0", "r1-1"}
    assert not isinstance(result.admit[0], NoRoom)


# ----- the LWS's subgroups, as LWS's pod webhook labels its pods -------------------------


def _lws(size: int, policy: dict[str, Any] | None, key: Any = HOST) -> dict[str, Any]:
    obj = lws("m").size(size).worker(gpu_limit=1).obj()
    obj["metadata"]["annotations"] = {SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION: key}
    if policy is not None:
        obj["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = policy
    return obj


@pytest.mark.parametrize(
    ("size", "policy", "expected"),
    [
        pytest.param(4, {"subGroupSize": 2}, Subgroups(HOST, ((0, 1), (2, 3))), id="size-divisible"),
        pytest.param(5, {"subGroupSize": 2}, Subgroups(HOST, ((0, 1, 2), (3, 4))), id="leader-extra"),
        pytest.param(
            5,
            {"subGroupSize": 2, "subGroupPolicyType": "LeaderExcluded"},
            Subgroups(HOST, ((1, 2), (3, 4)), loose=(0,)),
            id="leader-excluded",
        ),
        pytest.param(3, {"subGroupSize": 1}, Subgroups(HOST, ((0, 1), (2,))), id="one-each-leader-extra"),
        pytest.param(4, None, "subGroupSize: expected 1 to 4", id="no-policy"),
        pytest.param(4, {"subGroupSize": 5}, "subGroupSize: expected 1 to 4", id="larger-than-size"),
        pytest.param(4, {"subGroupSize": "2"}, "subGroupSize", id="not-a-number"),
    ],
)
def test_subgroups_as_lws_labels_them(size: int, policy: dict[str, Any] | None, expected: Any) -> None:
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            subgroups(_lws(size, policy))
    else:
        assert subgroups(_lws(size, policy)) == expected


def test_no_annotation_no_subgroups_and_a_bad_key_is_refused() -> None:
    assert subgroups(lws("m").size(4).worker(gpu_limit=1).obj()) is None
    with pytest.raises(ValueError, match="not a node label key"):
        subgroups(_lws(4, {"subGroupSize": 2}, key="no good"))
