"""The ``kueue`` backend's whole decision: one Kueue Workload per LWS group, gates follow it.

Why this exists: with the ``kueue`` backend, Kueue's ClusterQueues (cohorts, fair
sharing, preemption) decide which group runs, and the gatekeeper keeps only its own
gate. This module turns a snapshot (opted-in LWSs, their pods, our records, our
Workloads, ResourceFlavors) into ``KueueActions`` without any I/O, the same way
the ``pools`` backend does: plan, then act. What a Workload of ours is, and how it
is read back, is in ``workload``.

The model, per group of an opted-in LWS (label ``lws-gatekeeper.io/pool`` naming a
LocalQueue in the LWS's namespace):

* Groups are enumerated by ``core.groups``: ``0..replicas-1`` plus any index that still
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
  in the ``pools`` backend: old pods (the Workload's revision, or that of a pod already let
  through) still go through on it, new pods stay gated; once only new pods are left, the
  Workload is deleted (its quota goes back to Kueue) and a new one is made for the new
  demand, queued like any other.
* A Workload of ours whose node-fit check says its pods can never fit the nodes of its
  flavor (``core.checks.node_fit``: a pod larger than any node, or no node its pods accept) is
  deleted, so that it holds no quota, and made again after a delay (60 s by default,
  doubled each time up to 30 minutes; ``status.retryAt`` and ``status.retries`` on the
  record), in case nodes joined. Kueue's own ``Retry`` state cannot do this in v0.19.2:
  with a delay it keeps the quota until the delay is over, without one it loops at once.
  The record says why (reason ``NodesTooSmall`` or ``NoMatchingNode``, as with pools).
* An LWS's groups are offered to Kueue lowest index first (``order``): Kueue breaks ties of
  Workloads made in the same second by UID, so a window of new Workloads widens with the
  groups that hold quota, and a higher group never goes before a lower one of the same spec.
* Only pods the LWS made count (``core.members``: the owner chain up to the LWS, by UID).
  A gated pod that claims a group by its labels and was made by anyone else stays gated,
  is never let through on the group's Workload, and the record says so (reason
  ``NotMadeByLeaderWorkerSet``, a Warning Event); the group's own pods go on.
* A group admitted by the ``pools`` backend (record ``Admitted`` without ``status.workload``)
  whose pods run is adopted (``adopt``): its Workload is made, its pods are kept, reason
  ``Adopting``, until Kueue admits it.
* A leaving group keeps its Workload (and so its quota) until its last pod is gone, then
  its record and Workload are deleted.
* Record and Workload carry the finalizer ``lws-gatekeeper.io/group-pods``
  (``core.finalizers``): deleted by someone else (the garbage collector, the namespace
  controller, a person) they stay, and Kueue goes on counting the Workload's quota, while
  the group's pods need them. A deleted record is kept while its group is admitted and a
  pod of it lives (its LWS there or not). A deleted Workload of a group that stays is an
  admission taken back: its ungated pods are stopped, as on eviction, and once none is
  left it goes and a new one is made.
* The record mirrors the Workload: ``Admitted`` with Kueue's reason and message, so
  ``kubectl get groupadmissions`` reads the same with either backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gatekeeper.core.backends.kueue.adopt import adopted_elsewhere, adopting_message, old_pods
from gatekeeper.core.backends.kueue.order import Offers, queue_state, unreserved
from gatekeeper.core.backends.kueue.status import RecordStatus, said_strangers
from gatekeeper.core.backends.kueue.workload import (
    demand_changed,
    flavor_steering,
    never_fits,
    stale_spec,
    waiting_reason,
    workload_belongs,
    workload_indices,
)
from gatekeeper.core.charge import Charge, charge_toleration, charged
from gatekeeper.core.conformance import conforming
from gatekeeper.core.demand import GroupDemand
from gatekeeper.core.gating import Ungate
from gatekeeper.core.groups import DemandMemo, GroupState, lws_groups
from gatekeeper.core.keys import (
    ADMITTED,
    ADOPTING_REASON,
    EVICTED,
    KUEUE_ADMITTED,
    NO_NODE_FITS,
    QUOTA_RESERVED,
    WAITING_FOR_KUEUE,
)
from gatekeeper.core.lws import GroupPod
from gatekeeper.core.membership import membership
from gatekeeper.core.objects import (
    as_list,
    as_map,
    condition,
    conditions,
    index_by_key,
    is_terminating,
    meta,
    object_key,
    parse_time,
)
from gatekeeper.core.quantity import format_resources
from gatekeeper.core.queue import InvalidDemand
from gatekeeper.core.record import is_admitted

__all__ = [
    "NEVER_FIT_RETRY_MAX_SECONDS",
    "NEVER_FIT_RETRY_SECONDS",
    "KueueActions",
    "KueueSnapshot",
    "decide_kueue",
]

NEVER_FIT_RETRY_SECONDS = 60
NEVER_FIT_RETRY_MAX_SECONDS = 1800


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
    default_priority: int = 0
    """The value of the cluster's default PriorityClass (``globalDefault``); 0 without one."""
    statefulsets: Sequence[Mapping[str, Any]] = ()
    """StatefulSets of LWSs: which pods an LWS made (``core.members``)."""
    bound_pods: Sequence[Mapping[str, Any]] = ()
    """Every pod bound to a node: a pod let through keeps its group's Workload while it
    lives, whatever its labels say now (``core.charge``)."""
    now: datetime | None = None
    """The time of the pass, for retry delays (None: every delay is over)."""
    retry_seconds: int = NEVER_FIT_RETRY_SECONDS
    """First delay before a Workload that can never fit is made again (doubled per retry)."""


@dataclass(frozen=True)
class KueueActions:
    """Everything one pass decided, in the order the I/O layer carries it out."""

    create_records: tuple[GroupState, ...] = ()
    deferred: frozenset[tuple[str, str]] = frozenset()
    """(namespace, record) of records made without their Workload yet: lower groups go first."""
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


def _new_pods(
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


def _true(conds: Mapping[str, Mapping[str, Any]], kind: str) -> bool:
    return conds.get(kind, {}).get("status") == "True"


def _retries(record: Mapping[str, Any]) -> int:
    count = as_map(record.get("status")).get("retries")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def _backing_off(record: Mapping[str, Any], now: datetime | None) -> bool:
    """Is the group waiting out the delay after its Workload could never fit?"""
    return now is not None and now < parse_time(as_map(record.get("status")).get("retryAt"))


def decide_kueue(snap: KueueSnapshot, memo: DemandMemo | None = None) -> KueueActions:
    """The whole decision of one ``kueue`` backend pass. Pure: same snapshot, same actions.

    ``memo`` remembers demands from one pass to the next (the loop owns it).
    """
    memo = memo if memo is not None else DemandMemo()
    problems: list[str] = []
    records = index_by_key(snap.records)
    workloads = index_by_key(snap.workloads)
    flavors = {str(meta(f).get("name")): f for f in snap.flavors}

    lws_by_key = {key: obj for obj in snap.lwss if (key := object_key(obj))}
    who = membership(lws_by_key, snap.pods, snap.statefulsets, snap.bound_pods)
    pods_of, charges, stranger_pods = who.pods_of, who.charges, who.strangers

    create_records: list[GroupState] = []
    create_workloads: list[tuple[GroupState, str]] = []
    wanted: set[tuple[str, str]] = set()
    ungate: list[Ungate] = []
    stop: list[tuple[str, str]] = []
    clear: list[tuple[str, str]] = []
    statuses: list[RecordStatus] = []
    stale: list[tuple[str, str]] = []
    deferred: set[tuple[str, str]] = set()

    for lws in sorted(snap.lwss, key=lambda o: object_key(o) or ("", "")):
        lkey = object_key(lws)
        if lkey is None:
            problems.append("a LeaderWorkerSet without metadata.name was ignored")
            continue
        ns, name = lkey
        groups = lws_groups(
            ns, name, lws, pods_of, records, lambda n, lw, u: workload_indices(workloads, n, lw, u), memo
        )
        waiting, holding = queue_state(groups, workloads)
        offers = Offers(waiting, holding)
        for group in groups:
            gs, record, members, present, staying = (
                group.state,
                group.record,
                group.members,
                group.present,
                group.staying,
            )
            rname, index, queue, demand = gs.record, gs.key.index, gs.pool, gs.demand
            mark = charge_toleration(gs.lws_uid, index)
            live = any(p.live for p in members) or bool(record is not None and charged(record, charges))
            wl = workloads.get((ns, rname))
            if wl is not None and not workload_belongs(wl, name, gs.lws_uid, index):
                stale.append((ns, rname))
                wl = None
            conds = conditions(wl) if wl is not None else {}
            admitted = _true(conds, KUEUE_ADMITTED) and not _true(conds, EVICTED)
            admission = as_map(as_map(wl.get("status")).get("admission")) if wl is not None else {}
            reserved = _true(conds, QUOTA_RESERVED) or bool(admission)
            if not staying and not live:
                continue  # gone: record and Workload are released below
            if record is None:
                if staying:
                    create_records.append(gs)
                    if isinstance(demand, GroupDemand) and not offers.take():
                        deferred.add((ns, rname))
                continue
            if is_terminating(record) and not (admitted and live):
                continue  # deleted, and no running pod needs it: it goes with its Workload
            if wl is not None and is_terminating(wl) and staying:
                # Deleted (by hand, say): its admission is taken back, as on eviction. It holds
                # its quota until no pod it let through is left, then it goes and a new one is made.
                admitted = False
                if not any(p.live and not p.gated for p in members):
                    stale.append((ns, rname))
            wanted.add((ns, rname))
            if (
                wl is not None
                and not reserved
                and staying
                and isinstance(demand, GroupDemand)
                and stale_spec(wl, gs, lws, snap.priorities)
            ):
                # Not admitted yet and the LWS now asks for something else (another LocalQueue,
                # other templates, another priority): Kueue's pod sets cannot change, so the
                # Workload is made again.
                stale.append((ns, rname))
                wl, conds, admitted, admission = None, {}, False, {}
            ungated = [p for p in present if not p.gated and p.live]
            adopting = (
                staying
                and not admitted
                and not _true(conds, EVICTED)
                and bool(ungated)
                and adopted_elsewhere(record)
            )
            if (
                wl is not None
                and staying
                and not adopting
                and waiting is not None
                and waiting.ahead_of(index, wl)
                and not ungated
                and ((waiting.evaluated and unreserved(wl)) or admitted)
            ):
                # A lower group of the same spec waits: this one must not go first. Its waiting
                # Workload goes once Kueue found the lower one inadmissible (it could not fit
                # either), and so does an admitted one, whose quota then goes to the lower group.
                if waiting.evaluated:
                    stale.append((ns, rname))
                said = (
                    f"group {index} waits for group {waiting.index} of its LeaderWorkerSet: "
                    "Kueue admits an LeaderWorkerSet's groups lowest index first"
                )
                statuses.append(RecordStatus(gs, rname, False, WAITING_FOR_KUEUE, said))
                continue
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
            never = never_fits(wl) if wl is not None and reserved and not admitted else None
            backing_off = _backing_off(record, snap.now)
            if backing_off and (wl is None or never is not None):
                # Waiting out the delay (its Workload deleted, or still going): as it was.
                if wl is not None:
                    stale.append((ns, rname))
                said_before = condition(record, ADMITTED)
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
            if (
                wl is None
                and staying
                and isinstance(demand, GroupDemand)
                and (ns, rname) not in stale
                and not is_terminating(record)
            ):
                if not (adopting or offers.take()):
                    said = (
                        f"group {index} waits: its Workload is made once the lower groups of its "
                        "LeaderWorkerSet are admitted (Kueue admits them lowest index first)"
                    )
                    statuses.append(RecordStatus(gs, rname, False, WAITING_FOR_KUEUE, said))
                    continue
                create_workloads.append((gs, str(meta(record).get("uid") or "")))
            if adopting:
                # Running on another backend's admission: kept, and so are its old pods.
                let_through = old_pods(record, present)
                ungate.extend(Ungate(ns, p, {}, (mark,)) for p in sorted(let_through))
                why = waiting_reason(wl, index, queue)[1] if wl is not None else "its Workload is being made"
                said = adopting_message(index, rname, why)
                statuses.append(RecordStatus(gs, rname, True, ADOPTING_REASON, said))
                continue
            if admitted and staying:
                held: set[str] = set()
                if wl is not None and isinstance(demand, GroupDemand) and not demand_changed(wl, demand):
                    off = conforming(gs, present, lws, demand, snap.default_priority)[
                        1
                    ]  # a hand-edited StatefulSet's pods
                    stranger_pods.update({gs.key: [*stranger_pods.get(gs.key, []), *off]} if off else {})
                    held = {one.pod for one in off}
                for p in present:
                    if not p.gated or p.name in waits_new or p.name in held:
                        continue
                    role = "leader" if p.worker == 0 else "worker"
                    labels, tolerations = flavor_steering(wl or {}, flavors, role)
                    ungate.append(Ungate(ns, p.name, labels, (*tolerations, mark)))
            elif not admitted and (running := {p.name for p in ungated} | set(charged(record, charges))):
                # Its pods stop, those let through whose labels were changed since included.
                stop.extend((ns, pod) for pod in sorted(running))
            elif not admitted and reserved and _true(conds, EVICTED):
                clear.append((ns, rname))
            if isinstance(demand, InvalidDemand) and not admitted:
                said = f"group {index} waits: {demand.message}"
                statuses.append(RecordStatus(gs, rname, False, "InvalidSpec", said))
            elif admitted:
                flavors_used = sorted(
                    {
                        str(f)
                        for psa in as_list(admission.get("podSetAssignments"))
                        for f in as_map(as_map(psa).get("flavors")).values()
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
                reason, message = waiting_reason(wl, index, queue)
                statuses.append(RecordStatus(gs, rname, False, reason, message))
    statuses = [said_strangers(st, stranger_pods) for st in statuses]
    wanted |= _still_running(records, {k for lws in snap.lwss if (k := object_key(lws))}, pods_of, charges)
    release = tuple(sorted(k for k in records if k not in wanted))
    # Workloads of ours without a wanted record (their record was deleted by hand): delete them too.
    orphans = tuple(sorted(k for k in workloads if k not in wanted and k not in records))
    return KueueActions(
        create_records=tuple(create_records),
        deferred=frozenset(deferred),
        create_workloads=tuple(create_workloads),
        release=tuple(sorted({*release, *orphans})),
        delete_workloads=tuple(sorted(stale)),
        ungate=tuple(ungate),
        stop=tuple(stop),
        clear_admission=tuple(clear),
        statuses=tuple(statuses),
        problems=tuple(sorted(problems)),
    )


def _still_running(
    records: Mapping[tuple[str, str], Mapping[str, Any]],
    lwss: set[tuple[str, str]],
    pods_of: Mapping[tuple[str, str], Mapping[int, Sequence[GroupPod]]],
    charges: Mapping[Charge, tuple[str, ...]],
) -> set[tuple[str, str]]:
    """Records (and so Workloads) of groups whose pods still live though no group wants them:
    kept, so Kueue keeps the quota they use, until the last pod is gone, as on scale-down.
    By label: the group's LWS is gone (deleted, its namespace deleted, its label removed).
    By charge (``core.charge``): a pod let through on an admitted record still lives, its
    labels changed or its LWS deleted with ``--cascade=orphan`` or replaced."""
    kept: set[tuple[str, str]] = set()
    for (ns, rname), record in records.items():
        spec = as_map(record.get("spec"))
        name, index = spec.get("leaderWorkerSet"), spec.get("groupIndex")
        if not isinstance(name, str) or type(index) is not int:
            continue
        by_charge = is_admitted(record) and bool(charged(record, charges))
        by_label = (ns, name) not in lwss and any(p.live for p in pods_of.get((ns, name), {}).get(index, ()))
        if by_charge or by_label:
            kept.add((ns, rname))
    return kept
