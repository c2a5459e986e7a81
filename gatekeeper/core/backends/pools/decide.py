"""The ``pools`` backend's whole decision: the gatekeeper's own ``Pool`` objects decide.

Why this exists: with the ``pools`` backend (the default) the gatekeeper itself is the
quota authority. This module turns a pass's snapshot of the cluster into ``Actions``
without any I/O, records first, then gates; the controller's ``PoolsBackend`` carries them
out. Groups come from ``core.model.groups``; quota, node fit and queue order from
``core.backends.pools.planner``; this module adds the ``pools`` rules below.

The model:

* Each group has one ``GroupAdmission`` record, named after the LWS, its UID and the
  index. The record's status condition ``Admitted`` says whether the group holds its
  reservation; a record that says so is what counts against the pool's quota. A record
  whose ``spec.leaderWorkerSetUID`` names another UID belongs to an earlier LWS of the
  same name and is never taken for the current one's.
* A group is released (its record deleted) when its index is no longer wanted and
  none of its pods is left, or when its LWS is gone or was replaced (other UID).
* **A record goes only with its group's pods.** Every record carries the finalizer
  ``lws-gatekeeper.io/group-pods`` (``core.writes.finalizers``), so one deleted by someone else
  (the garbage collector after its LWS, the namespace controller, a person) stays, with
  ``deletionTimestamp`` set. While it is admitted and a live pod of its group is left it
  is kept and holds as any admitted record does (its LWS there or not); otherwise it is
  released like any other: its finalizer removed. A deleted record is never admitted
  again, and a group whose record is being deleted gets a new one only once it is gone.
* Pods of admitted groups lose their gate (those that ask what their role was admitted
  with: ``core.admission.conformance``); pods of waiting groups keep it.

Decisions:

* **Leaving groups are never admitted.** A group beyond ``replicas`` whose remaining
  pods are all terminating, and every group of an LWS that is being deleted, is on its
  way out: it gets no record and no admission. If it was admitted it keeps its record
  (and its quota) until its last pod is gone; if it was not, its record is released at
  once, since it holds nothing. A group beyond ``replicas`` with a pod that is not
  terminating is taken for a surge group and queued like any other (so, for the moment
  between a scale-down and the LWS controller deleting the pods, is a scaled-away group:
  the snapshot cannot tell the two apart; if admitted, it is released with its pods).
* **An admitted group whose demand can no longer be computed keeps its reservation.**
  (Its LWS was edited into something the core cannot read.) Its record stays
  ``Admitted=True`` and it keeps holding, in its recorded pool, the demand written in its
  record (``status.demand`` and ``status.pods``; no node room is held for it, since the
  shape of its pods is unknown, but its running pods are in the bound-pod usage). It is
  *not* put in ``waiting`` (that would overwrite the record with ``Admitted=False`` and
  silently free quota its running pods still use); it is reported in
  ``Actions.held_invalid`` with reason ``InvalidSpec``. Its gated pods stay gated: pods
  made from a template the core cannot read cannot be checked against the reservation.
  An unreadable ``spec.replicas`` is treated the same way: every group is InvalidSpec,
  admitted ones (found by their records) keep their reservation, none is admitted.
* **A template change is re-admitted, never let through on the old reservation.** The
  record keeps what the group was admitted with (``status.demand``, ``status.pods``, and
  ``status.templateRevision``: the LWS revision label of its pods then). When the LWS's
  templates now ask another demand (a rolling update to bigger or smaller pods), the pods
  are told apart by their revision label: *old* pods carry the recorded revision or that
  of a pod of the group already let through; *new* pods carry another. While any old pod
  is live, or no new pod exists yet (a group not yet updated, or restarting), the group
  keeps its recorded reservation, its gated old pods go through (a restart) and its new
  pods stay gated (``Actions.held_changed``, reason ``TemplateChanged``). Once only new
  pods are left, the group is planned again at its new demand, like a waiting group that
  holds nothing (its old reservation is free for it): admitted at once if it fits,
  otherwise its record says ``Admitted=False`` and it waits in its turn. Holding the old
  reservation while waiting for more would deadlock two growing groups on one pool, the
  very thing this project prevents. A demand that did not change (a new image) lets every
  pod through, as before, and the record's revision follows the leader's
  (``Actions.revisions``).
* **A group that cannot get all its nodes is given back** (``giveback``): an admitted group
  of a Pool with ``spec.admissionTimeout`` whose pods are not all bound that long after its
  admission has its ungated pods deleted and its record set back to ``Admitted=False``
  (reason ``AdmissionTimeout``, ``status.retryAt``), and is not planned before ``retryAt``;
  any pod of it made ungated meanwhile is deleted too. ``status.retries`` (the doubling) is
  cleared once the group has all its pods bound. So is a group whose own pod stays not as
  admitted (reason ``NotAsAdmitted``). Until its let-through pods are gone (a grace period,
  a finalizer) it holds what it was admitted with: nobody else is admitted on its quota.
* **A higher priority may take room back** where its Pool says so
  (``spec.preemption.withinPool: LowerPriority``): after the plan, a waiting group that fits
  only if admitted groups of lower priority go has them given back whole (``preemption``,
  ``preempting``), and is admitted by a later pass once their pods are gone; so is a group whose
  claim the hub asks back. A group once placed whole that lost a node's room to a pod the
  gatekeeper never saw is given back whole (``giveback.displaced``).
* **Bad input is reported, never fatal:** skipped, named in ``Actions.problems``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from gatekeeper.core.admission.exclusive import occupants
from gatekeeper.core.admission.intruders import intruders
from gatekeeper.core.admission.membership import membership
from gatekeeper.core.admission.record_cap import DEFAULT_MAX_RECORDS_PER_NAMESPACE, over_cap
from gatekeeper.core.backends.pools.changed import WaitStatus
from gatekeeper.core.backends.pools.giveback import GiveBack, displaced
from gatekeeper.core.backends.pools.kept import still_charged
from gatekeeper.core.backends.pools.planner import Plan, PoolStatus, plan
from gatekeeper.core.backends.pools.preempting import Cluster, Preempted, Preempting, asked_back, preempt
from gatekeeper.core.backends.pools.provisioning import (
    InstanceType,
    Launcher,
    NodeClaim,
    NodePool,
    read_launcher,
)
from gatekeeper.core.backends.pools.said import strangers_said_of, waiting_words
from gatekeeper.core.backends.pools.stages import GroupPass, Settings
from gatekeeper.core.kube.objects import index_by_key, meta, object_key, parse_time
from gatekeeper.core.kube.parsed import Parsed
from gatekeeper.core.kube.quantity import format_resources
from gatekeeper.core.model.charge import charge_toleration
from gatekeeper.core.model.claims import NO_CLAIMS, ClaimBook
from gatekeeper.core.model.demand import GroupDemand, PodDemand
from gatekeeper.core.model.devices import DeviceRoom, with_devices
from gatekeeper.core.model.gating import Ungate
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import DemandMemo, GroupState, PodsByGroup, lws_groups
from gatekeeper.core.model.lws import priority as lws_priority
from gatekeeper.core.model.nodes import Node, RequestsMemo, node_usage_skipping
from gatekeeper.core.model.owned import leader_template_revision
from gatekeeper.core.model.pool import Pool
from gatekeeper.core.model.record import admitted_indices
from gatekeeper.core.model.spread import BoundPods
from gatekeeper.core.plugin.decided import GroupActions

__all__ = ["Actions", "Admit", "Snapshot", "WaitStatus", "decide"]

Key = tuple[str, str]


@dataclass(frozen=True)
class Snapshot:
    """What one pass sees. Objects are API-shaped dicts, as the informers hold them."""

    lwss: Sequence[Mapping[str, Any]]
    """Opted-in LeaderWorkerSets."""
    pods: Sequence[Mapping[str, Any]]
    """Pods of opted-in LWSs (label ``lws-gatekeeper.io/pool``), gated or not."""
    bound_pods: Sequence[Mapping[str, Any]]
    """Every pod bound to a node, anyone's: node room is physical."""
    nodes: Sequence[Node]
    pools: Parsed[Pool]
    """The Pools, read at the edge (``ParseMemo(parse_pool)``); the unreadable admit nothing new."""
    records: Sequence[Mapping[str, Any]]
    priorities: Mapping[str, int] = field(default_factory=dict)
    """PriorityClass name -> value."""
    default_priority: int = 0
    """The value of the cluster's default PriorityClass (``globalDefault``); 0 without one."""
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Namespace name -> its labels (the pools' ``spec.namespaceSelector``)."""
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
    node_pools: Parsed[NodePool] = field(default_factory=Parsed)
    """Karpenter NodePools (read only when the gatekeeper knows the instance types)."""
    node_claims: Parsed[NodeClaim] = field(default_factory=Parsed)
    """Karpenter NodeClaims: what the NodePools hold, and the nodes coming up."""
    instance_types: Sequence[InstanceType] = ()
    """What Karpenter can launch (``--karpenter-instance-types``)."""
    daemon_sets: Parsed[PodDemand] = field(default_factory=Parsed)
    """The DaemonSets' pods, whose room a node Karpenter launches loses to them
    (``core.model.daemons``; read with the NodePools)."""
    now: datetime | None = None
    """The time of the pass (admission timeouts, retry times); None: no admission times out."""
    retry_seconds: int = 60
    """First delay before a given-back group is tried again (doubled per give-back)."""
    never_preempt: frozenset[str] = frozenset()
    """PriorityClasses whose ``preemptionPolicy`` is ``Never`` ("" when the cluster's default class's
    is): a group of such a class never preempts (``backends.pools.preemption``)."""
    exempt_namespaces: frozenset[str] = frozenset({"kube-system"})
    """Namespaces whose pods on a closed pool's nodes are not intruders (``core.admission.intruders``)."""
    asked_back: Mapping[tuple[str, str, int], str] = field(default_factory=dict)
    """(namespace, LWS UID, group) -> the hub's words: claims it asks back (``reservation.asked_of``)."""


@dataclass(frozen=True)
class Admit:
    """Admit a group now: write its record's ``Admitted=True`` first, then lift its pods' gates."""

    group: GroupState
    nodes: tuple[str, ...]
    """Tentative node of each pod, leader first."""
    summary: str
    lender: str = ""
    """The pool of its cohort whose room it borrows ("": its own): ``status.borrowedFrom``."""
    domain: tuple[tuple[str, str], ...] = ()
    """The topology domain its pods are pinned to, as node labels: ``status.domain``."""


@dataclass(frozen=True, kw_only=True)
class Actions(GroupActions):
    """Everything one pass decided, in the order the I/O layer must carry it out (the
    group lifecycle's fields, ``problems`` and ``look_again`` are ``GroupActions``')."""

    admit: tuple[Admit, ...]
    ungate: tuple[tuple[str, str], ...]
    """(namespace, pod) of already admitted groups whose pods still carry the gate."""
    waiting: tuple[WaitStatus, ...]
    pools: Mapping[str, PoolStatus]
    invalid_pools: Mapping[str, str]
    """Pools that could not be read, with the reason."""
    plan: Plan
    held_invalid: tuple[WaitStatus, ...] = ()
    """Admitted groups whose demand can no longer be computed: they keep their record and
    hold their recorded demand; their gated pods stay gated. Report them (an event)."""
    held_changed: tuple[WaitStatus, ...] = ()
    """Admitted groups whose LWS now asks another demand and whose new pods wait for their
    old ones to go (reason ``TemplateChanged``). They keep their record and recorded
    demand: report them (an event) and write the record's ``Admitted`` condition with this
    reason and message, its status staying True (the reservation holds)."""
    revisions: tuple[tuple[str, str, str], ...] = ()
    """(namespace, record, revision): admitted groups whose pods moved to another template
    revision with the same demand; write it to the record's ``status.templateRevision``."""
    restore_admitted: tuple[tuple[str, str, str], ...] = ()
    """(namespace, record, message): admitted groups whose record still says
    ``TemplateChanged`` though no new pod waits any more (the LWS was rolled back, say):
    its ``Admitted`` condition goes back to reason ``Admitted`` with this message."""
    strangers: tuple[WaitStatus, ...] = ()
    """Groups that pods claim by their labels which their LWS did not make (reason
    ``NotMadeByLeaderWorkerSet``): those pods stay gated. Report them (a Warning Event) and,
    for an admitted group, restate its record's reason and message (its status stays True)."""
    steer: Mapping[tuple[str, str], Ungate] = field(default_factory=dict)
    """(namespace, pod) -> how each pod to ungate (in ``admit`` and ``ungate``) is steered
    to its pool's nodes in the write that lifts its gate."""
    give_back: tuple[GiveBack, ...] = ()
    """Admitted groups whose pods were not all bound within their pool's admission timeout, or
    one of whose own pods has not asked what its role was admitted with for a few seconds:
    write the record first (``Admitted=False``, ``retryAt``), then delete the pods by UID."""
    settled: tuple[tuple[str, str], ...] = ()
    """(namespace, record): admitted groups now whole whose record still counts give-backs
    (``status.retries``): cleared."""
    held_by_pods: tuple[GroupState, ...] = ()
    """Groups given back whose let-through pods still live (terminating): they hold what they
    were admitted with until the pods are gone, their hub claim too."""
    not_stopped: tuple[WaitStatus, ...] = ()
    """Groups given back whose let-through pods still run past the grace (not deleted: the
    gatekeeper's RBAC, or a policy): their record's message says so, with a Warning Event."""
    over_cap: tuple[GroupState, ...] = ()
    """Groups past their namespace's record cap (``core.admission.record_cap``): no record,
    not queued; their LWS is told by a Warning Event."""
    preempting: tuple[Preempting, ...] = ()
    """Groups that preempted others this pass (whose give-backs are in ``give_back``): an Event
    on their LWS says so."""


def decide(snap: Snapshot, memo: DemandMemo | None = None, requests: RequestsMemo | None = None) -> Actions:
    """The whole decision of one pass. Pure: the same snapshot gives the same actions.

    ``memo`` and ``requests`` remember demands and pod requests from one pass to the next
    (the loop owns them).
    """
    memo = memo if memo is not None else DemandMemo()
    memo.use_cluster(snap.limit_ranges, snap.runtime_classes, snap.claim_book)
    problems: list[str] = []
    pools, invalid_pools = snap.pools.ok, snap.pools.bad

    lws_by_key = _lws_by_key(snap.lwss, problems)
    records = index_by_key(snap.records)

    who = membership(lws_by_key, snap.pods, snap.statefulsets, snap.bound_pods, memo.pods)

    launcher, launching = read_launcher(
        snap.node_pools, snap.node_claims, snap.instance_types, snap.nodes, problems, snap.daemon_sets
    )
    by_name = {p.name: p for p in pools}
    settings = Settings(
        who.charges, by_name, launcher, snap.now, snap.retry_seconds, snap.default_priority, snap.claim_book
    )
    one = GroupPass(settings, who.strangers)
    statefulsets, held = index_by_key(snap.statefulsets), partial(admitted_indices, records)
    priority_of: dict[Key, int] = {}
    for (ns, name), lws in sorted(lws_by_key.items()):
        created = parse_time(meta(lws).get("creationTimestamp"))
        order = priority_of[(ns, name)] = lws_priority(lws, snap.priorities).order
        revision = leader_template_revision(lws, statefulsets)
        for group in lws_groups(ns, name, lws, who.pods_of, records, held, memo, revision):
            one.group(lws, group, created, order)
    for rkey, running in still_charged(records, one.wanted_records, lws_by_key, who.pods_of, who.charges):
        one.wanted_records.add(rkey)
        one.admitted_groups.append(running)

    over = over_cap(
        one.groups,
        lambda g: (g.key.namespace, g.record) in one.wanted_records,
        snap.max_records_per_namespace,
    )
    if over:  # past the namespace's cap: no record, not queued, told by an Event
        unrecorded = {g.key for g in over}
        one.waiting_groups = [w for w in one.waiting_groups if w.key not in unrecorded]
    nodes, usage = with_devices(
        [*snap.nodes, *launching], node_usage_skipping(snap.bound_pods, problems, requests), snap.device_room
    )
    result, chosen = _planned(snap, one, nodes, usage, launcher, records, who.pods_of, priority_of)
    admit, ungate, steer = _steering(result, one)
    waiting = waiting_words(result, one, invalid_pools, lws_by_key, chosen.said)
    create = tuple(
        g for g in one.groups if (g.key.namespace, g.record) not in one.wanted_records and g not in over
    )
    release = tuple(sorted(k for k in records if k not in one.wanted_records))
    return Actions(
        create_records=create,
        admit=tuple(admit),
        ungate=ungate,
        waiting=tuple(waiting),
        release=release,
        pools=result.pools,
        invalid_pools=invalid_pools,
        plan=result,
        held_invalid=tuple(one.held_invalid),
        held_changed=tuple(one.held_changed),
        restore_admitted=tuple(sorted(one.restore)),
        revisions=tuple(sorted(one.revisions)),
        problems=tuple(sorted(problems)),
        strangers=strangers_said_of(one, records),
        steer=steer,
        give_back=tuple(one.gives),
        stop=tuple(sorted(one.stop)),
        settled=tuple(sorted(one.settled)),
        look_again=one.look_again,
        held_by_pods=tuple(one.held_by_pods),
        not_stopped=tuple(one.not_stopped),
        over_cap=over,
        preempting=chosen.preempting,
    )


def _planned(
    snap: Snapshot,
    one: GroupPass,
    nodes: Sequence[Node],
    usage: Mapping[str, Mapping[str, int]],
    launcher: Launcher,
    records: Mapping[Key, Mapping[str, Any]],
    pods_of: PodsByGroup,
    priority_of: Mapping[Key, int],
) -> tuple[Plan, Preempted]:
    """The pass's plan, then what it takes back: groups once placed whole that lost a node's room
    (``giveback.displaced``), and the victims of preemption (``preempting``)."""
    pools = snap.pools.ok
    found = intruders(pools, snap.nodes, snap.bound_pods, snap.exempt_namespaces)
    held_nodes = occupants(snap.bound_pods)
    result = plan(
        pools,
        nodes,
        usage,
        one.admitted_groups,
        one.waiting_groups,
        snap.namespaces,
        launcher,
        found,
        held_nodes,
        BoundPods(snap.bound_pods),
    )
    _evict(one, _displaced(result, one, records, pods_of, snap.now), None)
    room = Cluster(
        pools=one.settings.pools,
        nodes=nodes,
        usage=usage,
        namespaces=snap.namespaces,
        intruders=found,
        occupants=held_nodes,
        records=records,
        pods=snap.pods,
        pods_of=pods_of,
        priority_of=priority_of,
        never=snap.never_preempt,
        now=snap.now,
    )
    chosen = preempt(result, one, room)
    _evict(one, chosen.give_back, chosen.look_again)
    _evict(one, asked_back(one, records, pods_of, snap.asked_back, snap.now), None)
    return result, chosen


def _evict(one: GroupPass, gives: Sequence[GiveBack], look_again: datetime | None) -> None:
    """Groups given back after the plan (preempted, displaced) are given back as any group: until
    their pods are gone they hold what they were admitted with, and no gated pod of theirs is
    let through any more."""
    going = {g.group.key for g in gives}
    one.gives.extend(gives)
    one.held_by_pods.extend(g.group for g in gives)
    one.ungate_keys = [k for k in one.ungate_keys if k not in going]
    if look_again is not None:
        one.look_again = min(one.look_again or look_again, look_again)


def _displaced(
    result: Plan,
    one: GroupPass,
    records: Mapping[Key, Mapping[str, Any]],
    pods_of: PodsByGroup,
    now: datetime | None,
) -> list[GiveBack]:
    """The groups once placed whole that the plan found stranded, given back when due
    (``giveback.displaced``); the pass looks again when the next is due."""
    gives: list[GiveBack] = []
    for status in result.pools.values():
        for key in status.stranded:
            gs = one.state_of.get(key)
            record = records.get((key.namespace, gs.record)) if gs is not None else None
            if gs is None or record is None or key not in one.held_pools or key not in one.ungate_keys:
                continue
            pods = pods_of.get((key.namespace, key.name), {}).get(key.index, ())
            give = displaced(gs, record, pods, one.held_pools[key], now)
            if isinstance(give, datetime):
                one.look_again = min(one.look_again or give, give)
            elif give is not None:
                gives.append(give)
    return gives


def _lws_by_key(lwss: Sequence[Mapping[str, Any]], problems: list[str]) -> dict[Key, Mapping[str, Any]]:
    """The LWSs by (namespace, name); one without a name is named in ``problems``."""
    found: dict[Key, Mapping[str, Any]] = {}
    for obj in lwss:
        lkey = object_key(obj)
        if lkey is None:
            problems.append("a LeaderWorkerSet without metadata.name was ignored")
            continue
        found[lkey] = obj
    return found


def _steering(result: Plan, one: GroupPass) -> tuple[tuple[Admit, ...], tuple[Key, ...], dict[Key, Ungate]]:
    """The groups admitted this pass, and the pods let through (theirs, and those of groups
    that hold their admission), each steered onto its pool's nodes and marked with its charge."""
    steer: dict[Key, Ungate] = {}
    pools = one.settings.pools

    domains = dict(one.held_domains)

    def steered(ns: str, pod: str, pool_name: str, key: GroupKey) -> bool:
        pool = pools.get(pool_name)
        if pool is not None:  # a pod is never let through to no pool's nodes, and always marked
            mark = charge_toleration(one.state_of[key].lws_uid, key.index)
            selector = {**pool.node_selector, **dict(domains.get(key, ()))}  # pinned to its domain
            steer[(ns, pod)] = Ungate(ns, pod, selector, (*pool.tolerations, mark))
        return pool is not None

    admit: list[Admit] = []
    for a in result.admit:
        gs = one.state_of[a.key]
        summary = format_resources(gs.demand.total) if isinstance(gs.demand, GroupDemand) else ""
        admit.append(Admit(group=gs, nodes=tuple(a.nodes), summary=summary, lender=a.lender, domain=a.domain))
        domains[a.key] = a.domain
        for pod in gs.gated:
            steered(gs.key.namespace, pod, a.lender or gs.pool, gs.key)
    lifts = {
        (k.namespace, pod): (one.held_pools[k], k) for k in one.ungate_keys for pod in one.state_of[k].gated
    }
    lifts.update({(ns, pod): (pool_name, key) for ns, pod, pool_name, key in one.partial_ungate})
    ungate = tuple(
        (ns, pod) for (ns, pod), (pool_name, key) in sorted(lifts.items()) if steered(ns, pod, pool_name, key)
    )
    return tuple(admit), ungate, steer
