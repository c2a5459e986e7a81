"""How a Kueue AdmissionCheck controller writes: ``Active`` on its AdmissionChecks, and check
states on Workloads.

Why this exists: every AdmissionCheck controller the gatekeeper serves (``node_fit``,
``shared_reservation``) writes the same two things the same way. A check state is written
with server-side apply on the Workload's ``status`` subresource under the controller's own
field manager: ``status.admissionChecks`` is a list-map keyed by ``name``, so the apply
owns only its entry and keeps Kueue's fields and the other checks' entries. The apply
carries the cached ``resourceVersion``: if the Workload changed since (Kueue evicted it,
say), it is refused and the next pass decides again on fresh state. A state's transition
time moves only when the state does. Pure: these build the writes of a plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gatekeeper.core.kube.keys import ACTIVE, KUEUE_API_VERSION, WORKLOAD_PLURAL
from gatekeeper.core.kube.objects import as_list, as_map, index_by_key, meta, name_of, resource_version
from gatekeeper.core.writes.plan import Op, Write, rfc3339

__all__ = ["ADMISSION_CHECK_PLURAL", "CheckUpdate", "activate_writes", "check_state_writes"]

ADMISSION_CHECK_PLURAL = "admissionchecks"


@dataclass(frozen=True)
class CheckUpdate:
    """Set the state of check ``check`` of Workload ``namespace/workload`` to ``state``."""

    namespace: str
    workload: str
    check: str
    state: str
    message: str


def activate_writes(
    names: Iterable[str],
    checks: Iterable[Mapping[str, Any]],
    now: datetime,
    *,
    reason: str,
    message: str,
    field_manager: str,
    status: str = "True",
) -> list[Write]:
    """The ``Active`` condition (``status``, ``reason``, ``message``) on each AdmissionCheck named."""
    by_name = {name_of(c): c for c in checks}
    out: list[Write] = []
    for name in names:
        condition: dict[str, Any] = {
            "type": ACTIVE,
            "status": status,
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": rfc3339(now),
        }
        generation = meta(by_name.get(name, {})).get("generation")
        if isinstance(generation, int):
            condition["observedGeneration"] = generation
        body = {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "AdmissionCheck",
            "metadata": {"name": name},
            "status": {"conditions": [condition]},
        }
        out.append(_apply(ADMISSION_CHECK_PLURAL, None, name, body, "activate", (), field_manager))
    return out


def check_state_writes(
    updates: Iterable[CheckUpdate],
    workloads: Iterable[Mapping[str, Any]],
    now: datetime,
    *,
    field_manager: str,
) -> list[Write]:
    """One apply per changed check state, guarded by the cached Workload's resourceVersion;
    its ``labels`` are (old state, message) when the state moves, else empty."""
    stamp = rfc3339(now)
    cached = index_by_key(workloads)
    out: list[Write] = []
    for update in updates:
        wl = cached.get((update.namespace, update.workload))
        if wl is None:
            continue
        old = next(
            (
                as_map(e)
                for e in as_list(as_map(wl.get("status")).get("admissionChecks"))
                if as_map(e).get("name") == update.check
            ),
            {},
        )
        same_state = old.get("state") == update.state and old.get("lastTransitionTime")
        entry = {
            "name": update.check,
            "state": update.state,
            "message": update.message[:32768],
            "lastTransitionTime": old["lastTransitionTime"] if same_state else stamp,
        }
        body = {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "Workload",
            "metadata": {
                "name": update.workload,
                "namespace": update.namespace,
                "resourceVersion": resource_version(wl),
            },
            "status": {"admissionChecks": [entry]},
        }
        moved = () if same_state else (str(old.get("state")), update.message)
        out.append(
            _apply(
                WORKLOAD_PLURAL, update.namespace, update.workload, body, update.state, moved, field_manager
            )
        )
    return out


def _apply(
    resource: str,
    namespace: str | None,
    name: str,
    body: dict[str, Any],
    tag: str,
    labels: tuple[str, ...],
    field_manager: str,
) -> Write:
    return Write(
        Op.APPLY_STATUS, resource, namespace, name, body, tag=tag, labels=labels, field_manager=field_manager
    )
