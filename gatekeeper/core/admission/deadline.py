"""When an admitted group that is not whole yet is due to be given back: every backend's rule.

Why this exists: a group is admitted on its LWS's spec, before its pods exist, and holds its
quota from then on. If its pods can never be made (a missing ServiceAccount, a refused image
pull secret) or never bound (the cloud ran out), it would hold it for ever. A backend gives
such a group back after a timeout (a Pool's ``spec.admissionTimeout``, 10 minutes unless it
says; where no Pool decides, ``--admission-timeout-seconds``), counted as ``deadline``
says, so that a group whose leader loads its model for an hour under
``startupPolicy: LeaderReady`` is not given back. Called by the backends' give-back
stages. Pure: the time is the pass's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gatekeeper.core.kube.keys import ADMITTED
from gatekeeper.core.kube.objects import EPOCH, as_map, condition, parse_time
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.lws import GroupPod

__all__ = ["Deadline", "admitted_at", "deadline", "placed", "whole"]


@dataclass(frozen=True)
class Deadline:
    """When an admitted group not yet placed is given back, and from what it is counted."""

    at: datetime
    from_leader: bool
    """Counted from its leader turning Ready (``LeaderReady``), not from its admission."""


def deadline(
    record: Mapping[str, Any], pods: Sequence[GroupPod], timeout: int, *, leader_first: bool
) -> Deadline | None:
    """When the group is due to be given back unless all its pods are bound; None when it has
    no deadline now: placed since its admission, no admission time, or (``leader_first``:
    ``startupPolicy: LeaderReady``) its leader bound and not Ready yet, since the LWS makes
    the workers only once the leader is Ready, however long its model takes to load.

    The leader must be bound ``timeout`` seconds after the admission; under LeaderReady the
    workers ``timeout`` seconds after the leader turned Ready; otherwise every pod
    ``timeout`` seconds after the admission. A pod that is never made (a missing
    ServiceAccount, a refused image pull secret) counts as not bound."""
    if placed(record):
        return None  # it had all its pods bound once: a restart since is not a give-back
    start = admitted_at(record)
    if start == EPOCH:
        return None
    leader = next((p for p in pods if p.worker == 0 and p.live and not p.terminating), None)
    if leader_first and leader is not None and leader.bound:
        if not leader.ready_since:
            return None  # loading: its workers come once it is Ready
        ready = parse_time(leader.ready_since)
        if ready > start:
            return Deadline(ready + timedelta(seconds=timeout), from_leader=True)
    return Deadline(start + timedelta(seconds=timeout), from_leader=False)


def admitted_at(record: Mapping[str, Any]) -> datetime:
    """When the record says its group was admitted (``status.admittedAt``, else its
    condition's last transition); EPOCH when it says neither."""
    at = parse_time(as_map(record.get("status")).get("admittedAt"))
    return at if at != EPOCH else parse_time(condition(record, ADMITTED).get("lastTransitionTime"))


def placed(record: Mapping[str, Any]) -> bool:
    """Has the group had all its pods bound since it was last admitted (``status.placedAt``
    no earlier than ``status.admittedAt``)? The timeout then no longer applies to it, as
    Kueue's ``waitForPodsReady`` leaves a workload that was once ready: its pods may be made
    again (a restart) and bind a moment later."""
    status = as_map(record.get("status"))
    at = parse_time(status.get("placedAt"))
    return at != EPOCH and at >= parse_time(status.get("admittedAt"))


def whole(pods: Sequence[GroupPod], demand: GroupDemand) -> bool:
    """Are all the group's pods bound (and live, not terminating)?"""
    return sum(1 for p in pods if p.bound and p.live and not p.terminating) >= demand.pod_count
