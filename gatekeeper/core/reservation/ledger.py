"""The hub's ledger: which claims of one Reservation to grant, and what the Reservation holds.

Why this exists: several member clusters share one capacity reservation, and each member
alone cannot see what the others took. One decider on the hub (``controller.hub``, the
gatekeeper in its hub role, leading on the hub's Lease) calls :func:`decide` on each pass
with a Reservation and every claim naming it, and writes what it returns. Pure: no I/O.

The rules:

* **Never over-committed.** Granted and Orphaned claims hold their demand; the pass
  grants a Pending claim only when its whole demand fits what is free after every
  earlier grant of the pass. A claim is charged only for the resources the Reservation's
  ``spec.capacity`` lists (a reservation of GPUs is not a cpu quota).
* **Order:** priority (higher first), then the group's age across all members (its LWS's
  creation time on its member), then cluster, namespace, LWS, group index and name.
* **Queueing strategy, as a Pool's:** ``BestEffortFIFO`` lets a later claim that fits pass
  one that does not; ``StrictFIFO`` holds every later claim behind the first that waits.
  A claim that could never fit (more than the whole capacity) or cannot be read never
  blocks the queue.
* Released claims hold nothing and are never granted again.
* **Members gone** (``gone``: clusters whose heartbeat expired, from
  ``core.reservation.heartbeat``): their Granted claims become Orphaned and go on
  holding (their machines may still run); their Pending claims are not granted. An
  Orphaned claim whose member beats again is Granted again; one Orphaned for longer than
  the Reservation's ``spec.orphanTimeout`` is Released, and its room is free from the next
  pass on (a release whose write failed must not be granted to another in the same pass).
* **Preemption** (``spec.preemption.withinReservation: LowerPriority``): a Pending claim that
  waits for capacity asks granted claims of lower priority back (``core.reservation.preemption``);
  they hold until their members give them back, and it is granted by a later pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from gatekeeper.core.kube.quantity import format_amount
from gatekeeper.core.model.pool import QueueingStrategy, WithinPool
from gatekeeper.core.reservation.members import clamped, refusal
from gatekeeper.core.reservation.objects import (
    BadClaim,
    Claim,
    ClaimMemo,
    ClaimState,
    Reservation,
    parse_claim,
    parse_reservation,
)
from gatekeeper.core.reservation.preemption import GIVE_BACK_REQUESTED, choose

__all__ = [
    "Change",
    "ClaimReason",
    "ClusterShare",
    "Grant",
    "Ledger",
    "ReservationStatus",
    "Waiting",
    "decide",
    "moves_without_reservation",
    "order",
    "without_reservation",
]


class ClaimReason(StrEnum):
    """Why a Pending claim was not granted in a pass (``status.reason`` of the claim)."""

    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    BLOCKED_BY_STRICT_FIFO = "BlockedByStrictFIFO"
    EXCEEDS_CAPACITY = "ExceedsCapacity"
    INVALID_SPEC = "InvalidSpec"
    RESERVATION_NOT_FOUND = "ReservationNotFound"
    RESERVATION_INVALID = "ReservationInvalid"
    MEMBER_GONE = "MemberHeartbeatExpired"
    """Its member's heartbeat expired: a Pending claim is not granted, a Granted one is Orphaned."""
    ORPHAN_TIMEOUT = "OrphanTimeout"
    MEMBER_NOT_ALLOWED = "MemberNotAllowed"
    """The Reservation's ``spec.members`` does not list the claim's cluster: never granted."""
    MEMBER_LIMIT_REACHED = "MemberLimitReached"
    """Its member holds its ``maxClaims`` or its ``quota`` on the Reservation already."""
    RELEASED_BY_OPERATOR = "ReleasedByOperator"
    """``lws-gatekeeper hub release --cluster``."""
    GRANTED = "Granted"
    GIVE_BACK_REQUESTED = GIVE_BACK_REQUESTED
    """Granted, and asked back for a claim of higher priority (``core.reservation.preemption``):
    it holds until its member gives its group back and deletes it."""


@dataclass(frozen=True)
class Change:
    """Move a held claim to another state (Orphaned, Granted again, Released), guarded by the
    resourceVersion decided on."""

    name: str
    uid: str
    resource_version: str
    cluster: str
    state: ClaimState
    reason: ClaimReason
    message: str


@dataclass(frozen=True)
class Grant:
    """Write ``status.state: Granted`` on this claim, guarded by the resourceVersion decided on."""

    name: str
    uid: str
    resource_version: str
    cluster: str


@dataclass(frozen=True)
class Waiting:
    """A Pending claim left waiting, with why (written when it changed)."""

    name: str
    uid: str
    resource_version: str
    reason: ClaimReason
    message: str


@dataclass(frozen=True)
class ClusterShare:
    """What one member cluster holds in the Reservation, and how many of its claims wait."""

    name: str
    claimed: Mapping[str, int]
    granted: int = 0
    pending: int = 0
    orphaned: int = 0


@dataclass(frozen=True)
class ReservationStatus:
    """The Reservation's status after a pass: capacity, claimed, free, per member cluster."""

    capacity: Mapping[str, int]
    claimed: Mapping[str, int]
    free: Mapping[str, int]
    clusters: tuple[ClusterShare, ...]
    granted: int
    pending: int


@dataclass(frozen=True)
class Ledger:
    """Everything a pass decided for one Reservation."""

    reservation: str
    grants: tuple[Grant, ...]
    waiting: tuple[Waiting, ...]
    status: ReservationStatus | None
    """None when the Reservation cannot be read (its ``invalid`` says why)."""
    invalid: str = ""
    problems: tuple[str, ...] = field(default_factory=tuple)
    changes: tuple[Change, ...] = ()


def without_reservation(
    claims: Iterable[Mapping[str, Any]], names: frozenset[str], memo: ClaimMemo | None = None
) -> tuple[Waiting, ...]:
    """Pending claims that name no Reservation the hub has: each is told so."""
    read = memo.parse if memo is not None else parse_claim
    out: list[Waiting] = []
    for obj in claims:
        c = read(obj)
        if c.reservation in names or c.state is not ClaimState.PENDING or not c.name:
            continue
        message = f"claim {c.name}: no Reservation {c.reservation or '(none named)'} on the hub"
        out.append(Waiting(c.name, c.uid, c.resource_version, ClaimReason.RESERVATION_NOT_FOUND, message))
    return tuple(out)


def moves_without_reservation(
    claims: Iterable[Mapping[str, Any]],
    names: frozenset[str],
    gone: Mapping[str, str],
    memo: ClaimMemo | None = None,
) -> tuple[Change, ...]:
    """Held claims that name no Reservation the hub has (it was deleted): Orphaned when
    their member is gone and Granted again when it is back, as in a Reservation, so an
    operator's ``hub release`` sees them as it sees the others."""
    read = memo.parse if memo is not None else parse_claim
    out: list[Change] = []
    for obj in claims:
        c = read(obj)
        if isinstance(c, Claim) and c.reservation not in names and c.state.holds:
            res = Reservation(c.reservation, {})
            change = _membership(c, c.state, res, gone.get(c.cluster), None)
            if change is not None:
                out.append(change)
    return tuple(out)


def order(claim: Claim) -> tuple[int, Any, str, str, str, int, str]:
    """Queue order: priority desc, the group's age, then a stable tie-break."""
    c = claim
    return (-c.priority, c.created, c.cluster, c.namespace, c.lws, c.group, c.name)


def _charged(claim: Claim, capacity: Mapping[str, int]) -> dict[str, int]:
    return {r: a for r, a in claim.demand.items() if r in capacity and a > 0}


def _fits(demand: Mapping[str, int], free: Mapping[str, int]) -> bool:
    return all(amount <= free.get(resource, 0) for resource, amount in demand.items())


def _words(demand: Mapping[str, int], free: Mapping[str, int], capacity: Mapping[str, int]) -> str:
    short = [r for r in sorted(demand) if demand[r] > free.get(r, 0)] or sorted(demand) or sorted(capacity)
    r = short[0]
    return (
        f"needs {format_amount(r, demand.get(r, 0))} {r}; "
        f"{format_amount(r, max(free.get(r, 0), 0))} of {format_amount(r, capacity[r])} {r} free"
    )


def decide(
    reservation: Mapping[str, Any],
    claims: Iterable[Mapping[str, Any]],
    *,
    counted_granted: frozenset[str] = frozenset(),
    gone: Mapping[str, str] | None = None,
    now: datetime | None = None,
    memo: ClaimMemo | None = None,
) -> Ledger:
    """One pass over one Reservation and every claim that names it.

    ``counted_granted``: UIDs of claims this decider granted that its cache may not show
    yet; they hold as Granted (a stale cache must never free capacity twice). ``gone``:
    member clusters whose heartbeat expired -> why, in words. ``now``: the hub's clock,
    for ``spec.orphanTimeout`` (None: no claim is released for its timeout). ``memo``:
    claims already read (the caller's, kept across passes).
    """
    name = str((reservation.get("metadata") or {}).get("name") or "")
    read = memo.parse if memo is not None else parse_claim
    parsed = [read(c) for c in claims]
    bad = [c for c in parsed if isinstance(c, BadClaim)]
    good = [c for c in parsed if isinstance(c, Claim)]
    problems = tuple(b.message for b in bad)
    try:
        res = parse_reservation(reservation)
    except ValueError as err:
        waiting = tuple(
            Waiting(c.name, c.uid, c.resource_version, ClaimReason.RESERVATION_INVALID, str(err))
            for c in good
            if c.state is ClaimState.PENDING
        )
        return Ledger(name, (), waiting + _bad(bad), None, invalid=str(err), problems=problems)
    return _decide(res, good, bad, counted_granted, problems, gone or {}, now)


def _bad(bad: Iterable[BadClaim]) -> tuple[Waiting, ...]:
    return tuple(
        Waiting(b.name, b.uid, b.resource_version, ClaimReason.INVALID_SPEC, b.message)
        for b in bad
        if b.state is ClaimState.PENDING and b.name
    )


def _decide(
    res: Reservation,
    good: list[Claim],
    bad: list[BadClaim],
    counted: frozenset[str],
    problems: tuple[str, ...],
    gone: Mapping[str, str],
    now: datetime | None,
) -> Ledger:
    capacity = res.capacity
    held: dict[str, int] = dict.fromkeys(capacity, 0)
    by_cluster: dict[str, dict[str, int]] = {}
    counts: dict[str, list[int]] = {}  # cluster -> [granted, pending, orphaned]

    def hold(claim: Claim) -> None:
        for resource, amount in _charged(claim, capacity).items():
            held[resource] += amount
            share = by_cluster.setdefault(claim.cluster, {})
            share[resource] = share.get(resource, 0) + amount

    pending: list[Claim] = []
    changes: list[Change] = []
    waiting: list[Waiting] = list(_bad(bad))
    staying: list[Claim] = []  # Granted now and after the pass: what preemption may ask back
    for claim in good:
        state = ClaimState.GRANTED if claim.uid and claim.uid in counted else claim.state
        row = counts.setdefault(claim.cluster, [0, 0, 0])
        if state.holds:
            hold(claim)  # a claim released in this pass still holds until the next
            change = _membership(claim, state, res, gone.get(claim.cluster), now)
            if change is not None:
                changes.append(change)
                state = change.state if change.state is not ClaimState.RELEASED else state
            elif state is ClaimState.GRANTED:
                staying.append(claim)
            row[0 if state is ClaimState.GRANTED else 2] += 1
        elif state is ClaimState.PENDING:
            pending.append(claim)
    grants: list[Grant] = []
    blocked: Claim | None = None

    def wait(claim: Claim, reason: ClaimReason, message: str) -> None:
        waiting.append(Waiting(claim.name, claim.uid, claim.resource_version, reason, message))
        counts[claim.cluster][1] += 1

    pending = [replace(c, priority=clamped(res.members, c.cluster, c.priority)) for c in pending]
    short: list[Claim] = []  # waiting for capacity, in queue order
    for claim in sorted(pending, key=order):
        demand = _charged(claim, capacity)
        free = {r: capacity[r] - held[r] for r in capacity}
        row = counts[claim.cluster]
        bounds = refusal(
            res.members, res.name, claim.cluster, demand, by_cluster.get(claim.cluster, {}), row[0] + row[2]
        )
        if bounds is not None:  # never granted, and blocks no one (StrictFIFO included)
            wait(
                claim,
                ClaimReason.MEMBER_NOT_ALLOWED if bounds.not_member else ClaimReason.MEMBER_LIMIT_REACHED,
                bounds.message,
            )
        elif not _fits(demand, capacity):
            words = _words(demand, capacity, capacity)
            wait(claim, ClaimReason.EXCEEDS_CAPACITY, f"can never be granted: {words} with none granted")
        elif claim.cluster in gone:  # not granted, and blocks no one (StrictFIFO included)
            wait(
                claim, ClaimReason.MEMBER_GONE, f"not granted while its member is gone: {gone[claim.cluster]}"
            )
        elif blocked is not None:
            words = _words(demand, free, capacity)
            behind = f"waits behind claim {blocked.name} (StrictFIFO): {words}"
            wait(claim, ClaimReason.BLOCKED_BY_STRICT_FIFO, behind)
        elif _fits(demand, free):
            hold(claim)
            grants.append(Grant(claim.name, claim.uid, claim.resource_version, claim.cluster))
            counts[claim.cluster][0] += 1
        else:
            wait(claim, ClaimReason.WAITING_FOR_CAPACITY, _words(demand, free, capacity))
            short.append(claim)
            if res.queueing_strategy is QueueingStrategy.STRICT_FIFO:
                blocked = claim
    if res.within is WithinPool.LOWER_PRIORITY and short:
        waiting, asked = _asked_back(res, held, staying, short, waiting)
        changes.extend(asked)
    status = _status(capacity, held, by_cluster, counts)
    return Ledger(res.name, tuple(grants), tuple(waiting), status, problems=problems, changes=tuple(changes))


def _asked_back(
    res: Reservation,
    held: Mapping[str, int],
    staying: list[Claim],
    short: list[Claim],
    waiting: list[Waiting],
) -> tuple[list[Waiting], list[Change]]:
    """Preemption (``core.reservation.preemption``): the victims asked back, and the waiting
    claims' messages saying what they asked or wait for."""
    capacity = res.capacity
    granted = [replace(c, priority=clamped(res.members, c.cluster, c.priority)) for c in staying]
    free = {r: capacity[r] - held[r] for r in capacity}
    asked = choose(free, granted, short, lambda c: _charged(c, capacity))
    changes = [
        Change(
            c.name,
            c.uid,
            c.resource_version,
            c.cluster,
            ClaimState.GRANTED,
            ClaimReason.GIVE_BACK_REQUESTED,
            f"asked back for a claim of priority {by} (its own: {c.priority}); its member gives the "
            "group back whole and then deletes this claim",
        )
        for c, by in asked.victims
    ]
    told = [
        replace(w, message=f"{w.message}; {asked.said[w.name]}") if w.name in asked.said else w
        for w in waiting
    ]
    return told, changes


def _status(
    capacity: Mapping[str, int],
    held: Mapping[str, int],
    by_cluster: Mapping[str, Mapping[str, int]],
    counts: Mapping[str, list[int]],
) -> ReservationStatus:
    """What the Reservation holds after a pass, and per member (granted, pending, orphaned)."""
    clusters = tuple(
        ClusterShare(
            name=cluster,
            claimed={r: by_cluster.get(cluster, {}).get(r, 0) for r in sorted(capacity)},
            granted=row[0],
            pending=row[1],
            orphaned=row[2],
        )
        for cluster, row in sorted(counts.items())
    )
    return ReservationStatus(
        capacity=dict(capacity),
        claimed=dict(held),
        free={r: max(capacity[r] - held[r], 0) for r in capacity},
        clusters=clusters,
        granted=sum(s.granted for s in clusters),
        pending=sum(s.pending for s in clusters),
    )


def _membership(
    claim: Claim, state: ClaimState, res: Reservation, gone: str | None, now: datetime | None
) -> Change | None:
    """A held claim's move when its member's heartbeat expired or came back."""

    def move(to: ClaimState, reason: ClaimReason, message: str) -> Change:
        return Change(claim.name, claim.uid, claim.resource_version, claim.cluster, to, reason, message)

    c = claim.cluster
    if state is ClaimState.GRANTED and gone is not None:
        timeout = res.orphan_timeout
        after = f" or after the Reservation's orphanTimeout ({timeout}s)" if timeout else ""
        return move(
            ClaimState.ORPHANED,
            ClaimReason.MEMBER_GONE,
            f"still counted (its machines may still run): {gone}; released by "
            f"`lws-gatekeeper hub release --cluster {c}`{after}",
        )
    if state is not ClaimState.ORPHANED:
        return None
    if gone is None:
        back = f"granted again: cluster {c}'s heartbeat is back"
        return move(ClaimState.GRANTED, ClaimReason.GRANTED, back)
    if res.orphan_timeout is not None and now is not None and claim.orphaned_at is not None:
        held = (now - claim.orphaned_at).total_seconds()
        if held >= res.orphan_timeout:
            return move(
                ClaimState.RELEASED,
                ClaimReason.ORPHAN_TIMEOUT,
                f"released: Orphaned for {held:.0f}s, the Reservation's orphanTimeout is "
                f"{res.orphan_timeout}s ({gone})",
            )
    return None
