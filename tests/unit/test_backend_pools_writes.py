"""The ``pools`` backend's write rules: which patch carries a decision out, and when none is needed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from core_builders import lws, lws_pod, lws_statefulsets, node, pool, read_pools

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools import (
    MESSAGE_REFRESH_SECONDS,
    Actions,
    Admit,
    PassInputs,
    Snapshot,
    WaitStatus,
    admit_status,
    admitted_message,
    decide,
    plan_writes,
    pool_status_patch,
    restated_admission,
    wait_status,
)
from gatekeeper.core.backends.pools.planner import PoolStatus
from gatekeeper.core.model.demand import GroupDemand, PodDemand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.pool import QueueingStrategy
from gatekeeper.core.model.record import new_record
from gatekeeper.core.writes.plan import Memory, Op, Plan, walk

NOW, LATER = "2026-12-01T10:00:00Z", "2026-12-01T10:05:00Z"
GPU = "nvidia.com/gpu"
GROUP = GroupState(
    key=GroupKey("team", "vllm", 0),
    lws_uid="u",
    pool="a",
    record="vllm-u-0",
    demand=GroupDemand((PodDemand("leader", {GPU: 1}), PodDemand("worker", {GPU: 1}))),
    pods=("vllm-0", "vllm-0-1"),
    gated=("vllm-0", "vllm-0-1"),
    revision="r1",
)


def cond(status: str, reason: str, message: str, when: str = NOW) -> dict[str, Any]:
    return {
        "type": "Admitted",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": when,
    }


@pytest.mark.parametrize(
    ("nodes", "said"),
    [
        (("n0", "n1"), "group 0 admitted into pool a: 2 nvidia.com/gpu on n0, n1"),
        (
            ("n0", ""),
            "group 0 admitted into pool a: 2 nvidia.com/gpu on n0; 1 pod waits Pending for new nodes",
        ),
        (("", ""), "group 0 admitted into pool a: 2 nvidia.com/gpu; 2 pods wait Pending for new nodes"),
    ],
)
def test_the_admitted_sentence_names_the_nodes_and_who_waits_for_new_ones(
    nodes: tuple[str, ...], said: str
) -> None:
    assert admitted_message(Admit(GROUP, nodes, "2 nvidia.com/gpu")).startswith(said)


def test_admission_writes_demand_placement_revision_and_a_true_condition() -> None:
    before = {"placement": {"0": "old", "5": "gone"}, "conditions": [cond("False", "WaitingForQuota", "x")]}
    status = admit_status(Admit(GROUP, ("n0", "n1"), "2 nvidia.com/gpu"), before, LATER)
    assert status["placement"] == {"0": "n0", "1": "n1", "5": None}
    assert status["demand"] == {GPU: "2"} and status["pods"] == 2 and status["pool"] == "a"
    assert status["templateRevision"] == "r1" and status["admittedAt"] == LATER
    assert status["conditions"][0]["status"] == "True"
    assert status["conditions"][0]["lastTransitionTime"] == LATER, "the status changed: the time moves"


WAIT = WaitStatus(GROUP, Reason.WAITING_FOR_QUOTA, "group 0 needs 2; pool a has 0 free", 0)


@pytest.mark.parametrize(
    ("before", "since", "writes", "event"),
    [
        pytest.param(None, 1e9, True, True, id="first-word"),
        pytest.param(
            {"conditions": [cond("False", "WaitingForQuota", WAIT.message)]}, 1e9, False, False, id="said"
        ),
        pytest.param(
            {"conditions": [cond("False", "WaitingForQuota", "other numbers")]},
            1.0,
            False,
            False,
            id="numbers-soon",
        ),
        pytest.param(
            {"conditions": [cond("False", "WaitingForQuota", "other numbers")]},
            MESSAGE_REFRESH_SECONDS,
            True,
            False,
            id="numbers-later",
        ),
        pytest.param(
            {"conditions": [cond("False", "WaitingForNodes", "x")]}, 0.0, True, True, id="new-reason"
        ),
        pytest.param({"conditions": [cond("True", "Admitted", "x")]}, 0.0, True, True, id="was-admitted"),
    ],
)
def test_a_waiting_record_is_written_only_when_it_would_say_something_new(
    before: dict[str, Any] | None, since: float, writes: bool, event: bool
) -> None:
    patch, changed = wait_status(WAIT, before, LATER, since_last_write=since)
    assert (patch is not None) is writes
    assert changed is event
    if patch is not None:
        assert patch["conditions"][0]["status"] == "False"
        assert patch["conditions"][0]["reason"] == "WaitingForQuota"


def test_an_admitted_record_is_restated_only_while_admitted_and_saying_otherwise() -> None:
    admitted = {"status": {"conditions": [cond("True", "TemplateChanged", "old words")]}}
    patch = restated_admission(admitted, "Admitted", "new words", LATER)
    assert patch is not None
    assert patch["conditions"][0] == {**cond("True", "Admitted", "new words", NOW), "observedGeneration": 1}
    assert restated_admission(admitted, "TemplateChanged", "old words", LATER) is None
    waiting = {"status": {"conditions": [cond("False", "WaitingForQuota", "x")]}}
    assert restated_admission(waiting, "Admitted", "x", LATER) is None


STATUS = PoolStatus(
    name="a",
    queueing_strategy=QueueingStrategy.BEST_EFFORT_FIFO,
    quota={GPU: 4},
    used={GPU: 2},
    free={GPU: 2},
    admitted=1,
    waiting=0,
    inadmissible=0,
    nodes=4,
)


def test_a_pool_status_is_written_once_and_not_again_while_it_says_the_same() -> None:
    patch = pool_status_patch({}, STATUS, None, NOW)
    assert patch is not None
    assert patch["usedSummary"] == "2/4 nvidia.com/gpu" and patch["conditions"][0]["status"] == "True"
    assert pool_status_patch(patch, STATUS, None, LATER) is None
    assert pool_status_patch(patch, None, "spec.quota: bad", LATER) is not None
    assert pool_status_patch({}, None, None, LATER) is None, "neither planned nor invalid: not ours to write"


# ----- the plan of a whole pass ---------------------------------------------------------


def _pass_plan(records: list[dict[str, Any]], memory: Memory | None = None) -> tuple[Plan, Actions]:
    vllm = lws("vllm", "team").pool("a").uid("u-1").size(2).replicas(2).worker(gpu_limit=1).obj()
    pods = [lws_pod("vllm", g, w, namespace="team") for g in (0, 1) for w in (0, 1)]
    snap = Snapshot(
        lwss=[vllm],
        pods=pods,
        bound_pods=[],
        nodes=[node(f"n{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(2)],
        pools=read_pools([pool("a").quota(gpu=2).obj()]),
        records=records,
        statefulsets=lws_statefulsets([vllm], pods),
    )
    actions = decide(snap)
    when = datetime(2026, 12, 1, 10, tzinfo=UTC)
    return plan_writes(actions, PassInputs(snap, memory or Memory(), when, 100.0)), actions


def test_a_new_group_is_recorded_then_admitted_under_the_created_version_then_ungated() -> None:
    plan, _ = _pass_plan([])
    release, create, main, pools_stage = plan
    assert release == ()
    assert [w.tag for w in create] == ["create", "create"]
    admitted = next(w for w in create if w.then and w.then[0].tag == "admit")
    admit = admitted.then[0]
    assert admit.guard_from_parent and admit.guard is None
    assert sorted(w.name for w in admit.then if w.tag == "ungate") == ["vllm-0", "vllm-0-1"]
    assert [w.body.reason for w in admit.then if w.op is Op.EVENT] == ["Admitted"]
    waits = next(w for w in create if w is not admitted).then
    assert [w.tag for w in waits] == ["wait"]
    assert [w.body.reason for w in waits[0].then] == ["WaitingForQuota"]
    assert main == ()
    assert [w.tag for w in pools_stage] == ["pool"]


def test_one_event_per_lws_and_reason_and_none_once_posted() -> None:
    memory = Memory()
    plan, _ = _pass_plan([], memory)
    events = [w for w in walk(plan) if w.op is Op.EVENT and w.body.reason == "WaitingForQuota"]
    assert len(events) == 1
    memory.apply(events[0].marks, 0.0)
    again, _ = _pass_plan([], memory)
    assert not [w for w in walk(again) if w.op is Op.EVENT and w.body.reason == "WaitingForQuota"]


def test_a_waiting_record_is_written_under_the_version_it_was_read_at() -> None:
    """An unguarded waiting write over a record whose watch lags could overwrite
    ``Admitted=True`` (running pods would then hold no quota, and the next group overrun it)."""
    first, _ = _pass_plan([])
    made = [w for w in first[1] if any(t.tag == "wait" for t in w.then)]
    assert made and all(t.guard_from_parent for w in made for t in w.then if t.tag == "wait")
    rec = new_record(lws("vllm", "team").uid("u-1").obj(), 1)
    rec["metadata"]["resourceVersion"] = "41"
    plan, actions = _pass_plan([rec])
    assert [w.group.key.index for w in actions.waiting] == [1]
    waits = [w for w in walk(plan) if w.tag == "wait"]
    assert [w.guard for w in waits] == ["41"]


def test_a_pools_condition_observes_its_generation_and_a_new_generation_is_written() -> None:
    patch = pool_status_patch({}, STATUS, None, NOW, generation=3)
    assert patch is not None and patch["conditions"][0]["observedGeneration"] == 3
    assert pool_status_patch(patch, STATUS, None, LATER, generation=3) is None
    again = pool_status_patch(patch, STATUS, None, LATER, generation=4)
    assert again is not None and again["conditions"][0]["observedGeneration"] == 4
    invalid = pool_status_patch(patch, None, "spec.quota: bad", LATER, generation=5)
    assert invalid is not None and invalid["conditions"][0]["observedGeneration"] == 5


def test_every_record_condition_observes_the_records_only_generation() -> None:
    from gatekeeper.core.model.record import RECORD_GENERATION, admitted_condition

    assert admitted_condition(True, "Admitted", "x", {}, NOW)["observedGeneration"] == RECORD_GENERATION == 1
