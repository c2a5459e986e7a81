"""What the hub and the members say about a Reservation, in words and as status.

Why this exists: ``kubectl get reservations,reservationclaims`` on the hub and a waiting
group's record on a member must tell the same story of who holds what. The hub's
controller writes :func:`status_body` on each Reservation; a member reads that status
back (:func:`parse_shares`) and says why a group waits with :func:`group_waits`:
"group 3 waits for reservation p5-odcr on the hub: 0 of 64 nvidia.com/gpu free
(cluster-a holds 32, cluster-b 32)". Pure; numbers read from the hub are bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gatekeeper.core.kube.quantity import format_amount, format_resources, parse_units
from gatekeeper.core.reservation.ledger import ClaimReason, ReservationStatus

__all__ = ["Shares", "group_waits", "hub_unreachable", "parse_shares", "status_body"]

MAX_CLUSTERS = 1_000
_PERMANENT = frozenset(
    {
        ClaimReason.EXCEEDS_CAPACITY,
        ClaimReason.INVALID_SPEC,
        ClaimReason.RESERVATION_INVALID,
        ClaimReason.RESERVATION_NOT_FOUND,
    }
)


def _quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    return {r: format_amount(r, a) for r, a in sorted(amounts.items())}


def status_body(status: ReservationStatus) -> dict[str, Any]:
    """The Reservation's ``status`` as the hub writes it (quantities as strings)."""
    first = sorted(status.capacity)[0] if status.capacity else ""
    holding = [s for s in status.clusters if any(s.claimed.values())]
    clusters_summary = ", ".join(f"{s.name} {format_amount(first, s.claimed.get(first, 0))}" for s in holding)
    return {
        "capacity": _quantities(status.capacity),
        "claimed": _quantities(status.claimed),
        "free": _quantities(status.free),
        "capacitySummary": format_resources(status.capacity),
        "claimedSummary": format_resources(status.claimed),
        "freeSummary": format_resources(status.free),
        "clustersSummary": clusters_summary or "none",
        "grantedClaims": status.granted,
        "pendingClaims": status.pending,
        "clusters": [
            {
                "name": s.name,
                "claimed": _quantities(s.claimed),
                "claimedSummary": format_resources(s.claimed),
                "granted": s.granted,
                "pending": s.pending,
                "orphaned": s.orphaned,
            }
            for s in status.clusters
        ],
    }


Shares = tuple[Mapping[str, int], Mapping[str, int], Mapping[str, Mapping[str, int]]]
"""(capacity, free, cluster -> claimed) as a member reads them from a Reservation's status."""


def _amounts(raw: object) -> dict[str, int]:
    out: dict[str, int] = {}
    if isinstance(raw, Mapping):
        for resource, value in list(raw.items())[:32]:
            try:
                out[str(resource)] = max(parse_units(str(resource), value), 0)
            except (ValueError, ArithmeticError):
                continue
    return out


def parse_shares(reservation: Mapping[str, Any] | None) -> Shares | None:
    """What a Reservation's status says (None when it has none yet); lenient, bounded."""
    status = reservation.get("status") if reservation is not None else None
    if not isinstance(status, Mapping) or not isinstance(status.get("capacity"), Mapping):
        return None
    clusters: dict[str, Mapping[str, int]] = {}
    raw = status.get("clusters")
    for entry in (raw if isinstance(raw, list) else [])[:MAX_CLUSTERS]:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            clusters[entry["name"][:63]] = _amounts(entry.get("claimed"))
    return _amounts(status.get("capacity")), _amounts(status.get("free")), clusters


def group_waits(
    index: int,
    reservation: str,
    demand: Mapping[str, int],
    shares: Shares | None,
    claim_reason: str = "",
    claim_message: str = "",
    *,
    subject: str = "",
) -> str:
    """Why a group waits for the hub, in the words users read on their member: the
    Reservation's numbers, or the claim's own reason when waiting cannot help.
    ``subject`` names what waits (default ``group <index>``)."""
    head = f"{subject or f'group {index}'} waits for reservation {reservation} on the hub"
    if claim_reason in _PERMANENT and claim_message:
        return f"{head}: {claim_message}"
    if shares is None:
        return f"{head}: {claim_message}" if claim_message else f"{head}: its claim is not decided yet"
    capacity, free, clusters = shares
    charged = sorted(r for r in demand if r in capacity and demand[r] > 0)
    short = [r for r in charged if demand[r] > free.get(r, 0)] or charged or sorted(capacity)
    if not short:
        return f"{head}: its claim is not decided yet"
    r = short[0]
    holders = sorted(
        ((c, held.get(r, 0)) for c, held in clusters.items() if held.get(r, 0) > 0),
        key=lambda item: (-item[1], item[0]),
    )
    words = [
        f"{c} holds {format_amount(r, a)}" if i == 0 else f"{c} {format_amount(r, a)}"
        for i, (c, a) in enumerate(holders)
    ]
    who = f" ({', '.join(words)})" if words else ""
    numbers = f"{format_amount(r, free.get(r, 0))} of {format_amount(r, capacity.get(r, 0))} {r} free"
    return f"{head}: {numbers}{who}"


def hub_unreachable(index: int, reservation: str, since: datetime | None, error: str) -> str:
    """Why a group waits while the hub cannot be reached (reason ``HubUnreachable``); ``since``
    None: there is no hub to reach (the gatekeeper runs without one)."""
    if since is None:
        return f"group {index} waits for reservation {reservation}: no hub to charge it on ({error[:200]})"
    when = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"group {index} waits for reservation {reservation}: the hub is unreachable since {when} "
        f"({error[:200]}); admitted groups are not affected"
    )
