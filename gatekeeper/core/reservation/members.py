"""Which member clusters may claim on a Reservation, and within what bounds.

Why this exists: a member cluster writes its own claims, so every number in one is the
member's word: its priority (its place in the queue), its demand, how many claims it makes.
A member with a bug, or in hostile hands, could put itself ahead of every other member or
take the whole reservation. A Reservation's ``spec.members`` lists the clusters that may
claim on it and bounds each: ``maxPriority`` (a higher priority is read as this),
``maxClaims`` (claims holding at once) and ``quota`` (what its claims may hold together, per
resource of the Reservation's capacity). The hub's ledger (``core.reservation.ledger``)
applies them to every claim whatever the member wrote; the policy
``lws-gatekeeper-hub-member-bounds`` refuses a claim outside them at create, with why.
Absent ``spec.members``: any member, unbounded (as a Reservation without the field always was).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from gatekeeper.core.kube.fields import mapping, sequence
from gatekeeper.core.kube.quantity import amounts, format_amount

__all__ = [
    "MAX_CLUSTER_NAME",
    "MAX_MEMBERS",
    "MemberBounds",
    "Refusal",
    "clamped",
    "parse_members",
    "refusal",
    "valid_cluster_name",
]

MAX_MEMBERS = 64
"""Members one Reservation may list (the CRD says so too)."""

MAX_CLUSTER_NAME = 41
"""A cluster name is a DNS label short enough that its namespace on the hub is one too."""
_CLUSTER = re.compile(rf"[a-z0-9]([-a-z0-9]{{0,{MAX_CLUSTER_NAME - 2}}}[a-z0-9])?", re.ASCII)


def valid_cluster_name(name: str) -> bool:
    """Is ``name`` a member cluster's name (a DNS label of at most 41 characters: what a
    claim's ``spec.cluster`` and a Reservation's ``spec.members[].cluster`` must be)?"""
    return bool(_CLUSTER.fullmatch(name))


@dataclass(frozen=True)
class MemberBounds:
    """What one member cluster may do on a Reservation; None: unbounded."""

    cluster: str
    max_priority: int | None = None
    max_claims: int | None = None
    quota: Mapping[str, int] = field(default_factory=dict)
    """Scheduler units per resource its claims may hold together (only the listed ones)."""


@dataclass(frozen=True)
class Refusal:
    """Why a Pending claim is not granted for its member's bounds."""

    not_member: bool
    """The Reservation does not list its cluster (else: a bound is reached)."""
    message: str


def _bound(raw: object, where: str, low: int, high: int) -> int | None:
    if raw is None:
        return None
    if type(raw) is not int or not low <= raw <= high:
        raise ValueError(f"{where}: {str(raw)[:40]!r} is not an integer from {low} to {high}")
    return raw


def parse_members(raw: object) -> dict[str, MemberBounds] | None:
    """``spec.members`` by cluster name; None when absent (any member, unbounded)."""
    if raw is None:
        return None
    items = sequence(raw, "spec.members")
    if len(items) > MAX_MEMBERS:
        raise ValueError(f"spec.members: {len(items)} members, at most {MAX_MEMBERS}")
    out: dict[str, MemberBounds] = {}
    for i, item in enumerate(items):
        where = f"spec.members[{i}]"
        entry = mapping(item, where)
        cluster = entry.get("cluster")
        if not isinstance(cluster, str) or not valid_cluster_name(cluster):
            raise ValueError(f"{where}.cluster: not a cluster name (lower-case letters, digits and '-')")
        if cluster in out:
            raise ValueError(f"{where}.cluster: {cluster} is listed twice")
        quota = amounts(mapping(entry.get("quota"), f"{where}.quota"), f"{where}.quota")
        out[cluster] = MemberBounds(
            cluster,
            _bound(entry.get("maxPriority"), f"{where}.maxPriority", -(2**31), 2**31 - 1),
            _bound(entry.get("maxClaims"), f"{where}.maxClaims", 0, 100_000),
            quota,
        )
    return out


def clamped(members: Mapping[str, MemberBounds] | None, cluster: str, priority: int) -> int:
    """A claim's priority as the hub reads it: at most its member's ``maxPriority``."""
    bound = members.get(cluster) if members is not None else None
    if bound is None or bound.max_priority is None:
        return priority
    return min(priority, bound.max_priority)


def refusal(
    members: Mapping[str, MemberBounds] | None,
    reservation: str,
    cluster: str,
    demand: Mapping[str, int],
    held: Mapping[str, int],
    holding: int,
) -> Refusal | None:
    """Why a Pending claim of ``cluster`` asking ``demand`` is not granted for its member's
    bounds, given what the member's claims hold (``held``, ``holding`` claims); None: within."""
    if members is None:
        return None
    bound = members.get(cluster)
    if bound is None:
        listed = ", ".join(sorted(members)) or "none"
        return Refusal(
            True, f"cluster {cluster} is not a member of Reservation {reservation} (spec.members: {listed})"
        )
    if bound.max_claims is not None and holding >= bound.max_claims:
        return Refusal(False, f"cluster {cluster} holds {holding} claims, its maxClaims on {reservation}")
    for resource, cap in sorted(bound.quota.items()):
        has, asks = held.get(resource, 0), demand.get(resource, 0)
        if asks and has + asks > cap:
            return Refusal(
                False,
                f"cluster {cluster} holds {format_amount(resource, has)} of its quota of "
                f"{format_amount(resource, cap)} {resource} on {reservation}; this claim asks "
                f"{format_amount(resource, asks)} more",
            )
    return None
