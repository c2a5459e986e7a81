"""What the node-fit check writes: ``Active`` on its AdmissionChecks, and changed check states.

Why this exists: a check state is written with server-side apply on the Workload's
``status`` subresource, as the field manager ``lws-gatekeeper-node-fit``:
``status.admissionChecks`` is a list-map keyed by ``name``, so the apply owns only our
entry and keeps Kueue's fields and the other checks' entries. The apply carries the
cached ``resourceVersion``: if the Workload changed since (Kueue evicted it, say), it is
refused and the next pass decides again on fresh state. A state's transition time moves
only when the state does. These are decisions, so they are made here, as a plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gatekeeper.core.checks.node_fit.decide import NodeFitActions
from gatekeeper.core.keys import (
    ACTIVE,
    KUEUE_API_VERSION,
    NODE_FIT_ACTIVE_MESSAGE,
    NODE_FIT_ACTIVE_REASON,
    NODE_FIT_FIELD_MANAGER,
    WORKLOAD_PLURAL,
)
from gatekeeper.core.objects import as_list, as_map, index_by_key, meta, name_of, resource_version
from gatekeeper.core.writes import Op, Plan, Write, rfc3339

__all__ = ["plan_writes"]

ADMISSION_CHECK_PLURAL = "admissionchecks"


def plan_writes(
    actions: NodeFitActions,
    workloads: Iterable[Mapping[str, Any]],
    checks: Iterable[Mapping[str, Any]],
    now: datetime,
) -> Plan:
    """The writes of one node-fit pass, side by side: AdmissionChecks to mark ``Active``,
    check states to change (each guarded by the Workload's resourceVersion)."""
    stamp = rfc3339(now)
    by_name = {name_of(c): c for c in checks}
    cached = index_by_key(workloads)
    writes: list[Write] = []
    for name in actions.activate:
        condition: dict[str, Any] = {
            "type": ACTIVE,
            "status": "True",
            "reason": NODE_FIT_ACTIVE_REASON,
            "message": NODE_FIT_ACTIVE_MESSAGE,
            "lastTransitionTime": stamp,
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
        writes.append(_apply(ADMISSION_CHECK_PLURAL, None, name, body, "activate", ()))
    for update in actions.updates:
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
        writes.append(_apply(WORKLOAD_PLURAL, update.namespace, update.workload, body, update.state, moved))
    return (tuple(writes),)


def _apply(
    resource: str, namespace: str | None, name: str, body: dict[str, Any], tag: str, labels: tuple[str, ...]
) -> Write:
    return Write(
        Op.APPLY_STATUS,
        resource,
        namespace,
        name,
        body,
        tag=tag,
        labels=labels,
        field_manager=NODE_FIT_FIELD_MANAGER,
    )
