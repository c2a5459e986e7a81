"""Giving back a ``volcano`` group whose own pod is not as admitted, or that is not whole by
its admission's deadline, and holding it back until its retry.

Why this exists: a group Volcano let in, one of whose own pods (made by its LWS, within its
size) has asked other than its role was admitted with for a few seconds
(``core.admission.conformance.overdue``: its worker StatefulSet's template edited by hand
with the StatefulSet guard off), cannot be whole, while its let-through pods hold their
nodes. It is given back: its record says ``Admitted=False``, reason ``NotAsAdmitted``, with a
retry time that doubles with each give-back; its running pods stop (the LWS makes them
again from its own templates, the edited StatefulSet going with its leader pod), and only
once none is left does its PodGroup go, so the Queue's room comes back only when nothing
runs on it. It is not offered again before its retry. A group Volcano let in whose pods are
not all bound by the deadline (``core.admission.timeout``: its pods can never be made, say) is
given back the same way, its record saying ``AdmissionTimeout``: Volcano's PodGroup would
otherwise hold the Queue's room for pods that never come.

Called by ``decide`` (``give_back`` when it judges an admitted group, ``giving_back`` for a
group given back before). Pure: the time is the pass's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gatekeeper.core.admission.conformance import Departed, departed_message
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.admission.timeout import TimedOut
from gatekeeper.core.admission.timeout import timed_out as late
from gatekeeper.core.backends.volcano.podgroup import pod_group_belongs, pod_group_name
from gatekeeper.core.kube.keys import ADMITTED
from gatekeeper.core.kube.objects import as_map, condition, meta, parse_time
from gatekeeper.core.model.charge import Charge, charged
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.groups import LwsGroup
from gatekeeper.core.model.pool import DEFAULT_ADMISSION_TIMEOUT
from gatekeeper.core.model.retry import RETRY_MAX_SECONDS, recorded_retries, retry_delay

__all__ = ["Back", "Given", "Holding", "give_back", "given_back", "giving_back", "timed_out"]

Pod = tuple[str, str]


@dataclass(frozen=True)
class Back:
    """What a give-back reads of the pass."""

    now: datetime | None
    retry_seconds: int
    charges: Mapping[Charge, tuple[str, ...]]
    timeout: int = DEFAULT_ADMISSION_TIMEOUT
    """Seconds an admitted group may lack bound pods (``core.admission.timeout``)."""


@dataclass(frozen=True)
class Given:
    """A group given back this pass: its record's words and retry, and its pods to stop."""

    message: str
    retry_at: str
    retries: int
    stop: tuple[Pod, ...]


@dataclass(frozen=True)
class Holding:
    """A group given back before, waiting out its retry."""

    reason: Reason
    """Why it was given back (``NotAsAdmitted`` or ``AdmissionTimeout``; kept)."""
    message: str
    """What its record said when it was given back (kept)."""
    stop: tuple[Pod, ...]
    retire: tuple[str, str, str] | None
    """(namespace, PodGroup, its UID) to delete, once none of its pods runs."""
    busy: bool
    """Its PodGroup still holds room in its Queue."""


_GIVEN_BACK = (Reason.NOT_AS_ADMITTED, Reason.ADMISSION_TIMEOUT)


def given_back(record: Mapping[str, Any] | None, now: datetime | None) -> bool:
    """Does the record say its group was given back (its own pod not as admitted, or not whole
    by its deadline), with its retry still to come?"""
    said = condition(record, ADMITTED)
    return (
        now is not None
        and said.get("status") == "False"
        and said.get("reason") in _GIVEN_BACK
        and now < parse_time(as_map(as_map(record).get("status")).get("retryAt"))
    )


def _running(g: LwsGroup, charges: Mapping[Charge, tuple[str, ...]]) -> tuple[Pod, ...]:
    """The group's pods that run or may: let through (live, no gate), or charged to it."""
    record = g.record if g.record is not None else {}
    names = {p.name for p in g.present if p.live and not p.gated} | set(charged(record, charges))
    return tuple((g.state.key.namespace, name) for name in sorted(names))


def give_back(g: LwsGroup, due: Departed, back: Back) -> Given:
    """The group given back now, for ``due``, its own pod not as admitted past the grace."""
    if back.now is None:
        raise ValueError("a give-back needs the time of the pass")
    retries = recorded_retries(g.record) + 1
    delay = retry_delay(retries, back.retry_seconds)
    retry_at = (back.now + timedelta(seconds=delay)).strftime("%Y-%m-%dT%H:%M:%SZ")
    message = departed_message(g.state.key.index, due, delay)
    return Given(message, retry_at, retries, _running(g, back.charges))


def giving_back(
    g: LwsGroup,
    pod_groups: Mapping[tuple[str, str], Mapping[str, Any]],
    now: datetime | None,
    charges: Mapping[Charge, tuple[str, ...]],
) -> Holding | None:
    """The group held back until its retry, if its record says it was given back: its running
    pods stop, then its PodGroup goes."""
    if not given_back(g.record, now):
        return None
    st = g.state
    ns, name = st.key.namespace, pod_group_name(st.key.name, st.key.index)
    running = _running(g, charges)
    pg = pod_groups.get((ns, name))
    ours = pg is not None and pod_group_belongs(pg, st.key.name, st.lws_uid, st.key.index)
    retire = (ns, name, str(meta(pg).get("uid") or "")) if ours and pg is not None and not running else None
    said = condition(g.record, ADMITTED)
    return Holding(Reason(str(said.get("reason"))), str(said.get("message") or ""), running, retire, ours)


def timed_out(g: LwsGroup, lws: Mapping[str, Any], back: Back) -> Given | datetime | None:
    """The group given back now for not being whole by its deadline; else when that deadline
    falls (a pass should look again then), or None."""
    if not isinstance(g.state.demand, GroupDemand) or g.record is None:
        return None
    due = late(
        g, lws, g.record, g.state.demand, back.now, back.timeout, back.retry_seconds, RETRY_MAX_SECONDS
    )
    if not isinstance(due, TimedOut):
        return due
    return Given(due.message, due.retry_at, due.retries, _running(g, back.charges))
