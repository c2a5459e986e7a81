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
simulating the pass (``planner.plan`` on the pool's nodes with their room freed: the same
quota and node fit as an admission); then each victim it does not need is put back. A group
that would not fit even with every candidate gone preempts nothing. Groups already preempted
whose pods are still going count as gone, so a pass never preempts again what an earlier one
set going; each pass's preemptors are taken in queue order, each seeing the room the earlier
ones will take.

Not done in a Pool charged to a hub Reservation (the hub grants in its own order) or one
over Karpenter NodePools (it can buy nodes instead). Called by ``decide`` after the plan;
pure: the time is the pass's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gatekeeper.core.admission.exclusive import Occupant
from gatekeeper.core.admission.intruders import Intruders
from gatekeeper.core.admission.queue import AdmittedGroup, WaitingGroup
from gatekeeper.core.backends.pools.planner import Admission, plan
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.nodes import Node
from gatekeeper.core.model.pool import Pool, WithinPool

__all__ = [
    "MAX_SIMULATIONS",
    "Candidate",
    "Preemption",
    "Preemptions",
    "Room",
    "Usage",
    "choose",
    "never_preempts",
    "preempts",
]

Usage = Mapping[str, Mapping[str, int]]
"""Requests per node name, per resource (``core.model.nodes.node_usage``)."""

MAX_SIMULATIONS = 128
"""Simulated passes one pass may spend on preemption, over all its pools: a pool of hundreds
of groups costs a logarithm of them per preemptor, and one pass never more than this."""


@dataclass(frozen=True)
class Candidate:
    """An admitted group that could be preempted: its admission, its priority, when it was
    admitted, and what its bound pods hold on each node."""

    group: AdmittedGroup
    priority: int
    admitted_at: datetime
    usage: Usage = field(default_factory=dict)


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
    occupants: Mapping[str, Iterable[Occupant]] | None = None
    budget: list[int] = field(default_factory=lambda: [MAX_SIMULATIONS])
    """Simulations left, shared by the pools of one pass."""

    def fits(self, admitted: Sequence[AdmittedGroup], usage: Usage, group: WaitingGroup) -> Admission | None:
        """Is ``group`` admitted by a pass that sees only ``admitted`` and ``usage``? None also
        once the budget is spent."""
        if self.budget[0] <= 0:
            return None
        self.budget[0] -= 1
        found = plan(
            [self.pool],
            self.nodes,
            usage,
            admitted,
            [group],
            self.namespaces,
            intruders={self.pool.name: self.intruders} if self.intruders is not None else None,
            occupants=self.occupants,
        )
        return found.admit[0] if found.admit else None


def preempts(pool: Pool) -> bool:
    """Does ``pool`` preempt? It says ``LowerPriority``, is charged to no hub Reservation and
    buys no nodes."""
    return pool.within_pool is WithinPool.LOWER_PRIORITY and not pool.reservation and not pool.node_pools


def never_preempts(group: WaitingGroup, never: frozenset[str]) -> bool:
    """Does one of the group's PriorityClasses (``never``: those whose ``preemptionPolicy`` is
    ``Never``; "" for the cluster's default class) say it never preempts?"""
    return any(c in never for c in (group.classes or ("",)))


def _less(usage: Usage, *gone: Usage) -> dict[str, dict[str, int]]:
    out = {node: dict(used) for node, used in usage.items()}
    for one in gone:
        for node, used in one.items():
            into = out.setdefault(node, {})
            for resource, amount in used.items():
                into[resource] = max(into.get(resource, 0) - amount, 0)
    return out


def _more(usage: Usage, back: Usage) -> dict[str, dict[str, int]]:
    out = {node: dict(used) for node, used in usage.items()}
    for node, used in back.items():
        into = out.setdefault(node, {})
        for resource, amount in used.items():
            into[resource] = into.get(resource, 0) + amount
    return out


def _as_admitted(found: Admission, group: WaitingGroup) -> AdmittedGroup:
    """A group the simulation admitted, as the later preemptors of the pass see it."""
    if not isinstance(group.demand, GroupDemand):
        raise TypeError("only a group whose demand is known is admitted")
    nodes = {i: n for i, n in enumerate(found.nodes) if n}
    return AdmittedGroup(group.key, group.pool, group.demand, nodes=nodes, exclusive=group.exclusive)


def _order(c: Candidate) -> tuple[int, float, GroupKey]:
    """Lowest priority first, then the most recently admitted."""
    return (c.priority, -c.admitted_at.timestamp(), c.group.key)


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
    held = [g for g in admitted if g.key not in gone]
    room_now = _less(usage, *(c.usage for c in going))
    out: list[Preemption] = []
    waits: dict[GroupKey, int] = {}
    kept_until: list[datetime] = []
    kept_for: dict[GroupKey, tuple[int, datetime]] = {}
    taken: set[GroupKey] = set()
    # What found no room (a shape, or a shape and its candidates) since the room last changed:
    # the groups of one LWS ask alike, and a hundred of them cost one simulation, not a hundred.
    misses: set[object] = set()
    for group in waiting:
        open_ones: list[Candidate] = []
        kept: list[datetime] = []
        for c in candidates:
            if c.group.key in taken or c.priority >= group.priority:
                continue
            until = ran(c)
            if until is None:
                open_ones.append(c)
            else:
                kept.append(until)
        shape = (group.demand, group.exclusive, group.key.namespace)
        if (going or out) and shape not in misses:  # the room differs from the pass's: does it fit?
            found = room.fits(held, room_now, group)
            if found is not None:  # once the groups already going are gone: it waits for them
                if going:
                    waits[group.key] = len(going)
                held.append(_as_admitted(found, group))
                misses.clear()  # the room changed
                continue
            misses.add(shape)
        trial = (shape, tuple(c.group.key for c in open_ones))
        chosen = None
        if open_ones and trial not in misses:  # a group like one that found no victims finds none
            chosen = _fewest(room, held, room_now, group, sorted(open_ones, key=_order))
        if chosen is None:
            misses.add(trial)
            kept_until.extend(kept)
            if kept:
                kept_for[group.key] = (len(kept), min(kept))
            continue
        victims, held, room_now, found = chosen
        taken.update(v.group.key for v in victims)
        held.append(_as_admitted(found, group))
        out.append(Preemption(group, victims))
        misses.clear()
    return Preemptions(tuple(out), waits, min(kept_until) if kept_until else None, kept_for)


def _fewest(
    room: Room,
    held: Sequence[AdmittedGroup],
    usage: Usage,
    group: WaitingGroup,
    ordered: Sequence[Candidate],
) -> tuple[tuple[Candidate, ...], list[AdmittedGroup], dict[str, dict[str, int]], Admission] | None:
    """The victims ``group`` needs of ``ordered``: the shortest run from the first that lets it
    in (halving, since freeing more never makes room scarcer), then each it does not need put
    back, the last chosen first. None when even all of them are not enough, or when the pass's
    budget of simulations ran out on the way (the next pass tries again with a whole one)."""

    def without(victims: Sequence[Candidate]) -> tuple[list[AdmittedGroup], dict[str, dict[str, int]]]:
        keys = {v.group.key for v in victims}
        return [g for g in held if g.key not in keys], _less(usage, *(v.usage for v in victims))

    def trial(victims: Sequence[Candidate]) -> Admission | None:
        return room.fits(*without(victims), group)

    best = trial(ordered)
    if best is None:
        return None
    low, high = 1, len(ordered)  # the shortest run that fits lies in [low, high]
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
        found = trial(rest)
        if found is not None:
            victims, best = rest, found
    if room.budget[0] <= 0:
        return None  # some answer above may be the budget's, not the room's
    kept, freed = without(victims)
    return tuple(victims), kept, freed, best
