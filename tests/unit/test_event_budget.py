"""Events per namespace are held to a share of the minute (``core.writes.plan.Memory``).

A tenant that changes its LWSs without end (each change may be told again) or scales them up
and down would otherwise have the gatekeeper write as fast as it changes things. Past the
share, an Event is not posted, the writes it would have followed go on, and it is told once
the minute has passed if it still holds (it is not remembered as posted)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core_builders import lws, lws_pod, lws_statefulsets, node, pool, read_pools

from gatekeeper.core.backends.pools import Snapshot, decide
from gatekeeper.core.backends.pools.pass_writes import PassInputs, plan_writes
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.writes.plan import EventsOnce, Memory, Op, walk

T = datetime(2026, 12, 1, 10, 0, 5, tzinfo=UTC)


def test_each_namespace_has_its_share_of_each_minute() -> None:
    dropped: list[str] = []
    memory = Memory(events_per_minute=3, on_drop=dropped.append)
    assert [memory.take_event("a", T) for _ in range(4)] == [True, True, True, False]
    assert memory.take_event("b", T), "another namespace has a share of its own"
    assert memory.take_event("a", T + timedelta(seconds=55)), "the next minute"
    assert dropped == ["a"] and memory.dropped == 1


def test_an_event_not_posted_is_told_once_the_minute_has_passed() -> None:
    memory = Memory(events_per_minute=1)
    objs = {("team", n): lws(n, "team").uid(f"u-{n}").obj() for n in ("a", "b")}
    for obj in objs.values():
        obj["metadata"]["generation"] = 7
    first = EventsOnce(memory, objs, T)
    assert first.once(GroupKey("team", "a", 0), "WaitingForQuota", "waits", warning=False) is not None
    assert first.once(GroupKey("team", "b", 0), "WaitingForQuota", "waits", warning=False) is None
    again = first.once(GroupKey("team", "a", 0), "WaitingForQuota", "waits", warning=False)
    assert again is None, "told once per LWS and reason"
    memory.events["team/a/WaitingForQuota"] = "7/None"  # a's Event went through
    later = EventsOnce(memory, objs, T + timedelta(minutes=1))
    assert later.once(GroupKey("team", "b", 0), "WaitingForQuota", "waits", warning=False) is not None
    assert later.once(GroupKey("team", "a", 0), "WaitingForQuota", "waits", warning=False) is None


def test_a_pass_past_the_share_admits_every_group_and_tells_as_many_as_the_share_allows() -> None:
    groups = 6
    obj = lws("vllm", "team").pool("a").uid("u-1").size(1).replicas(groups).worker(gpu_limit=1).obj()
    pods = [lws_pod("vllm", g, 0, namespace="team") for g in range(groups)]
    snap = Snapshot(
        lwss=[obj],
        pods=pods,
        bound_pods=[],
        nodes=[node(f"n{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(groups)],
        pools=read_pools([pool("a").quota(gpu=groups).obj()]),
        records=[],
        statefulsets=lws_statefulsets([obj], pods),
    )
    memory = Memory(events_per_minute=4)
    plan = plan_writes(decide(snap), PassInputs(snap, memory, T, 100.0))
    writes = list(walk(plan))
    assert len([w for w in writes if w.tag == "admit"]) == groups, "every admission is written"
    assert len([w for w in writes if w.tag == "ungate"]) == groups
    assert len([w for w in writes if w.op is Op.EVENT]) == 4
    assert memory.dropped == groups - 4
