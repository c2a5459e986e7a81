"""The node-fit Kueue AdmissionCheck: admit a Workload only when all its pods fit free node room.

Why this exists: Kueue admits by quota, and quota is not placement. Four free GPUs
spread 1+1+1+1 satisfy a ClusterQueue's quota for two pods of two GPUs each; Kueue
admits the Workload, lifts its pods' gates, and the pods stay Unschedulable while they
hold the quota. A Kueue AdmissionCheck closes that gap: a ClusterQueue that lists an
AdmissionCheck whose ``spec.controllerName`` is ``lws-gatekeeper.io/node-fit`` admits a
Workload only once this controller sets the check's state to ``Ready``.

This module is the whole decision, as a function of plain data (Kueue and core objects
as the API returns them) with no I/O, so every outcome is reproducible in a unit test.
``decide_node_fit`` returns which AdmissionCheck objects to mark ``Active`` and which
check states of which Workloads to change. The rules:

* Only Workloads with quota reserved (``QuotaReserved=True`` and ``status.admission``)
  are checked: only then are their flavors known. Finished and evicted Workloads are
  ignored.
* A pod set's pods go to the nodes of the flavors Kueue assigned to it (the flavors'
  ``nodeLabels`` join the pod's node selector, their ``tolerations`` its tolerations,
  as Kueue does when it admits). The count is ``status.admission.podSetAssignments[].count``
  when present (partial admission), else the pod set's ``count``.
* Free room = node allocatable minus the requests of every bound, non-terminal pod
  (anyone's), minus room held for Workloads whose check is already ``Ready`` but whose
  pods are not all bound yet (only their unbound pods are held).
* Pending Workloads are checked one after another (priority high to low, then oldest,
  then by name); one that fits is marked ``Ready`` and its room is held for the ones
  after it in the same pass, so two Workloads never get the same room.
* One that does not fit stays ``Pending``, with a message that names the pod set, what
  one pod needs and what the best node has free, or says that it can never fit, even on
  the flavor's empty nodes.
* A check state is only written when its state or message changes.

Pods belong to a Workload when they are bound pods in its namespace and: they carry the
label or annotation ``kueue.x-k8s.io/pod-group-name`` with the Workload's name (Kueue's
pod groups, which its LWS integration uses); or they, or their owner, own the Workload
(Jobs own their Workload; a pod group's pods own theirs); or, for the gatekeeper's own
Workloads, their ``leaderworkerset.sigs.k8s.io/name`` and ``group-index`` labels equal
the Workload's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.admission.fit import Misfit, NodeTable
from gatekeeper.core.admission.messages import amount, plural
from gatekeeper.core.checks.states import CheckUpdate
from gatekeeper.core.kube.keys import (
    ACTIVE,
    CHECK_PENDING,
    CHECK_READY,
    CHECK_REJECTED,
    CHECK_RETRY,
    EVICTED,
    FINISHED,
    GROUP_INDEX_LABEL,
    KUEUE_POD_GROUP_KEY,
    KUEUE_PODSET_LABEL,
    KUEUE_ROLE_ANNOTATION,
    LWS_NAME_LABEL,
    NEVER_FITS,
    NO_NODE_FITS,
    NODE_FIT_ACTIVE_MESSAGE,
    NODE_FIT_ACTIVE_REASON,
    NODE_FIT_CONTROLLER,
    QUOTA_RESERVED,
    WORKER_INDEX_LABEL,
)
from gatekeeper.core.kube.objects import as_list, as_map, condition, is_true
from gatekeeper.core.kube.quantity import format_amount, format_resources
from gatekeeper.core.model.demand import PodDemand, pod_demand
from gatekeeper.core.model.devices import DeviceRoom, with_devices
from gatekeeper.core.model.nodes import Node, RequestsMemo, node_usage_skipping
from gatekeeper.core.plugin.decided import Decided

__all__ = ["CheckUpdate", "NodeFitActions", "decide_node_fit"]

MAX_WORKLOAD_PODS = 10_000
"""A Workload with more pods is not placed pod by pod (its check stays Pending and says why):
any tenant's Job can ask for billions, and each pod of a check is a placement to try."""

#: States only Kueue moves on from (after a retry delay, or never): left alone.
_KUEUE_OWNED = frozenset({CHECK_RETRY, CHECK_REJECTED})
_VIEW = "*"


@dataclass(frozen=True, kw_only=True)
class NodeFitActions(Decided):
    """What one pass decided.

    ``activate``: AdmissionCheck names whose ``Active`` condition must be (re)written.
    ``updates``: check states that differ from what the Workload shows.
    ``ready`` / ``pending``: Workloads with quota reserved whose node-fit checks are
    Ready / not Ready after this pass. ``problems``: objects ignored, in words.
    """

    activate: tuple[str, ...] = ()
    updates: tuple[CheckUpdate, ...] = ()
    ready: int = 0
    pending: int = 0


# ----- reading objects ------------------------------------------------------------------


@dataclass(frozen=True)
class _PodSet:
    name: str
    count: int
    spec: Mapping[str, Any]
    flavors: tuple[str, ...]


@dataclass
class _Workload:
    namespace: str
    name: str
    priority: int
    created: str
    owners: frozenset[str]
    labels: Mapping[str, str]
    checks: dict[str, tuple[str, str]]  # our check name -> (state, message)
    pod_sets: list[_PodSet]

    @property
    def label(self) -> str:
        return f"Workload {self.namespace}/{self.name}"

    def order(self) -> tuple[int, str, str, str]:
        return (-self.priority, self.created, self.name, self.namespace)


def _workload(obj: Mapping[str, Any], ours: frozenset[str]) -> _Workload | None:
    """The parts of a Workload node fit needs, or None if it is not ours to check now."""
    status = as_map(obj.get("status"))
    checks: dict[str, tuple[str, str]] = {}
    for entry in as_list(status.get("admissionChecks")):
        entry = as_map(entry)
        name = entry.get("name")
        if isinstance(name, str) and name in ours:
            checks[name] = (str(entry.get("state") or ""), str(entry.get("message") or ""))
    if not checks:
        return None
    admission = as_map(status.get("admission"))
    if not admission or not is_true(obj, QUOTA_RESERVED) or is_true(obj, FINISHED):
        return None
    if is_true(obj, EVICTED):
        # Being evicted (preempted, say): Kueue resets the checks to Pending and the quota
        # goes back; a verdict now would only be undone. Kueue clears Evicted when it
        # reserves quota again, and then the Workload is checked afresh.
        return None
    meta, spec = as_map(obj.get("metadata")), as_map(obj.get("spec"))
    assignments = {str(as_map(a).get("name")): as_map(a) for a in as_list(admission.get("podSetAssignments"))}
    pod_sets: list[_PodSet] = []
    for raw in as_list(spec.get("podSets")):
        ps = as_map(raw)
        name = str(ps.get("name") or "")
        assigned = assignments.get(name, {})
        count = assigned.get("count")
        if not isinstance(count, int) or isinstance(count, bool):
            count = ps.get("count", 1)
        count = count if isinstance(count, int) and not isinstance(count, bool) else 1
        flavors = tuple(sorted({str(f) for f in as_map(assigned.get("flavors")).values()}))
        pod_sets.append(_PodSet(name, max(count, 0), as_map(as_map(ps.get("template")).get("spec")), flavors))
    priority = spec.get("priority")
    owners = frozenset(
        str(as_map(o).get("uid")) for o in as_list(meta.get("ownerReferences")) if as_map(o).get("uid")
    )
    labels = {str(k): str(v) for k, v in as_map(meta.get("labels")).items()}
    return _Workload(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        created=str(meta.get("creationTimestamp") or ""),
        owners=owners,
        labels=labels,
        checks=checks,
        pod_sets=pod_sets,
    )


class _Members:
    """Bound pods indexed by every way a pod can belong to a Workload."""

    def __init__(self, pods: Iterable[Mapping[str, Any]]) -> None:
        self.by_group: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        self.by_owner: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        self.by_lws: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
        for pod in pods:
            meta = as_map(pod.get("metadata"))
            ns = str(meta.get("namespace") or "")
            labels, annotations = as_map(meta.get("labels")), as_map(meta.get("annotations"))
            group = labels.get(KUEUE_POD_GROUP_KEY) or annotations.get(KUEUE_POD_GROUP_KEY)
            if group:
                self.by_group.setdefault((ns, str(group)), []).append(pod)
            uids = {str(meta.get("uid") or "")} | {
                str(as_map(o).get("uid") or "") for o in as_list(meta.get("ownerReferences"))
            }
            for uid in uids - {""}:
                self.by_owner.setdefault((ns, uid), []).append(pod)
            if LWS_NAME_LABEL in labels and GROUP_INDEX_LABEL in labels:
                key = (ns, str(labels[LWS_NAME_LABEL]), str(labels[GROUP_INDEX_LABEL]))
                self.by_lws.setdefault(key, []).append(pod)

    def of(self, wl: _Workload) -> list[Mapping[str, Any]]:
        found: dict[tuple[str, str], Mapping[str, Any]] = {}
        candidates = list(self.by_group.get((wl.namespace, wl.name), ()))
        for uid in wl.owners:
            candidates.extend(self.by_owner.get((wl.namespace, uid), ()))
        if LWS_NAME_LABEL in wl.labels and GROUP_INDEX_LABEL in wl.labels:
            key = (wl.namespace, wl.labels[LWS_NAME_LABEL], wl.labels[GROUP_INDEX_LABEL])
            candidates.extend(self.by_lws.get(key, ()))
        for pod in candidates:
            meta = as_map(pod.get("metadata"))
            found[(str(meta.get("name")), str(meta.get("uid")))] = pod
        return list(found.values())


def _pod_set_of(pod: Mapping[str, Any], names: Sequence[str], left: Mapping[str, int]) -> str | None:
    """Which pod set a bound pod of a Workload fills."""
    meta = as_map(pod.get("metadata"))
    labels, annotations = as_map(meta.get("labels")), as_map(meta.get("annotations"))
    for hint in (labels.get(KUEUE_PODSET_LABEL), annotations.get(KUEUE_ROLE_ANNOTATION)):
        if isinstance(hint, str) and hint in names:
            return hint
    worker_index = labels.get(WORKER_INDEX_LABEL)
    if worker_index is not None:
        wanted = ("leader",) if str(worker_index) == "0" else ("worker", "workers")
        for name in wanted:
            if name in names:
                return name
    if len(names) == 1:
        return names[0]
    return next((name for name in names if left.get(name, 0) > 0), None)


@dataclass(frozen=True)
class _Pods:
    """The pods of a Workload still to place, and per pod what to call it in messages."""

    demands: tuple[PodDemand, ...]
    where: tuple[str, ...]  # per pod: its flavors, for messages
    total: int


def _unbound_pods(
    wl: _Workload, members: Sequence[Mapping[str, Any]], flavors: Mapping[str, Mapping[str, Any]]
) -> _Pods | str:
    """The pods of ``wl`` not bound yet, as demands on their flavors' nodes; or why they cannot be read."""
    names = [ps.name for ps in wl.pod_sets]
    total = sum(ps.count for ps in wl.pod_sets)
    if total > MAX_WORKLOAD_PODS:
        return f"it has {total} pods; node fit checks Workloads of at most {MAX_WORKLOAD_PODS}"
    left = {ps.name: ps.count for ps in wl.pod_sets}
    for pod in members:
        name = _pod_set_of(pod, names, left)
        if name is not None and left.get(name, 0) > 0:
            left[name] -= 1
    demands: list[PodDemand] = []
    where: list[str] = []
    for ps in wl.pod_sets:
        if left[ps.name] <= 0:
            continue
        labels: dict[str, str] = {}
        tolerations: list[Any] = []
        for flavor_name in ps.flavors:
            flavor = flavors.get(flavor_name)
            if flavor is None:
                return f"its pod set {ps.name} is assigned flavor {flavor_name}, which does not exist"
            fspec = as_map(flavor.get("spec"))
            labels.update({str(k): str(v) for k, v in as_map(fspec.get("nodeLabels")).items()})
            tolerations.extend(t for t in as_list(fspec.get("tolerations")) if t not in tolerations)
        spec = dict(ps.spec)
        spec["nodeSelector"] = {**as_map(spec.get("nodeSelector")), **labels}
        if tolerations:
            spec["tolerations"] = [*as_list(spec.get("tolerations")), *tolerations]
        try:
            demand = pod_demand(ps.name, spec, where=f"spec.podSets[{ps.name}].template.spec")
        except ValueError as err:
            return f"its pod set {ps.name} cannot be read: {err}"
        label = "flavor " + ", ".join(ps.flavors) if ps.flavors else "any flavor"
        demands.extend([demand] * left[ps.name])
        where.extend([label] * left[ps.name])
    return _Pods(tuple(demands), tuple(where), sum(ps.count for ps in wl.pod_sets))


# ----- messages -------------------------------------------------------------------------


def _needs(misfit: Misfit) -> str:
    return format_resources({r: a for r, a in misfit.requests.items() if r != "pods"}) or "a pod slot"


def _fits(pods: _Pods) -> str:
    places = sorted(set(pods.where))
    return (
        f"all {plural(pods.total, 'pod')} fit the free room of the nodes of {' and '.join(places)}"
        if pods.demands
        else f"all {plural(pods.total, 'pod')} are already bound to nodes"
    )


def _waits(pods: _Pods, misfit: Misfit) -> str:
    where = pods.where[misfit.pod]
    head = f"waits for node room: a pod of pod set {misfit.role}"
    if misfit.eligible == 0:
        return (
            f"waits for node room: no schedulable node of {where} accepts the pods "
            f"of pod set {misfit.role} now"
        )
    if misfit.resource is None:
        text = f"{head} needs {_needs(misfit)}, and no node of {where} has all of that free at once"
    elif misfit.total == 0:
        text = (
            f"{head} needs {amount(misfit.resource, misfit.needed)}; none of the "
            f"{plural(misfit.eligible, 'node')} of {where} has any {misfit.resource} free"
        )
    else:
        res = misfit.resource
        text = (
            f"{head} needs {amount(res, misfit.needed)}; the most free on any node of {where} is "
            f"{amount(res, misfit.largest)} ({format_amount(res, misfit.total)} free in all, "
            f"on {plural(misfit.spread, 'node')})"
        )
    if misfit.placed:
        text += f", after placing {plural(misfit.placed, 'other pod')} of this workload"
    return text


def _never(pods: _Pods, misfit: Misfit) -> str:
    where = pods.where[misfit.pod]
    head = f"{NEVER_FITS}, even on empty nodes: a pod of pod set {misfit.role}"
    if misfit.eligible == 0:
        return (
            f"{NO_NODE_FITS} of {where} accepts the pods of pod set {misfit.role} "
            "(check the flavor's node labels and the pods' node selector, affinity and tolerations)"
        )
    if misfit.resource is None:
        return f"{head} needs {_needs(misfit)}, and no node of {where} has all of that"
    res = misfit.resource
    need, largest = amount(res, misfit.needed), amount(res, misfit.largest)
    if misfit.placed == 0:
        return f"{head} needs {need}; the largest node of {where} has {largest}"
    return (
        f"{head} needs {need}, and with the workload's other {plural(misfit.placed, 'pod')} placed "
        f"on the empty nodes of {where}, no node has more than {largest} left"
    )


# ----- the decision ---------------------------------------------------------------------


def _active(check: Mapping[str, Any]) -> bool:
    cond = condition(check, ACTIVE)
    return (
        cond.get("status") == "True"
        and cond.get("reason") == NODE_FIT_ACTIVE_REASON
        and cond.get("message") == NODE_FIT_ACTIVE_MESSAGE
    )


def decide_node_fit(
    workloads: Iterable[Mapping[str, Any]],
    admission_checks: Iterable[Mapping[str, Any]],
    flavors: Iterable[Mapping[str, Any]],
    nodes: Iterable[Node],
    bound_pods: Iterable[Mapping[str, Any]],
    requests: RequestsMemo | None = None,
    devices: DeviceRoom | None = None,
) -> NodeFitActions:
    """One pass of the node-fit AdmissionCheck controller (see the module docstring).

    ``workloads``, ``admission_checks`` and ``flavors`` are Kueue objects
    (``kueue.x-k8s.io/v1beta2``), ``bound_pods`` the pods with a ``spec.nodeName``,
    ``devices`` the DRA devices of each node (``core.model.devices``).
    """
    ours: set[str] = set()
    activate: list[str] = []
    for check in admission_checks:
        if as_map(check.get("spec")).get("controllerName") != NODE_FIT_CONTROLLER:
            continue
        name = str(as_map(check.get("metadata")).get("name") or "")
        ours.add(name)
        if not _active(check):
            activate.append(name)
    flavor_map = {str(as_map(f.get("metadata")).get("name")): f for f in flavors}
    bound = list(bound_pods)
    problems: list[str] = []
    node_list, usage = with_devices(
        list(nodes), node_usage_skipping(bound, problems, requests), devices or DeviceRoom()
    )
    table = NodeTable(node_list, usage)
    table.add_view(_VIEW, lambda _node: True)
    empty: NodeTable | None = None
    members = _Members(bound)
    parsed = [w for w in (_workload(obj, frozenset(ours)) for obj in workloads) if w is not None]
    parsed.sort(key=_Workload.order)
    holders = [w for w in parsed if all(state == CHECK_READY for state, _ in w.checks.values())]
    waiting = [
        w
        for w in parsed
        if any(state != CHECK_READY for state, _ in w.checks.values())
        and not any(state in _KUEUE_OWNED for state, _ in w.checks.values())
    ]

    # Room for Workloads already Ready: their unbound pods are about to be bound.
    for wl in holders:
        pods = _unbound_pods(wl, members.of(wl), flavor_map)
        if isinstance(pods, str) or not pods.demands:
            continue
        if isinstance(table.place(_VIEW, pods.demands), Misfit):
            # Someone else took part of its room meanwhile: hold what is still there.
            for demand in pods.demands:
                table.reserve(_VIEW, demand)

    updates: list[CheckUpdate] = []
    ready = len(holders)
    for wl in waiting:
        pods = _unbound_pods(wl, members.of(wl), flavor_map)
        if isinstance(pods, str):
            state, message = CHECK_PENDING, f"cannot be checked: {pods}"
            problems.append(f"{wl.label}: {pods}")
        else:
            result = table.place(_VIEW, pods.demands) if pods.demands else ()
            if not isinstance(result, Misfit):
                state, message = CHECK_READY, _fits(pods)
            else:
                if empty is None:
                    empty = NodeTable(node_list, hypothetical=True)
                    empty.add_view(_VIEW, lambda _node: True)
                never = empty.place(_VIEW, pods.demands, keep=False)
                state = CHECK_PENDING
                message = _never(pods, never) if isinstance(never, Misfit) else _waits(pods, result)
        if state == CHECK_READY:
            ready += 1
        for check_name, (old_state, old_message) in sorted(wl.checks.items()):
            if (old_state, old_message) != (state, message):
                updates.append(CheckUpdate(wl.namespace, wl.name, check_name, state, message))
    return NodeFitActions(
        activate=tuple(sorted(activate)),
        updates=tuple(updates),
        ready=ready,
        pending=len(parsed) - ready,
        problems=tuple(problems),
    )
