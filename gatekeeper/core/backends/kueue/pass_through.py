"""Which groups of the ``kueue`` backend the webhook may let new pods through for.

Why this exists: with the ``kueue`` backend a group's pods were all born gated, even those
made after Kueue had admitted the group's Workload, and each waited for a pass to lift its
gate onto the flavor's nodes: a write per pod and up to a pass's gap per pod. The pass now
also says which groups it lets pods through for (``GroupPass._pods``: the Workload admitted
and not evicted, the group staying, its Workload made for the demand its LWS asks now, no
pod of it not as admitted, no new pod waiting for old ones), and the webhook makes their new
pods as the pass would have let them through (``core.admission.pass_through``): each role
onto the nodes and tolerations of the flavors Kueue assigned to its pod set, with the mark
that charges it to its group. A Workload Kueue evicts after the table was published is
the one way it is stale: the next pass stops the pods let through on it, by their mark, as
it stops those whose gates it lifted.

Called by ``decide.decide_kueue`` for each group ``GroupPass`` found passable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.core.admission.pass_through import Owners, Passable
from gatekeeper.core.backends.kueue import topology
from gatekeeper.core.backends.kueue.workload import flavor_steering, pod_set_assignment
from gatekeeper.core.kube.objects import meta
from gatekeeper.core.model.charge import charge_toleration
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.lws import size as lws_size

__all__ = ["passable"]


def passable(
    key: GroupKey,
    lws: Mapping[str, Any],
    demand: GroupDemand,
    workload: Mapping[str, Any],
    flavors: Mapping[str, Mapping[str, Any]],
    owned: Owners,
) -> tuple[tuple[str, str, int], Passable] | None:
    """The table's entry for a group whose Workload Kueue admitted, its pods steered as the
    pass steers them (``flavor_steering`` of each role's pod set); None for an LWS without a UID."""
    uid = str(meta(lws).get("uid") or "")
    if not uid:
        return None
    mark = charge_toleration(uid, key.index)
    leader_labels, leader_tolerations = flavor_steering(workload, flavors, "leader", 0)
    worker_labels, worker_tolerations = flavor_steering(workload, flavors, "worker")
    count = lws_size(lws)
    places = topology.assigned_domains(pod_set_assignment(workload, "worker"), count - 1)
    pins = tuple({**worker_labels, **place} for place in places)  # as flavor_steering(..., rank)
    return (key.namespace, key.name, key.index), Passable(
        lws_uid=uid,
        leader_sts_uid=owned.leader_sts.get((key.namespace, uid), ""),
        leader_pod_uid=owned.leader_pods.get((key.namespace, key.name, key.index), ""),
        leader=demand.pods[0].requests,
        worker=demand.pods[1].requests if len(demand.pods) > 1 else {},
        size=count,
        node_selector=leader_labels,
        tolerations=(*leader_tolerations, mark),
        worker_node_selector=worker_labels,
        worker_tolerations=(*worker_tolerations, mark),
        worker_pins=pins if any(pin != worker_labels for pin in pins) else (),
    )
