"""The Kueue Workload of one LWS group: how the ``kueue`` backend makes it and reads it back.

Why this exists: the ``kueue`` backend's decision (``decide``) is about *when* to make,
keep, delete or follow a Workload; this module is *what* a Workload of ours is. It has pod
sets ``leader`` (1) and ``worker`` (``size - 1``) from the LWS templates (counted before
the workers exist) and the LWS's priority, is owned by the group's record (not the LWS:
Kueue's own LWS integration deletes Workloads an LWS owns that it did not make), and
carries annotations that say which LWS incarnation, spec and demand it was made for. Read
back, it tells whether it belongs to a group, whether the LWS now asks for another one,
which flavors' node labels and tolerations its pods must get, and why it waits, in
Kueue's words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gatekeeper.core.backends.kueue import topology
from gatekeeper.core.kube.keys import (
    CHECK_PENDING,
    CHECK_READY,
    DEMAND_HASH_ANNOTATION,
    EVICTED,
    EVICTED_REASON,
    GATEKEEPER_API_VERSION,
    GROUP_INDEX_LABEL,
    HOLD_FINALIZER,
    KUEUE_ADMITTED,
    KUEUE_API_VERSION,
    LWS_NAME_LABEL,
    LWS_UID_ANNOTATION,
    NEVER_FITS,
    POOL_LABEL,
    PRIORITY_CLASS_GROUP,
    QUOTA_RESERVED,
    RECORD_KIND,
    REQUEUED,
    SPEC_HASH_ANNOTATION,
    WAITING_FOR_CHECKS,
    WAITING_FOR_KUEUE,
)
from gatekeeper.core.kube.objects import as_list, as_map, conditions, digest, is_terminating, labels, meta
from gatekeeper.core.kube.quantity import parse_units
from gatekeeper.core.model.claims import NO_CLAIMS, ClaimBook, template_counts
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import InvalidDemand
from gatekeeper.core.model.groups import GroupState, LwsGroup
from gatekeeper.core.model.lws import GroupPod, priority, size, templates

__all__ = [
    "PERMANENT_REASONS",
    "admitted_where",
    "clear_admission_status",
    "demand_changed",
    "flavor_steering",
    "never_fits",
    "new_pods",
    "new_workload",
    "pod_set_assignment",
    "stale_spec",
    "topology_checked",
    "waiting_reason",
    "workload_belongs",
    "workload_index",
    "workload_indices",
]


#: Kueue reasons that waiting alone will not fix (a person must change something).
PERMANENT_REASONS = frozenset(
    {
        "Misconfigured",
        "NoMatchingFlavor",
        "ExceedsMaxQuota",
        "InvalidSpec",
        "Inadmissible",
        "NodesTooSmall",
        "NoMatchingNode",
    }
)


def workload_belongs(wl: Mapping[str, Any], name: str, uid: str, index: int) -> bool:
    """Is ``wl`` the Workload of group ``index`` of this LWS incarnation?"""
    wl_labels = labels(wl)
    annotations = as_map(meta(wl).get("annotations"))
    return (
        wl_labels.get(LWS_NAME_LABEL) == name
        and wl_labels.get(GROUP_INDEX_LABEL) == str(index)
        and annotations.get(LWS_UID_ANNOTATION, uid) == uid
    )


def counted_spec(spec: Any, namespace: str, claim_book: ClaimBook) -> Any:
    """A pod set's spec as Kueue is to count it: devices asked through DRA claims become
    requests (and limits) of the resource their DeviceClass names on the first container,
    the claims themselves dropped, so that Kueue's quota counts what the gatekeeper counts
    whatever Kueue's own DRA support says (``core.model.claims``)."""
    if not isinstance(spec, Mapping) or not spec.get("resourceClaims"):
        return spec
    try:
        counts = template_counts(namespace, spec, claim_book, "spec")
    except ValueError:
        return spec  # the group's demand says why: it gets no Workload
    containers = [dict(as_map(c)) for c in as_list(spec.get("containers"))]
    for c in containers:
        resources = {k: v for k, v in as_map(c.get("resources")).items() if k != "claims"}
        c["resources"] = resources
    if containers:
        resources = containers[0]["resources"]
        requests, limits = dict(as_map(resources.get("requests"))), dict(as_map(resources.get("limits")))
        for resource, count in counts.items():
            had = requests.get(resource, limits.get(resource))
            requests[resource] = limits[resource] = str((parse_units(resource, had) if had else 0) + count)
        resources["requests"], resources["limits"] = requests, limits
    return {**{k: v for k, v in spec.items() if k != "resourceClaims"}, "containers": containers}


def new_workload(
    group: GroupState,
    lws: Mapping[str, Any],
    record_uid: str,
    priorities: Mapping[str, int] | None = None,
    claim_book: ClaimBook = NO_CLAIMS,
) -> dict[str, Any]:
    """The Kueue Workload of one group: pod sets from the LWS templates (devices asked through
    DRA claims as requests: ``counted_spec``), owned by its record."""
    leader, worker = templates(lws)
    count = size(lws)
    ns = group.key.namespace
    pod_sets: list[dict[str, Any]] = [
        {"name": "leader", "count": 1, "template": {"spec": counted_spec(leader.get("spec"), ns, claim_book)}}
    ]
    if count > 1:
        worker_spec = counted_spec(worker.get("spec"), ns, claim_book)
        pod_sets.append({"name": "worker", "count": count - 1, "template": {"spec": worker_spec}})
    for pod_set, template in zip(pod_sets, (leader, worker), strict=False):
        try:
            asked = topology.request(group.topology, template, int(pod_set["count"]))
        except ValueError:
            asked = None  # the group's demand says why (``pod_set_topology``): it gets no Workload
        if asked is not None:
            pod_set["topologyRequest"] = asked
    spec: dict[str, Any] = {"queueName": group.pool, "podSets": pod_sets}
    prio = priority(lws, priorities or {})
    if prio.class_name is not None and prio.value is not None:
        spec["priorityClassRef"] = {
            "group": PRIORITY_CLASS_GROUP,
            "kind": "PriorityClass",
            "name": prio.class_name,
        }
    if prio.value is not None:
        spec["priority"] = prio.value
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": group.record,
            "namespace": group.key.namespace,
            "labels": {
                LWS_NAME_LABEL: group.key.name,
                GROUP_INDEX_LABEL: str(group.key.index),
                POOL_LABEL: group.pool,
            },
            "annotations": _workload_annotations(group, spec),
            "finalizers": [HOLD_FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": GATEKEEPER_API_VERSION,
                    "kind": RECORD_KIND,
                    "name": group.record,
                    "uid": record_uid,
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": spec,
    }


def _workload_annotations(group: GroupState, spec: Mapping[str, Any]) -> dict[str, str]:
    notes = {LWS_UID_ANNOTATION: group.lws_uid, SPEC_HASH_ANNOTATION: _spec_hash(spec)}
    if isinstance(group.demand, GroupDemand):
        notes[DEMAND_HASH_ANNOTATION] = _demand_hash(group.demand)
    return notes


def _demand_hash(demand: GroupDemand) -> str:
    return digest(json.dumps([[p.role, sorted(p.requests.items())] for p in demand.pods]))


def demand_changed(wl: Mapping[str, Any], demand: GroupDemand) -> bool:
    """Was the Workload made for another demand than the LWS asks now? (No when it does not say.)"""
    made = as_map(meta(wl).get("annotations")).get(DEMAND_HASH_ANNOTATION)
    return made is not None and made != _demand_hash(demand)


def never_fits(wl: Mapping[str, Any]) -> str | None:
    """The message of a check of ours saying the Workload can never fit its flavor's nodes."""
    for state in as_list(as_map(wl.get("status")).get("admissionChecks")):
        state = as_map(state)
        message = str(state.get("message") or "")
        if state.get("state") == CHECK_PENDING and message.startswith(NEVER_FITS):
            return message
    return None


def _workload_spec(
    group: GroupState, lws: Mapping[str, Any], priorities: Mapping[str, int], claim_book: ClaimBook
) -> dict[str, Any]:
    spec: dict[str, Any] = new_workload(group, lws, "", priorities, claim_book)["spec"]
    return spec


def _spec_hash(spec: Mapping[str, Any]) -> str:
    return digest(json.dumps(spec, sort_keys=True, default=str))


def stale_spec(
    wl: Mapping[str, Any],
    group: GroupState,
    lws: Mapping[str, Any],
    priorities: Mapping[str, int],
    claim_book: ClaimBook = NO_CLAIMS,
) -> bool:
    """Does the Workload differ from what the LWS asks now? (Unknown when it carries no hash.)"""
    made = as_map(meta(wl).get("annotations")).get(SPEC_HASH_ANNOTATION)
    return made is not None and made != _spec_hash(_workload_spec(group, lws, priorities, claim_book))


def pod_set_assignment(wl: Mapping[str, Any], pod_set: str) -> Mapping[str, Any]:
    """Kueue's ``topologyAssignment`` of ``pod_set`` in the Workload's admission ({} when none)."""
    for psa in as_list(as_map(as_map(wl.get("status")).get("admission")).get("podSetAssignments")):
        if as_map(psa).get("name") == pod_set:
            return as_map(as_map(psa).get("topologyAssignment"))
    return {}


def flavor_steering(
    wl: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]], pod_set: str, rank: int | None = None
) -> tuple[dict[str, str], tuple[Mapping[str, Any], ...]]:
    """Node labels and tolerations of the flavors Kueue assigned to ``pod_set``, and the labels
    of the topology domain Kueue's Topology Aware Scheduling put it in (``topology``): the
    pod's own, with ``rank`` (its place in the pod set), else the one that holds them all."""
    node_labels: dict[str, str] = {}
    tolerations: list[Mapping[str, Any]] = []
    admission = as_map(as_map(wl.get("status")).get("admission"))
    assignments = admission.get("podSetAssignments")
    for psa in assignments if isinstance(assignments, list) else []:
        if not isinstance(psa, Mapping) or psa.get("name") != pod_set:
            continue
        for flavor_name in sorted({str(f) for f in as_map(psa.get("flavors")).values()}):
            flavor = as_map(flavors.get(str(flavor_name)))
            fspec = as_map(flavor.get("spec"))
            node_labels.update({str(k): str(v) for k, v in as_map(fspec.get("nodeLabels")).items()})
            tols = fspec.get("tolerations")
            for tol in tols if isinstance(tols, list) else []:
                if isinstance(tol, Mapping) and tol not in tolerations:
                    tolerations.append(tol)
        node_labels.update(topology.assigned_domain(as_map(psa.get("topologyAssignment")), rank))
    return node_labels, tuple(tolerations)


def admitted_where(admission: Mapping[str, Any]) -> str:
    """Where Kueue admitted a Workload, for its record: "ClusterQueue cq, flavor h100", and the
    topology domain that holds every pod set ("in rack=r2") when Kueue assigned one, else each
    pod set's ("leader in kubernetes.io/hostname=n3; worker in ...")."""
    assigned = [as_map(psa) for psa in as_list(admission.get("podSetAssignments"))]
    used = sorted({str(f) for psa in assigned for f in as_map(psa.get("flavors")).values()})
    where = f"ClusterQueue {admission.get('clusterQueue', '')}, flavor {', '.join(used) or '-'}"
    domains = [topology.assigned_domain(as_map(psa.get("topologyAssignment"))) for psa in assigned]
    shared = [(k, v) for k, v in domains[0].items() if all(d.get(k) == v for d in domains)] if domains else []
    if shared:
        return f"{where} in {', '.join(f'{k}={v}' for k, v in shared)}"
    apart = [
        f"{psa.get('name')} in {', '.join(f'{k}={v}' for k, v in domain.items())}"
        for psa, domain in zip(assigned, domains, strict=True)
        if domain
    ]
    return f"{where} ({'; '.join(apart)})" if apart else where


def topology_checked(group: LwsGroup, lws: Mapping[str, Any]) -> LwsGroup:
    """``group``, its demand ``InvalidSpec`` when the topology its LWS asks cannot go into its
    Workload's pod sets (``topology.request``): it then gets no Workload, and says why."""
    st = group.state
    if not isinstance(st.demand, GroupDemand):
        return group
    leader, worker = templates(lws)
    try:
        count = size(lws)
        topology.request(st.topology, leader, 1)
        if count > 1:
            topology.request(st.topology, worker, count - 1)
    except ValueError as exc:
        said = InvalidDemand(f"LeaderWorkerSet {st.key.namespace}/{st.key.name}: {exc}")
        return replace(group, state=replace(st, demand=said))
    return group


def waiting_reason(wl: Mapping[str, Any] | None, index: int, queue: str) -> tuple[str, str]:
    """Why a group's Workload is not admitted, in Kueue's words."""
    if wl is None:
        return WAITING_FOR_KUEUE, f"group {index} waits: its Workload is being created in LocalQueue {queue}"
    name = str(meta(wl).get("name"))
    if is_terminating(wl):
        return WAITING_FOR_KUEUE, (
            f"group {index} waits: its Workload {name} is being deleted; the pods it let through are "
            "stopped, and a new Workload is made once they are gone"
        )
    conds = conditions(wl)
    evicted = conds.get(EVICTED, {})
    if evicted.get("status") == "True":
        return EVICTED_REASON, (
            f"group {index} was evicted by Kueue ({evicted.get('reason')}): {evicted.get('message', '')}; "
            "its pods are stopped and it waits again"
        )
    reserved = conds.get(QUOTA_RESERVED, {})
    if reserved.get("status") == "True":
        checks = as_map(wl.get("status")).get("admissionChecks")
        pending = [
            f"{c.get('name')} is {c.get('state')}: {c.get('message') or 'no message'}"
            for c in (checks if isinstance(checks, list) else [])
            if isinstance(c, Mapping) and c.get("state") != CHECK_READY
        ]
        detail = "; ".join(pending) or "Kueue has not admitted it yet"
        return WAITING_FOR_CHECKS, f"group {index} has quota in Kueue but waits: {detail}"
    if reserved:
        reason = str(reserved.get("reason") or "Pending")
        return (
            reason,
            f"group {index} waits in LocalQueue {queue} (Workload {name}): {reserved.get('message', '')}",
        )
    return WAITING_FOR_KUEUE, (
        f"group {index} waits in LocalQueue {queue}: Kueue has not evaluated Workload {name} yet "
        "(it may be queued behind others)"
    )


def workload_indices(
    workloads: Mapping[tuple[str, str], Mapping[str, Any]], ns: str, name: str, uid: str
) -> set[int]:
    """Indices of this LWS incarnation's groups that have a Workload of ours."""
    return {
        workload_index(w)
        for (wns, _), w in workloads.items()
        if wns == ns and workload_index(w) >= 0 and workload_belongs(w, name, uid, workload_index(w))
    }


def workload_index(wl: Mapping[str, Any]) -> int:
    """The group index a Workload of ours is labelled with; -1 when unreadable."""
    try:
        return int(str(labels(wl).get(GROUP_INDEX_LABEL)))
    except ValueError:
        return -1


def clear_admission_status(wl: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The status that gives an evicted Workload's quota back, as Kueue's job integrations write it.

    ``admission`` goes, ``QuotaReserved`` and ``Admitted`` turn False and ``Requeued``
    True (so Kueue queues it again at once), each with the Workload's ``observedGeneration``
    as Kueue writes it; other conditions stay as they are.
    """
    conds = conditions(wl)
    generation = meta(wl).get("generation")
    observed = {"observedGeneration": generation} if type(generation) is int and generation > 0 else {}
    evicted = conds.get(EVICTED, {})
    message = str(evicted.get("message") or "evicted")
    reason = str(evicted.get("reason") or EVICTED_REASON)

    def cond(kind: str, status: str, why: str) -> dict[str, Any]:
        old = conds.get(kind, {})
        same = old.get("status") == status
        return {
            "type": kind,
            "status": status,
            "reason": why,
            "message": message,
            "lastTransitionTime": old.get("lastTransitionTime", now) if same else now,
            **observed,
        }

    replaced = {
        QUOTA_RESERVED: cond(QUOTA_RESERVED, "False", "Pending"),
        KUEUE_ADMITTED: cond(KUEUE_ADMITTED, "False", "NoReservation"),
        REQUEUED: cond(REQUEUED, "True", reason),
    }
    out = [dict(c) for kind, c in conds.items() if kind not in replaced]
    out.extend(replaced.values())
    return {"admission": None, "conditions": out}


def new_pods(
    wl: Mapping[str, Any], record: Mapping[str, Any], demand: GroupDemand, members: Sequence[GroupPod]
) -> list[str]:
    """Pods made from templates that ask another demand than the admitted Workload's.

    Empty when the demand did not change. Old pods carry the revision the record noted
    while the Workload was admitted (``status.templateRevision``) or that of a pod of the
    group already let through; pods without a revision label count as old.
    """
    if not demand_changed(wl, demand):
        return []
    made_at = str(as_map(record.get("status")).get("templateRevision") or "")
    old = {p.revision for p in members if p.live and not p.gated} | {made_at}
    return sorted(
        p.name for p in members if p.live and not p.terminating and p.revision and p.revision not in old
    )
