"""The ``kueue`` backend's decision for one group, in named stages (``decide.decide_kueue``
runs them for every group of every LWS).

Why this exists: what becomes of a group with this backend depends on its record, its
Workload and Kueue's word on it, its pods and its LWS now; told as one function it was too
long to read. Each stage below is one question, asked in this order, and the first that
settles the group ends it: is the group gone or new; was its Workload made for another spec;
does a lower group of its LWS go first; did its templates change its demand; is it waiting
out a retry delay, or can it never fit; must its Workload be made; is it adopted from
another backend; then its pods (let through, or stopped) and its record's words.

A group one of whose own pods has not asked what its role was admitted with for a few
seconds (``core.admission.conformance.overdue``) is given back: its record says
``Admitted=False``, reason ``NotAsAdmitted``, with a retry time; its running pods stop, and
once none is left its Workload goes (Kueue's quota comes back only when nothing runs on
it); after the retry a new Workload is made, and the LWS has made the pods again from its
own templates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gatekeeper.core.admission.conformance import Departed, conforming, departed_message, overdue
from gatekeeper.core.admission.deadline import whole
from gatekeeper.core.admission.members import Stranger
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.admission.record_cap import DEFAULT_MAX_RECORDS_PER_NAMESPACE, RecordRoom
from gatekeeper.core.admission.timeout import TimedOut, timed_out
from gatekeeper.core.backends.kueue.adopt import adopted_elsewhere, adopting_message, old_pods
from gatekeeper.core.backends.kueue.order import Offers, Waiting, unreserved
from gatekeeper.core.backends.kueue.status import RecordStatus
from gatekeeper.core.backends.kueue.workload import (
    admitted_where,
    demand_changed,
    flavor_steering,
    never_fits,
    new_pods,
    stale_spec,
    topology_checked,
    waiting_reason,
    workload_belongs,
)
from gatekeeper.core.kube.keys import (
    ADMITTED,
    ADOPTING_REASON,
    EVICTED,
    KUEUE_ADMITTED,
    NO_NODE_FITS,
    QUOTA_RESERVED,
    WAITING_FOR_KUEUE,
)
from gatekeeper.core.kube.objects import (
    as_map,
    condition,
    conditions,
    is_terminating,
    meta,
    parse_time,
)
from gatekeeper.core.kube.quantity import format_resources
from gatekeeper.core.model.charge import Charge, charge_toleration, charged
from gatekeeper.core.model.claims import NO_CLAIMS, ClaimBook
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.gating import Ungate
from gatekeeper.core.model.group import GroupKey, InvalidDemand
from gatekeeper.core.model.groups import GroupState, LwsGroup
from gatekeeper.core.model.lws import GroupPod
from gatekeeper.core.model.pool import DEFAULT_ADMISSION_TIMEOUT
from gatekeeper.core.model.retry import recorded_retries, retry_delay

__all__ = ["GroupPass", "Settings"]

Key = tuple[str, str]
Passing = tuple[GroupKey, Mapping[str, Any], GroupDemand, Mapping[str, Any]]  # with its LWS, demand, Workload


@dataclass(frozen=True)
class Settings:
    """What the stages read of the pass besides the group."""

    workloads: Mapping[Key, Mapping[str, Any]]
    flavors: Mapping[str, Mapping[str, Any]]
    charges: Mapping[Charge, tuple[str, ...]]
    priorities: Mapping[str, int]
    default_priority: int
    now: datetime | None
    retry_seconds: int
    retry_max_seconds: int
    admission_timeout: int = DEFAULT_ADMISSION_TIMEOUT
    """Seconds an admitted group may lack bound pods (``core.admission.deadline``)."""
    claim_book: ClaimBook = NO_CLAIMS
    """What DRA claims ask (``core.model.claims``): a made pod is judged by its claims."""


@dataclass
class _Group:
    """One group as the stages see it; the stages may take its Workload's admission back."""

    group: LwsGroup
    lws: Mapping[str, Any]
    wl: Mapping[str, Any] | None
    conds: Mapping[str, Mapping[str, Any]]
    admitted: bool
    admission: Mapping[str, Any]
    reserved: bool
    live: bool
    ungated: list[GroupPod] = field(default_factory=list)
    adopting: bool = False
    waits_new: list[str] = field(default_factory=list)

    @property
    def st(self) -> GroupState:
        return self.group.state

    @property
    def ns(self) -> str:
        return self.st.key.namespace

    @property
    def key(self) -> Key:
        return (self.st.key.namespace, self.st.record)

    @property
    def record(self) -> Mapping[str, Any]:
        assert self.group.record is not None
        return self.group.record

    @property
    def demand(self) -> GroupDemand | None:
        return self.st.demand if isinstance(self.st.demand, GroupDemand) else None

    @property
    def mark(self) -> dict[str, Any]:
        return charge_toleration(self.st.lws_uid, self.st.key.index)


@dataclass
class GroupPass:
    """The stages, and what they decided for every group so far this pass."""

    settings: Settings
    strangers: dict[GroupKey, list[Stranger]]
    """The pass's strangers (``core.admission.membership``): pods not as admitted are added here."""
    create_records: list[GroupState] = field(default_factory=list)
    deferred: set[Key] = field(default_factory=set)
    create_workloads: list[tuple[GroupState, str]] = field(default_factory=list)
    wanted: set[Key] = field(default_factory=set)
    ungate: list[Ungate] = field(default_factory=list)
    stop: list[Key] = field(default_factory=list)
    clear: list[Key] = field(default_factory=list)
    statuses: list[RecordStatus] = field(default_factory=list)
    stale: list[Key] = field(default_factory=list)
    room: RecordRoom = field(default_factory=lambda: RecordRoom((), DEFAULT_MAX_RECORDS_PER_NAMESPACE))
    """Room for new records per namespace (``core.admission.record_cap``)."""
    over_cap: list[GroupState] = field(default_factory=list)
    """Groups past their namespace's record cap: no record, no Workload."""
    look_again: datetime | None = None
    """The earliest moment a decision of this pass falls due with nothing changed."""
    passable: list[Passing] = field(default_factory=list)
    """Groups whose new pods the webhook makes as this pass lets their gated pods through."""

    def group(self, lws: Mapping[str, Any], group: LwsGroup, waiting: Waiting | None, offers: Offers) -> None:
        """Decide one group of ``lws``; ``waiting`` and ``offers`` are its LWS's queue."""
        c = self._read(lws, topology_checked(group, lws))
        if self._enter(c, offers):
            return
        self._respec(c)
        c.ungated = [p for p in group.present if not p.gated and p.live]
        c.adopting = (
            group.staying
            and not c.admitted
            and not _true(c.conds, EVICTED)
            and bool(c.ungated)
            and adopted_elsewhere(c.record)
        )
        settled = (
            self._given_back(c)
            or self._behind_lower(c, waiting)
            or self._new_demand(c)
            or self._retry(c)
            or self._make_workload(c, offers)
            or self._adopt(c)
        )
        if settled or self._timed_out(c) or self._pods(c):
            return
        self._say(c)

    def _read(self, lws: Mapping[str, Any], group: LwsGroup) -> _Group:
        """The group's Workload (one of an earlier LWS's that holds its name goes) and
        Kueue's word on it."""
        gs, record = group.state, group.record
        s = self.settings
        live = any(p.live for p in group.members) or bool(record is not None and charged(record, s.charges))
        wl = s.workloads.get((gs.key.namespace, gs.record))
        if wl is not None and not workload_belongs(wl, gs.key.name, gs.lws_uid, gs.key.index):
            self.stale.append((gs.key.namespace, gs.record))
            wl = None
        conds = conditions(wl) if wl is not None else {}
        admitted = _true(conds, KUEUE_ADMITTED) and not _true(conds, EVICTED)
        admission = as_map(as_map(wl.get("status")).get("admission")) if wl is not None else {}
        reserved = _true(conds, QUOTA_RESERVED) or bool(admission)
        return _Group(group, lws, wl, conds, admitted, admission, reserved, live)

    def _enter(self, c: _Group, offers: Offers) -> bool:
        """Gone (its record and Workload released below), new (its record made, its Workload
        with it unless lower groups go first), or deleted and needed by no running pod."""
        staying = c.group.staying
        if not staying and not c.live:
            return True
        if c.group.record is None:
            if staying and not self.room.take(c.st.key.namespace):
                self.over_cap.append(c.st)  # no record, no Workload: told by an Event
            elif staying:
                self.create_records.append(c.st)
                if c.demand is not None and not offers.take():
                    self.deferred.add(c.key)
            return True
        if is_terminating(c.record) and not (c.admitted and c.live):
            return True  # it goes with its Workload
        if c.wl is not None and is_terminating(c.wl) and staying:
            # Deleted (by hand, say): its admission is taken back, as on eviction. It holds
            # its quota until no pod it let through is left, then it goes and a new one is made.
            c.admitted = False
            if not any(p.live and not p.gated for p in c.group.members):
                self.stale.append(c.key)
        self.wanted.add(c.key)
        return False

    def _respec(self, c: _Group) -> None:
        """Not admitted yet and the LWS now asks for something else (another LocalQueue,
        other templates, another priority): Kueue's pod sets cannot change, so the Workload
        is made again."""
        if (
            c.wl is not None
            and not c.reserved
            and c.group.staying
            and c.demand is not None
            and stale_spec(c.wl, c.st, c.lws, self.settings.priorities, self.settings.claim_book)
        ):
            self.stale.append(c.key)
            c.wl, c.conds, c.admitted, c.admission = None, {}, False, {}

    def _behind_lower(self, c: _Group, waiting: Waiting | None) -> bool:
        """A lower group of the same spec waits: this one must not go first. Its waiting
        Workload goes once Kueue found the lower one inadmissible (it could not fit either),
        and so does an admitted one, whose quota then goes to the lower group."""
        index = c.st.key.index
        if (
            c.wl is None
            or not c.group.staying
            or c.adopting
            or waiting is None
            or not waiting.ahead_of(index, c.wl)
            or c.ungated
            or not ((waiting.evaluated and unreserved(c.wl)) or c.admitted)
        ):
            return False
        if waiting.evaluated:
            self.stale.append(c.key)
        said = (
            f"group {index} waits for group {waiting.index} of its LeaderWorkerSet: "
            "Kueue admits an LeaderWorkerSet's groups lowest index first"
        )
        self.statuses.append(RecordStatus(c.st, c.st.record, False, WAITING_FOR_KUEUE, said))
        return True

    def _new_demand(self, c: _Group) -> bool:
        """Admitted, and its templates now ask another demand: only its new pods wait; once
        only they are left, the old Workload goes (its quota back to Kueue) and a new one,
        for the new demand, is made on the next pass."""
        if not (c.admitted and c.group.staying and c.wl is not None and c.demand is not None):
            return False
        c.waits_new = new_pods(c.wl, c.record, c.demand, c.group.members)
        if not (c.waits_new and all(p.name in c.waits_new for p in c.group.members if p.live)):
            return False
        self.stale.append(c.key)
        said = (
            f"group {c.st.key.index} waits: its LeaderWorkerSet's templates changed its "
            f"demand to {format_resources(c.demand.total)}; its old Workload is "
            "deleted and a new one is made for Kueue to admit"
        )
        self.statuses.append(RecordStatus(c.st, c.st.record, False, "TemplateChanged", said))
        return True

    def _retry(self, c: _Group) -> bool:
        """Waiting out the delay after its Workload could never fit (as it was); or its
        Workload can never fit the nodes of its flavor: deleted, so that it holds no quota,
        and made again after a delay that doubles each time."""
        s, index = self.settings, c.st.key.index
        never = never_fits(c.wl) if c.wl is not None and c.reserved and not c.admitted else None
        if _backing_off(c.record, s.now) and (c.wl is None or never is not None):
            if c.wl is not None:
                self.stale.append(c.key)
            before = condition(c.record, ADMITTED)
            reason, message = str(before.get("reason") or ""), str(before.get("message") or "")
            self.statuses.append(RecordStatus(c.st, c.st.record, False, reason, message))
            return True
        if never is None or not c.group.staying or c.demand is None:
            return False
        retries = recorded_retries(c.record) + 1
        delay = retry_delay(retries, s.retry_seconds, s.retry_max_seconds)
        when = (s.now or datetime.fromtimestamp(0, UTC)) + timedelta(seconds=delay)
        self.stale.append(c.key)
        said = (
            f"group {index} {never}; its Workload is deleted so that it holds no quota, "
            f"and made again in {delay} s"
        )
        reason = "NoMatchingNode" if never.startswith(NO_NODE_FITS) else "NodesTooSmall"
        retry_at = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        self.statuses.append(
            RecordStatus(c.st, c.st.record, False, reason, said, retry_at=retry_at, retries=retries)
        )
        return True

    def _make_workload(self, c: _Group, offers: Offers) -> bool:
        """No Workload: made now, unless the lower groups of its LWS go first."""
        if (
            c.wl is not None
            or not c.group.staying
            or c.demand is None
            or c.key in self.stale
            or is_terminating(c.record)
        ):
            return False
        if not (c.adopting or offers.take()):
            said = (
                f"group {c.st.key.index} waits: its Workload is made once the lower groups of its "
                "LeaderWorkerSet are admitted (Kueue admits them lowest index first)"
            )
            self.statuses.append(RecordStatus(c.st, c.st.record, False, WAITING_FOR_KUEUE, said))
            return True
        self.create_workloads.append((c.st, str(meta(c.record).get("uid") or "")))
        return False

    def _adopt(self, c: _Group) -> bool:
        """Running on another backend's admission: kept, and so are its old pods."""
        if not c.adopting:
            return False
        let_through = old_pods(c.record, c.group.present)
        self.ungate.extend(Ungate(c.ns, p, {}, (c.mark,)) for p in sorted(let_through))
        index = c.st.key.index
        why = waiting_reason(c.wl, index, c.st.pool)[1] if c.wl is not None else "its Workload is being made"
        said = adopting_message(index, c.st.record, why)
        self.statuses.append(RecordStatus(c.st, c.st.record, True, ADOPTING_REASON, said))
        return True

    def _given_back(self, c: _Group) -> bool:
        """Given back for its own pod not as admitted, and waiting out its retry: its running
        pods stop, and once none is left its Workload goes, so that Kueue's quota comes back
        only when nothing runs on it. The record keeps its words."""
        said = condition(c.record, ADMITTED)
        reason = said.get("reason")
        if not (
            said.get("status") == "False"
            and reason in (Reason.NOT_AS_ADMITTED, Reason.ADMISSION_TIMEOUT)
            and _backing_off(c.record, self.settings.now)
        ):
            return False
        running = self._running(c)
        if running:
            self.stop.extend((c.ns, pod) for pod in sorted(running))
        elif c.wl is not None:
            self.stale.append(c.key)
        self.strangers.pop(c.st.key, None)  # its pods left as they go keep the give-back's words
        message = str(said.get("message") or "")
        self.statuses.append(RecordStatus(c.st, c.st.record, False, Reason(str(reason)), message))
        return True

    def _pods(self, c: _Group) -> bool:
        """Admitted: its gated pods let through onto the flavor's nodes (not new pods that
        wait, nor pods not as admitted); given back once one of its own pods has not been as
        admitted for the grace (True: its record's words are said). Not admitted: its running
        pods stop (those let through whose labels were changed since included); evicted with
        none left: its quota reservation is cleared."""
        if c.admitted and c.group.staying:
            held: set[str] = set()
            if c.wl is not None and c.demand is not None and not demand_changed(c.wl, c.demand):
                # A hand-edited StatefulSet's pods.
                s = self.settings
                kept, off = conforming(
                    c.st, c.group.present, c.lws, c.demand, s.default_priority, s.claim_book
                )
                if off:
                    self.strangers[c.st.key] = [*self.strangers.get(c.st.key, []), *off]
                    if self._give_back(c, off):
                        return True
                held = set(c.st.gated) - set(kept.gated)  # not as admitted, or its claims not made yet
                if not off and not c.waits_new:
                    self.passable.append((c.st.key, c.lws, c.demand, c.wl))
            for p in c.group.present:
                if not p.gated or p.name in c.waits_new or p.name in held:
                    continue
                role = "leader" if p.worker == 0 else "worker"
                rank = max(p.worker - 1, 0)  # its place in its pod set
                labels, tolerations = flavor_steering(c.wl or {}, self.settings.flavors, role, rank)
                self.ungate.append(Ungate(c.ns, p.name, labels, (*tolerations, c.mark)))
        elif not c.admitted and (running := self._running(c)):
            self.stop.extend((c.ns, pod) for pod in sorted(running))
        elif not c.admitted and c.reserved and _true(c.conds, EVICTED):
            self.clear.append(c.key)
        return False

    def _timed_out(self, c: _Group) -> bool:
        """Admitted and not whole by its deadline: given back as for a pod not as admitted
        (``core.admission.timeout``); before the deadline, the pass looks again then."""
        s = self.settings
        if not (c.admitted and c.group.staying) or c.demand is None:
            return False
        delays = (s.admission_timeout, s.retry_seconds, s.retry_max_seconds)
        due = timed_out(c.group, c.lws, c.record, c.demand, s.now, *delays)
        if isinstance(due, datetime):
            self.look_again = due if self.look_again is None else min(self.look_again, due)
        if not isinstance(due, TimedOut):
            return False
        self.stop.extend((c.ns, pod) for pod in sorted(self._running(c)))
        said = (Reason.ADMISSION_TIMEOUT, due.message)
        self.statuses.append(
            RecordStatus(c.st, c.st.record, False, *said, retry_at=due.retry_at, retries=due.retries)
        )
        return True

    def _running(self, c: _Group) -> set[str]:
        """The group's pods let through and live, and those charged to its record (their
        labels changed since): what must stop before its admission is let go."""
        return {p.name for p in c.ungated} | set(charged(c.record, self.settings.charges))

    def _give_back(self, c: _Group, off: Sequence[Stranger]) -> bool:
        """Its own pod not as admitted for the grace: given back (its running pods stop now,
        its Workload once they are gone: ``_given_back``), tried again after a delay that
        doubles each time; before the grace, the pass looks again when it ends."""
        s = self.settings
        due = overdue(c.group.present, off, s.now)
        if isinstance(due, datetime):
            self.look_again = due if self.look_again is None else min(self.look_again, due)
        if not isinstance(due, Departed):
            return False
        retries = recorded_retries(c.record) + 1
        delay = retry_delay(retries, s.retry_seconds, s.retry_max_seconds)
        when = (s.now or datetime.fromtimestamp(0, UTC)) + timedelta(seconds=delay)
        message = departed_message(c.st.key.index, due, delay)
        self.strangers.pop(c.st.key, None)  # the give-back's own words say it
        running = self._running(c)
        self.stop.extend((c.ns, pod) for pod in sorted(running))
        retry_at = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        self.statuses.append(
            RecordStatus(
                c.st, c.st.record, False, Reason.NOT_AS_ADMITTED, message, retry_at=retry_at, retries=retries
            )
        )
        return True

    def _say(self, c: _Group) -> None:
        """The record's words: why it waits, or by which ClusterQueue and flavor it runs."""
        index, demand = c.st.key.index, c.st.demand
        if isinstance(demand, InvalidDemand) and not c.admitted:
            said = f"group {index} waits: {demand.message}"
            self.statuses.append(RecordStatus(c.st, c.st.record, False, "InvalidSpec", said))
        elif c.admitted:
            self.statuses.append(_admitted_status(c))
        else:
            reason, message = waiting_reason(c.wl, index, c.st.pool)
            self.statuses.append(RecordStatus(c.st, c.st.record, False, reason, message))


def _admitted_status(c: _Group) -> RecordStatus:
    summary = format_resources(c.demand.total) if c.demand is not None else ""
    said = f"group {c.st.key.index} admitted by Kueue: {admitted_where(c.admission)}" + (
        f", {summary}" if summary else ""
    )
    if c.waits_new:
        n = len(c.waits_new)
        count = f"{n} new pod waits" if n == 1 else f"{n} new pods wait"
        said += (
            f"; its LeaderWorkerSet's templates changed its demand: its {count} "
            "for its old ones to go, then it is queued again"
        )
    # The revision its pods run under this Workload, unless new pods wait.
    revision = None if c.waits_new else c.st.revision or None
    placed = c.demand is not None and whole(c.group.present, c.demand)
    return RecordStatus(c.st, c.st.record, True, "Admitted", said, revision, placed=placed)


def _true(conds: Mapping[str, Mapping[str, Any]], kind: str) -> bool:
    return conds.get(kind, {}).get("status") == "True"


def _backing_off(record: Mapping[str, Any], now: datetime | None) -> bool:
    """Is the group waiting out the delay after its Workload could never fit?"""
    return now is not None and now < parse_time(as_map(record.get("status")).get("retryAt"))
