"""What the ``pools`` backend writes for what it decided, and when it writes nothing.

Why this exists: a decision is only as good as the write that carries it out, and the
rules of those writes are decisions too: which sentence a record says when its group is
admitted, which status patch admits it, when a waiting group's message is rewritten (not
when only its numbers changed, more than once per ``MESSAGE_REFRESH_SECONDS``), when an
admitted record's reason is restated, and what a Pool's status says (unchanged: no
write). They live here, pure and table-tested, so the controller only sends them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gatekeeper.core.admission.messages import plural
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.decide import Actions, Admit, Snapshot, WaitStatus
from gatekeeper.core.backends.pools.giveback import give_back_status
from gatekeeper.core.backends.pools.planner import PoolStatus
from gatekeeper.core.kube.keys import (
    ADMITTED,
    INVALID_SPEC_REASON,
    POOL_PLURAL,
    POOL_VALID,
    RECORD_PLURAL,
    VALID_REASON,
)
from gatekeeper.core.kube.objects import (
    as_map,
    condition,
    index_by_key,
    meta,
    name_of,
    parse_time,
    replacing_map,
    resource_version,
    uid_of,
)
from gatekeeper.core.kube.quantity import format_amount, format_resources
from gatekeeper.core.model.gating import ungate_patch
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.record import admitted_condition, demand_status, new_record
from gatekeeper.core.writes.finalizers import FINALIZER_WRITES_PER_PASS, hold_patch, release_writes
from gatekeeper.core.writes.plan import EventsOnce, Mark, Memory, Op, Plan, Write, rfc3339

__all__ = [
    "MESSAGE_REFRESH_SECONDS",
    "PassInputs",
    "admit_status",
    "admitted_message",
    "hold_older",
    "plan_writes",
    "pool_status_patch",
    "restated_admission",
    "wait_status",
]

MAX_INTRUDERS_SHOWN = 20
"""Pods on a closed pool's nodes without an admission named in its status (all are counted)."""

MESSAGE_REFRESH_SECONDS = 60.0
"""A waiting group's message is rewritten at most this often when only its numbers change
(a new reason is written at once): 1,000 waiting groups in a churning pool are then at most
17 writes a second, not one per group per pass."""


def admitted_message(admit: Admit) -> str:
    """ "group 0 admitted into pool a: 2 nvidia.com/gpu on n0, n1" (and who waits for new nodes)."""
    group = admit.group
    placed = [n for n in admit.nodes if n]
    where = f" on {', '.join(placed)}" if placed else ""
    unplaced = len(admit.nodes) - len(placed)
    if unplaced:
        pods = "1 pod waits" if unplaced == 1 else f"{unplaced} pods wait"
        where += f"; {pods} Pending for new nodes (nodeFit QuotaOnly)"
    return f"group {group.key.index} admitted into pool {group.pool}: {admit.summary}{where}"


def admit_status(admit: Admit, before: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    """The record status patch that admits the group (to be written guarded by its resourceVersion)."""
    group, status = admit.group, as_map(before)
    return {
        **demand_status(group.pool, group.demand, status),
        "placement": replacing_map(
            status.get("placement"), {str(i): n for i, n in enumerate(admit.nodes) if n}
        ),
        "templateRevision": group.revision or None,
        "admittedAt": now,
        "retryAt": None,  # status.retries stays until the group is whole (the doubling)
        "conditions": [
            admitted_condition(True, ADMITTED, admitted_message(admit), _admitted(status), now),
        ],
    }


def _admitted(status: Mapping[str, Any]) -> Mapping[str, Any]:
    return condition({"status": status}, ADMITTED)


def wait_status(
    wait: WaitStatus,
    before: Mapping[str, Any] | None,
    now: str,
    *,
    since_last_write: float,
) -> tuple[dict[str, Any] | None, bool]:
    """(record status patch, whether the reason changed) for a waiting group.

    No patch when the record already says so, or when only the message's numbers changed
    and it was written less than ``MESSAGE_REFRESH_SECONDS`` ago (a later pass writes them).
    A changed reason is what deserves an Event.
    """
    status = as_map(before)
    current = _admitted(status)
    reason = str(wait.reason)
    same_reason = current.get("status") == "False" and current.get("reason") == reason
    if same_reason and (current.get("message") == wait.message or since_last_write < MESSAGE_REFRESH_SECONDS):
        return None, False
    patch = {
        **demand_status(wait.group.pool, wait.group.demand, status),
        "conditions": [admitted_condition(False, reason, wait.message, current, now)],
    }
    return patch, not same_reason


def restated_admission(
    record: Mapping[str, Any], reason: str, message: str, now: str
) -> dict[str, Any] | None:
    """The patch that rewrites an admitted record's reason and message (its status stays True);
    None when it is not admitted (any more) or already says so."""
    current = condition(record, ADMITTED)
    if current.get("status") != "True":
        return None
    if current.get("reason") == reason and current.get("message") == message:
        return None
    return {"conditions": [admitted_condition(True, reason, message, current, now)]}


def _describe(st: PoolStatus) -> str:
    text = st.describe()
    if st.stranded:
        # Admitted whole, but the scheduler cannot place some of their pods now (room taken by
        # pods the gatekeeper does not control, or placement rules it does not model). The
        # reservation stays: the pods bind when room frees; people are told which groups.
        text += "; admitted groups whose pods fit no node now: " + ", ".join(map(str, st.stranded))
    if st.intruders:
        # Pods that tolerate the pool's taint by themselves (core.admission.intruders): held against
        # its quota.
        shown = ", ".join(st.intruders[:MAX_INTRUDERS_SHOWN])
        more = len(st.intruders) - MAX_INTRUDERS_SHOWN
        text += (
            f"; {plural(len(st.intruders), 'pod')} on its closed nodes without an admission, held "
            f"against its quota: {shown}{f' and {more} more' if more > 0 else ''}"
        )
    return text


def _desired(st: PoolStatus | None, invalid: str | None) -> dict[str, Any] | None:
    if st is None:
        if invalid is None:
            return None
        return {
            "conditions": [
                {"type": POOL_VALID, "status": "False", "reason": INVALID_SPEC_REASON, "message": invalid}
            ]
        }
    return {
        "nodes": st.nodes,
        "quota": {r: format_amount(r, v) for r, v in sorted(st.quota.items())},
        "used": {r: format_amount(r, v) for r, v in sorted(st.used.items())},
        "free": {r: format_amount(r, v) for r, v in sorted(st.free.items())},
        "quotaSummary": format_resources(st.quota),
        "usedSummary": ", ".join(
            f"{format_amount(r, st.used.get(r, 0))}/{format_amount(r, q)} {r}"
            for r, q in sorted(st.quota.items())
        ),
        "admittedGroups": st.admitted,
        "waitingGroups": st.waiting + st.inadmissible,
        "strandedGroups": [str(key) for key in st.stranded],
        "intruders": list(st.intruders[:MAX_INTRUDERS_SHOWN]),
        "conditions": [
            {"type": POOL_VALID, "status": "True", "reason": VALID_REASON, "message": _describe(st)}
        ],
    }


def pool_status_patch(
    current: Mapping[str, Any] | None, st: PoolStatus | None, invalid: str | None, now: str
) -> dict[str, Any] | None:
    """The status a Pool should have (``st`` from the pass, or ``invalid``: why its spec cannot be
    read), as a patch over ``current``; None when it already says exactly that."""
    desired = _desired(st, invalid)
    if desired is None:
        return None
    status = as_map(current)
    comparable = {key: value for key, value in status.items() if key in desired}
    if "conditions" in comparable:
        comparable["conditions"] = [
            {ck: cv for ck, cv in as_map(c).items() if ck != "lastTransitionTime"}
            for c in comparable["conditions"]
        ]
    if comparable == desired:
        return None
    for cond in desired["conditions"]:
        cond["lastTransitionTime"] = now
    return desired


# ----- the whole pass as writes ----------------------------------------------------------


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
    snap, now = inputs.snapshot, rfc3339(inputs.now)
    lwss = index_by_key(snap.lwss)
    records = index_by_key(snap.records)
    pods = index_by_key(snap.pods)
    events = EventsOnce(inputs.memory, lwss)
    creating = {(g.key.namespace, g.record) for g in actions.create_records}
    follow: dict[tuple[str, str], list[Write]] = {}  # writes on records made in this pass
    main: list[Write] = []

    def on(group: GroupState) -> _On | None:
        key = (group.key.namespace, group.record)
        if key in creating:
            return _On(None, None, True)
        record = records.get(key)
        return _On(record.get("status"), resource_version(record), False) if record is not None else None

    def add(group: GroupState, write: Write) -> None:
        if write.body is None:
            return  # the record already says so
        key = (group.key.namespace, group.record)
        (follow.setdefault(key, []) if key in creating else main).append(write)

    def ungate(namespace: str, pod: str) -> Write | None:
        obj = pods.get((namespace, pod))
        steer = actions.steer.get((namespace, pod))
        ops = ungate_patch(obj, steer) if obj is not None and steer is not None else None
        return Write(Op.JSON_PATCH, "pods", namespace, pod, ops, tag="ungate") if ops else None

    for admit in actions.admit:
        group, where = admit.group, on(admit.group)
        if where is None:
            continue
        ns = group.key.namespace
        gates = [w for w in (ungate(ns, p) for p in group.gated) if w is not None]
        lws = lwss.get((ns, group.key.name))
        said = [events.always(lws, ADMITTED, admitted_message(admit))] if lws is not None else []
        stamps = [
            parse_time(meta(pods[(ns, p)]).get("creationTimestamp")) for p in group.pods if (ns, p) in pods
        ]
        write = Write(
            Op.MERGE_STATUS,
            RECORD_PLURAL,
            ns,
            group.record,
            admit_status(admit, where.before, now),
            guard=where.guard,
            guard_from_parent=where.new,
            then=(*gates, *said),
            tag="admit",
            labels=(group.pool,),
            measure=max(0.0, (inputs.now - min(stamps)).total_seconds()) if stamps else 0.0,
        )
        add(group, write)
    main.extend(w for w in (ungate(ns, pod) for ns, pod in actions.ungate) if w is not None)
    for give in actions.give_back:
        group = give.group
        record = records.get((group.key.namespace, group.record))
        if record is None:
            continue
        ns = group.key.namespace
        owner = lwss.get((ns, group.key.name))
        deletes = tuple(
            Write(Op.DELETE, "pods", ns, pod, uid=uid_of(pods.get((ns, pod))), tag="give-back-pod")
            for pod in give.pods
        )
        warn = (
            (events.always(owner, str(Reason.ADMISSION_TIMEOUT), give.message, warning=True),)
            if owner is not None
            else ()
        )
        main.append(
            Write(
                Op.MERGE_STATUS,
                RECORD_PLURAL,
                ns,
                group.record,
                give_back_status(give, record.get("status"), now),
                # The record first: only a group whose record no longer says Admitted loses
                # its pods, and the pods made again are born gated.
                guard=resource_version(record),
                then=(*deletes, *warn),
                tag="give-back",
                labels=(group.pool,),
            )
        )
    main.extend(
        Write(Op.DELETE, "pods", ns, pod, uid=uid_of(pods.get((ns, pod))), tag="give-back-pod")
        for ns, pod in actions.stop
    )
    main.extend(
        Write(Op.MERGE_STATUS, RECORD_PLURAL, ns, name, {"retries": None}, tag="settled")
        for ns, name in actions.settled
    )
    for wait in actions.waiting:
        group, where = wait.group, on(wait.group)
        if where is None:
            continue
        key = f"{group.key.namespace}/{group.record}"
        since = inputs.clock - inputs.memory.messages.get(key, float("-inf"))
        patch, changed = wait_status(wait, where.before, now, since_last_write=since)
        told = (
            events.once(group.key, str(wait.reason), wait.message, warning=wait.reason.permanent)
            if changed
            else None
        )
        write = Write(
            Op.MERGE_STATUS,
            RECORD_PLURAL,
            group.key.namespace,
            group.record,
            patch,
            # Guarded as an admission is: a record that changed since it was read (admitted by
            # a write whose watch event has not come yet) is never overwritten with False.
            guard=where.guard,
            guard_from_parent=where.new,
            then=(told,) if told is not None else (),
            marks=(Mark("message", key),),
            tag="wait",
        )
        add(group, write)
    for held in actions.held_invalid:
        # Its record keeps Admitted=True (the reservation stays); only people are told.
        told = events.once(held.group.key, str(held.reason), held.message, warning=True)
        main.extend([told] if told is not None else [])
    for held, warning in [
        *((h, False) for h in actions.held_changed),
        *((h, True) for h in actions.strangers),
    ]:
        group = held.group
        told = events.once(group.key, str(held.reason), held.message, warning=warning)
        restated = _restate(records, group.key.namespace, group.record, str(held.reason), held.message, now)
        if restated is not None:
            main.append(replace(restated, then=(told,) if told is not None else ()))
        elif told is not None:
            main.append(told)
    for ns, name, message in actions.restore_admitted:
        restated = _restate(records, ns, name, ADMITTED, message, now)
        main.extend([restated] if restated is not None else [])
    for ns, name, revision in actions.revisions:
        main.append(
            Write(Op.MERGE_STATUS, RECORD_PLURAL, ns, name, {"templateRevision": revision}, tag="revision")
        )

    release: list[Write] = []
    for ns, name in actions.release:
        if len(release) >= FINALIZER_WRITES_PER_PASS:
            break  # the rest in the next pass (these writes' watch events ask for it)
        release.extend(release_writes(RECORD_PLURAL, ns, name, records.get((ns, name)), tag="release"))
    create: list[Write] = []
    for group in actions.create_records:
        lws = lwss.get((group.key.namespace, group.key.name))
        if lws is not None:
            body = new_record(lws, group.key.index)
            then = tuple(follow.get((group.key.namespace, group.record), ()))
            create.append(
                Write(
                    Op.CREATE, RECORD_PLURAL, group.key.namespace, group.record, body, then=then, tag="create"
                )
            )
    pools: list[Write] = []
    for obj in snap.pools:
        name = name_of(obj)
        patch = pool_status_patch(
            obj.get("status"), actions.pools.get(name), actions.invalid_pools.get(name), now
        )
        if patch is not None:
            pools.append(Write(Op.MERGE_STATUS, POOL_PLURAL, None, name, patch, tag="pool"))
    pools.extend(hold_older(records, set(actions.release)))
    return (tuple(release), tuple(create), tuple(main), tuple(pools))


def hold_older(
    records: Mapping[tuple[str, str], Mapping[str, Any]], released: set[tuple[str, str]]
) -> list[Write]:
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


def _restate(
    records: Mapping[tuple[str, str], Mapping[str, Any]],
    ns: str,
    name: str,
    reason: str,
    message: str,
    now: str,
) -> Write | None:
    record = records.get((ns, name))
    patch = restated_admission(record, reason, message, now) if record is not None else None
    if record is None or patch is None:
        return None
    return Write(
        Op.MERGE_STATUS, RECORD_PLURAL, ns, name, patch, guard=resource_version(record), tag="restate"
    )
