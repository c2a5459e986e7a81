"""Giving back an admitted group whose pods are not all bound in time, for a backend whose
quota authority does not do it itself.

Why this exists: a group is admitted on its LWS's spec, before its pods exist. One whose pods
can never be made (a missing ServiceAccount, a refused image pull secret) or never bound
would hold its quota for ever when the authority that admitted it has no deadline of its
own for pods it did not make. After ``--admission-timeout-seconds`` (10 minutes by
default), counted as ``core.admission.deadline`` counts it (under ``startupPolicy:
LeaderReady`` the workers' time from the leader turning Ready), the group is given back as
for a pod not as admitted: its record says ``AdmissionTimeout`` and when it is tried again,
its running pods stop, the backend's own object goes once they are gone, and it is offered
again after a delay that doubles each time. Called by the backends' decisions. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gatekeeper.core.admission.deadline import deadline, whole
from gatekeeper.core.kube.keys import ADMITTED
from gatekeeper.core.kube.objects import condition
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.groups import LwsGroup
from gatekeeper.core.model.lws import LEADER_READY, startup_policy
from gatekeeper.core.model.retry import recorded_retries, retry_delay

__all__ = ["TimedOut", "timed_out"]


@dataclass(frozen=True)
class TimedOut:
    """Give the group back: its record's words and when it is tried again."""

    message: str
    retry_at: str
    retries: int


def timed_out(
    group: LwsGroup,
    lws: Mapping[str, Any],
    record: Mapping[str, Any],
    demand: GroupDemand,
    now: datetime | None,
    timeout: int,
    base: int,
    most: int,
) -> TimedOut | datetime | None:
    """The give-back of an admitted group (its record says ``Admitted=True``) not whole by its
    deadline; else when that deadline falls (a pass should look again then), or None: whole,
    placed since its admission, or no deadline now."""
    if now is None or condition(record, ADMITTED).get("status") != "True" or whole(group.present, demand):
        return None
    first = startup_policy(lws) == LEADER_READY
    due = deadline(record, group.present, timeout, leader_first=first)
    if due is None:
        return None
    if now < due.at:
        return due.at
    retries = recorded_retries(record) + 1
    delay = retry_delay(retries, base, most)
    bound = sum(1 for p in group.present if p.bound and p.live)
    since = "its leader turning Ready" if due.from_leader else "its admission"
    message = (
        f"group {group.state.key.index} got {bound} of its {demand.pod_count} pods bound within "
        f"{timeout} s of {since}; given back, retried in {delay} s"
    )
    return TimedOut(message, (now + timedelta(seconds=delay)).strftime("%Y-%m-%dT%H:%M:%SZ"), retries)
