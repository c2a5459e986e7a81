"""What a ``kueue`` backend record says: its ``Admitted`` state, Kueue's reason and words.

Why this exists: ``decide`` works out, per group, what the group's record should say
(``RecordStatus``); ``writes`` turns that into the record's status patch and Event. The
words for a group that pods its LWS did not make claim by their labels
(``said_strangers``), and for a surge group of a rolling update (``said_surge``), are added
here, after the group's own state is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gatekeeper.core.admission.members import Stranger, strangers_said
from gatekeeper.core.admission.reasons import STRANGER_REASONS
from gatekeeper.core.backends.kueue.workload import PERMANENT_REASONS
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.rollout import surge_said

__all__ = ["RecordStatus", "said_strangers", "said_surge"]


@dataclass(frozen=True)
class RecordStatus:
    """What a group's record should say: ``Admitted`` True/False, Kueue's reason and message."""

    group: GroupState
    workload: str
    admitted: bool
    reason: str
    message: str
    revision: str | None = None
    """The LWS template revision the admitted group's pods run (``status.templateRevision``)."""
    retry_at: str | None = None
    """When the Workload of a group that could never fit is made again (RFC 3339)."""
    retries: int | None = None
    """How many times the group's Workload was deleted because it could never fit."""
    placed: bool = False
    """Admitted and all its pods bound: its record's ``status.placedAt`` is written once, and
    the admission timeout no longer applies (``core.admission.deadline``)."""
    stalls: bool = False
    """A surge group its LWS's rolling update waits for (``core.model.rollout``)."""

    @property
    def warning(self) -> bool:
        """Waiting will not fix it: the LWS, the queue or the ClusterQueue must change; or
        pods its LWS did not make claim the group."""
        return self.reason in STRANGER_REASONS or (not self.admitted and self.reason in PERMANENT_REASONS)


def said_strangers(st: RecordStatus, stranger_pods: Mapping[GroupKey, list[Stranger]]) -> RecordStatus:
    """The record's words for a group that pods its LWS did not make claim by their labels:
    reason ``NotMadeByLeaderWorkerSet`` (a Warning), what the group is otherwise doing, and
    which pods stay gated. Its ``Admitted`` status is unchanged: the group's own pods go on."""
    ones = stranger_pods.get(st.group.key)
    if not ones:
        return st
    reason, words = strangers_said(ones)
    return replace(st, reason=reason, message=f"{st.message}; {words}")


def said_surge(st: RecordStatus, lwss: Mapping[tuple[str, str], Mapping[str, Any]]) -> RecordStatus:
    """A waiting surge group's words say so, and whether its LWS's rolling update waits for it."""
    if st.admitted or st.warning:
        return st
    message, stalls = surge_said(st.message, lwss, st.group.key)
    return replace(st, message=message, stalls=stalls)
