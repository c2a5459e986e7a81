"""The gatekeeper in its hub role: the one decider that grants ReservationClaims.

Why this exists: several member clusters share a Reservation on the hub, and at every
instant the sum of granted claims must stay within its capacity whatever the members do.
So exactly one process decides: ``lws-gatekeeper run --role hub``, leading on the hub's
Lease with the same elector and write fence as a member's admission loop. Each pass
(``loop.PassLoop``) reads every Reservation and claim, asks the pure ledger
(``core.reservation.decide``) what to grant, and writes it: a claim's ``status.state:
Granted`` guarded by the resourceVersion decided on, the reason of each claim left
waiting, and each Reservation's status (capacity, claimed, free, per member cluster, and
a ``Valid`` condition that names what is wrong with a Reservation it cannot read).

Each member's claims and heartbeat are in its own namespace on the hub,
``lws-gatekeeper-member-<cluster>`` (RBAC bound there lets it read and write its own only);
the hub reads them in every namespace, and counts a claim or heartbeat only in its
cluster's namespace (``core.reservation.member_namespace``).

Members' heartbeats: each member renews a Lease ``lws-gatekeeper-member-<cluster>`` in its
namespace; a member whose Lease has not changed, by this process's own clock, for
longer than its duration is gone (``core.reservation.Heartbeats``): its Granted claims are
marked Orphaned (still counted), Granted again when it beats again, and Released after the
Reservation's ``spec.orphanTimeout`` or by ``lws-gatekeeper hub release``.

A stale cache must never free capacity twice: a grant this term sent (or may have sent:
a write that timed out) counts as granted until the cache shows the claim changed or
gone (``_sent``); a grant whose fate is unknown is read back from the API server on the
next pass, and fenced (``core.reservation.unsure``) before it counts as not granted, so a
grant that lands late cannot add to room given to another claim meanwhile.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
from prometheus_client import Gauge

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.errors import Conflict, PermanentError, TemporaryError
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.loop import Write
from gatekeeper.core.kube.objects import as_map, generation_of, meta
from gatekeeper.core.plugin.decided import Decided
from gatekeeper.core.reservation import (
    CLUSTER_LABEL,
    Change,
    ClaimMemo,
    Grant,
    Heartbeats,
    Ledger,
    Waiting,
    decide,
    moves_without_reservation,
    status_body,
    without_reservation,
)
from gatekeeper.core.reservation.unsure import Fate, fate_of, fence_patch, term_start
from gatekeeper.metrics import HUB_CLAIM_MOVES, HUB_CLAIMED, HUB_GRANTS, HUB_MEMBERS_GONE, Series, base_value

__all__ = ["HubController", "HubPass"]

log = logging.getLogger("gatekeeper.hub")

FENCES_AT_ONCE = 16
"""Reads and fences of grants of unknown fate sent at once (``_settle_unsure``)."""
MESSAGE_REFRESH_SECONDS = 60.0
"""A waiting claim's message is rewritten at once when its reason changes, and when only
its numbers change at most this often."""


@dataclass(frozen=True, kw_only=True)
class HubPass(Decided):
    """What one pass decided, for the loop (``problems``: its ledgers') and the tests."""

    ledgers: tuple[Ledger, ...] = ()
    orphans: tuple[Waiting, ...] = ()

    @classmethod
    def of(cls, ledgers: Sequence[Ledger], orphans: Sequence[Waiting]) -> HubPass:
        problems = tuple(p for ledger in ledgers for p in ledger.problems)
        return cls(ledgers=tuple(ledgers), orphans=tuple(orphans), problems=problems)


class HubController:
    """The hub's ledger keeper: a ``Controller`` for ``PassLoop``."""

    log = log

    def __init__(self, kube: k.Kube, caches: Caches) -> None:
        self.kube = kube
        self.reservations = caches.informer(r.RESERVATIONS)
        self.claims = caches.informer(r.CLAIMS)
        self.leases = caches.informer(r.LEASES, label_selector=CLUSTER_LABEL)
        self.memo = ClaimMemo()
        """Claims already read this term, by (uid, resourceVersion)."""
        self._claimed = Series()
        self._where: dict[str, str] = {}
        """uid -> namespace of the claims cached, and of those sent a grant this term."""
        self.heartbeats = Heartbeats(time.monotonic())
        """Made with the term: a hub that takes over gives every member a whole duration."""
        self._sent: dict[str, tuple[str, str]] = {}
        """uid -> (name, resourceVersion decided on) of grants sent this term."""
        self._unsure: set[str] = set()
        """uids of grants whose write failed without saying whether it was applied."""
        self._listed: set[str] = set()
        """Of ``_unsure``, claims Pending when this term began (the last term's grants of
        them may be in flight): fenced at the version listed, without reading them back."""
        self._term_started = False
        self._fenced: dict[str, str] = {}
        """uid -> resourceVersion of claims fenced this pass: their grant (or waiting message)
        this pass is guarded by that version, not the cache's older one."""
        self._said: dict[str, tuple[str, float]] = {}
        """claim uid -> (reason, when its waiting message was last written)."""

    @property
    def informers(self) -> list[Informer]:
        return [self.reservations, self.claims, self.leases]

    def gone(self, claims: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """Clusters with claims whose heartbeat expired -> why (a Lease counts only in its
        cluster's namespace: ``core.reservation.parse_heartbeat``)."""
        now = time.monotonic()
        self.heartbeats.observe(self.leases.values(), now)
        clusters = {str(as_map(c.get("spec")).get("cluster") or "") for c in claims} - {""}
        gone = self.heartbeats.gone(clusters, now)
        HUB_MEMBERS_GONE.set(len(gone))
        return gone

    async def _settle_unsure(self) -> None:
        """Read back grants of unknown fate (``core.reservation.unsure``): a claim changed
        since, or gone, is left to the cache; one still at the version decided on is fenced
        first, and counts as not granted only once the fence is written. At most
        ``FENCES_AT_ONCE`` at a time (a new term may have thousands to fence)."""
        limit = anyio.CapacityLimiter(FENCES_AT_ONCE)

        async def one(uid: str) -> None:
            async with limit:
                await self._settle(uid)

        async with anyio.create_task_group() as tg:
            for uid in list(self._unsure):
                tg.start_soon(one, uid)

    async def _settle(self, uid: str) -> None:
        name, rv = self._sent[uid]
        if uid not in self._listed:
            try:
                now: dict[str, Any] | None = await self.kube.get(r.CLAIMS, name, self._where.get(uid))
            except Conflict:  # gone
                now = None
            except TemporaryError as exc:  # not read: held, read back next pass
                log.warning("claim %s: reading back a grant of unknown fate failed: %s", name, exc)
                return
            if fate_of(now, rv) is Fate.SETTLED:
                self._unsure.discard(uid)  # the cache will show what it is
                return
        try:
            fenced = await self.kube.merge_patch(
                r.CLAIMS, name, self._where.get(uid), fence_patch(rv, uuid.uuid4().hex[:8])
            )
        except Conflict:  # moved on meanwhile (the late grant, perhaps): the cache will say
            self._unsure.discard(uid)
            self._listed.discard(uid)
            return
        except TemporaryError as exc:  # its fate unknown too: held, read back next pass
            log.warning("claim %s: fencing a grant of unknown fate failed: %s", name, exc)
            return
        if uid in self._listed:
            self._listed.discard(uid)
        else:
            log.info("claim %s: a grant sent without an answer was fenced; it is decided again", name)
        self._sent.pop(uid, None)
        self._unsure.discard(uid)
        version = meta(fenced).get("resourceVersion")
        if version:
            self._fenced[uid] = str(version)

    def _forget_seen(self, claims: Sequence[Mapping[str, Any]]) -> None:
        """Grants the cache now shows (the claim changed since the decision, or is gone)."""
        cached = {str(meta(c).get("uid")): str(meta(c).get("resourceVersion")) for c in claims}
        for uid, (_, rv) in list(self._sent.items()):
            if uid not in self._unsure and cached.get(uid, "") != rv:
                self._sent.pop(uid, None)

    def _note_where(self, claims: Sequence[Mapping[str, Any]]) -> None:
        """Where each claim is, for the writes to it (a grant in flight's, even once it is gone)."""
        sent = {uid: ns for uid, ns in self._where.items() if uid in self._sent}
        self._where = sent | {str(meta(c).get("uid")): str(meta(c).get("namespace") or "") for c in claims}

    def _start_term(self) -> None:
        """The last term's grants may be in flight: every claim Pending now counts as maybe
        granted until fenced (``core.reservation.unsure.term_start``)."""
        self._term_started = True
        listed = term_start(self.claims.values())
        for uid, name, rv in listed:
            self._sent[uid] = (name, rv)
            self._unsure.add(uid)
            self._listed.add(uid)
        if listed:
            log.info("a new term: fencing %d Pending claim(s) before the first grant", len(listed))

    async def reconcile_once(self, write: Write) -> HubPass:
        self._note_where(self.claims.values())
        if not self._term_started:
            self._start_term()
        self._fenced.clear()
        await self._settle_unsure()
        claims = self.claims.values()
        self._forget_seen(claims)
        counted = frozenset(self._sent)
        gone = self.gone(claims)
        wall = datetime.now(UTC)
        by_reservation: dict[str, list[Mapping[str, Any]]] = {}
        for claim in claims:
            spec = claim.get("spec")
            name = spec.get("reservation") if isinstance(spec, Mapping) else None
            by_reservation.setdefault(name if isinstance(name, str) else "", []).append(claim)
        ledgers: list[Ledger] = []
        names: set[str] = set()
        claimed: list[tuple[Gauge, tuple[str, ...], float]] = []
        for reservation in self.reservations.values():
            name = str(meta(reservation).get("name") or "")
            names.add(name)
            mine = by_reservation.get(name, ())
            ledger = decide(reservation, mine, counted_granted=counted, gone=gone, now=wall, memo=self.memo)
            ledgers.append(ledger)
            for change in ledger.changes:  # before the grants: a release frees room from the next pass
                await write(self._move, ledger.reservation, change, wall)
            for grant in ledger.grants:
                await write(self._grant, ledger.reservation, grant)
            body: dict[str, Any] = status_body(ledger.status) if ledger.status is not None else {}
            valid = ledger.status is not None
            body["conditions"] = [
                {
                    "type": "Valid",
                    "status": "True" if valid else "False",
                    "reason": "Valid" if valid else "InvalidSpec",
                    "message": "" if valid else ledger.invalid[:1024],
                    "observedGeneration": generation_of(reservation),
                }
            ]
            old = as_map(reservation.get("status"))
            if {key: old.get(key) for key in body} != body:
                await write(self.kube.patch_status, r.RESERVATIONS, name, None, body)
            for resource, amount in (ledger.status.claimed if ledger.status is not None else {}).items():
                claimed.append((HUB_CLAIMED, (name, resource), base_value(resource, amount)))
        self._claimed.publish(claimed)  # a deleted Reservation's series leave the scrape
        for change in moves_without_reservation(claims, frozenset(names), gone, self.memo):
            await write(self._move, "(deleted)", change, wall)  # its Reservation is gone
        orphans = without_reservation(claims, frozenset(names), self.memo)
        cached = {str(meta(c).get("uid")): c for c in claims}
        for one in [w for ledger in ledgers for w in ledger.waiting] + list(orphans):
            await self._say(write, one, cached.get(one.uid))
        return HubPass.of(ledgers, orphans)

    async def _grant(self, reservation: str, grant: Grant) -> None:
        version = self._fenced.get(grant.uid, grant.resource_version)
        self._sent[grant.uid] = (grant.name, version)
        status = {
            "state": "Granted",
            "reason": "Granted",
            "message": f"granted by reservation {reservation} to cluster {grant.cluster}",
            "grantedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        try:
            await self.kube.patch_status(r.CLAIMS, grant.name, self._where.get(grant.uid), status, version)
        except (Conflict, PermanentError):
            self._sent.pop(grant.uid, None)  # refused: certainly not granted
            raise
        except TemporaryError:
            self._unsure.add(grant.uid)
            raise
        HUB_GRANTS.labels(reservation).inc()
        log.info("granted claim %s (cluster %s) in reservation %s", grant.name, grant.cluster, reservation)

    async def _move(self, reservation: str, change: Change, now: datetime) -> None:
        status: dict[str, Any] = {
            "state": str(change.state),
            "reason": str(change.reason),
            "message": change.message,
        }
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        if change.state == "Orphaned":
            status["orphanedAt"] = stamp
        elif change.state == "Released":
            status["releasedAt"] = stamp
        else:
            status["orphanedAt"] = None
        where = self._where.get(change.uid)
        await self.kube.patch_status(r.CLAIMS, change.name, where, status, change.resource_version)
        HUB_CLAIM_MOVES.labels(reservation, str(change.state)).inc()
        log.info(
            "claim %s of cluster %s in reservation %s: %s (%s)",
            change.name,
            change.cluster,
            reservation,
            change.state,
            change.message,
        )

    async def _say(self, write: Write, one: Waiting, cached: Mapping[str, Any] | None) -> None:
        status = as_map((cached or {}).get("status"))
        if status.get("reason") == str(one.reason) and status.get("message") == one.message:
            return
        said = self._said.get(one.uid)
        now = time.monotonic()
        if status.get("reason") == str(one.reason) and said and now - said[1] < MESSAGE_REFRESH_SECONDS:
            return
        self._said[one.uid] = (str(one.reason), now)
        body = {"state": "Pending", "reason": str(one.reason), "message": one.message}
        version = self._fenced.get(one.uid, one.resource_version)
        await write(self.kube.patch_status, r.CLAIMS, one.name, self._where.get(one.uid), body, version)
