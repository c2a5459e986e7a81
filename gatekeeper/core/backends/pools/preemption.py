"""Whole-group preemption within a Pool: ``spec.preemption.withinPool: LowerPriority``.

Why this exists: without it a production LWS scaled up by its HPA waits behind a team's
experiment for as long as the experiment runs. With it, a waiting group that fits its pool
only if admitted groups of lower priority go takes their room, as Kueue's preemption within
a ClusterQueue does, and never half a group: the victims are given back whole (their
records say ``Preempted``, their pods are deleted, their LWSs make them again, gated), and the
waiting group is admitted by an ordinary pass once their pods are gone: until then they hold
what they were admitted with (``stages.GroupPass._held_by_pods``), so quota and node room are
never counted twice.

Victims are chosen as Kueue chooses them: candidates of lower priority (not those that have
held their admission less than the pool's ``spec.minRunSeconds``), lowest priority first, then
the most recently admitted; the shortest run of them that lets the group in, found by
simulating the pass (``planner.plan`` on the pool's nodes with their room freed, the topology
domains their pods held for exclusive placement too: the same quota and node fit as an
admission); then each victim it does not need is put back. A group that would not fit even
with every candidate gone preempts nothing. Groups already preempted
whose pods are still going count as gone, so a pass never preempts again what an earlier one
set going; each pass's preemptors are taken in queue order, each seeing the room the earlier
ones will take.

A lender of a cohort takes back its room the same way (``spec.preemption.reclaimWithinCohort``):
the groups of other pools borrowing it are candidates too, before its own (``cohort.reclaims``
says which: those of lower priority, or any), so what was lent goes first.

Not done in a Pool charged to a hub Reservation (the hub grants in its own order) or one
over Karpenter NodePools (it can buy nodes instead). Called by ``decide`` after the plan;
pure: the time is the pass's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from gatekeeper.core.admission import exclusive
from gatekeeper.core.admission.exclusive import Occupant
from gatekeeper.core.admission.intruders import Intruders
from gatekeeper.core.admission.queue import AdmittedGroup, WaitingGroup
from gatekeeper.core.admission.quota import limited_demand
from gatekeeper.core.backends.pools.planner import Admission, plan
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.nodes import Node, node_usage
from gatekeeper.core.model.pool import Pool, ReclaimWithinCohort, WithinPool, sum_allocatable

__all__ = [
    "FIRST_SIMULATIONS",
    "MAX_SIMULATIONS",
    "Budget",
    "Candidate",
    "Preemption",
    "Preemptions",
    "Room",
    "Usage",
    "as_admitted",
    "choose",
    "never_preempts",
    "preempts",
]

Usage = Mapping[str, Mapping[str, int]]
"""Requests per node name, per resource (``core.model.nodes.node_usage``)."""

MAX_SIMULATIONS = 16
"""Simulated passes one pass may spend on preemption, over all its pools (one costs about 25 ms
on 2,000 nodes with 1,000 admitted groups): quota arithmetic finds most victims, so a preemptor
costs one; the preemptors past the budget are served by the next pass."""

FIRST_SIMULATIONS = 64
"""What a pass may spend until it has decided one preemption: enough for the halving and the
putting back of a preemptor among a thousand candidates, so that every pass makes progress."""


@dataclass
class Budget:
    """The simulations one pass has left, shared by its pools: ``FIRST_SIMULATIONS`` until it
    has decided a preemption, ``MAX_SIMULATIONS`` in all once it has."""

    spent: int = 0
    decided: bool = False

    @property
    def left(self) -> bool:
        return self.spent < (MAX_SIMULATIONS if self.decided else FIRST_SIMULATIONS)

    def spend(self) -> bool:
        """Take one, if any is left."""
        if not self.left:
            return False
        self.spent += 1
        return True


@dataclass(eq=False)
class Candidate:
    """An admitted group that could be preempted: its admission, its priority, when it was
    admitted, and its pods (what they hold on each node is read only if it is tried)."""

    group: AdmittedGroup
    priority: int
    admitted_at: datetime
    pods: Sequence[Mapping[str, Any]] = ()
    _usage: Usage | None = None
    any_priority: bool = False
    """A borrower's group its lender reclaims whatever its priority (``reclaimWithinCohort: Any``)."""

    @property
    def usage(self) -> Usage:
        """What its bound pods hold on each node."""
        if self._usage is None:
            self._usage = node_usage(self.pods)
        return self._usage


@dataclass(frozen=True)
class Preemption:
    """``preemptor`` is admitted once ``victims`` are gone."""

    preemptor: WaitingGroup
    victims: tuple[Candidate, ...]


@dataclass(frozen=True)
class Preemptions:
    """What preemption decided in one pool, or in all of them."""

    preemptions: tuple[Preemption, ...] = ()
    waits_for: Mapping[GroupKey, int] = field(default_factory=dict)
    """Waiting groups that fit once the groups already preempted are gone: how many they wait for."""
    look_again: datetime | None = None
    """When a candidate kept by ``spec.minRunSeconds`` may be preempted, if one was needed."""
    kept: Mapping[GroupKey, tuple[int, datetime]] = field(default_factory=dict)
    """Waiting groups that preempted nothing while candidates were kept by ``spec.minRunSeconds``:
    how many, and when the first may go."""

    def __add__(self, other: Preemptions) -> Preemptions:
        times = [t for t in (self.look_again, other.look_again) if t is not None]
        return Preemptions(
            self.preemptions + other.preemptions,
            {**self.waits_for, **other.waits_for},
            min(times) if times else None,
            {**self.kept, **other.kept},
        )


@dataclass
class Room:
    """One pool's nodes and what is on them, to simulate a pass on (``fits``)."""

    pool: Pool
    nodes: Sequence[Node]
    namespaces: Mapping[str, Mapping[str, str]]
    intruders: Intruders | None = None
    occupants: Mapping[str, Counter[Occupant]] | None = None
    """The LWS groups' bound pods per node (``exclusive.occupants``): a victim's are freed."""
    budget: Budget = field(default_factory=Budget)
    """Simulations left, shared by the pools of one pass."""

    @cached_property
    def quota(self) -> Mapping[str, int]:
        """The pool's quota, or its schedulable nodes' allocatable (as the planner's)."""
        if self.pool.quota is not None:
            return self.pool.quota
        return sum_allocatable(n for n in self.nodes if n.schedulable)

    def short(self, held: Sequence[AdmittedGroup], group: WaitingGroup) -> dict[str, int]:
        """What the pool's quota lacks for ``group`` beside ``held`` (and the pods on its closed
        nodes without an admission), per resource it limits; {} when the quota holds it."""
        if not isinstance(group.demand, GroupDemand):
            return {}
        quota = self.quota
        used: dict[str, int] = dict(self.intruders.requests) if self.intruders is not None else {}
        for g in held:
            if g.held_in == self.pool.name:
                for r, amount in limited_demand(g.demand, quota).items():
                    used[r] = used.get(r, 0) + amount
        need = limited_demand(group.demand, quota)
        return {r: left for r, a in need.items() if (left := used.get(r, 0) + a - quota.get(r, 0)) > 0}

    def fits(
        self,
        admitted: Sequence[AdmittedGroup],
        usage: Usage,
        group: WaitingGroup,
        gone: Sequence[Candidate] = (),
    ) -> Admission | None:
        """Is ``group`` admitted by a pass that sees only ``admitted`` and ``usage``, the groups
        ``gone`` gone from the topology domains too (exclusive placement)? None also once the
        budget is spent."""
        if not self.budget.spend():
            return None
        occupants = self.occupants
        if gone and occupants is not None:
            occupants = exclusive.without(occupants, [p for c in gone for p in c.pods])
        found = plan(
            [self.pool],
            self.nodes,
            usage,
            admitted,
            [group],
            self.namespaces,
            intruders={self.pool.name: self.intruders} if self.intruders is not None else None,
            occupants=occupants,
        )
        return found.admit[0] if found.admit else None


def preempts(pool: Pool) -> bool:
    """Does ``pool`` preempt? It says ``LowerPriority`` within, or reclaims what it lent, is
    charged to no hub Reservation and buys no nodes."""
    takes = (
        pool.within_pool is WithinPool.LOWER_PRIORITY
        or pool.reclaim_within_cohort is not ReclaimWithinCohort.NEVER
    )
    return takes and not pool.reservation and not pool.node_pools


def never_preempts(group: WaitingGroup, never: frozenset[str]) -> bool:
    """Does one of the group's PriorityClasses (``never``: those whose ``preemptionPolicy`` is
    ``Never``; "" for the cluster's default class) say it never preempts?"""
    return any(c in never for c in (group.classes or ("",)))


def _less(usage: Usage, *gone: Usage) -> Usage:
    """``usage`` less what ``gone`` hold (a new map; only the nodes they are on copied)."""
    out: dict[str, Mapping[str, int]] = dict(usage)
    for one in gone:
        for node, used in one.items():
            into = dict(out.get(node, {}))
            for resource, amount in used.items():
                into[resource] = max(into.get(resource, 0) - amount, 0)
            out[node] = into
    return out


def as_admitted(found: Admission, group: WaitingGroup) -> AdmittedGroup:
    """A group a plan admitted (``found``), as what holds room after it: the later preemptors of
    the pass see it so, and ``preempting`` counts the pass's own admissions so."""
    if not isinstance(group.demand, GroupDemand):
        raise TypeError("only a group whose demand is known is admitted")
    nodes = {i: n for i, n in enumerate(found.nodes) if n}
    return AdmittedGroup(
        group.key,
        group.pool,
        group.demand,
        nodes=nodes,
        exclusive=group.exclusive,
        lender=found.lender,
        domain=found.domain,
        subgroups=group.subgroups is not None,
    )


def _order(c: Candidate) -> tuple[bool, int, float, GroupKey]:
    """Borrowers' groups first, then the lowest priority, then the most recently admitted."""
    return (not c.group.lender, c.priority, -c.admitted_at.timestamp(), c.group.key)


def choose(
    room: Room,
    admitted: Sequence[AdmittedGroup],
    usage: Usage,
    waiting: Sequence[WaitingGroup],
    candidates: Sequence[Candidate],
    going: Sequence[Candidate] = (),
    *,
    ran: Callable[[Candidate], datetime | None] = lambda c: None,
) -> Preemptions:
    """Preemption in one pool. ``admitted`` is everything that holds room in it (this pass's
    admissions included), ``usage`` what is bound on its nodes, ``waiting`` the groups that may
    preempt, in queue order, ``candidates`` the admitted groups that may be preempted, ``going``
    those preempted earlier whose pods are still there (``admitted`` holds them too). ``ran``
    says until when a candidate is kept by ``spec.minRunSeconds`` (None: it is not)."""
    gone = {c.group.key for c in going}
    freed = list(going)  # their pods' domains too, once the groups chosen below are added
    held = [g for g in admitted if g.key not in gone]
    room_now = _less(usage, *(c.usage for c in going))
    out: list[Preemption] = []
    waits: dict[GroupKey, int] = {}
    kept_for: dict[GroupKey, tuple[int, datetime]] = {}
    taken: set[GroupKey] = set()
    # What found no room (a shape, or a shape and its candidates) since the room last changed:
    # the groups of one LWS ask alike, and a hundred of them cost one simulation, not a hundred.
    misses: set[object] = set()
    floor = min((c.priority for c in (*candidates, *going)), default=None)
    anyone = any(c.any_priority for c in (*candidates, *going))
    for group in waiting:
        if floor is None or (group.priority <= floor and not anyone):
            continue  # it outranks no group here, taken or going: nothing to preempt or wait for
        open_ones: list[Candidate] = []
        kept: list[datetime] = []
        for c in candidates:
            if c.group.key in taken or (c.priority >= group.priority and not c.any_priority):
                continue
            until = ran(c)
            if until is None:
                open_ones.append(c)
            else:
                kept.append(until)
        shape = (group.demand, group.exclusive, group.key.namespace, group.topology, group.subgroups)
        if (going or out) and shape not in misses and not room.short(held, group):  # does it fit now?
            found = room.fits(held, room_now, group, freed)
            if found is not None:  # once the groups already going are gone: it waits for them
                if going:
                    waits[group.key] = len(going)
                held.append(as_admitted(found, group))
                misses.clear()  # the room changed
                continue
            misses.add(shape)
        trial = (shape, tuple(c.group.key for c in open_ones))
        chosen = None
        if open_ones and trial not in misses:  # a group like one that found no victims finds none
            chosen = _fewest(room, held, room_now, group, sorted(open_ones, key=_order), freed)
        if chosen is None:
            misses.add(trial)
            if kept:
                kept_for[group.key] = (len(kept), min(kept))
            continue
        victims, held, room_now, found = chosen
        taken.update(v.group.key for v in victims)
        freed.extend(victims)
        held.append(as_admitted(found, group))
        out.append(Preemption(group, victims))
        room.budget.decided = True
        misses.clear()
    first_free = min((until for _, until in kept_for.values()), default=None)
    return Preemptions(tuple(out), waits, first_free, kept_for)


def _fewest(
    room: Room,
    held: Sequence[AdmittedGroup],
    usage: Usage,
    group: WaitingGroup,
    ordered: Sequence[Candidate],
    freed: Sequence[Candidate] = (),
) -> tuple[tuple[Candidate, ...], list[AdmittedGroup], Usage, Admission] | None:
    """The victims ``group`` needs of ``ordered``: the shortest run from the first that lets it
    in (halving, since freeing more never makes room scarcer), then each it does not need put
    back, the last chosen first. None when even all of them are not enough, or when the pass's
    budget of simulations ran out on the way (the next pass tries again with a whole one)."""

    def without(victims: Sequence[Candidate]) -> tuple[list[AdmittedGroup], Usage]:
        keys = {v.group.key for v in victims}
        return [g for g in held if g.key not in keys], _less(usage, *(v.usage for v in victims))

    def trial(victims: Sequence[Candidate]) -> Admission | None:
        return room.fits(*without(victims), group, [*freed, *victims]) if room.budget.left else None

    short, quota = room.short(held, group), room.quota

    def enough(victims: Sequence[Candidate]) -> bool:
        """Do they free what the quota lacks? (Arithmetic: no simulation needs to say no.)"""
        freed: dict[str, int] = {}
        for v in victims:
            for r, amount in limited_demand(v.group.demand, quota).items():
                freed[r] = freed.get(r, 0) + amount
        return all(freed.get(r, 0) >= amount for r, amount in short.items())

    first, have = 0, dict.fromkeys(short, 0)
    while any(have[r] < amount for r, amount in short.items()) or not first:
        if first == len(ordered):
            return None  # even all of them free too little quota
        for r, amount in limited_demand(ordered[first].group.demand, quota).items():
            if r in have:
                have[r] += amount
        first += 1
    best = trial(ordered[:first])  # the quota's shortest run: usually the answer
    high = first
    if best is None:
        best = trial(ordered)
        if best is None:
            return None
        low, high = first + 1, len(ordered)  # the shortest run that fits lies in [low, high]
        while low < high:
            middle = (low + high) // 2
            found = trial(ordered[:middle])
            if found is not None:
                high, best = middle, found
            else:
                low = middle + 1
    victims = list(ordered[:high])
    for victim in reversed(victims[:-1]):
        rest = [v for v in victims if v is not victim]
        if not enough(rest):
            continue
        found = trial(rest)
        if found is not None:
            victims, best = rest, found
    if not room.budget.left:
        return None  # some answer above may be the budget's, not the room's
    kept, usage_left = without(victims)
    return tuple(victims), kept, usage_left, best
