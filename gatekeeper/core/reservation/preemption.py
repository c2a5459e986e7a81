"""Preemption across the members of a Reservation: the hub asks a member to give a claim back.

Why this exists: a Reservation shared by several clusters grants in priority order, but a
granted claim holds until its group ends; a production group on one member would wait behind
another member's experiment for as long as it runs. With ``spec.preemption.withinReservation:
LowerPriority`` a Pending claim that fits only if granted claims of lower priority go asks
their members for them back. The hub cannot evict anything itself (it sees no member's pods):
it marks each victim ``Granted`` with reason ``GiveBackRequested``; the member gives the group
back whole (``core.backends.pools``: its record ``Preempted``, its pods deleted) and deletes the
claim once the pods are gone. Only then is the room free, and the waiting claim is granted by
an ordinary pass: the Reservation is never over-committed in between.

Victims are chosen as Kueue and a Pool choose them: granted claims of strictly lower priority
(each clamped to its member's ``spec.members`` bounds, so a member cannot outrank the others by
its own word), lowest first, then the most recently granted; the shortest run that makes room,
then each one not needed put back. A claim that would not fit even with every candidate gone
asks nothing. Claims already asked and still held count as going, so a pass never asks again
what an earlier one asked. Orphaned claims are not candidates (their member cannot be asked):
they go with the Reservation's ``spec.orphanTimeout``, as ever; nor are the claims of the Kueue
shared-reservation AdmissionCheck (it gives claims back only as Kueue evicts).

Called by ``ledger`` after the grants of a pass; ``asked_of`` by a member's ``pools`` controller
(what the hub asks of it, for ``core.backends.pools.decide``). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.core.reservation.objects import Claim, ClaimState, parse_claim

__all__ = ["GIVE_BACK_REQUESTED", "Asked", "asked_of", "choose"]

GIVE_BACK_REQUESTED = "GiveBackRequested"
"""The reason of a granted claim the hub asked back (its state stays ``Granted``: it holds)."""

Demand = Callable[[Claim], Mapping[str, int]]


@dataclass(frozen=True)
class Asked:
    """What a pass asked back: the victims, each with the priority it was asked back for, and
    what each waiting claim's message adds."""

    victims: tuple[tuple[Claim, int], ...] = ()
    said: Mapping[str, str] = field(default_factory=dict)


def _plus(into: dict[str, int], amounts: Mapping[str, int], sign: int = 1) -> None:
    for resource, amount in amounts.items():
        into[resource] = into.get(resource, 0) + sign * amount


def _fits(need: Mapping[str, int], room: Mapping[str, int]) -> bool:
    return all(amount <= room.get(resource, 0) for resource, amount in need.items())


def choose(
    free: Mapping[str, int], granted: Sequence[Claim], waiting: Sequence[Claim], demand: Demand
) -> Asked:
    """Victims for ``waiting`` (Pending claims that wait for capacity, in queue order, their
    priorities clamped) among ``granted`` (claims Granted now and staying so, priorities clamped),
    with ``free`` what the Reservation has free after the pass's grants; ``demand`` is what a
    claim is charged."""
    going = [c for c in granted if c.reason == GIVE_BACK_REQUESTED]
    room = dict(free)
    for c in going:
        _plus(room, demand(c))
    open_ones = sorted(
        (c for c in granted if c.reason != GIVE_BACK_REQUESTED and not c.by_check),
        key=lambda c: (c.priority, -(c.granted_at or c.created).timestamp(), c.name),
    )
    victims: list[tuple[Claim, int]] = []
    taken: set[str] = set()
    said: dict[str, str] = {}
    for claim in waiting:
        need = demand(claim)
        if _fits(need, room):  # the room the claims already asked back free makes
            _plus(room, need, -1)
            said[claim.name] = (
                f"waits for {len(going)} claim(s) of lower priority asked back to be given back"
            )
            continue
        trial, run = dict(room), []
        for c in (c for c in open_ones if c.priority < claim.priority and c.name not in taken):
            if _fits(need, trial):
                break
            run.append(c)
            _plus(trial, demand(c))
        if not _fits(need, trial):
            continue  # not even every candidate makes room: nothing is asked for it
        for c in reversed(run[:-1]):  # put back what is not needed, the last chosen first
            less = dict(trial)
            _plus(less, demand(c), -1)
            if _fits(need, less):
                run.remove(c)
                trial = less
        _plus(trial, need, -1)
        room = trial
        taken.update(c.name for c in run)
        victims.extend((c, claim.priority) for c in run)
        lowest = min(c.priority for c in run)
        said[claim.name] = (
            f"asked {len(run)} granted claim(s) of lower priority (from {lowest}) to be given back; "
            "granted once their members have given them back"
        )
    return Asked(tuple(victims), said)


def asked_of(claims: Iterable[Mapping[str, Any]], cluster: str) -> dict[tuple[str, str, int], str]:
    """What the hub asks of member ``cluster``: (namespace, LWS UID, group index) -> the hub's
    words, for each of its claims still Granted with reason ``GiveBackRequested``."""
    out: dict[tuple[str, str, int], str] = {}
    for obj in claims:
        status = obj.get("status")
        if not isinstance(status, Mapping) or status.get("reason") != GIVE_BACK_REQUESTED:
            continue  # most claims: not read further
        c = parse_claim(obj)
        if (
            isinstance(c, Claim)
            and c.cluster == cluster
            and c.state is ClaimState.GRANTED
            and c.reason == GIVE_BACK_REQUESTED
        ):
            out[(c.namespace, c.lws_uid, c.group)] = c.message
    return out
