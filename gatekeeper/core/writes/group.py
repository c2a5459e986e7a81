"""The writes that every backend's group lifecycle shares: gates lifted, and each record's
words with the Event that tells them, once.

Why this exists: a backend whose quota authority lives outside the gatekeeper (``kueue``
and the others) decides its own objects (Workloads, PodGroups), but lifts a
group's gates and says on the group's record why it waits or that it was admitted in the
same way: one JSON patch per pod (``core.model.gating.ungate_patch``), one status patch per record
guarded by its resourceVersion, an Event only when the state or the reason changed
(``core.writes.plan.EventsOnce``). Called by those backends' ``plan_writes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from gatekeeper.core.admission.record_cap import RECORD_LIMIT_REACHED, over_cap_message
from gatekeeper.core.kube.keys import ADMITTED, RECORD_PLURAL
from gatekeeper.core.kube.objects import condition, resource_version
from gatekeeper.core.model.gating import Ungate, ungate_patch
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.rollout import ROLLOUT_STALLED
from gatekeeper.core.writes.plan import EventsOnce, Mark, Op, Write

__all__ = ["GroupStatus", "record_writes", "told_over_cap", "ungate_writes"]

Key = tuple[str, str]


class GroupStatus(Protocol):
    """What a backend's decision says of one group this pass."""

    @property
    def group(self) -> GroupState: ...
    @property
    def admitted(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def warning(self) -> bool: ...
    @property
    def stalls(self) -> bool:
        """A surge group its LWS's rolling update waits for: the LWS is warned (``ROLLOUT_STALLED``)."""
        ...


S = TypeVar("S", bound=GroupStatus)


def ungate_writes(ungates: Iterable[Ungate], pods: Mapping[Key, Mapping[str, Any]]) -> list[Write]:
    """One patch per pod that still carries the gate (a pod gone or ungated needs none)."""
    out: list[Write] = []
    for one in ungates:
        pod = pods.get((one.namespace, one.pod))
        ops = ungate_patch(pod, one) if pod is not None else None
        if ops is not None:
            out.append(Write(Op.JSON_PATCH, "pods", one.namespace, one.pod, ops, tag="ungate"))
    return out


def record_writes(
    statuses: Iterable[S],
    records: Mapping[Key, Mapping[str, Any]],
    events: EventsOnce,
    patch: Callable[[S, Mapping[str, Any], str, float], tuple[dict[str, Any] | None, bool]],
    stamp: str,
    *,
    messages: Mapping[str, float] | None = None,
    clock: float | None = None,
) -> list[Write]:
    """Each record's status patch (``patch`` says what, and whether the state or the reason
    changed, given the seconds since this leader last wrote the record's words), tagged
    ``admitted`` when it admits the group, with its Event when that changed; an admission is
    always told, a waiting reason once per LWS and reason, and a rolling update stalled by
    a surge group once per LWS (``ROLLOUT_STALLED``). With ``clock`` (the pass's
    monotonic clock) and ``messages`` (``Memory.messages``) each write is remembered, so that
    the words' numbers alone are rewritten at most once per ``MESSAGE_REFRESH_SECONDS``;
    without, the seconds are infinite (every change is written)."""
    out: list[Write] = []
    for st in statuses:
        group = st.group
        record = records.get((group.key.namespace, group.record))
        if record is None:
            continue
        key = f"{group.key.namespace}/{group.record}"
        since = math.inf
        if clock is not None and messages is not None:
            since = clock - messages.get(key, -math.inf)
        status, changed = patch(st, record, stamp, since)
        if status is None:
            continue
        told = (
            events.once(group.key, st.reason, st.message, warning=st.warning, force=st.admitted)
            if changed
            else None
        )
        was_admitted = condition(record, ADMITTED).get("status") == "True"
        out.append(
            Write(
                Op.MERGE_STATUS,
                RECORD_PLURAL,
                group.key.namespace,
                group.record,
                status,
                guard=resource_version(record),
                then=(told,) if told is not None else (),
                marks=(Mark("message", key),) if clock is not None else (),
                tag="admitted" if st.admitted and not was_admitted else "status",
                labels=(group.pool,),
            )
        )
        stalled = events.once(group.key, ROLLOUT_STALLED, st.message, warning=True) if st.stalls else None
        out.extend([stalled] if stalled is not None else [])
    return out


def told_over_cap(groups: Iterable[GroupState], events: EventsOnce, cap: int) -> list[Write]:
    """The Warning Event on the LWS of each group past the cap, once per LWS change."""
    out: list[Write] = []
    for group in groups:
        told = events.once(group.key, RECORD_LIMIT_REACHED, over_cap_message(group, cap), warning=True)
        if told is not None:
            out.append(told)
    return out
