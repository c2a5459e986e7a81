"""Pods of an admitted group made without the gate: the webhook already knows the answer.

Why this exists: the ``pools`` backend admits a group from its LWS's spec, often before
the group's pods exist (the StatefulSet controller makes them one by one). Each such pod
was still born gated and waited for a pass to see it and lift its gate: one more write
per pod and, in a scale-up, seconds between a pod's creation and its gate lifted
(``benchmarks/bench_timeline.py``). So after each pass the leader publishes a table of
the groups that hold their admission, and the webhook creates a pod of such a group with
what the lifting write would have added (the pool's node selector and tolerations)
instead of the gate.

Only a pod that would certainly have been let through is: its group's record says
``Admitted`` (reason ``Admitted``: not a changed template, not a stranger's claim, not a
demand that cannot be computed), the LWS is the one admitted (UID), the pod asks exactly
what the admitted demand says for its role (and asks nothing through DRA claims, which are
made after the pod), and its owner chain leads to the LWS: a
leader's controller is the LWS's leader StatefulSet, a worker's is its group's worker
StatefulSet, whose controller is the group's leader pod that the pass saw. Anything else,
or anything the table does not know yet, is gated as before and handled by the pass. The
table is only as fresh as the last pass; every way it can be stale errs towards the gate
(a new LWS, a new leader pod, a new worker StatefulSet), except a group released since,
and a group is released only once none of its pods is left, when the LWS is not asking
for it any more.

Called by ``backends.pools`` (``build``, after a pass's decision) and by the webhook
(``patch_for``, at a pod's CREATE, through ``controller.pass_through``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.admission.members import controller_uid
from gatekeeper.core.kube.keys import (
    ADMITTED,
    LWS_KIND,
    LWS_NAME_LABEL,
    POD_INDEX_LABEL,
    SCHEDULING_GATE,
    WORKER_INDEX_LABEL,
)
from gatekeeper.core.kube.objects import as_map, condition, is_terminating, labels, meta, object_key
from gatekeeper.core.kube.quantity import format_amount
from gatekeeper.core.model.charge import charge_toleration
from gatekeeper.core.model.demand import GroupDemand, Resources, pod_requests
from gatekeeper.core.model.gating import Ungate, is_opted_in, ungate_patch
from gatekeeper.core.model.lws import group_index, replicas, worker_index
from gatekeeper.core.model.lws import size as lws_size
from gatekeeper.core.model.pool import Pool

__all__ = [
    "AdmittedGroup",
    "Index",
    "Table",
    "Written",
    "as_known",
    "build",
    "index",
    "lift_for",
    "member_of",
    "patch_for",
    "written_after",
]


@dataclass(frozen=True)
class AdmittedGroup:
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
    """The pool's, and the mark that charges the pod to its group (``core.model.charge``)."""


Table = Mapping[tuple[str, str, int], AdmittedGroup]
"""(namespace, LWS name, group index) -> the admitted group."""

StatefulSets = Callable[[str, str], Mapping[str, Any] | None]
"""Look up a StatefulSet (or a pod) by (namespace, name), as the informer holds it now."""


@dataclass(frozen=True)
class Index:
    """What a pass read, indexed for ``entry``: made once per pass (``index``)."""

    lwss: Mapping[tuple[str, str], Mapping[str, Any]]
    pools: Mapping[str, Pool]
    leader_sts: Mapping[tuple[str, str], str]
    """(namespace, LWS UID) -> its leader StatefulSet's UID."""
    leader_pods: Mapping[tuple[str, str, int], str]
    """(namespace, LWS name, group index) -> its leader pod's UID."""
    demand_of: Callable[[Mapping[str, Any]], object]

    def entry(self, record: Mapping[str, Any]) -> tuple[tuple[str, str, int], AdmittedGroup] | None:
        """The table's entry for ``record``, if its group holds its admission as it should."""
        said = condition(record, ADMITTED)
        if said.get("status") != "True" or said.get("reason") != ADMITTED or is_terminating(record):
            return None
        ns = str(meta(record).get("namespace") or "")
        spec, status = as_map(record.get("spec")), as_map(record.get("status"))
        name, index, uid = spec.get("leaderWorkerSet"), spec.get("groupIndex"), spec.get("leaderWorkerSetUID")
        lws = self.lwss.get((ns, str(name)))
        pool = self.pools.get(str(status.get("pool") or ""))
        if lws is None or pool is None or type(index) is not int or uid != meta(lws).get("uid"):
            return None
        try:
            if index >= replicas(lws):
                return None  # leaving: its new pods (if any) wait for the pass
        except ValueError:
            return None
        demand = self.demand_of(lws)
        sts_uid = self.leader_sts.get((ns, str(uid)))
        if not isinstance(demand, GroupDemand) or _total(status) != _total_of(demand):
            return None
        return (ns, str(name), index), AdmittedGroup(
            lws_uid=str(uid),
            leader_sts_uid=sts_uid or "",
            leader_pod_uid=self.leader_pods.get((ns, str(name), index), ""),
            leader=demand.pods[0].requests,
            worker=demand.pods[1].requests if len(demand.pods) > 1 else {},
            size=lws_size(lws),
            node_selector=dict(pool.node_selector),
            tolerations=(*pool.tolerations, charge_toleration(str(uid), index)),
        )


def index(
    lwss: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    statefulsets: Iterable[Mapping[str, Any]],
    pools: Iterable[Pool],
    demand_of: Callable[[Mapping[str, Any]], object],
) -> Index:
    """Index what a pass read (``demand_of``: the LWS's group demand; ``pools``: the readable
    Pools, an unreadable one admits nothing new, its groups' pods wait for the pass)."""
    pool_by_name: dict[str, Pool] = {}
    for parsed in pools:
        pool_by_name.setdefault(parsed.name, parsed)
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
    lws_by_key = {(str(meta(o).get("namespace") or ""), str(meta(o).get("name") or "")): o for o in lwss}
    return Index(lws_by_key, pool_by_name, leader_sts, leader_pods, demand_of)


def build(
    lwss: Iterable[Mapping[str, Any]],
    records: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    statefulsets: Iterable[Mapping[str, Any]],
    pools: Iterable[Pool],
    demand_of: Callable[[Mapping[str, Any]], object],
) -> dict[tuple[str, str, int], AdmittedGroup]:
    """The whole table after a pass, from what the pass read."""
    idx = index(lwss, pods, statefulsets, pools, demand_of)
    return dict(e for e in map(idx.entry, records) if e is not None)


@dataclass(frozen=True)
class Written:
    """A record as this leader's last write of it was answered, kept until the informer
    shows that version (or any other one than the version the write was made on)."""

    before: str
    """The resourceVersion the write was made on ("" for the write that made the record)."""
    after: Mapping[str, Any]
    """The record as the API server answered the write."""
    at: float
    """When it was answered (the controller's monotonic clock)."""
    made_unseen: bool = False
    """This leader made the record and the informer has not shown it yet."""


def written_after(
    previous: Written | None, guard: str | None, answer: Mapping[str, Any], at: float, *, made: bool = False
) -> Written:
    """The ``Written`` of a record after one more write of it was answered: made (``made``),
    or written on the version ``guard`` (None: on the version this leader wrote last)."""
    if made:
        return Written("", answer, at, made_unseen=True)
    if guard is not None:
        before = guard
    else:
        before = str(meta(previous.after).get("resourceVersion") or "") if previous is not None else ""
    return Written(before, answer, at, made_unseen=previous.made_unseen if previous else False)


def as_known(
    records: Iterable[Mapping[str, Any]],
    written: Mapping[tuple[str, str], Written],
    now: float,
    max_age: float = 60.0,
) -> tuple[list[Mapping[str, Any]], dict[tuple[str, str], Written]]:
    """The records as this leader knows them, and the writes the informer does not show yet.

    The informer's copy of a record lags this leader's own writes by a watch event. A table
    built from it alone left out, for a pass, a group the last pass admitted whose watch
    event had not come yet, and put back a group just given back. So a record written by
    this leader is taken as written while the informer still shows it at the version the
    write was made on, or does not show one it made; any other version of it (or its
    absence, once seen) is newer, and wins.
    """
    by = {key: record for record in records if (key := object_key(record)) is not None}
    still: dict[tuple[str, str], Written] = {}
    for key, w in written.items():
        if now - w.at > max_age:
            continue
        seen = by.get(key)
        if seen is None:
            if w.made_unseen:
                by[key], still[key] = w.after, w
            continue
        version = str(meta(seen).get("resourceVersion") or "")
        if w.before and version == w.before:
            by[key], still[key] = w.after, Written(w.before, w.after, w.at)
    return list(by.values()), still


def _ordinal(value: object) -> int | None:
    try:
        index = int(str(value)) if value is not None else -1
    except ValueError:
        return None
    return index if index >= 0 else None


def _total(status: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in as_map(status.get("demand")).items() if v is not None}


def _total_of(demand: GroupDemand) -> dict[str, str]:
    return {r: format_amount(r, v) for r, v in demand.total.items()}


def member_of(
    pod: Mapping[str, Any],
    namespace: str,
    table: Table,
    statefulsets: StatefulSets,
    pods: StatefulSets | None = None,
) -> AdmittedGroup | None:
    """The admitted group that ``pod`` (in ``namespace``) certainly belongs to, or None: its
    labels name the group, its owner chain leads to the admitted LWS, and it asks exactly
    what the admitted demand says for its role."""
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
    return group


def patch_for(
    pod: Mapping[str, Any],
    namespace: str,
    table: Table,
    statefulsets: StatefulSets,
    pods: StatefulSets | None = None,
) -> list[dict[str, Any]] | None:
    """The JSON patch that creates ``pod`` (being created in ``namespace``) as if its gate had
    been lifted at once: the pool's node selector and tolerations; None when the pod must be
    gated (the usual answer)."""
    group = member_of(pod, namespace, table, statefulsets, pods)
    if group is None:
        return None
    # What lifting the gate would have added, on a pod that never had it.
    gated = {**pod, "spec": {**as_map(pod.get("spec")), "schedulingGates": [{"name": SCHEDULING_GATE}]}}
    ops = ungate_patch(gated, Ungate(namespace, "", group.node_selector, group.tolerations)) or []
    return [op for op in ops if not op["path"].startswith("/spec/schedulingGates")]


def lift_for(
    pod: Mapping[str, Any],
    table: Table,
    statefulsets: StatefulSets,
    pods: StatefulSets | None = None,
) -> list[dict[str, Any]] | None:
    """The JSON patch that lifts the gate of ``pod`` (one that exists, gated) because its group
    already holds its admission: the write a pass would make for it (the gate removed, the
    pool's node selector and tolerations added); None when the pod is not gated, is going,
    or is not certainly a member of an admitted group (the pass decides it then)."""
    if is_terminating(pod):
        return None
    m = meta(pod)
    namespace = str(m.get("namespace") or "")
    group = member_of(pod, namespace, table, statefulsets, pods)
    if group is None:
        return None
    return ungate_patch(
        pod, Ungate(namespace, str(m.get("name") or ""), group.node_selector, group.tolerations)
    )
