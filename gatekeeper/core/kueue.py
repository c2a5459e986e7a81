"""The ``kueue`` backend's whole decision: one Kueue Workload per LWS group, gates follow it.

Why this exists: with the ``kueue`` backend, Kueue's ClusterQueues (cohorts, fair
sharing, preemption) decide which group runs, and the gatekeeper keeps only its own
gate. This module turns a snapshot (opted-in LWSs, their pods, our records, our
Workloads, ResourceFlavors) into ``KueueActions`` without any I/O, the same way
``reconcile.decide`` does for the ``pools`` backend: plan, then act.

The model, per group of an opted-in LWS (label ``lws-gatekeeper.io/pool`` naming a
LocalQueue in the LWS's namespace):

* Groups are enumerated as in ``reconcile``: ``0..replicas-1`` plus any index that still
  has a live pod; a group of a deleted LWS, or beyond ``replicas`` with only terminating
  pods, is leaving.
* Each group has a ``GroupAdmission`` record (owned by the LWS) and one Workload of the
  same name, owned by the record. Not by the LWS: Kueue's own LWS integration reconciles
  every LWS that owns a Workload and deletes Workloads it did not make. So the Workload
  goes when its record goes, and the record when the LWS goes.
* The Workload has pod sets ``leader`` (1) and ``worker`` (``size - 1``) from the LWS
  templates, counted before the workers exist, and the LWS's priority.
* Kueue admits it (``Admitted=True``): every gated pod of the group loses its gate in
  one write that also adds the assigned flavors' node labels to its node selector (and
  their tolerations), so the pods land on the flavor's nodes. Pods that come later
  (LeaderReady workers, restarts) go through the same way.
* Kueue evicts or preempts it, or it is no longer admitted for any other reason: every
  ungated pod of the group is deleted (the LWS recreates them, gated by the webhook), so
  no group is left half-running; once none is left, the Workload's quota reservation is
  cleared as Kueue's job integrations do (``QuotaReserved=False``, ``Requeued=True``),
  and Kueue queues it again.
* A Workload Kueue has not reserved quota for is made again when the LWS asks for another
  one (another LocalQueue in its label, other templates, another priority): Kueue's pod
  sets cannot change. An admitted Workload is kept as long as the group's demand is the
  same (a new image goes through on it). When the LWS's templates ask another demand (a
  rolling update to other pod sizes), pods are told apart by the LWS revision label as
  in ``reconcile``: old pods (the Workload's revision, or that of a pod already let
  through) still go through on it, new pods stay gated; once only new pods are left, the
  Workload is deleted (its quota goes back to Kueue) and a new one is made for the new
  demand, queued like any other.
* A Workload of ours whose node-fit check says its pods can never fit the nodes of its
  flavor (``core.nodefit``: a pod larger than any node, or no node its pods accept) is
  deleted, so that it holds no quota, and made again after a delay (60 s by default,
  doubled each time up to 30 minutes; ``status.retryAt`` and ``status.retries`` on the
  record), in case nodes joined. Kueue's own ``Retry`` state cannot do this in v0.19.2:
  with a delay it keeps the quota until the delay is over, without one it loops at once.
  The record says why (reason ``NodesTooSmall`` or ``NoMatchingNode``, as with pools).
* A leaving group keeps its Workload (and so its quota) until its last pod is gone, then
  its record and Workload are deleted.
* The record mirrors the Workload: ``Admitted`` with Kueue's reason and message, so
  ``kubectl get groupadmissions`` reads the same with either backend.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gatekeeper.core.demand import GroupDemand
from gatekeeper.core.names import API_GROUP, API_VERSION, POOL_LABEL, SCHEDULING_GATE
from gatekeeper.core.nodefit import NEVER_FITS, NO_NODE_FITS
from gatekeeper.core.quantity import format_resources
from gatekeeper.core.queue import InvalidDemand
from gatekeeper.core.reconcile import (
    ADMITTED,
    GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    RECORD_KIND,
    GroupState,
    _lws_groups,
    _map,
    _meta,
    _object_key,
    _parse_time,
    _Pod,
    _pods_by_group,
    digest,
)

__all__ = [
    "DEMAND_HASH_ANNOTATION",
    "KUEUE_API_VERSION",
    "LWS_UID_ANNOTATION",
    "NEVER_FIT_RETRY_MAX_SECONDS",
    "NEVER_FIT_RETRY_SECONDS",
    "SPEC_HASH_ANNOTATION",
    "KueueActions",
    "KueueSnapshot",
    "RecordStatus",
    "Ungate",
    "clear_admission_status",
    "decide_kueue",
    "new_workload",
    "ungate_patch",
]

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
LWS_UID_ANNOTATION = f"{API_GROUP}/leaderworkerset-uid"
SPEC_HASH_ANNOTATION = f"{API_GROUP}/spec-hash"
"""Digest of the Workload spec the gatekeeper made, to see when the LWS asks for another one."""
DEMAND_HASH_ANNOTATION = f"{API_GROUP}/demand-hash"
"""Digest of the group's demand (requests per pod) the Workload was made for."""
_RECORD_API_VERSION = f"{API_GROUP}/{API_VERSION}"
NEVER_FIT_RETRY_SECONDS = 60
NEVER_FIT_RETRY_MAX_SECONDS = 1800

#: Kueue reasons that waiting alone will not fix (a person must change something).
_PERMANENT = frozenset(
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


@dataclass(frozen=True)
class KueueSnapshot:
    """What one pass of the ``kueue`` backend sees (API-shaped dicts, as informers hold them)."""

    lwss: Sequence[Mapping[str, Any]]
    """Opted-in LeaderWorkerSets."""
    pods: Sequence[Mapping[str, Any]]
    """Pods of opted-in LWSs."""
    records: Sequence[Mapping[str, Any]]
    """GroupAdmission records."""
    workloads: Sequence[Mapping[str, Any]]
    """Kueue Workloads made by the gatekeeper (they carry ``lws-gatekeeper.io/pool``)."""
    flavors: Sequence[Mapping[str, Any]] = ()
    """Kueue ResourceFlavors."""
    priorities: Mapping[str, int] = field(default_factory=dict)
    """PriorityClass name -> value."""
    now: datetime | None = None
    """The time of the pass, for retry delays (None: every delay is over)."""
    retry_seconds: int = NEVER_FIT_RETRY_SECONDS
    """First delay before a Workload that can never fit is made again (doubled per retry)."""


@dataclass(frozen=True)
class Ungate:
    """Lift our gate from one pod of an admitted group, steering it to its flavor's nodes."""

    namespace: str
    pod: str
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class RecordStatus:
    """What a group's record should say: ``Admitted`` True/False, Kueue's reason and message."""

    group: GroupState
    workload: str
    admitted: bool
    reason: str
    message: str
    revision: str | None = None
    """The LWS template revision the admitted group's pods run (``status.templateRevision``)."""
    retry_at: str | None = None
    """When the Workload of a group that could never fit is made again (RFC 3339)."""
    retries: int | None = None
    """How many times the group's Workload was deleted because it could never fit."""

    @property
    def warning(self) -> bool:
        """Waiting will not fix it: the LWS, the queue or the ClusterQueue must change."""
        return not self.admitted and self.reason in _PERMANENT


@dataclass(frozen=True)
class KueueActions:
    """Everything one pass decided, in the order the I/O layer carries it out."""

    create_records: tuple[GroupState, ...] = ()
    create_workloads: tuple[tuple[GroupState, str], ...] = ()
    """(group, record UID): Workloads to create, owned by the record."""
    release: tuple[tuple[str, str], ...] = ()
    """(namespace, name) of records and their Workloads to delete: groups gone."""
    delete_workloads: tuple[tuple[str, str], ...] = ()
    """(namespace, name) of Workloads of an earlier LWS that hold a current group's name."""
    ungate: tuple[Ungate, ...] = ()
    stop: tuple[tuple[str, str], ...] = ()
    """(namespace, pod): ungated pods of groups that are not admitted; delete them."""
    clear_admission: tuple[tuple[str, str], ...] = ()
    """(namespace, workload): evicted Workloads whose pods are all stopped."""
    statuses: tuple[RecordStatus, ...] = ()
    problems: tuple[str, ...] = ()


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    conds = _map(obj.get("status")).get("conditions")
    for cond in conds if isinstance(conds, list) else []:
        if isinstance(cond, Mapping) and isinstance(cond.get("type"), str):
            found[cond["type"]] = cond
    return found


def _true(conds: Mapping[str, Mapping[str, Any]], kind: str) -> bool:
    return conds.get(kind, {}).get("status") == "True"


def _workload_belongs(wl: Mapping[str, Any], name: str, uid: str, index: int) -> bool:
    meta = _meta(wl)
    labels = _map(meta.get("labels"))
    annotations = _map(meta.get("annotations"))
    return (
        labels.get(LWS_NAME_LABEL) == name
        and labels.get(GROUP_INDEX_LABEL) == str(index)
        and annotations.get(LWS_UID_ANNOTATION, uid) == uid
    )


def _priority_of(lws: Mapping[str, Any], priorities: Mapping[str, int]) -> tuple[int | None, str | None]:
    """(priority value, PriorityClass name) of the LWS's pods, leader template first."""
    lwt = _map(_map(lws.get("spec")).get("leaderWorkerTemplate"))
    for tmpl in (lwt.get("leaderTemplate"), lwt.get("workerTemplate")):
        spec = _map(_map(tmpl).get("spec"))
        name = spec.get("priorityClassName")
        if isinstance(name, str) and name:
            return priorities.get(name), name
        value = spec.get("priority")
        if isinstance(value, int) and not isinstance(value, bool):
            return value, None
    return None, None


def new_workload(
    group: GroupState,
    lws: Mapping[str, Any],
    record_uid: str,
    priorities: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The Kueue Workload of one group: pod sets from the LWS templates, owned by its record."""
    lwt = _map(_map(lws.get("spec")).get("leaderWorkerTemplate"))
    size = lwt.get("size", 1)
    size = size if isinstance(size, int) and not isinstance(size, bool) and size >= 1 else 1
    worker = _map(lwt.get("workerTemplate"))
    leader = _map(lwt.get("leaderTemplate")) or worker
    pod_sets: list[dict[str, Any]] = [
        {"name": "leader", "count": 1, "template": {"spec": leader.get("spec")}}
    ]
    if size > 1:
        pod_sets.append({"name": "worker", "count": size - 1, "template": {"spec": worker.get("spec")}})
    spec: dict[str, Any] = {"queueName": group.pool, "podSets": pod_sets}
    value, class_name = _priority_of(lws, priorities or {})
    if class_name is not None and value is not None:
        spec["priorityClassRef"] = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": class_name}
    if value is not None:
        spec["priority"] = value
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
            "ownerReferences": [
                {
                    "apiVersion": _RECORD_API_VERSION,
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


def _demand_changed(wl: Mapping[str, Any], demand: GroupDemand) -> bool:
    """Was the Workload made for another demand than the LWS asks now? (No when it does not say.)"""
    made = _map(_meta(wl).get("annotations")).get(DEMAND_HASH_ANNOTATION)
    return made is not None and made != _demand_hash(demand)


def _new_pods(
    wl: Mapping[str, Any], record: Mapping[str, Any], demand: GroupDemand, members: Sequence[_Pod]
) -> list[str]:
    """Pods made from templates that ask another demand than the admitted Workload's.

    Empty when the demand did not change. Old pods carry the revision the record noted
    while the Workload was admitted (``status.templateRevision``) or that of a pod of the
    group already let through; pods without a revision label count as old.
    """
    if not _demand_changed(wl, demand):
        return []
    made_at = str(_map(record.get("status")).get("templateRevision") or "")
    old = {p.revision for p in members if p.live and not p.gated} | {made_at}
    return sorted(
        p.name for p in members if p.live and not p.terminating and p.revision and p.revision not in old
    )


def _never_fits(wl: Mapping[str, Any]) -> str | None:
    """The message of a check of ours saying the Workload can never fit its flavor's nodes."""
    for state in _list(_map(wl.get("status")), "admissionChecks"):
        message = str(state.get("message") or "")
        if state.get("state") == "Pending" and message.startswith(NEVER_FITS):
            return message
    return None


def _retries(record: Mapping[str, Any]) -> int:
    count = _map(record.get("status")).get("retries")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def _backing_off(record: Mapping[str, Any], now: datetime | None) -> bool:
    """Is the group waiting out the delay after its Workload could never fit?"""
    return now is not None and now < _parse_time(_map(record.get("status")).get("retryAt"))


def _workload_spec(
    group: GroupState, lws: Mapping[str, Any], priorities: Mapping[str, int]
) -> dict[str, Any]:
    spec: dict[str, Any] = new_workload(group, lws, "", priorities)["spec"]
    return spec


def _spec_hash(spec: Mapping[str, Any]) -> str:
    return digest(json.dumps(spec, sort_keys=True, default=str))


def _stale_spec(
    wl: Mapping[str, Any], group: GroupState, lws: Mapping[str, Any], priorities: Mapping[str, int]
) -> bool:
    """Does the Workload differ from what the LWS asks now? (Unknown when it carries no hash.)"""
    made = _map(_meta(wl).get("annotations")).get(SPEC_HASH_ANNOTATION)
    return made is not None and made != _spec_hash(_workload_spec(group, lws, priorities))


def _flavor_steering(
    wl: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]], pod_set: str
) -> tuple[dict[str, str], tuple[Mapping[str, Any], ...]]:
    """Node labels and tolerations of the flavors Kueue assigned to ``pod_set``."""
    labels: dict[str, str] = {}
    tolerations: list[Mapping[str, Any]] = []
    admission = _map(_map(wl.get("status")).get("admission"))
    assignments = admission.get("podSetAssignments")
    for psa in assignments if isinstance(assignments, list) else []:
        if not isinstance(psa, Mapping) or psa.get("name") != pod_set:
            continue
        for flavor_name in sorted(set(_map(psa.get("flavors")).values()), key=str):
            flavor = _map(flavors.get(str(flavor_name)))
            fspec = _map(flavor.get("spec"))
            labels.update({str(k): str(v) for k, v in _map(fspec.get("nodeLabels")).items()})
            tols = fspec.get("tolerations")
            for tol in tols if isinstance(tols, list) else []:
                if isinstance(tol, Mapping) and tol not in tolerations:
                    tolerations.append(tol)
    return labels, tuple(tolerations)


def _waiting_reason(wl: Mapping[str, Any] | None, index: int, queue: str) -> tuple[str, str]:
    """Why a group's Workload is not admitted, in Kueue's words."""
    if wl is None:
        return "WaitingForKueue", f"group {index} waits: its Workload is being created in LocalQueue {queue}"
    name = str(_meta(wl).get("name"))
    conds = _conditions(wl)
    evicted = conds.get("Evicted", {})
    if evicted.get("status") == "True":
        return "Evicted", (
            f"group {index} was evicted by Kueue ({evicted.get('reason')}): {evicted.get('message', '')}; "
            "its pods are stopped and it waits again"
        )
    reserved = conds.get("QuotaReserved", {})
    if reserved.get("status") == "True":
        checks = _map(wl.get("status")).get("admissionChecks")
        pending = [
            f"{c.get('name')} is {c.get('state')}: {c.get('message') or 'no message'}"
            for c in (checks if isinstance(checks, list) else [])
            if isinstance(c, Mapping) and c.get("state") != "Ready"
        ]
        detail = "; ".join(pending) or "Kueue has not admitted it yet"
        return "WaitingForAdmissionChecks", f"group {index} has quota in Kueue but waits: {detail}"
    if reserved:
        reason = str(reserved.get("reason") or "Pending")
        return (
            reason,
            f"group {index} waits in LocalQueue {queue} (Workload {name}): {reserved.get('message', '')}",
        )
    return "WaitingForKueue", (
        f"group {index} waits in LocalQueue {queue}: Kueue has not evaluated Workload {name} yet "
        "(it may be queued behind others)"
    )


def decide_kueue(snap: KueueSnapshot) -> KueueActions:
    """The whole decision of one ``kueue`` backend pass. Pure: same snapshot, same actions."""
    problems: list[str] = []
    records: dict[tuple[str, str], Mapping[str, Any]] = {}
    for rec in snap.records:
        rkey = _object_key(rec)
        if rkey is not None:
            records[rkey] = rec
    workloads: dict[tuple[str, str], Mapping[str, Any]] = {}
    for obj in snap.workloads:
        wkey = _object_key(obj)
        if wkey is not None:
            workloads[wkey] = obj
    flavors = {str(_meta(f).get("name")): f for f in snap.flavors}

    pods_of = _pods_by_group(snap.pods)

    create_records: list[GroupState] = []
    create_workloads: list[tuple[GroupState, str]] = []
    wanted: set[tuple[str, str]] = set()
    ungate: list[Ungate] = []
    stop: list[tuple[str, str]] = []
    clear: list[tuple[str, str]] = []
    statuses: list[RecordStatus] = []
    stale: list[tuple[str, str]] = []

    for lws in sorted(snap.lwss, key=lambda o: _object_key(o) or ("", "")):
        lkey = _object_key(lws)
        if lkey is None:
            problems.append("a LeaderWorkerSet without metadata.name was ignored")
            continue
        ns, name = lkey
        for group in _lws_groups(
            ns, name, lws, pods_of, records, lambda n, lw, u: _workload_indices(workloads, n, lw, u)
        ):
            gs, record, members, present, staying = (
                group.state,
                group.record,
                group.members,
                group.present,
                group.staying,
            )
            rname, index, queue, demand = gs.record, gs.key.index, gs.pool, gs.demand
            live = any(p.live for p in members)
            wl = workloads.get((ns, rname))
            if wl is not None and not _workload_belongs(wl, name, gs.lws_uid, index):
                stale.append((ns, rname))
                wl = None
            conds = _conditions(wl) if wl is not None else {}
            admitted = _true(conds, "Admitted") and not _true(conds, "Evicted")
            admission = _map(_map(wl.get("status")).get("admission")) if wl is not None else {}
            reserved = _true(conds, "QuotaReserved") or bool(admission)
            if not staying and not live:
                continue  # gone: record and Workload are released below
            if record is None:
                if staying:
                    create_records.append(gs)
                continue
            wanted.add((ns, rname))
            if (
                wl is not None
                and not reserved
                and staying
                and isinstance(demand, GroupDemand)
                and _stale_spec(wl, gs, lws, snap.priorities)
            ):
                # Not admitted yet and the LWS now asks for something else (another LocalQueue,
                # other templates, another priority): Kueue's pod sets cannot change, so the
                # Workload is made again.
                stale.append((ns, rname))
                wl, conds, admitted, admission = None, {}, False, {}
            waits_new: list[str] = []
            if admitted and staying and wl is not None and isinstance(demand, GroupDemand):
                waits_new = _new_pods(wl, record, demand, members)
                if waits_new and all(p.name in waits_new for p in members if p.live):
                    # Only new pods are left: the old Workload goes (its quota back to Kueue)
                    # and a new one, for the new demand, is made on the next pass.
                    stale.append((ns, rname))
                    said = (
                        f"group {index} waits: its LeaderWorkerSet's templates changed its "
                        f"demand to {format_resources(demand.total)}; its old Workload is "
                        "deleted and a new one is made for Kueue to admit"
                    )
                    statuses.append(RecordStatus(gs, rname, False, "TemplateChanged", said))
                    continue
            never = _never_fits(wl) if wl is not None and reserved and not admitted else None
            backing_off = _backing_off(record, snap.now)
            if backing_off and (wl is None or never is not None):
                # Waiting out the delay (its Workload deleted, or still going): as it was.
                if wl is not None:
                    stale.append((ns, rname))
                said_before = _conditions(record).get(ADMITTED, {})
                reason_before = str(said_before.get("reason") or "")
                statuses.append(
                    RecordStatus(gs, rname, False, reason_before, str(said_before.get("message") or ""))
                )
                continue
            if never is not None and staying and isinstance(demand, GroupDemand):
                retries = _retries(record) + 1
                delay = min(NEVER_FIT_RETRY_MAX_SECONDS, snap.retry_seconds << min(retries - 1, 20))
                when = (snap.now or datetime.fromtimestamp(0, UTC)) + timedelta(seconds=delay)
                stale.append((ns, rname))
                said = (
                    f"group {index} {never}; its Workload is deleted so that it holds no quota, "
                    f"and made again in {delay} s"
                )
                reason = "NoMatchingNode" if never.startswith(NO_NODE_FITS) else "NodesTooSmall"
                retry_at = when.strftime("%Y-%m-%dT%H:%M:%SZ")
                statuses.append(
                    RecordStatus(gs, rname, False, reason, said, retry_at=retry_at, retries=retries)
                )
                continue
            if wl is None and staying and isinstance(demand, GroupDemand) and (ns, rname) not in stale:
                create_workloads.append((gs, str(_meta(record).get("uid") or "")))
            ungated = [p for p in present if not p.gated and p.live]
            if admitted and staying:
                for p in present:
                    if not p.gated or p.name in waits_new:
                        continue
                    role = "leader" if p.worker == 0 else "worker"
                    labels, tolerations = _flavor_steering(wl or {}, flavors, role)
                    ungate.append(Ungate(ns, p.name, labels, tolerations))
            elif not admitted and ungated:
                stop.extend((ns, p.name) for p in ungated)
            elif not admitted and reserved and _true(conds, "Evicted"):
                clear.append((ns, rname))
            if isinstance(demand, InvalidDemand) and not admitted:
                said = f"group {index} waits: {demand.message}"
                statuses.append(RecordStatus(gs, rname, False, "InvalidSpec", said))
            elif admitted:
                flavors_used = sorted(
                    {
                        str(f)
                        for psa in _list(admission, "podSetAssignments")
                        for f in _map(psa.get("flavors")).values()
                    }
                )
                cq = admission.get("clusterQueue", "")
                summary = format_resources(demand.total) if isinstance(demand, GroupDemand) else ""
                said = f"group {index} admitted by Kueue: ClusterQueue {cq}, flavor " + (
                    f"{', '.join(flavors_used) or '-'}" + (f", {summary}" if summary else "")
                )
                if waits_new:
                    count = (
                        f"{len(waits_new)} new pod waits"
                        if len(waits_new) == 1
                        else f"{len(waits_new)} new pods wait"
                    )
                    said += (
                        f"; its LeaderWorkerSet's templates changed its demand: its {count} "
                        "for its old ones to go, then it is queued again"
                    )
                # The revision its pods run under this Workload, unless new pods wait.
                revision = None if waits_new else gs.revision or None
                statuses.append(RecordStatus(gs, rname, True, "Admitted", said, revision))
            else:
                reason, message = _waiting_reason(wl, index, queue)
                statuses.append(RecordStatus(gs, rname, False, reason, message))
    release = tuple(sorted(k for k in records if k not in wanted))
    # Workloads of ours without a wanted record (their record was deleted by hand): delete them too.
    orphans = tuple(sorted(k for k in workloads if k not in wanted and k not in records))
    return KueueActions(
        create_records=tuple(create_records),
        create_workloads=tuple(create_workloads),
        release=tuple(sorted({*release, *orphans})),
        delete_workloads=tuple(sorted(stale)),
        ungate=tuple(ungate),
        stop=tuple(stop),
        clear_admission=tuple(clear),
        statuses=tuple(statuses),
        problems=tuple(sorted(problems)),
    )


def _workload_indices(
    workloads: Mapping[tuple[str, str], Mapping[str, Any]], ns: str, name: str, uid: str
) -> set[int]:
    """Indices of this LWS incarnation's groups that have a Workload of ours."""
    return {
        _wl_index(w)
        for (wns, _), w in workloads.items()
        if wns == ns and _wl_index(w) >= 0 and _workload_belongs(w, name, uid, _wl_index(w))
    }


def _wl_index(wl: Mapping[str, Any]) -> int:
    try:
        return int(str(_map(_meta(wl).get("labels")).get(GROUP_INDEX_LABEL)))
    except ValueError:
        return -1


def _list(obj: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = obj.get(key)
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def ungate_patch(pod: Mapping[str, Any], ungate: Ungate) -> list[dict[str, Any]] | None:
    """JSON patch: remove our gate, add the flavor's node labels and tolerations, in one write.

    Kubernetes lets a gated pod's node selector grow (and tolerations be added) in the
    same update that removes a gate. Returns None if the pod no longer carries our gate.
    A label the pod already selects with another value is left as the pod says (Kueue
    would not have assigned a flavor that contradicts it).
    """
    spec = _map(pod.get("spec"))
    gates = spec.get("schedulingGates")
    gates = gates if isinstance(gates, list) else []
    index = next((i for i, g in enumerate(gates) if _map(g).get("name") == SCHEDULING_GATE), None)
    if index is None:
        return None
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": SCHEDULING_GATE},
        {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
    ]
    selector = _map(spec.get("nodeSelector"))
    missing = {k: v for k, v in ungate.node_selector.items() if k not in selector}
    if missing and not spec.get("nodeSelector"):
        ops.append({"op": "add", "path": "/spec/nodeSelector", "value": dict(sorted(missing.items()))})
    else:
        for k, v in sorted(missing.items()):
            ops.append({"op": "add", "path": f"/spec/nodeSelector/{_pointer(k)}", "value": v})
    existing = spec.get("tolerations")
    existing = existing if isinstance(existing, list) else []
    new = [dict(t) for t in ungate.tolerations if t not in existing]
    if new and not existing:
        ops.append({"op": "add", "path": "/spec/tolerations", "value": new})
    else:
        ops.extend({"op": "add", "path": "/spec/tolerations/-", "value": t} for t in new)
    return ops


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def clear_admission_status(wl: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The status that gives an evicted Workload's quota back, as Kueue's job integrations write it.

    ``admission`` goes, ``QuotaReserved`` and ``Admitted`` turn False and ``Requeued``
    True (so Kueue queues it again at once); other conditions stay as they are.
    """
    conds = _conditions(wl)
    evicted = conds.get("Evicted", {})
    message = str(evicted.get("message") or "evicted")
    reason = str(evicted.get("reason") or "Evicted")

    def cond(kind: str, status: str, why: str) -> dict[str, Any]:
        old = conds.get(kind, {})
        same = old.get("status") == status
        return {
            "type": kind,
            "status": status,
            "reason": why,
            "message": message,
            "lastTransitionTime": old.get("lastTransitionTime", now) if same else now,
        }

    replaced = {
        "QuotaReserved": cond("QuotaReserved", "False", "Pending"),
        "Admitted": cond("Admitted", "False", "NoReservation"),
        "Requeued": cond("Requeued", "True", reason),
    }
    out = [dict(c) for kind, c in conds.items() if kind not in replaced]
    out.extend(replaced.values())
    return {"admission": None, "conditions": out}
