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
from typing import Any

from gatekeeper.core.admission.messages import plural
from gatekeeper.core.backends.pools.decide import Admit, WaitStatus
from gatekeeper.core.backends.pools.planner import PoolStatus
from gatekeeper.core.kube.keys import (
    ADMITTED,
    INVALID_SPEC_REASON,
    POOL_VALID,
    VALID_REASON,
)
from gatekeeper.core.kube.objects import (
    as_map,
    condition,
    replacing_map,
)
from gatekeeper.core.kube.quantity import format_amount, format_resources
from gatekeeper.core.model.record import admitted_condition, demand_status
from gatekeeper.core.writes.plan import MESSAGE_REFRESH_SECONDS

__all__ = [
    "MESSAGE_REFRESH_SECONDS",
    "admit_status",
    "admitted_message",
    "pool_status_patch",
    "restated_admission",
    "wait_status",
]

MAX_INTRUDERS_SHOWN = 20
"""Pods on a closed pool's nodes without an admission named in its status (all are counted)."""
MAX_NOTES_SHOWN = 3
"""Instance types planned not as their file gives them, named in a Pool's condition at most."""


def admitted_message(admit: Admit) -> str:
    """ "group 0 admitted into pool a: 2 nvidia.com/gpu on n0, n1" (and who waits for new nodes)."""
    group = admit.group
    placed = [n for n in admit.nodes if n]
    where = f" on {', '.join(placed)}" if placed else ""
    unplaced = len(admit.nodes) - len(placed)
    if unplaced:
        pods = "1 pod waits" if unplaced == 1 else f"{unplaced} pods wait"
        where += f"; {pods} Pending for new nodes (nodeFit QuotaOnly)"
    lent = f" (borrowed from pool {admit.lender} of its cohort)" if admit.lender else ""
    inside = f" in {', '.join(f'{k}={v}' for k, v in admit.domain)}" if admit.domain else ""
    return f"group {group.key.index} admitted into pool {group.pool}{lent}{inside}: {admit.summary}{where}"


def admit_status(admit: Admit, before: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    """The record status patch that admits the group (to be written guarded by its resourceVersion)."""
    group, status = admit.group, as_map(before)
    return {
        **demand_status(group.pool, group.demand, status),
        "placement": replacing_map(
            status.get("placement"), {str(i): n for i, n in enumerate(admit.nodes) if n}
        ),
        "templateRevision": group.revision or None,
        "borrowedFrom": admit.lender or None,
        "domain": replacing_map(status.get("domain"), dict(admit.domain)) or None,
        "admittedAt": now,
        "retryAt": None,  # status.retries stays until the group is whole (the doubling)
        "placedAt": None,  # until it is whole again under this admission (giveback.placed)
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


def restated_give_back(record: Mapping[str, Any], message: str, now: str) -> dict[str, Any] | None:
    """The patch that rewrites a given-back record's message (its status stays False, its
    reason and transition time kept); None when it is admitted again or already says so."""
    current = condition(record, ADMITTED)
    if current.get("status") != "False" or current.get("message") == message:
        return None
    return {
        "conditions": [admitted_condition(False, str(current.get("reason") or ""), message, current, now)]
    }


def _describe(st: PoolStatus) -> str:
    text = st.describe()
    if st.stranded:
        # Admitted whole, but the scheduler cannot place some of their pods now (room taken by
        # pods the gatekeeper does not control, or placement rules it does not model). The
        # reservation stays: the pods bind when room frees; people are told which groups.
        text += "; admitted groups whose pods fit no node now: " + ", ".join(map(str, st.stranded))
    if st.notes:
        # Where the room of a node Karpenter would buy is not the instance-types file's
        # (core.backends.pools.kubelet): estimated, or less as its NodeClaims show.
        text += "; " + "; ".join(st.notes[:MAX_NOTES_SHOWN])
        if len(st.notes) > MAX_NOTES_SHOWN:
            text += f" and {len(st.notes) - MAX_NOTES_SHOWN} more instance types"
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


def _desired(st: PoolStatus | None, invalid: str | None, generation: int) -> dict[str, Any] | None:
    observed = {"observedGeneration": generation} if generation else {}
    if st is None:
        if invalid is None:
            return None
        return {
            "conditions": [
                {
                    "type": POOL_VALID,
                    "status": "False",
                    "reason": INVALID_SPEC_REASON,
                    "message": invalid,
                    **observed,
                }
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
        **(
            {
                "lent": {r: format_amount(r, v) for r, v in sorted(st.lent.items()) if v},
                "borrowed": {r: format_amount(r, v) for r, v in sorted(st.borrowed.items()) if v},
            }
            if st.cohort
            else {}
        ),
        "conditions": [
            {
                "type": POOL_VALID,
                "status": "True",
                "reason": VALID_REASON,
                "message": _describe(st),
                **observed,
            }
        ],
    }


def pool_status_patch(
    current: Mapping[str, Any] | None,
    st: PoolStatus | None,
    invalid: str | None,
    now: str,
    generation: int = 0,
) -> dict[str, Any] | None:
    """The status a Pool should have (``st`` from the pass, or ``invalid``: why its spec cannot be
    read; its condition observing ``generation``, the Pool's ``metadata.generation``), as a patch
    over ``current``; None when it already says exactly that."""
    desired = _desired(st, invalid, generation)
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
