"""What the records of the ``pools`` backend's waiting groups say, and of groups with strangers.

Why this exists: ``decide`` plans; the words a tenant reads on a record (why a group waits, in
the planner's words with what an invalid pool, a template change, a rolling update's surge or a
preemption adds; what a group whose pods were not made by its LWS holds) are composed here.
Called by ``decide``; pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.core.admission.members import strangers_said
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.changed import WaitStatus
from gatekeeper.core.backends.pools.outcome import Plan
from gatekeeper.core.backends.pools.stages import GroupPass, restored
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.record import is_admitted
from gatekeeper.core.model.rollout import surge_said

__all__ = ["strangers_said_of", "waiting_words"]

Key = tuple[str, str]


def waiting_words(
    result: Plan,
    one: GroupPass,
    invalid_pools: Mapping[str, str],
    lwss: Mapping[Key, Mapping[str, Any]],
    preempting: Mapping[GroupKey, str],
) -> tuple[WaitStatus, ...]:
    """Why each waiting group waits, in the planner's words, with what a pool, a template
    change or a rolling update's surge adds."""
    waiting: list[WaitStatus] = []
    for w in result.waiting:
        message = w.message
        if w.reason is Reason.POOL_NOT_FOUND and w.pool in invalid_pools:
            message = f"group {w.key.index} waits: pool {w.pool} is invalid: {invalid_pools[w.pool]}"
        if w.key in one.readmitted:
            before = one.readmitted[w.key] or "an unrecorded demand"
            message = (
                f"{message}; it was admitted with {before} before its LeaderWorkerSet's templates "
                "changed, and gave that back when its last old pod went"
            )
        if w.key in preempting:
            message = f"{message}; it {preempting[w.key]}"
        stalls = False
        if not w.reason.permanent:
            message, stalls = surge_said(message, lwss, w.key)
        waiting.append(WaitStatus(one.state_of[w.key], w.reason, message, w.position, stalls=stalls))
    return tuple(waiting)


def strangers_said_of(one: GroupPass, records: Mapping[Key, Mapping[str, Any]]) -> tuple[WaitStatus, ...]:
    """What the record of each group with strangers says of them (and of its admission)."""
    said: list[WaitStatus] = []
    for key, ones in sorted(one.strangers.items()):
        if key in one.state_of:
            gs = one.state_of[key]
            record = records.get((key.namespace, gs.record))
            holds = f"{restored(gs, record)[2]}; " if record is not None and is_admitted(record) else ""
            reason, words = strangers_said(ones)
            said.append(WaitStatus(gs, reason, holds + words, 0))
    return tuple(said)
