"""The ``pools`` backend's decision for one group before planning, in named stages
(``decide.decide`` runs them for every group of every LWS, then plans).

Why this exists: what a group brings to the planner depends on its record, its pods and
its LWS now; told as one function it was too long to read. A group leaving and holding
nothing is dropped; a hand-edited StatefulSet's pods are told apart (``core.admission.conformance``);
a deleted record no running pod needs goes. Then one of three: its templates changed its
demand (``changed``), it holds an admission (kept, given back past its pool's
``spec.admissionTimeout``, or held at its recorded demand when it cannot be read any more),
or it waits (its stragglers stopped, after its retry time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gatekeeper.core.admission.conformance import conforming, over_record
from gatekeeper.core.admission.members import Stranger
from gatekeeper.core.admission.queue import AdmittedGroup, WaitingGroup
from gatekeeper.core.admission.reasons import STRANGER_REASONS, Reason
from gatekeeper.core.admission.stopping import not_stopped, not_stopped_message, stop_due
from gatekeeper.core.backends.pools.changed import WaitStatus, changed_template, waiting_group
from gatekeeper.core.backends.pools.giveback import (
    GiveBack,
    departed,
    due,
    given_back,
    placed,
    stragglers,
    timeout_at,
    waits_for_retry,
    whole,
)
from gatekeeper.core.backends.pools.kept import holds_pods
from gatekeeper.core.backends.pools.provisioning import Launcher
from gatekeeper.core.kube.keys import ADMITTED
from gatekeeper.core.kube.objects import as_map, condition, is_terminating
from gatekeeper.core.kube.quantity import format_resources
from gatekeeper.core.model.charge import Charge, charged
from gatekeeper.core.model.claims import NO_CLAIMS, ClaimBook
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import GroupState, LwsGroup
from gatekeeper.core.model.lws import LEADER_READY, GroupPod, priority_classes, startup_policy
from gatekeeper.core.model.pool import Pool
from gatekeeper.core.model.record import (
    held_in,
    is_admitted,
    placement,
    recorded_demand,
    recorded_domain,
    recorded_shape,
)

__all__ = ["GroupPass", "Settings", "restored"]

Key = tuple[str, str]


@dataclass(frozen=True)
class Settings:
    """What the stages read of the pass besides the group."""

    charges: Mapping[Charge, tuple[str, ...]]
    pools: Mapping[str, Pool]
    launcher: Launcher
    now: datetime | None
    retry_seconds: int
    default_priority: int
    claim_book: ClaimBook = NO_CLAIMS


@dataclass
class GroupPass:
    """The stages, and what they gathered for the planner from every group so far."""

    settings: Settings
    strangers: dict[GroupKey, list[Stranger]]
    """The pass's strangers (``core.admission.membership``): pods not as admitted are added here."""
    groups: list[GroupState] = field(default_factory=list)
    state_of: dict[GroupKey, GroupState] = field(default_factory=dict)
    wanted_records: set[Key] = field(default_factory=set)
    waiting_groups: list[WaitingGroup] = field(default_factory=list)
    admitted_groups: list[AdmittedGroup] = field(default_factory=list)
    ungate_keys: list[GroupKey] = field(default_factory=list)
    """Admitted groups whose gated pods are let through onto their pool's nodes."""
    held_pools: dict[GroupKey, str] = field(default_factory=dict)
    """The pool each of ``ungate_keys`` holds its admission in."""
    held_domains: dict[GroupKey, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """The topology domain the pods of an admitted group are pinned to (``status.domain``)."""
    partial_ungate: list[tuple[str, str, str, GroupKey]] = field(default_factory=list)
    """(namespace, pod, pool, group): old pods of a group whose templates changed."""
    held_invalid: list[WaitStatus] = field(default_factory=list)
    held_changed: list[WaitStatus] = field(default_factory=list)
    restore: list[tuple[str, str, str]] = field(default_factory=list)
    revisions: list[tuple[str, str, str]] = field(default_factory=list)
    readmitted: dict[GroupKey, str] = field(default_factory=dict)
    """Groups queued again after a template change, with the demand they were admitted with."""
    gives: list[GiveBack] = field(default_factory=list)
    held_by_pods: list[GroupState] = field(default_factory=list)
    """Groups given back whose let-through pods still live: they hold their recorded demand."""
    not_stopped: list[WaitStatus] = field(default_factory=list)
    """Groups given back whose let-through pods still run, not even terminating, past the grace
    (``core.admission.stopping``): their record says so, with the reason it had."""
    look_again: datetime | None = None
    """The earliest moment a decision of this pass falls due with nothing changed (a group
    to give back): the next pass comes no later."""
    stop: list[Key] = field(default_factory=list)
    settled: list[Key] = field(default_factory=list)

    def group(self, lws: Mapping[str, Any], group: LwsGroup, created: datetime, order: int) -> None:
        """Decide what one group of ``lws`` (made at ``created``, of priority ``order``) brings."""
        gs, record, pods, staying = group.state, group.record, group.members, group.staying
        admitted = is_admitted(record)
        if not (staying or admitted):
            return  # leaving and holding nothing: its record (if any) goes now
        demand = gs.demand
        classes = priority_classes(lws)
        changed = (
            changed_template(record, demand, pods, gs, order, created, classes)
            if record is not None and admitted and isinstance(demand, GroupDemand)
            else None
        )
        if changed is None and isinstance(demand, GroupDemand):  # a hand-edited StatefulSet's pods
            gs, off = conforming(
                gs, pods, lws, demand, self.settings.default_priority, self.settings.claim_book
            )
            if off:
                self.strangers[gs.key] = [*self.strangers.get(gs.key, []), *off]
        charges = self.settings.charges
        if (
            record is not None
            and is_terminating(record)
            and not holds_pods(admitted, record, pods, charges, isinstance(changed, WaitingGroup))
        ):
            return  # deleted, and no running pod needs it: it goes; a new one once it is gone
        self.groups.append(gs)
        self.state_of[gs.key] = gs
        if record is not None:
            self.wanted_records.add((gs.key.namespace, gs.record))
        if changed is not None:
            assert record is not None
            self._changed(gs, record, changed, pods)
        elif record is not None and admitted:
            self._admitted(gs, record, pods, staying, leader_first=startup_policy(lws) == LEADER_READY)
        else:
            self._waiting(gs, record, pods, created, order, classes)

    def _changed(
        self,
        gs: GroupState,
        record: Mapping[str, Any],
        changed: WaitingGroup | tuple[AdmittedGroup, list[str], WaitStatus | None],
        pods: Sequence[GroupPod],
    ) -> None:
        """Its templates changed its demand: queued again once its old pods are gone, or
        held with its old pods let through (while they ask no more than the record holds:
        ``over_record``; given back when they have not for the grace) and its new ones waiting."""
        key, s = gs.key, self.settings
        was = recorded_shape(record)
        if isinstance(changed, WaitingGroup):
            self.waiting_groups.append(changed)
            self.readmitted[key] = format_resources(was[0]) if was else ""
            return
        going, off = over_record(gs, pods, changed[1], was[0] if was else {}, s.claim_book)
        if off:
            self.strangers[key] = [*self.strangers.get(key, []), *off]
            give = departed(gs, record, pods, self.strangers[key], s.now, base=s.retry_seconds)
            if isinstance(give, datetime):
                self._look_again(give)
            elif give is not None:
                self.strangers.pop(key, None)  # the give-back's own words say it
                self.gives.append(give)
                self._held_by_pods(gs, record, pods)
                return
        self.admitted_groups.append(changed[0])
        self.partial_ungate.extend((key.namespace, pod, changed[0].held_in, key) for pod in going)
        self.held_domains[key] = changed[0].domain
        if changed[2] is not None:
            self.held_changed.append(changed[2])
        elif said_changed(record) and key not in self.strangers:
            self.restore.append(restored(gs, record))

    def _admitted(
        self,
        gs: GroupState,
        record: Mapping[str, Any],
        pods: Sequence[GroupPod],
        staying: bool,
        *,
        leader_first: bool,
    ) -> None:
        """It holds an admission: given back when due, kept (its gated pods let through), or
        held at its recorded demand when its demand cannot be read any more."""
        key, s = gs.key, self.settings
        if said_changed(record) and key not in self.strangers:
            self.restore.append(restored(gs, record))
        status = as_map(record.get("status"))
        held_pool, lender = held_in(record, gs.pool)
        give = (
            due(
                gs,
                record,
                pods,
                s.pools.get(held_pool),
                s.launcher,
                s.now,
                s.retry_seconds,
                leader_first=leader_first,
            )
            if staying
            else None
        )
        if give is None and staying:
            off = departed(gs, record, pods, self.strangers.get(key, ()), s.now, base=s.retry_seconds)
            if isinstance(off, datetime):
                self._look_again(off)
            elif off is not None:
                give = off
                self.strangers.pop(key, None)  # the give-back's own words say it
        if give is not None:
            self.gives.append(give)  # its pods go; until they are gone they hold its charge
            self._held_by_pods(gs, record, pods)
            return
        demand = gs.demand
        if not isinstance(demand, GroupDemand):
            self._held_unreadable(gs, record, demand.message)
            return
        pool = s.pools.get(held_pool)
        if (status.get("retries") or (pool is not None and not placed(record))) and whole(pods, demand):
            self.settled.append((key.namespace, gs.record))  # the doubling cleared; placed from now
        elif (
            staying
            and (at := timeout_at(record, pods, pool, leader_first=leader_first)) is not None
            and s.now is not None
            and at > s.now
        ):
            self._look_again(at)  # not whole yet: the timeout's pass comes when it falls due
        bound = frozenset(p.worker for p in pods if p.bound and p.live)
        nodes = placement(status.get("placement"))
        self.admitted_groups.append(
            AdmittedGroup(
                key=key,
                pool=held_pool,
                demand=demand,
                nodes=nodes,
                bound=bound,
                exclusive=gs.exclusive,
                lender=lender,
                domain=recorded_domain(record),
                subgroups=gs.subgroups is not None,
                gang=gs.gang,
            )
        )
        if staying:
            self.ungate_keys.append(key)
            self.held_pools[key] = lender or held_pool
            self.held_domains[key] = recorded_domain(record)
            recorded_revision = str(status.get("templateRevision") or "")
            if gs.revision and gs.revision != recorded_revision:
                self.revisions.append((key.namespace, gs.record, gs.revision))

    def _look_again(self, at: datetime) -> None:
        self.look_again = at if self.look_again is None else min(self.look_again, at)

    def _held_unreadable(self, gs: GroupState, record: Mapping[str, Any], why: str) -> None:
        held = recorded_demand(record)
        held_pool, lender = held_in(record, gs.pool)
        bound = frozenset(range(held.pod_count))
        self.admitted_groups.append(
            AdmittedGroup(key=gs.key, pool=held_pool, demand=held, bound=bound, lender=lender)
        )
        summary = format_resources(held.total) or "nothing recorded"
        message = (
            f"group {gs.key.index} keeps its admission into pool {held_pool} ({summary}), "
            f"but its demand cannot be computed any more: {why}; "
            "its new pods stay gated until the LeaderWorkerSet is fixed"
        )
        self.held_invalid.append(WaitStatus(gs, Reason.INVALID_SPEC, message, 0))

    def _waiting(
        self,
        gs: GroupState,
        record: Mapping[str, Any] | None,
        pods: Sequence[GroupPod],
        created: datetime,
        order: int,
        classes: tuple[str, ...],
    ) -> None:
        """It waits: its stragglers stopped, and queued unless given back until its retry time.
        Given back, while a pod let through on it still lives (terminating in its grace
        period), it holds what its record says it was admitted with, and is not queued: its
        reservation is free only once its pods are gone."""
        self.stop.extend((gs.key.namespace, p) for p in stragglers(record, pods))
        if record is not None and given_back(record) and self._held_by_pods(gs, record, pods):
            self._not_stopped(gs, record, pods)
            return
        if waits_for_retry(record, self.settings.now):
            return  # given back: planned again at its status.retryAt
        self.waiting_groups.append(waiting_group(gs, gs.demand, created, order, classes))

    def _held_by_pods(self, gs: GroupState, record: Mapping[str, Any], pods: Sequence[GroupPod]) -> bool:
        """Does a pod let through on this group (no gate, not finished: terminating too; or
        charged to its record) still live? Then it holds its recorded demand (else its
        demand now) in its recorded pool."""
        if not (any(p.live and not p.gated for p in pods) or charged(record, self.settings.charges)):
            return False
        held = recorded_demand(record)
        if not held.total and isinstance(gs.demand, GroupDemand):
            held = gs.demand
        pool, lender = held_in(record, gs.pool)
        bound = frozenset(range(held.pod_count))
        self.admitted_groups.append(
            AdmittedGroup(key=gs.key, pool=pool, demand=held, bound=bound, lender=lender)
        )
        self.held_by_pods.append(gs)
        return True

    def _not_stopped(self, gs: GroupState, record: Mapping[str, Any], pods: Sequence[GroupPod]) -> None:
        """A given-back group's let-through pods that still run past the grace: said on its record."""
        running = not_stopped(record, pods, self.settings.now)
        said = condition(record, ADMITTED)
        if not running:
            due = stop_due(record)
            if due is not None and any(p.live and not p.gated and not p.terminating for p in pods):
                self._look_again(due)
            return
        message = not_stopped_message(str(said.get("message") or ""), running)
        reason = Reason(str(said.get("reason")))
        self.not_stopped.append(WaitStatus(gs, reason, message, 0))


def said_changed(record: Mapping[str, Any]) -> bool:
    """Does an admitted record say why some of its group's pods wait?"""
    reason = condition(record, ADMITTED).get("reason")
    return isinstance(reason, str) and (reason == Reason.TEMPLATE_CHANGED or reason in STRANGER_REASONS)


def restored(group: GroupState, record: Mapping[str, Any]) -> tuple[str, str, str]:
    """(namespace, record, message) that says the group holds its admission, as it did."""
    status = as_map(record.get("status"))
    held = str(status.get("demandSummary") or "") or format_resources(recorded_demand(record).total)
    pool = str(status.get("pool") or group.pool)
    message = f"group {group.key.index} holds its admission into pool {pool}: {held}"
    return group.key.namespace, group.record, message
