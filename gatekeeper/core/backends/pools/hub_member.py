"""The member side of a shared Reservation: the ``pools`` decision joined with the hub's grants.

Why this exists: a Pool with ``spec.reservation`` is charged to a Reservation on the hub
as well as to its own quota and node fit. ``core.backends.pools.decide`` plans the local
part; this module (pure, called by the ``pools`` controller after it, when the gatekeeper
runs with ``--hub-kubeconfig``) turns that plan into one that also respects the hub:

* a group the local plan admits into such a pool is admitted only once its claim on the
  hub is ``Granted``; until then it waits (reason ``WaitingForReservation``, with the
  Reservation's numbers in words), and a claim is created for it if it has none;
* a claim this member deleted is never admitted on, even while its cache still shows it;
  one whose delete failed without an answer is deleted again;
* a claim is kept while its group is admitted (its record says ``Admitted=True``) or the
  local plan would admit it; every other claim of this cluster is deleted: a granted
  claim whose group cannot run here is given back rather than held, and a released
  group's claim goes once its record is gone (its pods are gone by then);
* a claim the hub asks back (reason ``GiveBackRequested``, ``core.reservation.preemption``) is
  never admitted on: its group is given back by ``decide`` (``Snapshot.asked_back``) and the
  claim is deleted once the group's pods are gone; the group then claims again, in its turn;
* while the hub cannot be reached (or was not read yet this term), no claim is written
  and such groups wait with reason ``HubUnreachable``, saying since when; admitted groups
  and their later pods are not touched (their ungating is in the local plan).

Pools without ``spec.reservation`` are left exactly as the local plan has them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools import Actions, Admit, Snapshot, WaitStatus, held_back
from gatekeeper.core.kube.objects import as_map, meta, parse_time
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.lws import priority as lws_priority
from gatekeeper.core.model.record import is_admitted
from gatekeeper.core.reservation import (
    GIVE_BACK_REQUESTED,
    SOURCE_LABEL,
    Claim,
    ClaimState,
    ClaimWrites,
    HubView,
    claim_body,
    group_waits,
    hub_unreachable,
    parse_claim,
    parse_shares,
)

__all__ = [
    "ClaimWrites",
    "HubView",
    "charge_reservations",
    "gangs_whole",
]  # the view's types, for the pools controller

GroupId = tuple[str, str, str, int]
"""(namespace, LWS, LWS UID, group index)."""


def _reservations(snap: Snapshot) -> dict[str, str]:
    """Pool name -> the Reservation it is charged to (only pools that name one)."""
    out: dict[str, str] = {}
    for pool in snap.pools.ok:
        if pool.reservation:
            out[pool.name] = pool.reservation
    return out


def _holding(snap: Snapshot, actions: Actions) -> set[GroupId]:
    """Groups that keep their claims: admitted ones, and ones given back whose pods still live."""
    held = {(g.key.namespace, g.key.name, g.lws_uid, g.key.index) for g in actions.held_by_pods}
    for record in snap.records:
        spec = as_map(record.get("spec"))
        index = spec.get("groupIndex")
        if is_admitted(record) and type(index) is int:
            ns = str(meta(record).get("namespace") or "")
            held.add(
                (ns, str(spec.get("leaderWorkerSet") or ""), str(spec.get("leaderWorkerSetUID") or ""), index)
            )
    return held


def _ours(hub: HubView) -> tuple[dict[GroupId, list[Claim]], list[tuple[str, str]]]:
    """This member's claims by group, and those that can only go: given back but perhaps never
    deleted, or unreadable."""
    claims: dict[GroupId, list[Claim]] = {}
    stray: list[tuple[str, str]] = []
    for obj in hub.claims:
        uid = str(meta(obj).get("uid") or "")
        if uid in hub.given_back:
            name = str(meta(obj).get("name") or "")
            if uid in hub.undeleted and name and as_map(obj.get("spec")).get("cluster") == hub.cluster:
                stray.append((name, uid))  # its delete may never have applied: once more
            continue
        if as_map(meta(obj).get("labels")).get(SOURCE_LABEL):
            continue  # the shared-reservation AdmissionCheck's: it gives its own back
        c = parse_claim(obj)
        if not isinstance(c, Claim):
            if c.cluster == hub.cluster and c.name:
                stray.append((c.name, c.uid))  # ours and unreadable: it can only go
            continue
        if c.cluster == hub.cluster:
            claims.setdefault((c.namespace, c.lws, c.lws_uid, c.group), []).append(c)
    return claims, stray


def charge_reservations(actions: Actions, snap: Snapshot, hub: HubView) -> tuple[Actions, ClaimWrites]:
    """The local plan, with admissions into reservation pools held until the hub grants them."""
    charged = _reservations(snap)
    if not charged:
        return actions, ClaimWrites()
    claims, stray = _ours(hub)
    lwss = {(str(meta(o).get("namespace") or ""), str(meta(o).get("name") or "")): o for o in snap.lwss}
    keep: set[str] = set()
    for gid in _holding(snap, actions):
        keep.update(c.name for c in claims.get(gid, ()))
    admit: list[Admit] = []
    waiting: list[WaitStatus] = []
    create: list[dict[str, Any]] = []
    for one in actions.admit:
        gs = one.group
        reservation = charged.get(gs.pool)
        if reservation is None:
            admit.append(one)
            continue
        gid = (gs.key.namespace, gs.key.name, gs.lws_uid, gs.key.index)
        mine = [
            c
            for c in claims.get(gid, ())
            if c.reservation == reservation and c.state is not ClaimState.RELEASED
        ]
        asked = bool(mine) and mine[0].reason == GIVE_BACK_REQUESTED
        if not asked:  # a claim the hub asked back is not admitted on, and goes with its pods
            keep.update(c.name for c in mine[:1])
        index = gs.key.index
        demand = gs.demand.total if isinstance(gs.demand, GroupDemand) else {}
        if not hub.reachable:
            since = hub.unreachable_since
            waiting.append(
                WaitStatus(
                    gs, Reason.HUB_UNREACHABLE, hub_unreachable(index, reservation, since, hub.error), 0
                )
            )
            continue
        if mine and mine[0].state.holds and not asked:
            admit.append(one)
            continue
        if asked:
            said = (
                f"group {index} waits: the hub asked its claim on Reservation {reservation} back "
                "for a group of higher priority; a new claim is made once it is given back"
            )
            waiting.append(WaitStatus(gs, Reason.WAITING_FOR_RESERVATION, said, 0))
            continue
        if not mine:
            lws = lwss.get((gs.key.namespace, gs.key.name), {})
            create.append(
                claim_body(
                    reservation=reservation,
                    cluster=hub.cluster,
                    namespace=gs.key.namespace,
                    lws=gs.key.name,
                    lws_uid=gs.lws_uid,
                    group=index,
                    demand=demand,
                    priority=lws_priority(lws, snap.priorities).order,
                    created=parse_time(meta(lws).get("creationTimestamp")),
                )
            )
        claim = mine[0] if mine else None
        # Until the hub has judged the claim, the Reservation's numbers do not speak of it.
        judged = claim is not None and bool(claim.reason)
        shares = parse_shares(hub.reservations.get(reservation)) if judged else None
        message = group_waits(
            index, reservation, demand, shares, claim.reason if claim else "", claim.message if claim else ""
        )
        waiting.append(WaitStatus(gs, Reason.WAITING_FOR_RESERVATION, message, 0))
    admit, waiting = gangs_whole(admit, waiting)
    held = replace(
        actions,
        admit=tuple(admit),
        waiting=actions.waiting + tuple(waiting),
        pools=held_back(actions.pools, waiting),
    )
    if not hub.reachable:
        return held, ClaimWrites()
    delete = [(c.name, c.uid) for group in claims.values() for c in group if c.name not in keep]
    return held, ClaimWrites(tuple(create), tuple(sorted(set(delete + stray))))


def gangs_whole(admit: list[Admit], waiting: list[WaitStatus]) -> tuple[list[Admit], list[WaitStatus]]:
    """A gang's member whose claim is not granted holds back the members whose claims are: a
    gang is admitted whole or not at all (``gangs``); their claims are kept meanwhile."""
    held_back = {(w.group.key.namespace, w.group.gang) for w in waiting if w.group.gang}
    if not held_back:
        return admit, waiting
    keep: list[Admit] = []
    for one in admit:
        gs = one.group
        if (gs.key.namespace, gs.gang) not in held_back:
            keep.append(one)
            continue
        said = (
            f"group {gs.key.index} is admitted only with its {gs.gang}, all or none: "
            "a claim of another of its groups is not granted yet; its own is kept"
        )
        waiting.append(WaitStatus(gs, Reason.WAITING_FOR_RESERVATION, said, 0))
    return keep, waiting
