"""What the ``volcano`` backend writes for what it decided, and when it writes nothing.

Why this exists: the order of a pass's writes (a PodGroup after the record that owns it,
gates lifted before the records say so) and whether a record must be rewritten are
decisions; they are made here, pure, as a plan (``plan_writes``) that
``controller.backends.volcano`` hands to ``act.execute``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gatekeeper.core.admission.deadline import placed
from gatekeeper.core.backends.volcano.decide import VolcanoActions, VolcanoSnapshot
from gatekeeper.core.backends.volcano.keys import POD_GROUP_PLURAL
from gatekeeper.core.backends.volcano.podgroup import new_pod_group
from gatekeeper.core.backends.volcano.status import VolcanoStatus
from gatekeeper.core.kube.keys import ADMITTED, RECORD_PLURAL
from gatekeeper.core.kube.objects import as_map, condition, index_by_key, uid_of
from gatekeeper.core.model.record import admitted_condition, demand_status, new_record
from gatekeeper.core.writes.finalizers import FINALIZER_WRITES_PER_PASS, release_writes
from gatekeeper.core.writes.group import record_writes, told_over_cap, ungate_writes
from gatekeeper.core.writes.plan import MESSAGE_REFRESH_SECONDS, EventsOnce, Memory, Op, Plan, Write, rfc3339

__all__ = ["plan_writes", "record_status_patch"]


def record_status_patch(
    st: VolcanoStatus, record: Mapping[str, Any], now: str, since_last_write: float = math.inf
) -> tuple[dict[str, Any] | None, bool]:
    """(status patch, whether the state or reason changed); no patch when the record says it
    all, nor when a waiting group's words alone changed less than ``MESSAGE_REFRESH_SECONDS``
    after this leader last wrote them."""
    current = condition(record, ADMITTED)
    before = as_map(record.get("status"))
    want = "True" if st.admitted else "False"
    same = current.get("status") == want and current.get("reason") == st.reason
    retry: dict[str, Any] = {"retryAt": st.retry_at, "retries": st.retries} if st.retries is not None else {}
    if st.admitted and before.get("retries") is not None:
        retry = {"retryAt": None, "retries": None}  # admitted again: the count starts afresh
    newly_placed = st.admitted and st.placed and not placed(record)
    if same and not retry and not newly_placed:
        if current.get("message") == st.message:
            return None, False
        if not st.admitted and since_last_write < MESSAGE_REFRESH_SECONDS:
            return None, False  # only its words: a later pass writes them
    status: dict[str, Any] = {
        **demand_status(st.group.pool, st.group.demand, before),
        "conditions": [admitted_condition(st.admitted, st.reason, st.message, current, now)],
        **retry,
    }
    if st.admitted and current.get("status") != "True":
        status["admittedAt"] = now
    if newly_placed:
        status["placedAt"] = now
    return status, not same


def plan_writes(
    actions: VolcanoActions,
    snap: VolcanoSnapshot,
    memory: Memory,
    now: datetime,
    *,
    clock: float | None = None,
) -> Plan:
    """Every write of one pass, in order: records released and made, PodGroups made and
    withdrawn; then gates lifted, and the records' words (with ``clock``, the pass's monotonic
    clock: a waiting record's numbers at most once per ``MESSAGE_REFRESH_SECONDS``); last,
    pods of groups given back."""
    stamp = rfc3339(now)
    lwss = index_by_key(snap.lwss)
    records = index_by_key(snap.records)
    pods = index_by_key(snap.pods)
    events = EventsOnce(memory, lwss, now)

    first: list[Write] = []
    for ns, name in actions.release:
        if len(first) >= FINALIZER_WRITES_PER_PASS:
            break  # the rest in the next pass (these writes' watch events ask for it)
        first.extend(release_writes(RECORD_PLURAL, ns, name, records.get((ns, name)), tag="release"))
    for group in actions.create_records:
        lws = lwss.get((group.key.namespace, group.key.name))
        if lws is not None:
            body = new_record(lws, group.key.index)
            first.append(
                Write(Op.CREATE, RECORD_PLURAL, group.key.namespace, group.record, body, tag="create")
            )
    for group, record_uid in actions.create_pod_groups:
        lws = lwss.get((group.key.namespace, group.key.name))
        if lws is None:
            continue
        try:
            body = new_pod_group(group, lws, record_uid)
        except ValueError:
            continue  # its demand is unreadable: the record says so
        name = str(body["metadata"]["name"])
        first.append(
            Write(
                Op.CREATE,
                POD_GROUP_PLURAL,
                group.key.namespace,
                name,
                body,
                tag="podgroup",
                labels=(group.pool,),
            )
        )

    for ns, name, uid in actions.withdraw_pod_groups:
        first.append(Write(Op.DELETE, POD_GROUP_PLURAL, ns, name, uid=uid or None, tag="withdraw"))
    for ns, name, uid in actions.retire_pod_groups:
        first.append(Write(Op.DELETE, POD_GROUP_PLURAL, ns, name, uid=uid or None, tag="retire"))

    second = [
        *ungate_writes(actions.ungate, pods),
        *record_writes(
            actions.statuses,
            records,
            events,
            record_status_patch,
            stamp,
            messages=memory.messages,
            clock=clock,
        ),
        *told_over_cap(actions.over_cap, events, snap.max_records_per_namespace),
    ]
    # Pods of groups given back stop after their record says so, each by its UID.
    third = [
        Write(Op.DELETE, "pods", ns, pod, uid=uid_of(pods.get((ns, pod))), tag="stop")
        for ns, pod in actions.stop
    ]
    return (tuple(first), tuple(second), tuple(third))
