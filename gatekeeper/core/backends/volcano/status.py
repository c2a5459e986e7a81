"""What a ``volcano`` backend record says this pass (``VolcanoStatus``), and the words a
surge group of a rolling update adds (``said_surge``).

Why this exists: ``decide`` works out each group's status; ``writes`` turns it into the
record's status patch and Event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.rollout import surge_said

__all__ = ["VolcanoStatus", "said_surge"]


@dataclass(frozen=True)
class VolcanoStatus:
    """What a group's record says this pass."""

    group: GroupState
    admitted: bool
    reason: str
    message: str
    pod_group: str = ""
    warning: bool = False
    retry_at: str | None = None
    """When a group given back is offered again (RFC 3339)."""
    retries: int | None = None
    """How many times the group was given back since it last ran."""
    placed: bool = False
    """Admitted and all its pods bound: its record's ``status.placedAt`` is written once
    (``core.admission.deadline``)."""
    stalls: bool = False
    """A surge group its LWS's rolling update waits for (``core.model.rollout``)."""


def said_surge(st: VolcanoStatus, lwss: Mapping[tuple[str, str], Mapping[str, Any]]) -> VolcanoStatus:
    """A waiting surge group's words say so, and whether its LWS's rolling update waits for it."""
    if st.admitted or st.warning:
        return st
    message, stalls = surge_said(st.message, lwss, st.group.key)
    return replace(st, message=message, stalls=stalls)
