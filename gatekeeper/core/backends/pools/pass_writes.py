"""A whole ``pools`` pass as writes: what ``decide`` returned, in the order it must happen.

Why this exists: a pass's decisions hang together through their writes. A record made in
this pass is admitted only under the resourceVersion its creation returned, a group's
gates are lifted only after its record says ``Admitted=True``, a record given back loses
its pods only once it no longer says so, and finalizers are released a bounded number a
pass. ``plan_writes`` keeps those rules in one place, as named stages of one small writer,
each turning one kind of action into writes; ``writes`` holds the single patches they use.

Called by the pools controller after each pass's ``decide``, and by the table tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gatekeeper.core.admission.stopping import PODS_NOT_STOPPED
from gatekeeper.core.backends.pools.decide import Actions, Admit, Snapshot, WaitStatus
from gatekeeper.core.backends.pools.giveback import GiveBack, give_back_status
from gatekeeper.core.backends.pools.preempting import PREEMPTING
from gatekeeper.core.backends.pools.writes import (
    admit_status,
    admitted_message,
    pool_status_patch,
    restated_admission,
    restated_give_back,
    wait_status,
)
from gatekeeper.core.kube.keys import ADMITTED, POOL_PLURAL, RECORD_PLURAL
from gatekeeper.core.kube.objects import index_by_key, meta, parse_time, resource_version, uid_of
from gatekeeper.core.model.gating import ungate_patch
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.record import new_record
from gatekeeper.core.model.rollout import ROLLOUT_STALLED
from gatekeeper.core.writes.finalizers import FINALIZER_WRITES_PER_PASS, hold_patch, release_writes
from gatekeeper.core.writes.group import told_over_cap
from gatekeeper.core.writes.plan import EventsOnce, Mark, Memory, Op, Plan, Write, rfc3339

__all__ = ["PassInputs", "hold_older", "plan_writes"]

Records = Mapping[tuple[str, str], Mapping[str, Any]]


@dataclass(frozen=True)
class PassInputs:
    """What the writes of a pass are made from, besides what ``decide`` returned."""

    snapshot: Snapshot
    memory: Memory
    now: datetime
    """The time of the pass (record times, the admission wait metric)."""
    clock: float
    """The monotonic clock of the pass (the message refresh rule)."""


@dataclass(frozen=True)
class _On:
    """Where a write on a group's record goes: after the record's creation in this pass
    (guarded by what it returns), or on the record the snapshot holds (guarded by its version)."""

    before: Mapping[str, Any] | None
    guard: str | None
    new: bool


def plan_writes(actions: Actions, inputs: PassInputs) -> Plan:
    """Every write of one ``pools`` pass, in order: records released (their finalizer removed,
    then deleted), records made, then admissions (each record first, then its pods' gates and
    an Event), gates of admitted groups, what waiting and held groups say, and last the Pools'
    status and the finalizer on older records the pass keeps."""
    writer = _Writer(actions, inputs)
    for admit in actions.admit:
        writer.admit(admit)
    writer.main.extend(w for w in (writer.ungate(ns, pod) for ns, pod in actions.ungate) if w is not None)
    for give in actions.give_back:
        writer.give_back(give)
    writer.say_preempting()
    writer.stop_and_settle()
    for wait in actions.waiting:
        writer.wait(wait)
    writer.say_held()
    writer.say_not_stopped()
    writer.say_over_cap()
    writer.restate()
    return (writer.releases(), writer.creations(), tuple(writer.main), writer.pool_statuses())


class _Writer:
    """The writes of one pass as they are gathered: ``main`` in order, and the writes on
    records made in this pass kept apart (``follow``) to run once each record exists."""

    def __init__(self, actions: Actions, inputs: PassInputs) -> None:
        snap = inputs.snapshot
        self.actions, self.inputs, self.now = actions, inputs, rfc3339(inputs.now)
        self.lwss = index_by_key(snap.lwss)
        self.records: Records = index_by_key(snap.records)
        self.pods = index_by_key(snap.pods)
        self.events = EventsOnce(inputs.memory, self.lwss, inputs.now)
        self.creating = {(g.key.namespace, g.record) for g in actions.create_records}
        self.follow: dict[tuple[str, str], list[Write]] = {}
        self.main: list[Write] = []

    def on(self, group: GroupState) -> _On | None:
        key = (group.key.namespace, group.record)
        if key in self.creating:
            return _On(None, None, True)
        record = self.records.get(key)
        return _On(record.get("status"), resource_version(record), False) if record is not None else None

    def add(self, group: GroupState, write: Write) -> None:
        if write.body is None:
            return  # the record already says so
        key = (group.key.namespace, group.record)
        (self.follow.setdefault(key, []) if key in self.creating else self.main).append(write)

    def ungate(self, namespace: str, pod: str) -> Write | None:
        obj = self.pods.get((namespace, pod))
        steer = self.actions.steer.get((namespace, pod))
        ops = ungate_patch(obj, steer) if obj is not None and steer is not None else None
        return Write(Op.JSON_PATCH, "pods", namespace, pod, ops, tag="ungate") if ops else None

    def admit(self, admit: Admit) -> None:
        """The record admitted first, then its pods' gates and an Event."""
        group, where = admit.group, self.on(admit.group)
        if where is None:
            return
        ns = group.key.namespace
        gates = [w for w in (self.ungate(ns, p) for p in group.gated) if w is not None]
        lws = self.lwss.get((ns, group.key.name))
        told = self.events.always(lws, ADMITTED, admitted_message(admit)) if lws is not None else None
        said = [told] if told is not None else []
        stamps = [
            parse_time(meta(self.pods[(ns, p)]).get("creationTimestamp"))
            for p in group.pods
            if (ns, p) in self.pods
        ]
        write = Write(
            Op.MERGE_STATUS,
            RECORD_PLURAL,
            ns,
            group.record,
            admit_status(admit, where.before, self.now),
            guard=where.guard,
            guard_from_parent=where.new,
            then=(*gates, *said),
            tag="admit",
            labels=(group.pool,),
            measure=max(0.0, (self.inputs.now - min(stamps)).total_seconds()) if stamps else 0.0,
        )
        self.add(group, write)

    def give_back(self, give: GiveBack) -> None:
        """The record first: only a group whose record no longer says Admitted loses its
        pods, and the pods made again are born gated."""
        group = give.group
        ns = group.key.namespace
        record = self.records.get((ns, group.record))
        if record is None:
            return
        owner = self.lwss.get((ns, group.key.name))
        deletes = tuple(self._delete_pod(ns, pod) for pod in give.pods)
        told = self.events.always(owner, str(give.reason), give.message, warning=True) if owner else None
        warn = (told,) if told is not None else ()
        self.main.append(
            Write(
                Op.MERGE_STATUS,
                RECORD_PLURAL,
                ns,
                group.record,
                give_back_status(give, record.get("status"), self.now),
                guard=resource_version(record),
                then=(*deletes, *warn),
                tag="give-back",
                labels=(group.pool, str(give.reason)),
            )
        )

    def say_preempting(self) -> None:
        """An Event on the LWS of each group that preempted others this pass (once: its victims
        are not candidates again)."""
        for one in self.actions.preempting:
            lws = self.lwss.get((one.group.key.namespace, one.group.key.name))
            told = self.events.always(lws, PREEMPTING, one.message) if lws is not None else None
            if told is not None:
                self.main.append(told)

    def _delete_pod(self, ns: str, pod: str) -> Write:
        return Write(Op.DELETE, "pods", ns, pod, uid=uid_of(self.pods.get((ns, pod))), tag="give-back-pod")

    def stop_and_settle(self) -> None:
        """Pods to stop, by UID; records of groups now whole: retries settled, placed from now."""
        self.main.extend(self._delete_pod(ns, pod) for ns, pod in self.actions.stop)
        self.main.extend(
            Write(
                Op.MERGE_STATUS,
                RECORD_PLURAL,
                ns,
                name,
                {"retries": None, "placedAt": self.now},
                tag="settled",
            )
            for ns, name in self.actions.settled
        )

    def wait(self, wait: WaitStatus) -> None:
        """What a waiting group says: rewritten on a new reason at once, on new numbers at most
        once per refresh; guarded as an admission is, so a record admitted by a write whose
        watch event has not come yet is never overwritten with False."""
        group, where = wait.group, self.on(wait.group)
        if where is None:
            return
        key = f"{group.key.namespace}/{group.record}"
        since = self.inputs.clock - self.inputs.memory.messages.get(key, float("-inf"))
        patch, changed = wait_status(wait, where.before, self.now, since_last_write=since)
        told = (
            self.events.once(group.key, str(wait.reason), wait.message, warning=wait.reason.permanent)
            if changed
            else None
        )
        if wait.stalls:  # the LWS's rolling update waits for this group: a Warning of its own
            stalled = self.events.once(group.key, ROLLOUT_STALLED, wait.message, warning=True)
            self.main.extend([stalled] if stalled is not None else [])
        write = Write(
            Op.MERGE_STATUS,
            RECORD_PLURAL,
            group.key.namespace,
            group.record,
            patch,
            guard=where.guard,
            guard_from_parent=where.new,
            then=(told,) if told is not None else (),
            marks=(Mark("message", key),),
            tag="wait",
        )
        self.add(group, write)

    def say_held(self) -> None:
        """Held groups: an unreadable one keeps Admitted=True (the reservation stays) and only
        people are told; a changed one or a stranger's claim has its record's reason restated."""
        for held in self.actions.held_invalid:
            told = self.events.once(held.group.key, str(held.reason), held.message, warning=True)
            self.main.extend([told] if told is not None else [])
        for held, warning in [
            *((h, False) for h in self.actions.held_changed),
            *((h, True) for h in self.actions.strangers),
        ]:
            group = held.group
            told = self.events.once(group.key, str(held.reason), held.message, warning=warning)
            restated = _restate(
                self.records, group.key.namespace, group.record, str(held.reason), held.message, self.now
            )
            if restated is not None:
                self.main.append(replace(restated, then=(told,) if told is not None else ()))
            elif told is not None:
                self.main.append(told)

    def say_not_stopped(self) -> None:
        """Given-back groups whose pods still run: their record says why the quota stays held,
        and people are told once (a Warning Event)."""
        for held in self.actions.not_stopped:
            group = held.group
            ns = group.key.namespace
            record = self.records.get((ns, group.record))
            patch = restated_give_back(record, held.message, self.now) if record is not None else None
            told = self.events.once(group.key, PODS_NOT_STOPPED, held.message, warning=True)
            if record is not None and patch is not None:
                self.main.append(
                    Write(
                        Op.MERGE_STATUS, RECORD_PLURAL, ns, group.record, patch,
                        guard=resource_version(record), then=(told,) if told is not None else (),
                        tag="not-stopped",
                    )
                )  # fmt: skip
            elif told is not None:
                self.main.append(told)

    def say_over_cap(self) -> None:
        """The LWS of a group past its namespace's record cap is told, once per LWS change."""
        cap = self.inputs.snapshot.max_records_per_namespace
        self.main.extend(told_over_cap(self.actions.over_cap, self.events, cap))

    def restate(self) -> None:
        """Records whose admission is said again, and template revisions recorded."""
        for ns, name, message in self.actions.restore_admitted:
            restated = _restate(self.records, ns, name, ADMITTED, message, self.now)
            self.main.extend([restated] if restated is not None else [])
        self.main.extend(
            Write(Op.MERGE_STATUS, RECORD_PLURAL, ns, name, {"templateRevision": revision}, tag="revision")
            for ns, name, revision in self.actions.revisions
        )

    def releases(self) -> tuple[Write, ...]:
        """Records released, at most ``FINALIZER_WRITES_PER_PASS`` writes a pass (the rest in
        the next pass, which these writes' watch events ask for)."""
        release: list[Write] = []
        for ns, name in self.actions.release:
            if len(release) >= FINALIZER_WRITES_PER_PASS:
                break
            release.extend(
                release_writes(RECORD_PLURAL, ns, name, self.records.get((ns, name)), tag="release")
            )
        return tuple(release)

    def creations(self) -> tuple[Write, ...]:
        """Records made, each followed by the writes on it gathered in this pass."""
        create: list[Write] = []
        for group in self.actions.create_records:
            lws = self.lwss.get((group.key.namespace, group.key.name))
            if lws is None:
                continue
            body = new_record(lws, group.key.index)
            then = tuple(self.follow.get((group.key.namespace, group.record), ()))
            create.append(
                Write(
                    Op.CREATE, RECORD_PLURAL, group.key.namespace, group.record, body, then=then, tag="create"
                )
            )
        return tuple(create)

    def pool_statuses(self) -> tuple[Write, ...]:
        """Each Pool's status where it changed, then the finalizer on older records kept."""
        pools: list[Write] = []
        for name, status in self.inputs.snapshot.pools.statuses.items():
            patch = pool_status_patch(
                status,
                self.actions.pools.get(name),
                self.actions.invalid_pools.get(name),
                self.now,
                self.inputs.snapshot.pools.generations.get(name, 0),
            )
            if patch is not None:
                pools.append(Write(Op.MERGE_STATUS, POOL_PLURAL, None, name, patch, tag="pool"))
        pools.extend(hold_older(self.records, set(self.actions.release)))
        return tuple(pools)


def hold_older(records: Records, released: set[tuple[str, str]]) -> list[Write]:
    """Records made before the gatekeeper held them, kept by this pass: given the finalizer,
    so that from now on they too stay while their group's pods live (at most
    ``FINALIZER_WRITES_PER_PASS`` a pass)."""
    writes: list[Write] = []
    for (ns, name), record in sorted(records.items()):
        ops = hold_patch(record) if (ns, name) not in released else None
        if ops is not None:
            writes.append(Write(Op.JSON_PATCH, RECORD_PLURAL, ns, name, ops, tag="hold"))
            if len(writes) >= FINALIZER_WRITES_PER_PASS:
                break
    return writes


def _restate(records: Records, ns: str, name: str, reason: str, message: str, now: str) -> Write | None:
    record = records.get((ns, name))
    patch = restated_admission(record, reason, message, now) if record is not None else None
    if record is None or patch is None:
        return None
    return Write(
        Op.MERGE_STATUS, RECORD_PLURAL, ns, name, patch, guard=resource_version(record), tag="restate"
    )
