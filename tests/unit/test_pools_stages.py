"""The ``pools`` decision's stages, each on its own: a changed template, records kept by their pods.

``test_backend_pools.py`` proves the whole pass; these tables pin each stage's rule, so that a
change to one shows which rule moved.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from core_builders import group_pod, lws, record

from gatekeeper.core.admission.queue import AdmittedGroup, WaitingGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.changed import changed_template
from gatekeeper.core.backends.pools.kept import holds_pods, still_charged
from gatekeeper.core.model.demand import GroupDemand, group_demand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.lws import GroupPod

GPU = "nvidia.com/gpu"
LWS = lws("vllm").size(2).worker(gpu=1).uid("u-vllm").pool("a").obj()
UID = LWS["metadata"]["uid"]
KEY = GroupKey("default", "vllm", 0)
CREATED = datetime(2025, 1, 1, tzinfo=UTC)


def demand(gpus: int) -> GroupDemand:
    d = group_demand(lws("vllm").size(2).worker(gpu=gpus).uid("u-vllm").pool("a").obj())
    assert isinstance(d, GroupDemand)
    return d


def state(d: GroupDemand) -> GroupState:
    return GroupState(key=KEY, lws_uid=UID, pool="a", record="r", demand=d, pods=(), gated=())


def admitted(gpus: int = 1, revision: str = "v1") -> dict[str, Any]:
    """The record of group 0, admitted at ``gpus`` per pod on revision ``revision``."""
    return record(LWS, 0, admitted=True, pool="a", demand={GPU: str(2 * gpus)}, pods=2, revision=revision)


def pod(
    name: str, revision: str, *, gated: bool = False, live: bool = True, terminating: bool = False
) -> GroupPod:
    worker = 0 if name.endswith("0") else 1
    return group_pod(name, revision, gated=gated, live=live, terminating=terminating, worker=worker)


# ----- changed_template: an admitted group whose LWS now asks another demand -----------------


def test_the_same_demand_is_no_change() -> None:
    assert changed_template(admitted(1), demand(1), [pod("p-0", "v1")], state(demand(1)), 0, CREATED) is None


def test_a_record_that_does_not_say_its_demand_is_no_change() -> None:
    bare = record(LWS, 0, admitted=True, pool="a")
    assert changed_template(bare, demand(2), [pod("p-0", "v2")], state(demand(2)), 0, CREATED) is None


def test_only_new_pods_left_the_group_is_planned_again_at_its_new_demand() -> None:
    pods = [pod("p-0", "v2", gated=True), pod("p-1", "v2", gated=True), pod("o-0", "v1", live=False)]
    out = changed_template(admitted(1), demand(2), pods, state(demand(2)), 7, CREATED)
    assert out == WaitingGroup(key=KEY, pool="a", demand=demand(2), created=CREATED, priority=7)


@pytest.mark.parametrize(
    ("pods", "let_through", "reported"),
    [
        pytest.param(
            [pod("p-0", "v1"), pod("p-1", "v1", gated=True)], ["p-1"], False, id="old-gated-goes-through"
        ),
        pytest.param(
            [pod("p-0", "v1"), pod("p-1", "v2", gated=True)], [], True, id="new-pod-waits-for-the-old"
        ),
        pytest.param(
            [pod("p-0", "v1", terminating=True), pod("p-1", "v2", gated=True)],
            [],
            True,
            id="a-terminating-old-pod-still-holds",
        ),
    ],
)
def test_while_an_old_pod_lives_the_group_holds_its_recorded_demand(
    pods: list[GroupPod], let_through: list[str], reported: bool
) -> None:
    out = changed_template(admitted(1), demand(2), pods, state(demand(2)), 0, CREATED)
    assert isinstance(out, tuple)
    held, through, report = out
    assert isinstance(held, AdmittedGroup)
    assert (held.pool, held.demand.total[GPU], held.bound) == ("a", 2, frozenset({0, 1}))
    assert through == let_through
    assert (report is not None) == reported
    if report is not None:
        assert report.reason is Reason.TEMPLATE_CHANGED
        assert "now needs" in report.message and "(admitted with" in report.message


# ----- kept: records that stay while their pods live ----------------------------------------


@pytest.mark.parametrize(
    ("is_admitted", "pods", "charges", "new_only", "kept"),
    [
        pytest.param(False, [pod("p-0", "v1")], {}, False, False, id="never-admitted"),
        pytest.param(True, [pod("p-0", "v1")], {}, False, True, id="a-live-member"),
        pytest.param(True, [pod("p-0", "v1", live=False)], {}, False, False, id="members-all-done"),
        pytest.param(True, [pod("p-0", "v2", gated=True)], {}, True, False, id="only-new-pods"),
        pytest.param(True, [], {("default", UID, 0): ("x",)}, True, True, id="a-pod-charged-to-it"),
    ],
)
def test_a_deleted_record_is_kept_while_its_group_has_a_pod(
    is_admitted: bool,
    pods: list[GroupPod],
    charges: dict[tuple[str, str, int], tuple[str, ...]],
    new_only: bool,
    kept: bool,
) -> None:
    assert holds_pods(is_admitted, admitted(), pods, charges, new_only) is kept


REC = admitted()
RKEY = ("default", REC["metadata"]["name"])


@pytest.mark.parametrize(
    ("wanted", "lwss", "pods_of", "charges", "held_as"),
    [
        pytest.param({RKEY}, {}, {}, {}, None, id="wanted-by-a-group"),
        pytest.param(set(), {}, {}, {}, None, id="no-pod-left"),
        pytest.param(
            set(), {}, {("default", "vllm"): {0: [pod("p-0", "v1")]}}, {}, "vllm", id="lws-gone-member-lives"
        ),
        pytest.param(
            set(),
            {("default", "vllm"): LWS},
            {("default", "vllm"): {0: [pod("p-0", "v1")]}},
            {},
            None,
            id="lws-there-member-by-label-is-its-own",
        ),
        pytest.param(
            set(),
            {("default", "vllm"): LWS},
            {},
            {("default", UID, 0): ("p-0",)},
            RKEY[1],
            id="a-same-named-lws-since-told-apart-by-record",
        ),
    ],
)
def test_a_record_no_group_wants_holds_its_demand_while_a_pod_of_it_lives(
    wanted: set[tuple[str, str]],
    lwss: dict[tuple[str, str], dict[str, Any]],
    pods_of: dict[tuple[str, str], dict[int, list[GroupPod]]],
    charges: dict[tuple[str, str, int], tuple[str, ...]],
    held_as: str | None,
) -> None:
    out = still_charged({RKEY: REC}, wanted, lwss, pods_of, charges)
    if held_as is None:
        assert out == []
        return
    ((rkey, group),) = out
    assert rkey == RKEY
    assert (group.key, group.pool, group.demand.total[GPU]) == (GroupKey("default", held_as, 0), "a", 2)


def test_a_record_not_admitted_is_not_held_by_its_pods() -> None:
    waiting = record(LWS, 0, admitted=False, pool="a")
    key = ("default", waiting["metadata"]["name"])
    assert still_charged({key: waiting}, set(), {}, {}, {("default", UID, 0): ("p-0",)}) == []
