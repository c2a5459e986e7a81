"""Gangs in the pools planner: the waiting groups of one unit (a DisaggregatedSet's roles, a
slice, an ``lws-gatekeeper.io/gang``) are admitted together or not at all."""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import gpu_nodes, lws, node, pool, waiting

from gatekeeper.core.admission.queue import AdmittedGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.changed import WaitStatus
from gatekeeper.core.backends.pools.decide import Admit
from gatekeeper.core.backends.pools.hub_member import gangs_whole
from gatekeeper.core.backends.pools.planner import Plan, plan
from gatekeeper.core.kube.keys import (
    DISAGGREGATED_REVISION_LABEL,
    DISAGGREGATED_SET_LABEL,
    DISAGGREGATED_SLICE_LABEL,
    GANG_LABEL,
    GANG_SIZE_ANNOTATION,
)
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey, InvalidDemand
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.lws import TopologyRequest, gang_of, gang_size
from gatekeeper.core.model.nodes import Node

GANG = "DisaggregatedSet ds revision r1"
RACK = "topology.example.com/rack"


def group(pods: int, gpus: int) -> GroupDemand:
    return lws("m").size(pods).worker(gpu_limit=gpus).demand()


def run(nodes: list[Node], groups: list[Any], *, quota: int = 64, **more: Any) -> Plan:
    built = pool("a").quota(gpu=quota)
    if more.get("levels"):
        built = built.levels(*more["levels"])
    if more.get("strict"):
        built = built.strict()
    pools = [built.parsed(), *more.get("pools", [])]
    return plan(pools, nodes, more.get("usage", {}), [], groups)


FULL = {"n2": {"nvidia.com/gpu": 2, "pods": 1}}
"""Of three 2-GPU nodes, one taken: 4 GPUs free."""


def roles(prefill: GroupDemand, decode: GroupDemand, **kwargs: Any) -> list[Any]:
    return [
        waiting("ds-prefill", 0, prefill, gang=GANG, **kwargs),
        waiting("ds-decode", 0, decode, gang=GANG, age=1, **kwargs),
    ]


def test_a_slice_of_two_roles_is_admitted_together() -> None:
    result = run(gpu_nodes(4, gpus=2), roles(group(2, 2), group(1, 2)))
    assert [(a.key.name, len(a.nodes)) for a in result.admit] == [("ds-prefill", 2), ("ds-decode", 1)]
    assert len({n for a in result.admit for n in a.nodes}) == 3
    status = result.pools["a"]
    assert (status.admitted, status.waiting, status.used["nvidia.com/gpu"]) == (2, 0, 6)


def test_when_one_role_does_not_fit_neither_is_admitted() -> None:
    """Room for the prefill role (4 GPUs) but not for both (6): without the gang, prefill would
    be admitted alone and hold its GPUs for nothing."""
    result = run(gpu_nodes(3, gpus=2), roles(group(2, 2), group(1, 2)), usage=FULL)
    assert result.admit == ()
    assert {w.key.name for w in result.waiting} == {"ds-prefill", "ds-decode"}
    for w in result.waiting:
        assert w.reason is Reason.WAITING_FOR_NODES and w.position == 1
        assert (
            f"is admitted only with its {GANG} (ds-prefill group 0, ds-decode group 0), all or none"
            in w.message
        )
        assert "the gang fits pool a's quota but not its nodes" in w.message
    assert result.pools["a"].waiting == 2
    alone = run(
        gpu_nodes(2, gpus=2),
        [waiting("ds-prefill", 0, group(2, 2)), waiting("ds-decode", 0, group(1, 2), age=1)],
    )
    assert [a.key.name for a in alone.admit] == ["ds-prefill"]


def test_a_waiting_gang_holds_a_strict_fifo_queue_and_a_later_group_waits() -> None:
    groups = [*roles(group(2, 2), group(1, 2)), waiting("later", 0, group(1, 1), age=5)]
    result = run(gpu_nodes(3, gpus=2), groups, strict=True, usage=FULL)
    later = next(w for w in result.waiting if w.key.name == "later")
    assert later.reason is Reason.BLOCKED_BY_STRICT_FIFO


def test_a_gang_that_asks_for_a_rack_goes_whole_into_one() -> None:
    nodes = [
        node(f"{rack}-{i}").labels(pool="a").label(RACK, rack).alloc(gpu=2).parsed()
        for rack, count in (("r1", 2), ("r2", 3))
        for i in range(count)
    ]
    rack = TopologyRequest(RACK, required=True)
    result = run(nodes, roles(group(2, 2), group(1, 2), topology=rack), levels=[RACK])
    assert {a.domain for a in result.admit} == {((RACK, "r2"),)}, "6 GPUs: only r2 holds the slice"
    assert all(n.startswith("r2-") for a in result.admit for n in a.nodes)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        pytest.param({"pool": "b"}, "its LWSs name different pools (a, b)", id="two-pools"),
        pytest.param(
            {
                "topology": TopologyRequest(RACK, required=True),
                "first": TopologyRequest(RACK, required=False),
            },
            "ask for different topology levels",
            id="two-levels",
        ),
        pytest.param(
            {"demand": InvalidDemand("spec.x: bad")}, "ds-decode group 0: spec.x: bad", id="invalid-member"
        ),
    ],
)
def test_a_gang_that_cannot_be_one_unit_is_told_so_on_every_member(
    change: dict[str, Any], words: str
) -> None:
    members = roles(group(1, 1), group(1, 1), topology=change.get("first"))
    decode = members[1]
    members[1] = waiting(
        "ds-decode",
        0,
        change.get("demand", decode.demand),
        pool=change.get("pool", "a"),
        gang=GANG,
        age=1,
        topology=change.get("topology"),
    )
    other = pool("b").quota(gpu=4).parsed()
    result = run(gpu_nodes(2, gpus=2), members, pools=[other])
    assert result.admit == ()
    for w in result.waiting:
        assert w.reason is Reason.INVALID_SPEC and w.position == 0
        assert words in w.message


def test_members_of_different_namespaces_are_not_one_gang() -> None:
    members = [
        waiting("ds-prefill", 0, group(2, 2), gang=GANG),
        waiting("ds-decode", 0, group(1, 2), gang=GANG, namespace="other", age=1),
    ]
    result = run(gpu_nodes(2, gpus=2), members)
    assert [a.key.name for a in result.admit] == ["ds-prefill"]


# ----- which groups are one unit ------------------------------------------------------------


def _lws(labels: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "ds-prefill", "labels": labels}}


DS = {DISAGGREGATED_SET_LABEL: "ds", DISAGGREGATED_REVISION_LABEL: "r1"}


@pytest.mark.parametrize(
    ("labels", "index", "expected"),
    [
        pytest.param({}, 0, "", id="none"),
        pytest.param(DS, 0, GANG, id="first-group-of-a-role"),
        pytest.param(DS, 1, "", id="later-groups-one-by-one"),
        pytest.param(
            {**DS, DISAGGREGATED_SLICE_LABEL: "s0"}, 3, f"{GANG} slice s0", id="every-group-of-a-slice"
        ),
        pytest.param({GANG_LABEL: "llama"}, 0, "gang llama", id="gang-label"),
        pytest.param({GANG_LABEL: "llama", **DS}, 0, "gang llama", id="gang-label-first"),
        pytest.param({DISAGGREGATED_SET_LABEL: "ds"}, 0, "DisaggregatedSet ds", id="no-revision"),
        pytest.param({GANG_LABEL: "no good"}, 0, "not a label value", id="bad-value"),
        pytest.param({GANG_LABEL: 3}, 0, "not a label value", id="not-a-string"),
    ],
)
def test_gang_of(labels: dict[str, Any], index: int, expected: str) -> None:
    if expected.startswith("not a"):
        with pytest.raises(ValueError, match=expected):
            gang_of(_lws(labels), index)
    else:
        assert gang_of(_lws(labels), index) == expected


def test_a_member_whose_hub_claim_is_not_granted_holds_back_the_others() -> None:
    """With a Pool charged to a hub Reservation, each member is admitted once its claim is
    granted: one granted and one not is no gang admitted, and the granted one says why."""

    def state(name: str, gang: str = GANG) -> GroupState:
        key = GroupKey("default", name, 0)
        return GroupState(key, "u", "a", f"{name}-0", group(1, 1), (f"{name}-0",), (f"{name}-0",), gang=gang)

    granted, alone = Admit(state("ds-prefill"), ("n0",), ""), Admit(state("plain", gang=""), ("n1",), "")
    pending = WaitStatus(state("ds-decode"), Reason.WAITING_FOR_RESERVATION, "its claim waits", 0)
    admit, waits = gangs_whole([granted, alone], [pending])
    assert [a.group.key.name for a in admit] == ["plain"]
    held = next(w for w in waits if w.group.key.name == "ds-prefill")
    assert held.reason is Reason.WAITING_FOR_RESERVATION
    assert "a claim of another of its groups is not granted yet" in held.message


def test_a_gang_waits_until_every_lws_it_says_it_has_is_there() -> None:
    """A DisaggregatedSet makes its roles one after another: a pass between them sees one. With
    the gang's size said, the role there waits for the other instead of being admitted alone."""
    made_first = [waiting("ds-prefill", 0, group(1, 1), gang=GANG, gang_size=2)]
    result = run(gpu_nodes(2, gpus=2), made_first)
    assert result.admit == ()
    (only,) = result.waiting
    assert only.reason is Reason.WAITING_FOR_GANG and not only.reason.permanent
    assert "1 of its 2 LWSs are there (lws-gatekeeper.io/gang-size)" in only.message
    both = run(
        gpu_nodes(2, gpus=2), [*made_first, waiting("ds-decode", 0, group(1, 1), gang=GANG, gang_size=2)]
    )
    assert len(both.admit) == 2


def test_a_member_made_again_is_admitted_beside_its_admitted_gang() -> None:
    """The decode role holds its admission; the prefill group made again is admitted alone (the
    gang is there: one LWS waits, the other holds)."""
    held = AdmittedGroup(GroupKey("default", "ds-decode", 0), "a", group(1, 1), gang=GANG)
    result = plan(
        [pool("a").quota(gpu=8).parsed()],
        gpu_nodes(2, gpus=2),
        {},
        [held],
        [waiting("ds-prefill", 0, group(1, 1), gang=GANG, gang_size=2)],
    )
    assert [a.key.name for a in result.admit] == ["ds-prefill"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 0),
        ("2", 2),
        ("64", 64),
        ("0", "expected 1 to 64"),
        ("65", "expected 1 to 64"),
        ("two", "expected"),
    ],
)
def test_gang_size(value: str | None, expected: Any) -> None:
    obj: dict[str, Any] = {
        "metadata": {"annotations": {} if value is None else {GANG_SIZE_ANNOTATION: value}}
    }
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            gang_size(obj)
    else:
        assert gang_size(obj) == expected
