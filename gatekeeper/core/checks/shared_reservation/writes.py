"""What the shared-reservation check writes on its member: ``Active`` on its AdmissionChecks
(True, or False with what is wrong with their parameters) and changed check states.

Why this exists: the pass decides (``decide``); this turns its decisions into a plan of
writes as every AdmissionCheck controller of the gatekeeper writes them
(``core.checks.states``, under the field manager ``lws-gatekeeper-shared-reservation``).
The claims it writes on the hub go through the hub's connection instead
(``controller.hub_link``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gatekeeper.core.checks.shared_reservation.decide import SharedReservationActions
from gatekeeper.core.checks.states import activate_writes, check_state_writes
from gatekeeper.core.kube.keys import SHARED_RESERVATION_FIELD_MANAGER
from gatekeeper.core.writes.plan import Plan, Write

__all__ = ["plan_writes"]


def plan_writes(
    actions: SharedReservationActions,
    workloads: Iterable[Mapping[str, Any]],
    checks: Iterable[Mapping[str, Any]],
    now: datetime,
) -> Plan:
    checks = list(checks)
    active: list[Write] = []
    for a in actions.activate:
        active += activate_writes(
            [a.name],
            checks,
            now,
            reason=a.reason,
            message=a.message,
            field_manager=SHARED_RESERVATION_FIELD_MANAGER,
            status=a.status,
        )
    states = check_state_writes(
        actions.updates, workloads, now, field_manager=SHARED_RESERVATION_FIELD_MANAGER
    )
    return (tuple(active + states),)
