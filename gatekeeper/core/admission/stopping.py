"""Pods of a given-back group that keep running after the gatekeeper deleted them.

Why this exists: a group given back (``AdmissionTimeout``, ``NotAsAdmitted``) has its
let-through pods deleted; its quota stays held while any of them lives. A pod that is not
even terminating some seconds later was not deleted: the gatekeeper's RBAC lacks the verb
(``lws_gatekeeper_api_forbidden_total``, and the log, say so), or an admission policy refused it.
The quota then stays held for as long as the pod runs, which is right, but nobody would know
why from the record. Every backend asks :func:`not_stopped` and, when it names pods, writes
:func:`not_stopped_message` on the record with a Warning Event (``PODS_NOT_STOPPED``).
Pure: the time is the pass's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from gatekeeper.core.kube.keys import ADMITTED
from gatekeeper.core.kube.objects import condition, parse_time
from gatekeeper.core.model.lws import GroupPod

__all__ = ["PODS_NOT_STOPPED", "STOP_GRACE_SECONDS", "not_stopped", "not_stopped_message", "stop_due"]

STOP_GRACE_SECONDS = 10
"""How long after a give-back a let-through pod may still show no deletion before the record
says it was not stopped (a delete is answered in well under a second; caches lag a little)."""

PODS_NOT_STOPPED = "PodsNotStopped"
"""The Event reason of a given-back group whose pods were not stopped."""

_SHOWN = 5
_MARK = "; not stopped: "


def stop_due(record: Mapping[str, Any] | None) -> datetime | None:
    """When a given-back group's pods should show their deletion: its give-back (the time its
    ``Admitted`` condition became False) plus the grace; None when the record says no time."""
    since = condition(record, ADMITTED).get("lastTransitionTime")
    if not since:
        return None
    return parse_time(since) + timedelta(seconds=STOP_GRACE_SECONDS)


def not_stopped(
    record: Mapping[str, Any] | None, pods: Sequence[GroupPod], now: datetime | None
) -> tuple[str, ...]:
    """The let-through pods (no gate, live, not terminating) of a group given back at least
    the grace ago; () before that, or when every such pod is on its way out."""
    due = stop_due(record)
    if now is None or due is None or now < due:
        return ()
    return tuple(sorted(p.name for p in pods if p.live and not p.gated and not p.terminating))


def not_stopped_message(said: str, pods: Sequence[str]) -> str:
    """The record's message of a given-back group whose ``pods`` still run: what it said, then why
    its quota stays held."""
    shown = ", ".join(pods[:_SHOWN]) + (f" and {len(pods) - _SHOWN} more" if len(pods) > _SHOWN else "")
    head = said.split(_MARK, 1)[0]  # what it said before any pass added this
    return (
        f"{head}{_MARK}pods {shown} still run after the gatekeeper deleted them (see the gatekeeper's "
        "log and lws_gatekeeper_api_forbidden_total: it may lack the right to delete pods here); the quota "
        "stays held until they are gone"
    )
