"""The ``kueue`` backend's whole decision: one Kueue Workload per LWS group, gates follow it.

Why this exists: with the ``kueue`` backend, Kueue's ClusterQueues (cohorts, fair
sharing, preemption) decide which group runs, and the gatekeeper keeps only its own
gate. This module turns a snapshot (opted-in LWSs, their pods, our records, our
Workloads, ResourceFlavors) into ``KueueActions`` without any I/O, the same way
the ``pools`` backend does: plan, then act. What a Workload of ours is, and how it
is read back, is in ``workload``.

The model, per group of an opted-in LWS (label ``lws-gatekeeper.io/pool`` naming a
LocalQueue in the LWS's namespace):

* Groups are enumerated by ``core.model.groups``: ``0..replicas-1`` plus any index that still
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
* Only pods the LWS made count (``core.admission.members``: the owner chain up to the LWS, by UID).
  A gated pod that claims a group by its labels and was made by anyone else stays gated,
  is never let through on the group's Workload, and the record says so (reason
  ``NotMadeByLeaderWorkerSet``, a Warning Event); the group's own pods go on.
* A group admitted by the ``pools`` backend (record ``Admitted`` without ``status.workload``)
  whose pods run is adopted (``adopt``): its Workload is made, its pods are kept, reason
  ``Adopting``, until Kueue admits it.
* A leaving group keeps its Workload (and so its quota) until its last pod is gone, then
  its record and Workload are deleted.
* Record and Workload carry the finalizer ``lws-gatekeeper.io/group-pods``
  (``core.writes.finalizers``): deleted by someone else (the garbage collector, the namespace
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
from datetime import datetime
from typing import Any

from gatekeeper.core.admission.membership import membership
from gatekeeper.core.admission.pass_through import Passable, owners
from gatekeeper.core.admission.record_cap import DEFAULT_MAX_RECORDS_PER_NAMESPACE, RecordRoom
from gatekeeper.core.backends.kueue.order import Offers, queue_state
from gatekeeper.core.backends.kueue.pass_through import passable
from gatekeeper.core.backends.kueue.stages import GroupPass, Settings
from gatekeeper.core.backends.kueue.status import RecordStatus, said_strangers, said_surge
from gatekeeper.core.backends.kueue.workload import (
    workload_indices,
)
from gatekeeper.core.kube.objects import as_map, index_by_key, meta, object_key
from gatekeeper.core.model.charge import Charge, charged
from gatekeeper.core.model.claims import NO_CLAIMS, ClaimBook
from gatekeeper.core.model.devices import DeviceRoom
from gatekeeper.core.model.gating import Ungate
from gatekeeper.core.model.groups import DemandMemo, GroupState, lws_groups
from gatekeeper.core.model.lws import GroupPod
from gatekeeper.core.model.pool import DEFAULT_ADMISSION_TIMEOUT
from gatekeeper.core.model.record import is_admitted
from gatekeeper.core.model.retry import RETRY_MAX_SECONDS
from gatekeeper.core.plugin.decided import GroupActions

__all__ = [
    "NEVER_FIT_RETRY_MAX_SECONDS",
    "NEVER_FIT_RETRY_SECONDS",
    "KueueActions",
    "KueueSnapshot",
    "decide_kueue",
]

NEVER_FIT_RETRY_SECONDS = 60
NEVER_FIT_RETRY_MAX_SECONDS = RETRY_MAX_SECONDS


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
    """StatefulSets of LWSs: which pods an LWS made (``core.admission.members``)."""
    limit_ranges: Sequence[Mapping[str, Any]] = ()
    """Every LimitRange: the requests a container that names none gets (``core.model.limits``)."""
    runtime_classes: Sequence[Mapping[str, Any]] = ()
    """Every RuntimeClass: the overhead a pod that names one gets (``core.model.overhead``)."""
    claim_book: ClaimBook = NO_CLAIMS
    """What DRA claims ask: DeviceClasses, ResourceClaimTemplates, claims (``core.model.claims``)."""
    device_room: DeviceRoom = field(default_factory=DeviceRoom)
    """The DRA devices of each node, and those claims hold (``core.model.devices``)."""
    max_records_per_namespace: int = DEFAULT_MAX_RECORDS_PER_NAMESPACE
    """Records one namespace may have (``core.admission.record_cap``)."""
    admission_timeout: int = DEFAULT_ADMISSION_TIMEOUT
    """Seconds an admitted group may lack bound pods before it is given back (``core.admission.timeout``)."""
    bound_pods: Sequence[Mapping[str, Any]] = ()
    """Every pod bound to a node: a pod let through keeps its group's Workload while it
    lives, whatever its labels say now (``core.model.charge``)."""
    now: datetime | None = None
    """The time of the pass, for retry delays (None: every delay is over)."""
    retry_seconds: int = NEVER_FIT_RETRY_SECONDS
    """First delay before a Workload that can never fit is made again (doubled per retry)."""


@dataclass(frozen=True, kw_only=True)
class KueueActions(GroupActions):
    """Everything one pass decided, in the order the I/O layer carries it out (the group
    lifecycle's fields, ``problems`` and ``look_again`` are ``GroupActions``'; ``release``
    deletes a record's Workload first, and ``stop`` stops pods of groups not admitted)."""

    deferred: frozenset[tuple[str, str]] = frozenset()
    """(namespace, record) of records made without their Workload yet: lower groups go first."""
    over_cap: tuple[GroupState, ...] = ()
    """Groups past their namespace's record cap: no record, no Workload; their LWS is told."""
    create_workloads: tuple[tuple[GroupState, str], ...] = ()
    """(group, record UID): Workloads to create, owned by the record."""
    delete_workloads: tuple[tuple[str, str], ...] = ()
    """(namespace, name) of Workloads of an earlier LWS that hold a current group's name."""
    ungate: tuple[Ungate, ...] = ()
    clear_admission: tuple[tuple[str, str], ...] = ()
    """(namespace, workload): evicted Workloads whose pods are all stopped."""
    statuses: tuple[RecordStatus, ...] = ()
    passable: tuple[tuple[tuple[str, str, int], Passable], ...] = ()
    """The webhook's table (``core.admission.pass_through``): the groups whose new pods are
    made as this pass lets their gated pods through, onto their flavors' nodes."""


def decide_kueue(snap: KueueSnapshot, memo: DemandMemo | None = None) -> KueueActions:
    """The whole decision of one ``kueue`` backend pass. Pure: same snapshot, same actions.

    ``memo`` remembers demands from one pass to the next (the loop owns it).
    """
    memo = memo if memo is not None else DemandMemo()
    memo.use_cluster(snap.limit_ranges, snap.runtime_classes, snap.claim_book)
    problems: list[str] = []
    records = index_by_key(snap.records)
    workloads = index_by_key(snap.workloads)
    flavors = {str(meta(f).get("name")): f for f in snap.flavors}

    lws_by_key = {key: obj for obj in snap.lwss if (key := object_key(obj))}
    who = membership(lws_by_key, snap.pods, snap.statefulsets, snap.bound_pods, memo.pods)

    settings = Settings(
        workloads,
        flavors,
        who.charges,
        snap.priorities,
        snap.default_priority,
        snap.now,
        snap.retry_seconds,
        NEVER_FIT_RETRY_MAX_SECONDS,
        snap.admission_timeout,
        snap.claim_book,
    )
    room = RecordRoom((ns for ns, _ in records), snap.max_records_per_namespace)
    one = GroupPass(settings, who.strangers, room=room)
    for lws in sorted(snap.lwss, key=lambda o: object_key(o) or ("", "")):
        lkey = object_key(lws)
        if lkey is None:
            problems.append("a LeaderWorkerSet without metadata.name was ignored")
            continue
        ns, name = lkey
        groups = lws_groups(
            ns, name, lws, who.pods_of, records, lambda n, lw, u: workload_indices(workloads, n, lw, u), memo
        )
        waiting, holding = queue_state(groups, workloads)
        offers = Offers(waiting, holding)
        for group in groups:
            one.group(lws, group, waiting, offers)
    lwss = index_by_key(snap.lwss)
    statuses = [said_surge(said_strangers(st, one.strangers), lwss) for st in one.statuses]
    owned = owners(snap.pods, snap.statefulsets)
    table = [
        entry
        for key, lws, demand, wl in one.passable
        if (entry := passable(key, lws, demand, wl, flavors, owned)) is not None
    ]
    wanted = one.wanted
    wanted |= _still_running(records, set(lws_by_key), who.pods_of, who.charges)
    release = tuple(sorted(k for k in records if k not in wanted))
    # Workloads of ours without a wanted record (their record was deleted by hand): delete them too.
    orphans = tuple(sorted(k for k in workloads if k not in wanted and k not in records))
    return KueueActions(
        create_records=tuple(one.create_records),
        over_cap=tuple(one.over_cap),
        deferred=frozenset(one.deferred),
        create_workloads=tuple(one.create_workloads),
        release=tuple(sorted({*release, *orphans})),
        delete_workloads=tuple(sorted(one.stale)),
        ungate=tuple(one.ungate),
        stop=tuple(one.stop),
        clear_admission=tuple(one.clear),
        statuses=tuple(statuses),
        passable=tuple(table),
        problems=tuple(sorted(problems)),
        look_again=one.look_again,
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
    By charge (``core.model.charge``): a pod let through on an admitted record still lives, its
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
