"""What the ``kueue`` backend writes for what it decided, and when it writes nothing.

Why this exists: the record mirrors the group's Workload; whether a pass must rewrite it
(another state, reason or message, a revision to note, a never-fit retry to count or to
clear) is a decision, and so is the order of a pass's writes (a Workload is made after
the record that owns it, a Workload's release before its record's). They are made here,
pure, as a plan (``plan_writes``); the controller only executes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gatekeeper.core.admission.deadline import placed
from gatekeeper.core.backends.kueue.decide import KueueActions, KueueSnapshot
from gatekeeper.core.backends.kueue.status import RecordStatus
from gatekeeper.core.backends.kueue.workload import clear_admission_status, new_workload
from gatekeeper.core.kube.keys import ADMITTED, RECORD_PLURAL, WORKLOAD_PLURAL
from gatekeeper.core.kube.objects import as_map, condition, index_by_key, resource_version, uid_of
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.record import admitted_condition, demand_status, new_record
from gatekeeper.core.writes.finalizers import FINALIZER_WRITES_PER_PASS, hold_patch, release_writes
from gatekeeper.core.writes.group import record_writes, told_over_cap, ungate_writes
from gatekeeper.core.writes.plan import MESSAGE_REFRESH_SECONDS, EventsOnce, Memory, Op, Plan, Write, rfc3339

__all__ = ["plan_writes", "record_status_patch"]


def record_status_patch(
    st: RecordStatus, record: Mapping[str, Any], now: str, since_last_write: float = math.inf
) -> tuple[dict[str, Any] | None, bool]:
    """(status patch, whether the state or reason changed) for the record of ``st.group``;
    no patch when the record already says all of it, nor when a waiting group's words alone
    changed (Kueue's numbers move with every admission around it) less than
    ``MESSAGE_REFRESH_SECONDS`` after this leader last wrote them."""
    before = as_map(record.get("status"))
    current = condition(record, ADMITTED)
    want = "True" if st.admitted else "False"
    same = current.get("status") == want and current.get("reason") == st.reason
    noted = st.revision is None or before.get("templateRevision") == st.revision
    retry: dict[str, Any] = {"retryAt": st.retry_at, "retries": st.retries} if st.retries is not None else {}
    if st.admitted and before.get("retries") is not None:
        retry = {"retryAt": None, "retries": None}  # admitted at last: the count starts afresh
    newly_placed = st.admitted and st.placed and not placed(record)
    if same and noted and not retry and not newly_placed:
        if current.get("message") == st.message:
            return None, False
        if not st.admitted and since_last_write < MESSAGE_REFRESH_SECONDS:
            return None, False  # only its words: a later pass writes them
    status: dict[str, Any] = {
        **demand_status(st.group.pool, st.group.demand, before),
        "workload": st.workload,
        "conditions": [admitted_condition(st.admitted, st.reason, st.message, current, now)],
    }
    if st.admitted and current.get("status") != "True":
        status["admittedAt"] = now
    if newly_placed:
        status["placedAt"] = now
    if st.revision is not None:
        status["templateRevision"] = st.revision
    status.update(retry)
    return status, not same


def plan_writes(
    actions: KueueActions, snap: KueueSnapshot, memory: Memory, now: datetime, *, clock: float | None = None
) -> Plan:
    """Every write of one ``kueue`` pass, in order: groups released (Workload, then record),
    stale Workloads deleted, records made (each with its Workload, owned by the record just
    made), Workloads made; then gates lifted onto their flavors, pods of groups that lost
    their admission stopped, evicted Workloads' quota given back, and the records' words
    (with ``clock``, the pass's monotonic clock: a waiting record's numbers at most once per
    ``MESSAGE_REFRESH_SECONDS``)."""
    stamp = rfc3339(now)
    lwss = index_by_key(snap.lwss)
    records = index_by_key(snap.records)
    workloads = index_by_key(snap.workloads)
    pods = index_by_key([*snap.bound_pods, *snap.pods])  # a pod stopped by its charge may be unlabelled
    events = EventsOnce(memory, lwss, now)

    first: list[Write] = []
    for ns, name in actions.release:
        if len(first) >= FINALIZER_WRITES_PER_PASS:
            break  # the rest in the next pass (these writes' watch events ask for it)
        record, wl = records.get((ns, name)), workloads.get((ns, name))
        drop = release_writes(RECORD_PLURAL, ns, name, record, tag="release") if record is not None else ()
        first.extend(release_writes(WORKLOAD_PLURAL, ns, name, wl, tag="release", then=drop))
    for ns, name in actions.delete_workloads:
        first.extend(release_writes(WORKLOAD_PLURAL, ns, name, workloads.get((ns, name)), tag="stale"))
    for group in actions.create_records:
        lws = lwss.get((group.key.namespace, group.key.name))
        if lws is None:
            continue
        then: tuple[Write, ...] = ()
        deferred = (group.key.namespace, group.record) in actions.deferred
        if isinstance(group.demand, GroupDemand) and not deferred:  # its Workload at once
            workload = new_workload(group, lws, "", snap.priorities, snap.claim_book)
            then = (_create_workload(group, workload, owner_from_parent=True),)
        body = new_record(lws, group.key.index)
        first.append(
            Write(Op.CREATE, RECORD_PLURAL, group.key.namespace, group.record, body, then=then, tag="create")
        )
    for group, record_uid in actions.create_workloads:
        lws = lwss.get((group.key.namespace, group.key.name))
        if lws is not None and record_uid:
            first.append(
                _create_workload(
                    group, new_workload(group, lws, record_uid, snap.priorities, snap.claim_book)
                )
            )

    second = ungate_writes(actions.ungate, pods)
    second.extend(
        Write(Op.DELETE, "pods", ns, pod, uid=uid_of(pods.get((ns, pod))), tag="stop")
        for ns, pod in actions.stop
    )
    for ns, name in actions.clear_admission:
        wl = workloads.get((ns, name))
        if wl is not None:
            body = clear_admission_status(wl, stamp)
            second.append(
                Write(
                    Op.MERGE_STATUS,
                    WORKLOAD_PLURAL,
                    ns,
                    name,
                    body,
                    guard=resource_version(wl),
                    tag="give-back",
                    labels=(str(as_map(wl.get("spec")).get("queueName") or ""),),
                )
            )
    second.extend(
        record_writes(
            actions.statuses,
            records,
            events,
            record_status_patch,
            stamp,
            messages=memory.messages,
            clock=clock,
        )
    )
    second.extend(told_over_cap(actions.over_cap, events, snap.max_records_per_namespace))
    return (tuple(first), tuple(second), tuple(_hold_older(actions, records, workloads)))


def _hold_older(
    actions: KueueActions,
    records: Mapping[tuple[str, str], Mapping[str, Any]],
    workloads: Mapping[tuple[str, str], Mapping[str, Any]],
) -> list[Write]:
    """Records and Workloads made before the gatekeeper held them, kept by this pass: given
    the finalizer (at most ``FINALIZER_WRITES_PER_PASS`` a pass)."""
    going = {*actions.release, *actions.delete_workloads}
    writes: list[Write] = []
    for plural, objs in ((RECORD_PLURAL, records), (WORKLOAD_PLURAL, workloads)):
        for (ns, name), obj in sorted(objs.items()):
            ops = hold_patch(obj) if (ns, name) not in going else None
            if ops is not None and len(writes) < FINALIZER_WRITES_PER_PASS:
                writes.append(Write(Op.JSON_PATCH, plural, ns, name, ops, tag="hold"))
    return writes


def _create_workload(
    group: GroupState, workload: dict[str, Any], *, owner_from_parent: bool = False
) -> Write:
    return Write(
        Op.CREATE,
        WORKLOAD_PLURAL,
        group.key.namespace,
        group.record,
        workload,
        owner_from_parent=owner_from_parent,
        tag="workload",
        labels=(group.pool,),
    )
