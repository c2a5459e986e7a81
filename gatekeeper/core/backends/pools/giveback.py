"""Giving back an admitted group that cannot get all its nodes: the ``pools`` rule.

Why this exists: a Pool over an autoscaler (``spec.nodePools``) admits a group on what the
cloud can still launch, and the cloud can run out while the nodes come (an offering has no
capacity, the NodePool's limit was lowered). The group is then half-placed: some of its pods
bound, holding nodes that serve nothing, the rest Pending for ever. So is a group whose
pods can never be made (a missing ServiceAccount, a refused image pull secret): it holds its
quota and makes nothing. After its Pool's ``spec.admissionTimeout`` (10 minutes unless the
Pool says otherwise; under ``LeaderReady`` the workers' time counts from the leader turning
Ready, so a model that loads for an hour is not given back) such a group is given back, as
Kueue's ``waitForPodsReady`` does: its pods are deleted (its LWS makes them again, and they are born
gated: the record no longer says ``Admitted``, so the webhook's pass-through table drops it),
its record says ``Admitted=False`` with reason ``AdmissionTimeout`` and why, and it is tried
again after a delay that doubles with each give-back (``status.retryAt``, ``status.retries``,
as the ``kueue`` backend's never-fit retry). Karpenter then removes the empty nodes.

A group is given back the same way, whatever its pool, when one of its own pods (made by its
LWS, within its size) has asked other than its role was admitted with for a few seconds
(``departed``, by ``core.admission.conformance.overdue``): its StatefulSet's template was
edited by hand with the gatekeeper's check of StatefulSets off. That pod stays gated, so the
group cannot be whole on its admission, and its let-through pods would hold their nodes for
nothing. Its pods deleted, the LWS makes them again from its own templates (the edited
worker StatefulSet goes with its leader pod); its record says ``NotAsAdmitted`` and why.
This is what Kueue does with a job whose pods no longer match its admitted Workload.

A group once placed whole is given back too (``displaced``, reason ``Stranded``) when a pod of
it, let through and unbound, has found no room on its pool's nodes for a few seconds: the default
scheduler preempted one of its pods for a pod the gatekeeper never saw, or a node was lost, and
its LWS made it again. Its admission's timeout no longer applies, so it would hold half its
nodes for ever. Groups preempted for a waiting group of higher priority (``preemption``) leave
by the same road, with reason ``Preempted``.

Called by ``decide`` (which groups time out, which wait for their retry, which stragglers to
stop) and by ``writes`` (the record's status patches). Pure: the time is the pass's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gatekeeper.core.admission.conformance import Departed, departed_message, overdue
from gatekeeper.core.admission.deadline import Deadline, deadline, placed, whole
from gatekeeper.core.admission.members import Stranger
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.provisioning import Launcher
from gatekeeper.core.kube.keys import ADMITTED
from gatekeeper.core.kube.objects import as_map, condition, parse_time
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.lws import GroupPod
from gatekeeper.core.model.pool import Pool
from gatekeeper.core.model.record import admitted_condition
from gatekeeper.core.model.retry import recorded_retries, retry_delay

__all__ = [
    "GIVE_BACK_REASONS",
    "GIVE_BACK_RETRY_MAX_SECONDS",
    "Deadline",
    "GiveBack",
    "deadline",
    "departed",
    "displaced",
    "due",
    "give_back_status",
    "given_back",
    "placed",
    "retry_delay",
    "stragglers",
    "timed_out",
    "timeout_at",
    "waits_for_retry",
    "whole",
]

GIVE_BACK_RETRY_MAX_SECONDS = 1800
"""The delay before a given-back group is tried again doubles up to this (30 minutes)."""

GIVE_BACK_REASONS = frozenset(
    {str(Reason.ADMISSION_TIMEOUT), str(Reason.NOT_AS_ADMITTED), str(Reason.PREEMPTED), str(Reason.STRANDED)}
)
"""The reasons of a record whose group was given back (``Admitted=False``)."""

DISPLACED_GRACE_SECONDS = 8
"""How long an unbound pod of a group once placed whole may find no room in its pool before the
group is given back (``displaced``): long enough for a pod just bound to show so in every cache,
short of the 15 s after which a half-placed group's GPUs are counted stranded."""

_MAX_RETRIES = 1000
"""A record's ``status.retries`` above this (anyone with rights in the namespace can write it)
is read as this."""


@dataclass(frozen=True)
class GiveBack:
    """Give an admitted group back: its record first (``Admitted=False``, ``retryAt``), then its
    pods deleted by UID."""

    group: GroupState
    pods: tuple[str, ...]
    """Its pods to delete: every one that is not terminating and carries no gate."""
    message: str
    retry_at: datetime
    retries: int
    reason: Reason = Reason.ADMISSION_TIMEOUT


def given_back(record: Mapping[str, Any] | None) -> bool:
    """Does the record say its group was given back (and is not admitted since)?"""
    said = condition(record, ADMITTED)
    reason = said.get("reason")  # anything a user with rights on the record wrote
    return said.get("status") == "False" and isinstance(reason, str) and reason in GIVE_BACK_REASONS


def waits_for_retry(record: Mapping[str, Any] | None, now: datetime | None) -> bool:
    """Was the group given back, and is its ``retryAt`` still to come? (``now`` None: never.)"""
    if record is None or now is None or not given_back(record):
        return False
    return now < parse_time(as_map(record.get("status")).get("retryAt"))


def timed_out(
    group: GroupState,
    record: Mapping[str, Any],
    pods: Sequence[GroupPod],
    timeout: int,
    now: datetime | None,
    *,
    base: int,
    why: str = "",
    leader_first: bool = False,
) -> GiveBack | None:
    """The give-back of an admitted group whose pods are not all bound by its ``deadline``;
    None when it is whole, has been whole since its admission (``placed``), or has time
    left. Only a record that says ``Admitted`` (reason ``Admitted``) times out: one that
    waits for a changed template's old pods, or names a stranger, is not waiting for nodes.
    ``why`` says what the cloud can still launch."""
    said = condition(record, ADMITTED)
    if now is None or said.get("status") != "True" or said.get("reason") != ADMITTED:
        return None
    demand = group.demand
    count = getattr(demand, "pod_count", 0)
    if not isinstance(count, int) or count <= 0:
        return None
    bound = sum(1 for p in pods if p.bound and p.live and not p.terminating)
    if bound >= count:
        return None
    due_at = deadline(record, pods, timeout, leader_first=leader_first)
    if due_at is None or now < due_at.at:
        return None
    retries = recorded_retries(record) + 1
    delay = retry_delay(retries, base)
    cause = f" ({why})" if why else ""
    since = " of its leader turning Ready" if due_at.from_leader else " of its admission"
    message = (
        f"group {group.key.index} got {bound} of its {count} pods bound within {timeout} s{since}"
        f"{cause}; given back, retried in {delay} s"
    )
    stop = tuple(sorted(p.name for p in pods if not p.terminating and not p.gated))
    return GiveBack(group, stop, message, now + timedelta(seconds=delay), retries)


def timeout_at(
    record: Mapping[str, Any], pods: Sequence[GroupPod], pool: Pool | None, *, leader_first: bool
) -> datetime | None:
    """When an admitted group not yet placed is due to be given back by its pool's
    ``spec.admissionTimeout`` (a pass should look again then); None without a pool or a
    deadline (``deadline``)."""
    if pool is None:
        return None
    due_at = deadline(record, pods, pool.admission_timeout, leader_first=leader_first)
    return None if due_at is None else due_at.at


def due(
    group: GroupState,
    record: Mapping[str, Any],
    pods: Sequence[GroupPod],
    pool: Pool | None,
    launcher: Launcher,
    now: datetime | None,
    base: int,
    *,
    leader_first: bool = False,
) -> GiveBack | None:
    """The give-back of an admitted group past its pool's ``spec.admissionTimeout``, if due;
    its message says what the pool's NodePools can still launch."""
    if pool is None or not isinstance(group.demand, GroupDemand):
        return None
    why = f"its NodePools can still launch {launcher.describe(pool.node_pools)}" if pool.node_pools else ""
    return timed_out(
        group, record, pods, pool.admission_timeout, now, base=base, why=why, leader_first=leader_first
    )


def departed(
    group: GroupState,
    record: Mapping[str, Any],
    pods: Sequence[GroupPod],
    strangers: Sequence[Stranger],
    now: datetime | None,
    *,
    base: int,
) -> GiveBack | datetime | None:
    """The give-back of an admitted group one of whose own gated pods has not asked what its
    role was admitted with for the grace (``core.admission.conformance.overdue``); else the
    moment that is due (a pass should look again then), or None. Only a record that says
    ``Admitted=True`` is given back (one that waits for a changed template's old pods is
    judged by its revision instead)."""
    if condition(record, ADMITTED).get("status") != "True":
        return None
    off = overdue(pods, strangers, now)
    if not isinstance(off, Departed):
        return off
    assert now is not None
    retries = recorded_retries(record) + 1
    delay = retry_delay(retries, base)
    message = departed_message(group.key.index, off, delay)
    stop = tuple(sorted(p.name for p in pods if not p.terminating and not p.gated))
    return GiveBack(group, stop, message, now + timedelta(seconds=delay), retries, Reason.NOT_AS_ADMITTED)


def displaced(
    group: GroupState, record: Mapping[str, Any], pods: Sequence[GroupPod], pool: str, now: datetime | None
) -> GiveBack | datetime | None:
    """The give-back of a group that was placed whole (``placed``) and that the planner found
    stranded: a pod of it, let through and unbound, fits no node of its pool any more, since
    another pod took its place (the default scheduler preempted one of its pods for a pod of
    higher priority, a pod the gatekeeper did not admit bound there, a node was lost). Its
    admission's timeout no longer applies, so without this it would hold half its nodes for
    ever. Given back whole once that pod has waited ``DISPLACED_GRACE_SECONDS``; before, the
    moment it is due; None when the record does not say ``Admitted`` or no such pod waits."""
    said = condition(record, ADMITTED)
    if now is None or said.get("status") != "True" or said.get("reason") != ADMITTED or not placed(record):
        return None
    unbound = [p for p in pods if p.live and not p.terminating and not p.bound and not p.gated]
    if not unbound:
        return None
    since, name = min((parse_time(p.created), p.name) for p in unbound)
    due_at = since + timedelta(seconds=DISPLACED_GRACE_SECONDS)
    if now < due_at:
        return due_at
    waited = int((now - since).total_seconds())
    message = (
        f"group {group.key.index} was placed whole, but its pod {name} has waited unbound for {waited} s "
        f"and no node of pool {pool} has room for it (another pod took its place: the scheduler's "
        "preemption, a pod the gatekeeper did not admit, or a node lost); given back whole, its pods "
        "are deleted and it waits in the pool's queue again"
    )
    stop = tuple(sorted(p.name for p in pods if not p.terminating and not p.gated))
    return GiveBack(group, stop, message, now, recorded_retries(record), Reason.STRANDED)


def stragglers(record: Mapping[str, Any] | None, pods: Sequence[GroupPod]) -> tuple[str, ...]:
    """Pods of a given-back group that carry no gate and are not terminating: made ungated
    by a webhook whose table still had the group in the moment it was given back. They are
    deleted too (no pod runs on an admission given back)."""
    if not given_back(record):
        return ()
    return tuple(sorted(p.name for p in pods if not p.terminating and not p.gated))


def give_back_status(give: GiveBack, before: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    """The record status patch that gives the group back (written guarded by the version the
    decision was made on, before any of its pods is deleted)."""
    current = condition({"status": as_map(before)}, ADMITTED)
    return {
        "placement": None,
        "domain": None,
        "admittedAt": None,
        "placedAt": None,
        "retryAt": give.retry_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "retries": give.retries,
        "conditions": [
            admitted_condition(False, str(give.reason), give.message, current, now),
        ],
    }
