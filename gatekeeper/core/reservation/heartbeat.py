"""Members' heartbeats on the hub, and which members the hub holds for gone.

Why this exists: a member cluster gone for good (deleted, cut off) leaves granted claims
on the hub. Its machines may still run, so its claims must go on counting, but they
must be told apart from a live member's, and be released by an operator
(``lws-gatekeeper hub release``) or after a Reservation's ``spec.orphanTimeout``. Each
member renews a Lease on the hub (:func:`heartbeat_body`, written by
``controller.hub_link``); the hub's controller (``controller.hub``) keeps a
:class:`Heartbeats` and asks it each pass which clusters are gone.

As client-go's leader election does, the hub never compares a member's clock with its
own: a heartbeat is alive while the hub, by its own monotonic clock, saw its Lease
change within the Lease's ``leaseDurationSeconds``. A hub that starts (or takes over)
gives every member a whole duration from then. Pure: the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gatekeeper.core.kube.objects import meta
from gatekeeper.core.reservation.objects import (
    CLUSTER_LABEL,
    MEMBER_NAMESPACE_PREFIX,
    member_namespace,
    valid_cluster_name,
)

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "HEARTBEAT_PREFIX",
    "MAX_LEASE_SECONDS",
    "MIN_LEASE_SECONDS",
    "Beat",
    "Heartbeats",
    "heartbeat_body",
    "heartbeat_name",
    "parse_heartbeat",
]

HEARTBEAT_PREFIX = MEMBER_NAMESPACE_PREFIX
"""A member's heartbeat is the Lease ``lws-gatekeeper-member-<cluster>`` in its own namespace
on the hub, of the same name (RBAC lets a member write there only; the policy
``hub-member-claims`` only its own Lease)."""
DEFAULT_LEASE_SECONDS = 40
MIN_LEASE_SECONDS = 5
MAX_LEASE_SECONDS = 3600


def heartbeat_name(cluster: str) -> str:
    return HEARTBEAT_PREFIX + cluster


def _micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def heartbeat_body(cluster: str, holder: str, duration: int, now: datetime) -> dict[str, Any]:
    """The member's Lease as it writes it on each renewal (create or replace)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": heartbeat_name(cluster),
            "namespace": member_namespace(cluster),
            "labels": {CLUSTER_LABEL: cluster},
        },
        "spec": {
            "holderIdentity": holder[:128],
            "leaseDurationSeconds": max(MIN_LEASE_SECONDS, min(duration, MAX_LEASE_SECONDS)),
            "renewTime": _micro(now),
        },
    }


@dataclass(frozen=True)
class Beat:
    """One member's Lease as the hub read it."""

    cluster: str
    version: str
    """Its resourceVersion: a renewal is a change of it."""
    duration: int
    renewed: str
    """``spec.renewTime`` as the member wrote it (said in words, never compared)."""


def parse_heartbeat(obj: Mapping[str, Any]) -> Beat | None:
    """A member's heartbeat, or None for a Lease that is not one (names no valid cluster, or
    is not in that cluster's namespace: only the member itself writes there)."""
    m = meta(obj)
    name = str(m.get("name") or "")
    labels = m.get("labels")
    cluster = labels.get(CLUSTER_LABEL) if isinstance(labels, Mapping) else None
    if not isinstance(cluster, str) or not valid_cluster_name(cluster) or name != heartbeat_name(cluster):
        return None
    if m.get("namespace") != member_namespace(cluster):
        return None
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    raw = spec.get("leaseDurationSeconds")
    duration = raw if type(raw) is int else DEFAULT_LEASE_SECONDS
    duration = max(MIN_LEASE_SECONDS, min(duration, MAX_LEASE_SECONDS))
    renewed = spec.get("renewTime")
    return Beat(cluster, str(m.get("resourceVersion") or ""), duration, str(renewed or "")[:40])


class Heartbeats:
    """What the hub has seen of each member's heartbeat, by its own monotonic clock.

    ``started``: when this hub's term began (a member never seen is given a whole default
    duration from then). Made afresh for each term of the hub's controller.
    """

    def __init__(self, started: float, default_duration: int = DEFAULT_LEASE_SECONDS) -> None:
        self.started = started
        self.default_duration = default_duration
        self._seen: dict[str, tuple[str, float, Beat]] = {}
        """cluster -> (resourceVersion, when the hub first saw it, the beat)."""

    def observe(self, leases: Iterable[Mapping[str, Any]], now: float) -> None:
        """Take in the Leases as the hub's cache holds them now."""
        for obj in leases:
            beat = parse_heartbeat(obj)
            if beat is None:
                continue
            old = self._seen.get(beat.cluster)
            if old is None or old[0] != beat.version:
                self._seen[beat.cluster] = (beat.version, now, beat)

    def gone(self, clusters: Iterable[str], now: float) -> dict[str, str]:
        """Of ``clusters``, those whose heartbeat expired: cluster -> why, in words."""
        out: dict[str, str] = {}
        for cluster in sorted(set(clusters)):
            seen = self._seen.get(cluster)
            if seen is None:
                waited = now - self.started
                if waited > self.default_duration:
                    out[cluster] = (
                        f"no heartbeat of cluster {cluster} (Lease {heartbeat_name(cluster)}) seen by "
                        f"the hub in {waited:.0f}s"
                    )
                continue
            _, when, beat = seen
            quiet = now - when
            if quiet > beat.duration:
                out[cluster] = (
                    f"the heartbeat of cluster {cluster} (Lease {heartbeat_name(cluster)}, last renewed "
                    f"at {beat.renewed or 'an unknown time'}) has not changed for {quiet:.0f}s, longer "
                    f"than its {beat.duration}s"
                )
        return out
