"""What the hub does with a grant whose write got no answer: the claim read back decides.

Why this exists: a grant is a status patch guarded by the resourceVersion the hub decided
on. When it times out, the API server may still apply it later: the request can sit in a
queue past the client's deadline. Reading the claim back and finding it still Pending at
that version does not prove the grant never lands, so the hub first *fences* it: a write
of its own (an annotation) guarded by the same version moves the claim past it, and the
late grant can then only fail its precondition. Until the fence is answered, the room
stays held.

A term's grants in flight are not known to the next term (another replica, or this one
started again): the new leader lists every claim Pending, and a grant the last leader sent
just before it stopped may still land. So a term's first pass fences every Pending claim
(``term_start``) before it grants anything: one write per Pending claim per takeover.
Pure: ``gatekeeper.controller.hub`` reads the claims and acts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from gatekeeper.core.reservation.objects import ClaimState, parse_claim

__all__ = ["FENCE_ANNOTATION", "Fate", "fate_of", "fence_patch", "term_start"]

FENCE_ANNOTATION = "lws-gatekeeper.io/grant-fence"
"""On a ReservationClaim: ``<resourceVersion>/<nonce>``, the version at which a grant of
unknown fate was fenced (written by the hub, read by nobody: it exists to move the claim's
resourceVersion)."""


class Fate(StrEnum):
    """What a claim read back says about a grant of unknown fate."""

    SETTLED = "Settled"
    """Gone, or changed since the decision: the hub's cache will show what it is (Granted
    if the grant landed), and the grant is counted until it does."""
    FENCE = "Fence"
    """Still at the version decided on: fence it, and only then count it as not granted."""


def fate_of(read: Mapping[str, Any] | None, decided: str) -> Fate:
    """``read`` is the claim as the API server holds it now (None: gone)."""
    if read is None:
        return Fate.SETTLED
    meta = read.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return Fate.FENCE if str(version) == decided else Fate.SETTLED


def fence_patch(decided: str, nonce: str) -> dict[str, Any]:
    """The merge patch that fences a grant decided at resourceVersion ``decided``: guarded by
    it, and a real change (``nonce`` is new each time, so the value is not the one there
    already), so the API server writes it and gives the claim a new version."""
    value = f"{decided}/{nonce}"
    return {"metadata": {"resourceVersion": decided, "annotations": {FENCE_ANNOTATION: value}}}


def term_start(claims: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """The claims a new term fences before its first grant: every Pending one, as (uid, name,
    resourceVersion listed). Released, Granted and Orphaned claims are what they say (a late
    grant of one of them fails its precondition or changes nothing)."""
    out: list[tuple[str, str, str]] = []
    for obj in claims:
        claim = parse_claim(obj)
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping) or claim.state is not ClaimState.PENDING:
            continue
        uid, name, rv = meta.get("uid"), meta.get("name"), meta.get("resourceVersion")
        if isinstance(uid, str) and isinstance(name, str) and uid and name and rv is not None:
            out.append((uid, name, str(rv)))
    return out
