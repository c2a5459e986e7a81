"""What the node-fit check writes: ``Active`` on its AdmissionChecks, and changed check states.

Why this exists: the node-fit pass decides which check states change; this turns that
into its plan of writes, as every AdmissionCheck controller of the gatekeeper writes
them (``core.checks.states``: server-side applies under the field manager
``lws-gatekeeper-node-fit``, each guarded by the Workload's resourceVersion).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gatekeeper.core.checks.node_fit.decide import NodeFitActions
from gatekeeper.core.checks.states import activate_writes, check_state_writes
from gatekeeper.core.kube.keys import NODE_FIT_ACTIVE_MESSAGE, NODE_FIT_ACTIVE_REASON, NODE_FIT_FIELD_MANAGER
from gatekeeper.core.writes.plan import Plan

__all__ = ["plan_writes"]


def plan_writes(
    actions: NodeFitActions,
    workloads: Iterable[Mapping[str, Any]],
    checks: Iterable[Mapping[str, Any]],
    now: datetime,
) -> Plan:
    """The writes of one node-fit pass, side by side: AdmissionChecks to mark ``Active``,
    check states to change (each guarded by the Workload's resourceVersion)."""
    active = activate_writes(
        actions.activate,
        checks,
        now,
        reason=NODE_FIT_ACTIVE_REASON,
        message=NODE_FIT_ACTIVE_MESSAGE,
        field_manager=NODE_FIT_FIELD_MANAGER,
    )
    states = check_state_writes(actions.updates, workloads, now, field_manager=NODE_FIT_FIELD_MANAGER)
    return (tuple(active + states),)
