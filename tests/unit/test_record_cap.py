"""Group records per namespace are capped (``core.admission.record_cap``): a group past the cap
gets no record, is not queued, holds nothing, and its LWS is told once."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from core_builders import gpu_nodes, lws, pool, read_pools, record

from gatekeeper.core.admission.record_cap import RECORD_LIMIT_REACHED, over_cap
from gatekeeper.core.backends.pools import PassInputs, Snapshot, decide, plan_writes
from gatekeeper.core.model.group import GroupKey, InvalidDemand
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.writes.plan import Memory, Op, walk


def _state(ns: str, name: str, index: int) -> GroupState:
    return GroupState(GroupKey(ns, name, index), "u", "a", f"{name}-{index}", InvalidDemand("-"), (), ())


def test_records_held_count_and_the_rest_in_order() -> None:
    groups = [_state("a", "x", i) for i in range(4)] + [_state("b", "y", i) for i in range(2)]
    held = {("a", "x-3")}
    over = over_cap(groups, lambda g: (g.key.namespace, g.record) in held, cap=2)
    assert [(g.key.namespace, g.key.index) for g in over] == [("a", 1), ("a", 2)]
    assert over_cap(groups, lambda g: True, cap=1) == (), "groups with records keep them, past the cap too"


def _snap(replicas: int, *, records: int = 0, cap: int = 3) -> Snapshot:
    many = lws("many", "team").size(2).replicas(replicas).worker(gpu_limit=1).pool("a").uid("u").obj()
    return Snapshot(
        lwss=[many],
        pods=[],
        bound_pods=[],
        nodes=gpu_nodes(20),
        pools=read_pools([pool("a").quota(gpu=20).obj()]),
        records=[record(many, i) for i in range(records)],
        max_records_per_namespace=cap,
    )


def test_a_group_past_the_cap_gets_no_record_and_is_not_admitted() -> None:
    actions = decide(_snap(5))
    assert [g.key.index for g in actions.create_records] == [0, 1, 2]
    assert [g.key.index for g in actions.over_cap] == [3, 4]
    assert sorted(a.group.key.index for a in actions.admit) == [0, 1, 2]
    assert not any(w.group.key.index > 2 for w in actions.waiting)


def test_the_lws_is_told_once_with_a_warning() -> None:
    snap = _snap(5, records=3)
    actions = decide(snap)
    plan = plan_writes(actions, PassInputs(snap, Memory(), datetime.now(UTC), 0.0))
    events = [w.body for w in walk(plan) if w.op is Op.EVENT and w.body.reason == RECORD_LIMIT_REACHED]
    assert len(events) == 1 and events[0].warning
    assert "namespace team has 3 group records" in events[0].message
    assert "--max-records-per-namespace" in events[0].message


def test_once_a_record_goes_the_next_group_gets_one() -> None:
    snap = _snap(5, records=3)
    fewer = replace(snap, records=snap.records[1:])  # group 0's record released (scaled in, say)
    assert [g.key.index for g in decide(fewer).create_records] == [0]
