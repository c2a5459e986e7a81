"""Records kept while their pods live: found by their labels, or by the charge they carry.

Why this exists: a record that the pass would release (its LWS gone or replaced by
another of the same name, its group scaled away, the record itself deleted) must stay,
and go on holding its recorded demand, while a pod let through on it still runs: else its
quota is given to another group while the pod holds the GPUs. The pods are found two
ways: by their labels (``pods_of``: the group's live members, as the records of groups
let through before pods were marked need) and by their mark (``core.model.charge``: a pod's
toleration that names its group, which survives a relabel and an orphaning delete).
``decide`` calls :func:`holds_pods` for a deleted record of a group it plans and
:func:`still_charged` once every group is planned, for the records no group wants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gatekeeper.core.admission.queue import AdmittedGroup
from gatekeeper.core.kube.objects import as_map
from gatekeeper.core.model.charge import Charge, charged
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import PodsByGroup
from gatekeeper.core.model.lws import GroupPod
from gatekeeper.core.model.record import held_in, is_admitted, recorded_demand

__all__ = ["holds_pods", "still_charged"]


def holds_pods(
    admitted: bool,
    record: Mapping[str, Any],
    pods: Sequence[GroupPod],
    charges: Mapping[Charge, tuple[str, ...]],
    new_pods_only: bool,
) -> bool:
    """Is a deleted record of an LWS's group kept? While admitted and a pod of the group lives
    (by its labels, or charged to it), unless only new pods of a changed template are left
    (``new_pods_only``: they are gated, and could only be admitted again on a record being
    deleted) and none charged to the record."""
    if not admitted:
        return False
    return bool(charged(record, charges)) or (not new_pods_only and any(p.live for p in pods))


def still_charged(
    records: Mapping[tuple[str, str], Mapping[str, Any]],
    wanted: set[tuple[str, str]],
    lwss: Mapping[tuple[str, str], Mapping[str, Any]],
    pods_of: PodsByGroup,
    charges: Mapping[Charge, tuple[str, ...]],
) -> list[tuple[tuple[str, str], AdmittedGroup]]:
    """Admitted records no group wants whose pods still live: each keeps its record and holds
    its recorded demand until its last pod is gone, as a scaled-away group does. By label:
    a record whose LWS is gone (deleted, its namespace deleted, its label removed) and a
    live pod of its group is left. By charge: any record with a live pod charged to it,
    its LWS gone or not. No node room is held for it (the shape of its pods is unknown);
    its pods are in the bound-pod usage."""
    held: list[tuple[tuple[str, str], AdmittedGroup]] = []
    for (ns, rname), record in records.items():
        spec = as_map(record.get("spec"))
        name, index = spec.get("leaderWorkerSet"), spec.get("groupIndex")
        if (ns, rname) in wanted or not isinstance(name, str) or type(index) is not int:
            continue
        if not is_admitted(record):
            continue
        by_label = (ns, name) not in lwss and any(p.live for p in pods_of.get((ns, name), {}).get(index, ()))
        if not (by_label or charged(record, charges)):
            continue
        demand = recorded_demand(record)
        pool, lender = held_in(record, "")
        # A same-named LWS made since has groups of its own: this one is told apart by its record.
        key = GroupKey(ns, name if (ns, name) not in lwss else rname, index)
        bound = frozenset(range(demand.pod_count))
        held.append(((ns, rname), AdmittedGroup(key, pool, demand, bound=bound, lender=lender)))
    return held
