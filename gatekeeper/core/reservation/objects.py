"""The hub's objects read leniently: ``Reservation`` and ``ReservationClaim``.

Why this exists: a Reservation on the hub is shared by several member clusters, and each
member writes claims there. The hub's ledger (``ledger.py``) and the members
(``core.backends.pools.reserve``) read them through this module only: every number is
bounded, a claim that cannot be read becomes a ``BadClaim`` with its reason (the others
go on), and a Reservation that cannot be read raises ``ValueError`` naming the field.
It also builds the claim a member creates (:func:`claim_body`), so that name, labels and
spec are spelled in one place.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from fractions import Fraction
from typing import Any

from gatekeeper.core.kube.fields import mapping, string
from gatekeeper.core.kube.keys import GATEKEEPER_API_VERSION
from gatekeeper.core.kube.objects import EPOCH, as_map, meta, parse_time
from gatekeeper.core.kube.quantity import amounts, format_quantity, format_resources
from gatekeeper.core.model.pool import QueueingStrategy, WithinPool
from gatekeeper.core.reservation.members import (
    MAX_CLUSTER_NAME,
    MemberBounds,
    parse_members,
    valid_cluster_name,
)
from gatekeeper.core.reservation.view import SOURCE_CHECK, SOURCE_LABEL

__all__ = [
    "CLAIM_KIND",
    "CLAIM_PLURAL",
    "CLUSTER_LABEL",
    "MAX_GROUP_INDEX",
    "MAX_ORPHAN_SECONDS",
    "MAX_RESOURCES",
    "MEMBER_NAMESPACE_PREFIX",
    "RESERVATION_KIND",
    "RESERVATION_PLURAL",
    "BadClaim",
    "Claim",
    "ClaimMemo",
    "ClaimState",
    "Reservation",
    "claim_body",
    "claim_name",
    "member_namespace",
    "parse_claim",
    "parse_reservation",
    "valid_cluster_name",
]

RESERVATION_KIND = "Reservation"
RESERVATION_PLURAL = "reservations"
CLAIM_KIND = "ReservationClaim"
CLAIM_PLURAL = "reservationclaims"
CLUSTER_LABEL = "lws-gatekeeper.io/cluster"
"""Label on a claim: the member cluster that made it."""
MEMBER_NAMESPACE_PREFIX = "lws-gatekeeper-member-"
"""A member's claims and heartbeat live in the hub namespace ``lws-gatekeeper-member-<cluster>``:
RBAC bound there (and nowhere else) lets a member read and write its own and no other's."""

MAX_RESOURCES = 32
MAX_GROUP_INDEX = 10_000
"""As ``core.model.groups``: an LWS of more groups than this is refused."""
MAX_PRIORITY = 2**31 - 1
MAX_ORPHAN_SECONDS = 366 * 24 * 3600
MAX_NAME = 253
_DURATION = re.compile(r"(?:(\d{1,6})h)?(?:(\d{1,6})m)?(?:(\d{1,6})s)?", re.ASCII)


class ClaimState(StrEnum):
    """Where a claim stands; only the hub writes it."""

    PENDING = "Pending"
    """Asked for, not granted (also a claim without status)."""
    GRANTED = "Granted"
    """Holds its whole demand in the Reservation: its group may be admitted on its member."""
    RELEASED = "Released"
    """Given back by the hub (a member gone for good); holds nothing and is never granted again."""
    ORPHANED = "Orphaned"
    """Granted, but its member's heartbeat expired: still counted (its machines may still run)."""

    @property
    def holds(self) -> bool:
        return self in (ClaimState.GRANTED, ClaimState.ORPHANED)


@dataclass(frozen=True)
class Reservation:
    """A parsed Reservation: ``capacity`` in scheduler units per resource."""

    name: str
    capacity: Mapping[str, int]
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    orphan_timeout: int | None = None
    """Seconds an Orphaned claim keeps holding; None: until released by hand."""
    members: Mapping[str, MemberBounds] | None = None
    """``spec.members`` by cluster (``core.reservation.members``); None: any member, unbounded."""
    within: WithinPool = WithinPool.NEVER
    """``spec.preemption.withinReservation``: may a waiting claim ask granted claims of lower
    priority back (``core.reservation.preemption``)?"""


@dataclass(frozen=True)
class Claim:
    """A parsed ReservationClaim."""

    name: str
    uid: str
    resource_version: str
    reservation: str
    cluster: str
    namespace: str
    lws: str
    lws_uid: str
    group: int
    demand: Mapping[str, int]
    """The group's whole demand, scheduler units per resource."""
    priority: int
    created: datetime
    """The group's LWS creation time on its member (the queue order across members)."""
    state: ClaimState
    reason: str = ""
    message: str = ""
    orphaned_at: datetime | None = None
    """When the hub marked it Orphaned (``status.orphanedAt``; the hub's own clock)."""
    granted_at: datetime | None = None
    """When the hub granted it (``status.grantedAt``; the hub's own clock)."""
    by_check: bool = False
    """Made by the Kueue shared-reservation AdmissionCheck (label ``SOURCE_LABEL``), not by a
    member's ``pools`` backend: never asked back (that check does not give claims back on request)."""


@dataclass(frozen=True)
class BadClaim:
    """A claim that cannot be read: it is told why, holds nothing and is never granted."""

    name: str
    uid: str
    resource_version: str
    reservation: str
    cluster: str
    state: ClaimState
    message: str


def _resources(raw: object, where: str) -> dict[str, int]:
    items = mapping(raw, where)
    if len(items) > MAX_RESOURCES:
        raise ValueError(f"{where}: more than {MAX_RESOURCES} resources")
    for resource in items:
        if not isinstance(resource, str) or not resource or len(resource) > MAX_NAME:
            raise ValueError(f"{where}: {str(resource)[:40]!r} is not a resource name")
    return amounts(items, where)


def _duration(raw: object, where: str) -> int | None:
    text = string(raw, where, "")
    if not text:
        return None
    match = _DURATION.fullmatch(text)
    if match is None or not any(match.groups()):
        raise ValueError(f"{where}: {text[:32]!r} is not a duration such as 30m or 2h")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not 0 < total <= MAX_ORPHAN_SECONDS:
        raise ValueError(f"{where}: {text!r} is not between 1s and 366 days")
    return total


def parse_reservation(obj: Mapping[str, Any]) -> Reservation:
    """A ``Reservation`` from its object; ValueError names the reservation and the bad field."""
    name = meta(obj).get("name")
    label = f"Reservation {name}" if isinstance(name, str) and name else "Reservation"
    try:
        if not isinstance(name, str) or not name:
            raise ValueError("metadata.name: missing")
        spec = mapping(obj.get("spec"), "spec")
        capacity = _resources(spec.get("capacity"), "spec.capacity")
        if not capacity:
            raise ValueError("spec.capacity: empty (a reservation of nothing grants nothing)")
        strategy_name = string(spec.get("queueingStrategy"), "spec.queueingStrategy", "BestEffortFIFO")
        try:
            strategy = QueueingStrategy(strategy_name)
        except ValueError:
            allowed = ", ".join(s.value for s in QueueingStrategy)
            bad = strategy_name[:40]
            raise ValueError(f"spec.queueingStrategy: {bad!r} is not one of {allowed}") from None
        timeout = _duration(spec.get("orphanTimeout"), "spec.orphanTimeout")
        members = parse_members(spec.get("members"))
        preemption = mapping(spec.get("preemption"), "spec.preemption")
        within_name = string(
            preemption.get("withinReservation"), "spec.preemption.withinReservation", "Never"
        )
        try:
            within = WithinPool(within_name)
        except ValueError:
            allowed = ", ".join(w.value for w in WithinPool)
            raise ValueError(
                f"spec.preemption.withinReservation: {within_name[:40]!r} is not one of {allowed}"
            ) from None
        for bound in (members or {}).values():
            outside = sorted(set(bound.quota) - set(capacity))
            if outside:
                raise ValueError(
                    f"spec.members[{bound.cluster}].quota: {', '.join(outside)} not in spec.capacity"
                )
    except ValueError as err:
        raise ValueError(f"{label}: {err}") from None
    return Reservation(name, capacity, strategy, timeout, members, within)


def _state(obj: Mapping[str, Any]) -> ClaimState:
    status = obj.get("status")
    raw = status.get("state") if isinstance(status, Mapping) else None
    try:
        return ClaimState(raw) if isinstance(raw, str) and raw else ClaimState.PENDING
    except ValueError:
        return ClaimState.PENDING


def _bounded_int(raw: object, where: str, low: int, high: int, default: int | None = None) -> int:
    if raw is None and default is not None:
        return default
    if type(raw) is not int or not low <= raw <= high:
        raise ValueError(f"{where}: {str(raw)[:40]!r} is not an integer from {low} to {high}")
    return raw


def parse_claim(obj: Mapping[str, Any]) -> Claim | BadClaim:
    """A ``Claim``, or a ``BadClaim`` saying what is wrong with it (never raises)."""
    m = meta(obj)
    name = str(m.get("name") or "")[:MAX_NAME]
    uid, rv = str(m.get("uid") or "")[:64], str(m.get("resourceVersion") or "")[:64]
    raw_spec = obj.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    reservation = spec.get("reservation")
    reservation = reservation[:MAX_NAME] if isinstance(reservation, str) else ""
    cluster = spec.get("cluster")
    cluster = cluster[:MAX_CLUSTER_NAME] if isinstance(cluster, str) else ""
    state = _state(obj)
    try:
        if not name:
            raise ValueError("metadata.name: missing")
        if not isinstance(raw_spec, Mapping):
            raise ValueError("spec: missing")
        if not reservation:
            raise ValueError("spec.reservation: missing")
        if not valid_cluster_name(cluster):
            raise ValueError(
                f"spec.cluster: not a cluster name (lower-case letters, digits and '-', at most "
                f"{MAX_CLUSTER_NAME})"
            )
        where = str(m.get("namespace") or "")[:64]
        if where != member_namespace(cluster):
            raise ValueError(
                f"a claim of cluster {cluster} counts only in namespace {member_namespace(cluster)}, "
                f"not {where or 'none'}"
            )
        namespace = string(spec.get("namespace"), "spec.namespace")[:64]
        lws = string(spec.get("leaderWorkerSet"), "spec.leaderWorkerSet")[:MAX_NAME]
        if not namespace or not lws:
            raise ValueError("spec.namespace and spec.leaderWorkerSet: required")
        group = _bounded_int(spec.get("groupIndex"), "spec.groupIndex", 0, MAX_GROUP_INDEX)
        priority = _bounded_int(spec.get("priority"), "spec.priority", -MAX_PRIORITY - 1, MAX_PRIORITY, 0)
        demand = _resources(spec.get("demand"), "spec.demand")
        # The member's word for its group's age counts only where it is no earlier than the
        # claim itself, which the hub's API server stamped: a member cannot queue ahead by it.
        created = max(parse_time(spec.get("groupCreated")), parse_time(m.get("creationTimestamp")))
        status = obj.get("status")
        status = status if isinstance(status, Mapping) else {}
    except ValueError as err:
        return BadClaim(name, uid, rv, reservation, cluster, state, f"claim {name}: {err}")
    return Claim(
        name=name,
        uid=uid,
        resource_version=rv,
        reservation=reservation,
        cluster=cluster,
        namespace=namespace,
        lws=lws,
        lws_uid=str(spec.get("leaderWorkerSetUID") or "")[:64],
        group=group,
        demand=demand,
        priority=priority,
        created=created,
        state=state,
        reason=str(status.get("reason") or "")[:64],
        message=str(status.get("message") or "")[:1024],
        orphaned_at=_stamp(status, "orphanedAt"),
        by_check=as_map(m.get("labels")).get(SOURCE_LABEL) == SOURCE_CHECK,
        granted_at=_stamp(status, "grantedAt"),
    )


def _stamp(status: Mapping[str, Any], key: str) -> datetime | None:
    raw = status.get(key)
    when = parse_time(raw) if isinstance(raw, str) else EPOCH
    return None if when == EPOCH else when


class ClaimMemo:
    """Claims already read, by (uid, resourceVersion), bounded.

    Owned by the hub's controller for a term, so that nothing in the core is global state:
    a pass reads every claim, and reading one (its quantities above all) is most of a
    pass's time (10,000 claims: 3.8 s of 4.4 s under a profiler). A claim's spec never
    changes and a new status is a new resourceVersion, so what is remembered is never stale.
    """

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._seen: dict[tuple[str, str], Claim | BadClaim] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def parse(self, obj: Mapping[str, Any]) -> Claim | BadClaim:
        m = meta(obj)
        uid, rv = m.get("uid"), m.get("resourceVersion")
        if not (isinstance(uid, str) and uid and isinstance(rv, str) and rv):
            return parse_claim(obj)
        key = (uid, rv)
        found = self._seen.get(key)
        if found is None:
            if len(self._seen) >= self.limit:
                self._seen.clear()  # old versions pile up; starting afresh is cheap
            found = self._seen[key] = parse_claim(obj)
        return found


def member_namespace(cluster: str) -> str:
    """The hub namespace of ``cluster``'s claims and heartbeat."""
    return MEMBER_NAMESPACE_PREFIX + cluster


def claim_name(cluster: str, namespace: str, lws: str, lws_uid: str, group: int) -> str:
    """The claim of one group of one member: readable, and unique by a digest of all five."""
    digest = hashlib.sha256(f"{cluster}/{namespace}/{lws}/{lws_uid}/{group}".encode()).hexdigest()[:10]
    readable = f"{cluster}.{namespace}.{lws}"[: MAX_NAME - 30].rstrip(".-")
    return f"{readable}.{group}-{digest}".lower()


def claim_body(
    *,
    reservation: str,
    cluster: str,
    namespace: str,
    lws: str,
    lws_uid: str,
    group: int,
    demand: Mapping[str, int],
    priority: int,
    created: datetime,
) -> dict[str, Any]:
    """The ReservationClaim a member creates for one group (spec only: the hub writes status)."""
    quantities = {
        resource: format_quantity(Fraction(units, 1000) if resource == "cpu" else units)
        for resource, units in sorted(demand.items())
    }
    return {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": CLAIM_KIND,
        "metadata": {
            "name": claim_name(cluster, namespace, lws, lws_uid, group),
            "namespace": member_namespace(cluster),
            "labels": {CLUSTER_LABEL: cluster},
        },
        "spec": {
            "reservation": reservation,
            "cluster": cluster,
            "namespace": namespace,
            "leaderWorkerSet": lws,
            "leaderWorkerSetUID": lws_uid,
            "groupIndex": group,
            "priority": max(-MAX_PRIORITY - 1, min(priority, 1_000_000_000)),
            "groupCreated": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "demand": quantities,
            "demandSummary": format_resources(demand)[:1024],
        },
    }
