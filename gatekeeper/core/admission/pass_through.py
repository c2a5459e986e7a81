"""Pods of an admitted group made without the gate, whatever the backend that admitted it.

Why this exists: a backend admits a group from its LWS's spec (the ``pools`` backend on its
own quota, the ``kueue`` backend once Kueue admitted the group's Workload), often before the
group's pods exist: the StatefulSet controller makes them one by one. Each such pod was
still born gated and waited for a pass to see it and lift its gate: one more write per pod
and, in a scale-up, seconds between a pod's creation and its gate lifted. So after each pass
the leader publishes a table of the groups whose pods it would let through now
(``Passable``: the backend says which, ``core.backends.pools.pass_through`` and
``core.backends.kueue.pass_through``), and the webhook creates a pod of such a group with
what the lifting write would have added (the node selector and tolerations its role is
steered with, and the mark that charges it to its group) instead of the gate.

Only a pod that would certainly have been let through is: the LWS is the one admitted
(UID), the pod asks exactly what the admitted demand says for its role (and asks nothing
through DRA claims, which are made after the pod), and its owner chain leads to the LWS: a
leader's controller is the LWS's leader StatefulSet, a worker's is its group's worker
StatefulSet, whose controller is the group's leader pod that the pass saw. Anything else,
or anything the table does not know yet, is gated as before and handled by the pass. The
table is only as fresh as the last pass; every way it can be stale errs towards the gate
(a new LWS, a new leader pod, a new worker StatefulSet), except a group given back or
released since, whose pods the next pass stops by the mark they carry.

Called by the backends (after a pass's decision) and by the webhook (``patch_for``, at a
pod's CREATE, through ``webhook.pass_through``) and ``controller/lift.py`` (``lift_for``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.admission.members import controller_uid
from gatekeeper.core.kube.keys import (
    LWS_KIND,
    LWS_NAME_LABEL,
    POD_INDEX_LABEL,
    SCHEDULING_GATE,
    WORKER_INDEX_LABEL,
)
from gatekeeper.core.kube.objects import as_map, is_terminating, labels, meta
from gatekeeper.core.model.demand import Resources, pod_requests
from gatekeeper.core.model.gating import Ungate, is_opted_in, ungate_patch
from gatekeeper.core.model.lws import group_index, worker_index

__all__ = [
    "Owners",
    "Passable",
    "StatefulSets",
    "Table",
    "lift_for",
    "member_of",
    "owners",
    "patch_for",
]


@dataclass(frozen=True)
class Passable:
    """What the webhook must know of one admitted group to let its new pods through."""

    lws_uid: str
    leader_sts_uid: str
    """"" until the pass saw the LWS's leader StatefulSet: then looked up live, as the
    StatefulSet named as the LWS whose controller is the LWS (an admission often comes
    before the LWS controller made it)."""
    leader_pod_uid: str
    """"" until the pass saw the group's leader pod: workers are gated until then."""
    leader: Resources
    worker: Resources
    size: int
    """Pods per group, leader included: a worker whose index is not below it stays gated."""
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    """What the leader is steered with (a pool's, a Kueue flavor's), and the mark that
    charges the pod to its group (``core.model.charge``)."""
    worker_node_selector: Mapping[str, str] | None = None
    worker_tolerations: tuple[Mapping[str, Any], ...] | None = None
    """What the workers are steered with, when not the leader's (Kueue may give each role
    its own flavor)."""
    worker_pins: tuple[Mapping[str, str], ...] = ()
    """Per worker (index 1 first): its whole node selector, where each worker has a place of
    its own (Kueue's topology assignment: ``core.backends.kueue.topology``); () when not."""

    def steering(self, leader: bool, worker: int = 0) -> Ungate:
        """The node selector and tolerations a pod of the role (a worker: of its index) is let
        through with."""
        if leader or self.worker_node_selector is None or self.worker_tolerations is None:
            return Ungate("", "", self.node_selector, self.tolerations)
        if 0 < worker <= len(self.worker_pins):
            return Ungate("", "", self.worker_pins[worker - 1], self.worker_tolerations)
        return Ungate("", "", self.worker_node_selector, self.worker_tolerations)


Table = Mapping[tuple[str, str, int], Passable]
"""(namespace, LWS name, group index) -> the group whose new pods may be let through."""

StatefulSets = Callable[[str, str], Mapping[str, Any] | None]
"""Look up a StatefulSet (or a pod) by (namespace, name), as the informer holds it now."""


@dataclass(frozen=True)
class Owners:
    """Who made what, as a pass read it: the LWSs' leader StatefulSets and the groups' leaders."""

    leader_sts: Mapping[tuple[str, str], str]
    """(namespace, LWS UID) -> its leader StatefulSet's UID."""
    leader_pods: Mapping[tuple[str, str, int], str]
    """(namespace, LWS name, group index) -> its leader pod's UID."""


def owners(pods: Iterable[Mapping[str, Any]], statefulsets: Iterable[Mapping[str, Any]]) -> Owners:
    """The leader StatefulSet of each LWS and the leader pod of each group, from a pass's read."""
    leader_sts: dict[tuple[str, str], str] = {}
    for sts in statefulsets:
        m = meta(sts)
        owner = controller_uid(sts, LWS_KIND)
        if owner and m.get("uid"):
            leader_sts[(str(m.get("namespace") or ""), owner)] = str(m["uid"])
    leader_pods: dict[tuple[str, str, int], str] = {}
    for pod in pods:
        group = group_index(pod)
        m = meta(pod)
        if group is not None and worker_index(pod) == 0 and not is_terminating(pod) and m.get("uid"):
            key = (str(m.get("namespace") or ""), str(labels(pod).get(LWS_NAME_LABEL) or ""), group)
            leader_pods[key] = str(m["uid"])
    return Owners(leader_sts, leader_pods)


def _ordinal(value: object) -> int | None:
    try:
        index = int(str(value)) if value is not None else -1
    except ValueError:
        return None
    return index if index >= 0 else None


def member_of(
    pod: Mapping[str, Any],
    namespace: str,
    table: Table,
    statefulsets: StatefulSets,
    pods: StatefulSets | None = None,
) -> tuple[Passable, bool] | None:
    """The admitted group that ``pod`` (in ``namespace``) certainly belongs to, and whether it
    is the group's leader; None when not certain: its labels name the group, its owner chain
    leads to the admitted LWS, and it asks exactly what the admitted demand says for its role."""
    if not table or not is_opted_in(pod):
        return None
    # The webhook may see the pod before LWS's own pod webhook labels it: a leader has no
    # group index yet (its StatefulSet's ordinal is the index) and a worker no worker index.
    # Which StatefulSet made it says its role.
    name = str(labels(pod).get(LWS_NAME_LABEL) or "")
    index = group_index(pod)
    if index is None:
        index = _ordinal(labels(pod).get(POD_INDEX_LABEL))
    group = table.get((namespace, name, index)) if index is not None else None
    owner = controller_uid(pod, "StatefulSet")
    if group is None or not owner:
        return None
    leader_sts_uid = group.leader_sts_uid
    if not leader_sts_uid:  # not seen by the pass: the LWS's leader StatefulSet as the informer holds it
        sts = statefulsets(namespace, name)
        if sts is None or controller_uid(sts, LWS_KIND) != group.lws_uid:
            return None
        leader_sts_uid = str(meta(sts).get("uid") or "")
    leader = owner == leader_sts_uid
    ordinal = labels(pod).get(POD_INDEX_LABEL)
    if leader and ordinal is not None and _ordinal(ordinal) != index:
        return None  # a leader's ordinal is its group index: these labels disagree
    if not leader:
        # A worker's index (its StatefulSet's ordinal, which starts at 1) must be one its
        # group has: a worker StatefulSet scaled past ``size - 1`` makes pods the group's
        # reservation does not hold.
        pod_labels = labels(pod)
        said = {_ordinal(pod_labels[k]) for k in (WORKER_INDEX_LABEL, POD_INDEX_LABEL) if k in pod_labels}
        if len(said) != 1 or (worker := said.pop()) is None or not 1 <= worker < group.size:
            return None
        # The group's leader pod: as the informer holds it now (``pods``), else as the pass saw it.
        leader_uid = group.leader_pod_uid
        live = pods(namespace, f"{name}-{index}") if pods is not None else None
        if (
            live is not None
            and not is_terminating(live)
            and controller_uid(live, "StatefulSet") == leader_sts_uid
        ):
            leader_uid = str(meta(live).get("uid") or "")
        sts = statefulsets(namespace, f"{name}-{index}")
        if (
            sts is None
            or str(meta(sts).get("uid") or "") != owner
            or not leader_uid
            or controller_uid(sts, "Pod") != leader_uid
        ):
            return None
    if as_map(pod.get("spec")).get("resourceClaims"):
        return None  # what its DRA claims ask is known once they are made (core.model.claims)
    try:
        asks = pod_requests(as_map(pod.get("spec")))
    except (ValueError, ArithmeticError):
        return None
    if asks != (group.leader if leader else group.worker):
        return None
    return group, leader


def patch_for(
    pod: Mapping[str, Any],
    namespace: str,
    table: Table,
    statefulsets: StatefulSets,
    pods: StatefulSets | None = None,
) -> list[dict[str, Any]] | None:
    """The JSON patch that creates ``pod`` (being created in ``namespace``) as if its gate had
    been lifted at once: its role's node selector and tolerations; None when the pod must be
    gated (the usual answer)."""
    found = member_of(pod, namespace, table, statefulsets, pods)
    if found is None:
        return None
    steer = found[0].steering(found[1], worker_index(pod))
    # What lifting the gate would have added, on a pod that never had it.
    gated = {**pod, "spec": {**as_map(pod.get("spec")), "schedulingGates": [{"name": SCHEDULING_GATE}]}}
    ops = ungate_patch(gated, Ungate(namespace, "", steer.node_selector, steer.tolerations)) or []
    return [op for op in ops if not op["path"].startswith("/spec/schedulingGates")]


def lift_for(
    pod: Mapping[str, Any],
    table: Table,
    statefulsets: StatefulSets,
    pods: StatefulSets | None = None,
) -> list[dict[str, Any]] | None:
    """The JSON patch that lifts the gate of ``pod`` (one that exists, gated) because its group
    already holds its admission: the write a pass would make for it (the gate removed, its
    role's node selector and tolerations added); None when the pod is not gated, is going,
    or is not certainly a member of an admitted group (the pass decides it then)."""
    if is_terminating(pod):
        return None
    m = meta(pod)
    namespace = str(m.get("namespace") or "")
    found = member_of(pod, namespace, table, statefulsets, pods)
    if found is None:
        return None
    steer = found[0].steering(found[1], worker_index(pod))
    name = str(m.get("name") or "")
    return ungate_patch(pod, Ungate(namespace, name, steer.node_selector, steer.tolerations))
