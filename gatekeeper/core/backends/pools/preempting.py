"""The pass's groups as preemption sees them, and its choices as give-backs and words.

Why this exists: ``preemption`` chooses victims among admitted groups it knows as
``Candidate``s; this module finds them in what ``decide`` gathered (``GroupPass``: which
groups hold an admission, which were given back and still have pods), reads what each holds
on the nodes from its bound pods, and turns every choice into what the writes carry out: a
``GiveBack`` per victim (reason ``Preempted``: its record first, then its pods by UID, as any
give-back) and a ``Preempting`` for the preemptor (an Event on its LWS, and its record's
message). Names of another namespace's LWS are never written into a tenant's record or Event:
a group preempted by, or preempting, another namespace's group is told its priority only.
Called by ``decide``; pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gatekeeper.core.admission.exclusive import Occupant
from gatekeeper.core.admission.intruders import Intruders
from gatekeeper.core.admission.queue import AdmittedGroup, WaitingGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools import cohort
from gatekeeper.core.backends.pools.giveback import GiveBack
from gatekeeper.core.backends.pools.planner import Plan
from gatekeeper.core.backends.pools.preemption import (
    Budget,
    Candidate,
    Preemptions,
    Room,
    as_admitted,
    choose,
    never_preempts,
    preempts,
)
from gatekeeper.core.backends.pools.stages import GroupPass
from gatekeeper.core.kube.keys import ADMITTED
from gatekeeper.core.kube.objects import as_map, condition, index_by_key, parse_time
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import GroupState, PodsByGroup
from gatekeeper.core.model.nodes import Node
from gatekeeper.core.model.pool import Pool, ReclaimWithinCohort, WithinPool
from gatekeeper.core.model.retry import recorded_retries

__all__ = ["PREEMPTING", "Preempted", "Preempting", "asked_back", "preempt"]

Key = tuple[str, str]

PREEMPTING = "Preempting"
"""The Event reason on a preemptor's LWS."""

_WAITS_FOR = frozenset({Reason.WAITING_FOR_QUOTA, Reason.WAITING_FOR_NODES})
"""A waiting group that may preempt waits for room, not for its turn or for a fix."""


@dataclass(frozen=True)
class Preempting:
    """A group that preempted others in this pass: an Event on its LWS says so."""

    group: GroupState
    message: str


@dataclass(frozen=True)
class Preempted:
    """What preemption decided in one pass, ready for ``decide``."""

    give_back: tuple[GiveBack, ...] = ()
    preempting: tuple[Preempting, ...] = ()
    said: Mapping[GroupKey, str] = field(default_factory=dict)
    """What a preemptor's record adds to why it waits."""
    look_again: datetime | None = None


@dataclass(frozen=True)
class Cluster:
    """What preemption reads of the pass besides its groups."""

    pools: Mapping[str, Pool]
    nodes: Sequence[Node]
    usage: Mapping[str, Mapping[str, int]]
    namespaces: Mapping[str, Mapping[str, str]]
    intruders: Mapping[str, Intruders]
    occupants: Mapping[str, Counter[Occupant]]
    """The LWS groups' bound pods per node, counted (``core.admission.exclusive.occupants``)."""
    records: Mapping[Key, Mapping[str, Any]]
    pods: Sequence[Mapping[str, Any]]
    """The opted-in pods."""
    pods_of: PodsByGroup = field(default_factory=dict)
    priority_of: Mapping[Key, int] = field(default_factory=dict)
    """(namespace, LWS) -> the priority its groups are queued by."""
    never: frozenset[str] = frozenset()
    """PriorityClasses whose ``preemptionPolicy`` is ``Never`` ("": the cluster's default is)."""
    now: datetime | None = None


def preempt(result: Plan, one: GroupPass, cluster: Cluster) -> Preempted:
    """Preemption in every pool that allows it, over the plan ``result`` of ``one``'s groups."""
    pools = {n: p for n, p in cluster.pools.items() if preempts(p)}
    if not pools or cluster.now is None:
        return Preempted()
    waiting_of = {w.key: w for w in one.waiting_groups}
    queued: dict[str, list[WaitingGroup]] = {}
    for w in result.waiting:  # in queue order
        group = waiting_of.get(w.key)
        if (
            w.pool in pools
            and w.reason in _WAITS_FOR
            and group is not None
            and isinstance(group.demand, GroupDemand)
            and not never_preempts(group, cluster.never)
            and not group.gang  # a gang's member waits with its gang, it does not preempt alone
        ):
            queued.setdefault(w.pool, []).append(group)
    if not queued:
        return Preempted()
    admitted = _admitted(result, one, waiting_of)
    top = {name: max(w.priority for w in waiting) for name, waiting in queued.items()}
    candidates, going = _candidates(one, cluster, top)
    budget = Budget()  # shared by the pools of the pass
    decided = Preemptions()
    for name, waiting in sorted(queued.items()):
        pool = pools[name]
        room = Room(
            pool,
            [n for n in cluster.nodes if pool.selects(n)],
            cluster.namespaces,
            cluster.intruders.get(name),
            cluster.occupants,
            budget,
        )

        def ran(c: Candidate, seconds: int = pool.min_run_seconds) -> datetime | None:
            until = c.admitted_at + timedelta(seconds=seconds)
            return until if seconds and cluster.now is not None and cluster.now < until else None

        decided += choose(
            room,
            [g for g in admitted if g.held_in == name],
            cluster.usage,
            waiting,
            [c for c in candidates if c.group.held_in == name],
            [c for c in going if c.group.held_in == name],
            ran=ran,
        )
    return _said(decided, one, cluster)


def _admitted(
    result: Plan, one: GroupPass, waiting_of: Mapping[GroupKey, WaitingGroup]
) -> list[AdmittedGroup]:
    """Everything that holds room after the plan: the admitted groups, and those it admits."""
    held = list(one.admitted_groups)
    for a in result.admit:
        group = waiting_of.get(a.key)
        if group is not None and isinstance(group.demand, GroupDemand):
            held.append(as_admitted(a, group))
    return held


def _candidates(
    one: GroupPass, cluster: Cluster, top: Mapping[str, int]
) -> tuple[list[Candidate], list[Candidate]]:
    """The admitted groups that could be preempted (they hold an admission as admitted, their
    gated pods let through, on the room of a pool in ``top``: its own below its highest waiting
    priority where it preempts within, borrowers' as it reclaims), and those preempted earlier
    whose pods are still there, in those pools."""
    by_key = {g.key: g for g in one.admitted_groups if g.held_in in top}
    pods = index_by_key(cluster.pods)
    found: list[Candidate] = []
    for key in one.ungate_keys:
        gs, group = one.state_of.get(key), by_key.get(key)
        record = cluster.records.get((key.namespace, gs.record)) if gs is not None else None
        if gs is None or group is None or record is None:
            continue
        pool, priority = cluster.pools[group.held_in], cluster.priority_of.get((key.namespace, key.name), 0)
        if group.lender:
            if not cohort.reclaims(pool, priority, top[group.held_in]):
                continue  # its lender does not take back what it lent, or not from such a group
        elif pool.within_pool is not WithinPool.LOWER_PRIORITY or priority >= top[group.held_in]:
            continue  # no waiting group of its pool outranks it
        if condition(record, ADMITTED).get("reason") != ADMITTED:
            continue  # it names a stranger, or waits for a changed template's old pods
        found.append(_candidate(gs, group, record, cluster, pods, any_priority=bool(group.lender)))
    going: list[Candidate] = []
    for gs in one.held_by_pods:
        record = cluster.records.get((gs.key.namespace, gs.record))
        group = by_key.get(gs.key)
        preempted = condition(record, ADMITTED).get("reason") == str(Reason.PREEMPTED)
        if record is not None and group is not None and preempted:
            going.append(_candidate(gs, group, record, cluster, pods))
    return found, going


def _candidate(
    gs: GroupState,
    group: AdmittedGroup,
    record: Mapping[str, Any],
    cluster: Cluster,
    by_key: Mapping[Key, Mapping[str, Any]],
    *,
    any_priority: bool = False,
) -> Candidate:
    ns = gs.key.namespace
    members = cluster.pods_of.get((ns, gs.key.name), {}).get(gs.key.index, ())  # terminating too
    pods = [by_key[(ns, p.name)] for p in members if (ns, p.name) in by_key]
    return Candidate(
        group,
        cluster.priority_of.get((ns, gs.key.name), 0),
        parse_time(as_map(record.get("status")).get("admittedAt")),
        pods,
        any_priority=any_priority
        and cluster.pools[group.held_in].reclaim_within_cohort is ReclaimWithinCohort.ANY,
    )


def _said(decided: Preemptions, one: GroupPass, cluster: Cluster) -> Preempted:
    """Each choice as give-backs of its victims and an Event for its preemptor."""
    assert cluster.now is not None
    gives: list[GiveBack] = []
    events: list[Preempting] = []
    said: dict[GroupKey, str] = {}
    for p in decided.preemptions:
        by = p.preemptor
        for v in p.victims:
            gs = one.state_of[v.group.key]
            gives.append(_give_back(gs, v, by, one, cluster))
        names = _named(by.key, [v.group.key for v in p.victims])
        lowest = min(v.priority for v in p.victims)
        lent = sum(1 for v in p.victims if v.group.lender)
        which = f"{len(p.victims)} group(s) of lower priority (from {lowest})"
        if lent:
            which = f"{len(p.victims)} group(s), {lent} of them borrowing its room (priority from {lowest}),"
        words = f"preempted {which} in pool {by.pool}: {names}; it is admitted once their pods are gone"
        said[by.key] = words
        events.append(Preempting(one.state_of[by.key], f"group {by.key.index} {words}"))
    for key, count in decided.waits_for.items():
        said.setdefault(key, f"waits for {count} preempted group(s) of lower priority to stop")
    for key, (count, until) in decided.kept.items():
        seconds = cluster.pools[one.state_of[key].pool].min_run_seconds if key in one.state_of else 0
        said.setdefault(
            key,
            f"preempts nothing yet: {count} group(s) of lower priority have held their admission less "
            f"than the pool's spec.minRunSeconds ({seconds} s), the first until {until:%H:%M:%S}",
        )
    return Preempted(tuple(gives), tuple(events), said, decided.look_again)


def _give_back(gs: GroupState, v: Candidate, by: WaitingGroup, one: GroupPass, cluster: Cluster) -> GiveBack:
    assert cluster.now is not None
    key = gs.key
    record = cluster.records[(key.namespace, gs.record)]
    members = cluster.pods_of.get((key.namespace, key.name), {}).get(key.index, ())
    stop = tuple(sorted(p.name for p in members if not p.terminating and not p.gated))
    who = (
        f"group {by.key.index} of LeaderWorkerSet {by.key.name}"
        if by.key.namespace == key.namespace
        else "a group of another namespace"
    )
    where, queue = f"pool {v.group.pool}", "the pool's"
    if v.group.lender:
        where = f"pool {v.group.lender}, which lent it room from its cohort and took it back,"
        queue = f"pool {v.group.pool}'s"
    message = (
        f"group {key.index} was preempted in {where} by {who} of priority {by.priority} "
        f"(its own: {v.priority}); its pods are deleted, and it waits in {queue} queue again"
    )
    return GiveBack(gs, stop, message, cluster.now, recorded_retries(record), Reason.PREEMPTED)


def _named(by: GroupKey, victims: Sequence[GroupKey]) -> str:
    """The victims as the preemptor's namespace may read them: its own by name, others counted."""
    own = [f"{k.name} group {k.index}" for k in sorted(victims) if k.namespace == by.namespace]
    others = sum(1 for k in victims if k.namespace != by.namespace)
    if others:
        own.append(f"{others} of other namespaces")
    return ", ".join(own)


def asked_back(
    one: GroupPass,
    records: Mapping[Key, Mapping[str, Any]],
    pods_of: PodsByGroup,
    asked: Mapping[tuple[str, str, int], str],
    now: datetime | None,
) -> list[GiveBack]:
    """The admitted groups whose claims the hub asks back for a claim of higher priority
    (``core.reservation.preemption``), given back whole as a preempted group is: their claims
    are deleted once their pods are gone (``hub_member``), and only then does the hub grant the
    room to the claim that asked."""
    gives: list[GiveBack] = []
    if not asked or now is None:
        return gives
    for key in one.ungate_keys:
        gs = one.state_of.get(key)
        words = asked.get((key.namespace, gs.lws_uid, key.index)) if gs is not None else None
        record = records.get((key.namespace, gs.record)) if gs is not None else None
        if gs is None or words is None or record is None:
            continue
        members = pods_of.get((key.namespace, key.name), {}).get(key.index, ())
        stop = tuple(sorted(p.name for p in members if not p.terminating and not p.gated))
        message = (
            f"group {key.index} was preempted: the hub asked its claim back ({words}); its pods are "
            "deleted, and it waits in the pool's queue again"
        )
        gives.append(GiveBack(gs, stop, message, now, recorded_retries(record), Reason.PREEMPTED))
    return gives
