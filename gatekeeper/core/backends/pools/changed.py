"""An admitted group whose LWS now asks another demand than its record holds (a rolling update).

Why this exists: the ``pools`` backend's rule for template changes (see ``decide``): while
any old pod of the group is live it keeps its recorded reservation and its new pods wait;
once only new pods are left it is planned again at its new demand. This module tells the
group's pods apart by their revision label and says which of the three cases holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gatekeeper.core.admission.queue import AdmittedGroup, WaitingGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.kube.objects import as_map
from gatekeeper.core.kube.quantity import format_resources
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import InvalidDemand
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.lws import GroupPod
from gatekeeper.core.model.record import (
    held_in,
    recorded_demand,
    recorded_domain,
    recorded_shape,
    without_pod_count,
)

__all__ = ["WaitStatus", "changed_template", "waiting_group"]


@dataclass(frozen=True)
class WaitStatus:
    """A group that waits (or whose new pods wait): its record's ``Admitted`` condition."""

    group: GroupState
    reason: Reason
    message: str
    position: int
    stalls: bool = False
    """A surge group whose LWS's rolling update waits for it with no old group to go first
    (``core.model.rollout.surge_words``): its LWS is warned (``ROLLOUT_STALLED``)."""


def waiting_group(
    gs: GroupState,
    demand: GroupDemand | InvalidDemand,
    created: datetime,
    priority: int,
    classes: tuple[str, ...],
) -> WaitingGroup:
    """The group as the planner queues it, with what its LWS asks of its placement."""
    return WaitingGroup(
        gs.key,
        gs.pool,
        demand,
        created,
        priority=priority,
        classes=classes,
        exclusive=gs.exclusive,
        topology=gs.topology,
        subgroups=gs.subgroups,
        gang=gs.gang,
        gang_size=gs.gang_size,
    )


def changed_template(
    record: Mapping[str, Any],
    demand: GroupDemand,
    pods: Sequence[GroupPod],
    gs: GroupState,
    priority: int,
    created: datetime,
    classes: tuple[str, ...] = (),
) -> WaitingGroup | tuple[AdmittedGroup, list[str], WaitStatus | None] | None:
    """An admitted group whose LWS now asks another demand than its record holds.

    None: the demand did not change (or the record does not say what it was): as before.
    A ``WaitingGroup``: only new pods are left; plan it again at its new demand.
    Otherwise (the group held at its recorded demand, its gated old pods to let through, a
    status to report when new pods wait).
    """
    recorded = recorded_shape(record)
    if recorded is None or recorded == (without_pod_count(demand.total), demand.pod_count):
        return None
    status = as_map(record.get("status"))
    through = {p.revision for p in pods if p.live and not p.gated}
    old_revisions = through | {str(status.get("templateRevision") or "")}

    def is_old(pod: GroupPod) -> bool:
        return not pod.revision or pod.revision in old_revisions

    live = [p for p in pods if p.live]
    new = [p for p in live if not p.terminating and not is_old(p)]
    if new and not any(is_old(p) for p in live):
        return waiting_group(gs, demand, created, priority, classes)
    held = recorded_demand(record)
    pool, lender = held_in(record, gs.pool)
    bound = frozenset(range(held.pod_count))
    group = AdmittedGroup(
        key=gs.key,
        pool=pool,
        demand=held,
        bound=bound,
        lender=lender,
        domain=recorded_domain(record),
        subgroups=gs.subgroups is not None,
        gang=gs.gang,
    )
    let_through = sorted(p.name for p in live if p.gated and not p.terminating and is_old(p))
    report = None
    if new:
        old_count = sum(1 for p in live if is_old(p))
        old_pods = f"{old_count} old pod remains" if old_count == 1 else f"{old_count} old pods remain"
        new_pods = f"{len(new)} new pod waits" if len(new) == 1 else f"{len(new)} new pods wait"
        message = (
            f"group {gs.key.index}'s LeaderWorkerSet changed: it now needs {format_resources(demand.total)} "
            f"for {demand.pod_count} pods (admitted with {format_resources(recorded[0])} for "
            f"{recorded[1]}); it keeps its admission while its {old_pods}, and its {new_pods} "
            "to be admitted again when they are gone"
        )
        report = WaitStatus(gs, Reason.TEMPLATE_CHANGED, message, 0)
    return group, let_through, report
