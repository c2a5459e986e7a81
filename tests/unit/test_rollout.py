"""``core.model.rollout``: a rolling update's surge groups, and whether the update waits for one.

The counts as the LWS controller resolves them (a count, or a percentage of ``replicas``:
maxSurge rounded up, maxUnavailable down; by default 0 and 1); a spec it cannot read gives
no words, never an error. A pass of the pools backend puts them in a surge group's reason
and warns its LWS once (``RolloutStalled``) when the update cannot go on without it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from core_builders import lws, lws_pod, node, pool, read_pools, record
from test_backend_pools import lws_statefulsets

from gatekeeper.core.backends.kueue.status import RecordStatus
from gatekeeper.core.backends.kueue.status import said_surge as kueue_said
from gatekeeper.core.backends.pools import PassInputs, Snapshot, decide, plan_writes
from gatekeeper.core.backends.volcano.status import VolcanoStatus
from gatekeeper.core.backends.volcano.status import said_surge as volcano_said
from gatekeeper.core.model.demand import GroupDemand, PodDemand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.record import record_name
from gatekeeper.core.model.rollout import ROLLOUT_STALLED, Rollout, rollout, surge_words
from gatekeeper.core.writes.group import record_writes
from gatekeeper.core.writes.plan import EventsOnce, Memory, Op, walk


def _lws(replicas: Any = 4, **config: Any) -> dict[str, Any]:
    obj = lws("vllm", "team").pool("a").uid("u-1").size(2).worker(gpu_limit=1).obj()
    obj["spec"]["replicas"] = replicas
    if config:
        obj["spec"]["rolloutStrategy"] = {"type": "RollingUpdate", "rollingUpdateConfiguration": config}
    return obj


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(_lws(), Rollout(4, 0, 1), id="defaults"),
        pytest.param(_lws(maxSurge=1, maxUnavailable=0), Rollout(4, 1, 0), id="counts"),
        pytest.param(_lws(maxSurge="25%", maxUnavailable="25%"), Rollout(4, 1, 1), id="percent-even"),
        pytest.param(
            _lws(replicas=3, maxSurge="10%", maxUnavailable="50%"), Rollout(3, 1, 1), id="up-and-down"
        ),
        pytest.param(
            _lws(replicas=3, maxSurge="0%", maxUnavailable="100%"), Rollout(3, 0, 3), id="percent-ends"
        ),
        pytest.param(_lws(maxSurge="101%"), None, id="over-100-percent"),
        pytest.param(_lws(maxSurge="1.5%"), None, id="not-a-percent"),
        pytest.param(_lws(maxSurge=-1), None, id="negative"),
        pytest.param(_lws(maxSurge=10**9), None, id="huge"),
        pytest.param(_lws(maxSurge=True), None, id="bool"),
        pytest.param(_lws(replicas="two"), None, id="replicas-unreadable"),
    ],
)
def test_the_settings_resolve_as_the_lws_controller_resolves_them(
    spec: dict[str, Any], expected: Rollout | None
) -> None:
    assert rollout(spec) == expected


@pytest.mark.parametrize(
    ("spec", "index", "stalls"),
    [
        pytest.param(_lws(maxSurge=1, maxUnavailable=0), 4, True, id="surge-and-none-unavailable"),
        pytest.param(_lws(maxSurge=2, maxUnavailable=1), 5, False, id="surge-old-groups-go"),
        pytest.param(_lws(maxSurge=1, maxUnavailable=0), 3, None, id="below-replicas"),
        pytest.param(_lws(maxUnavailable=1), 4, None, id="no-surge-a-scale-down"),
        pytest.param(_lws(maxSurge="bad"), 4, None, id="unreadable"),
    ],
)
def test_a_surge_group_is_named_and_whether_the_update_waits_for_it(
    spec: dict[str, Any], index: int, stalls: bool | None
) -> None:
    said = surge_words(spec, "vllm", index)
    if stalls is None:
        assert said is None
        return
    assert said is not None and said[1] is stalls
    assert said[0].startswith(f"group {index} is a surge group of LeaderWorkerSet vllm's rolling update")
    assert ("maxUnavailable of at least 1" in said[0]) is stalls


def test_a_full_pool_says_the_update_is_stalled_by_its_surge_group_and_warns_the_lws_once() -> None:
    """Two groups admitted on a pool of 2 GPUs; the update's surge group 2 waits for quota."""
    vllm = _lws(replicas=1, maxSurge=1, maxUnavailable=0)
    pods = [lws_pod("vllm", g, w, namespace="team", gated=g == 1) for g in (0, 1) for w in (0, 1)]
    for p in pods[:2]:
        p["spec"]["nodeName"] = "n0" if p["metadata"]["name"].endswith("-0") else "n1"
    snap = Snapshot(
        lwss=[vllm],
        pods=pods,
        bound_pods=pods[:2],
        nodes=[node(f"n{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(2)],
        pools=read_pools([pool("a").quota(gpu=2).obj()]),
        records=[record(vllm, 0, admitted=True, pool="a", demand={"nvidia.com/gpu": "2"}, pods=2)],
        statefulsets=lws_statefulsets([vllm], pods),
    )
    actions = decide(snap)
    [wait] = actions.waiting
    assert (wait.group.key.index, str(wait.reason), wait.stalls) == (1, "WaitingForQuota", True)
    assert "group 1 is a surge group of LeaderWorkerSet vllm's rolling update" in wait.message
    memory = Memory()
    plan = plan_writes(actions, PassInputs(snap, memory, datetime(2026, 12, 1, tzinfo=UTC), 100.0))
    warned = [w for w in walk(plan) if w.op is Op.EVENT and w.body.reason == ROLLOUT_STALLED]
    assert len(warned) == 1 and warned[0].body.warning and warned[0].body.involved["name"] == "vllm"
    assert record_name("vllm", "u-1", 1) in {w.name for w in walk(plan) if w.tag in ("create", "wait")}


def _state(index: int) -> GroupState:
    demand = GroupDemand(
        (PodDemand("leader", {"nvidia.com/gpu": 1}), PodDemand("worker", {"nvidia.com/gpu": 1}))
    )
    return GroupState(
        GroupKey("team", "vllm", index), "u-1", "a", record_name("vllm", "u-1", index), demand, (), ()
    )


@pytest.mark.parametrize("backend", ["kueue", "volcano"])
def test_the_other_backends_say_a_surge_group_and_warn_its_lws_once(backend: str) -> None:
    """kueue's and volcano's records: a waiting surge group's words, a Warning ``RolloutStalled``
    with the record's write (``core.writes.group.record_writes``); an admitted one, a group
    below ``replicas`` and a Warning's reason are left as they are."""
    vllm = _lws(replicas=1, maxSurge=1, maxUnavailable=0)
    lwss = {("team", "vllm"): vllm}
    waiting: Any
    if backend == "kueue":
        waiting, said = RecordStatus(_state(1), "wl", False, "Pending", "waits"), kueue_said
    else:
        waiting, said = VolcanoStatus(_state(1), False, "WaitingForVolcano", "waits"), volcano_said
    surge = said(waiting, lwss)
    assert surge.stalls and surge.message.startswith(
        "waits; group 1 is a surge group of LeaderWorkerSet vllm's"
    )
    assert said(replace(waiting, admitted=True), lwss) == replace(waiting, admitted=True)
    assert said(replace(waiting, group=_state(0)), lwss).message == "waits"
    rec = record(vllm, 1, admitted=False)
    events = EventsOnce(Memory(), lwss)
    writes = record_writes(
        [surge, surge], {("team", rec["metadata"]["name"]): rec}, events, lambda *_: ({"x": 1}, False), "t"
    )
    stalled = [w for w in writes if w.op is Op.EVENT and w.body.reason == ROLLOUT_STALLED]
    assert len(stalled) == 1 and stalled[0].body.warning
