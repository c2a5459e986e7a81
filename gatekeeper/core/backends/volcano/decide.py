"""The ``volcano`` backend's whole decision: one Volcano PodGroup per LWS group, gates follow it.

Why this exists: with ``--backend=volcano`` Volcano's scheduler, by its Queues, decides
which group may start, and the gatekeeper keeps only its own gate, lifted for a whole
group at once. This module turns a snapshot (opted-in LWSs, their pods, our records, our
PodGroups and Volcano's Events about them, nodes and bound pods) into ``VolcanoActions``
without any I/O; ``VolcanoBackend`` (``controller.backends.volcano``) executes them. What
a PodGroup of ours is, and how Volcano's answer is read, is in ``podgroup``.

The model, per group of an opted-in LWS (label ``lws-gatekeeper.io/pool`` naming a
Volcano Queue):

* Groups are enumerated by ``core.model.groups``; each has a ``GroupAdmission`` record (owned
  by the LWS) and at most one PodGroup named by ``pod_group_name`` (the webhook writes
  that name on the group's pods, ``scheduling.k8s.io/group-name``), owned by the record.
* A PodGroup is offered to Volcano one at a time per Queue: a group's PodGroup is made only
  when every other PodGroup of ours in that Queue is ``Inqueue`` (or later) with none of
  its pods gated. Volcano v1.10 reserves no room in a Queue for pods that carry a
  scheduling gate (its proportion plugin deducts them from an Inqueue PodGroup's
  ``minResources``), so two gated PodGroups in one Queue would both be let in, whatever
  the Queue's capability (``tests/e2e/test_volcano_backend.py`` shows it). Offered one at
  a time, each is judged against the room the others hold. Groups are offered highest
  priority first (the LWS's PriorityClass, as its pods get it), then oldest LWS, then
  namespace, LWS name and index. An offer Volcano has not let in (its group's pods all
  gated, nothing of it started) is withdrawn, its PodGroup deleted, when a group of a
  higher priority waits in the same Queue: the next pass offers that group in its stead,
  so a higher-priority LWS that comes later does not wait behind a lower one's offer.
* Volcano puts the PodGroup ``Inqueue``: the group's gated pods lose their gate together,
  if the whole group fits the nodes now (``core.admission.fit``, placements of this pass kept so that
  two groups do not count the same room). Pods of an admitted group that come later
  (LeaderReady workers, restarts) lose theirs as they come: the group's room is reserved
  by ``minResources``. A group Volcano let in that does not fit the nodes stays gated,
  and its record says so.
* Only the pods the LWS said are let through, as with the other backends: a gated pod
  counts only when its owner chain leads to the LWS by UID, its worker index is below
  the LWS's ``size`` (``core.admission.members``) and it asks what its role was admitted with
  (``core.admission.conformance``); any other stays gated, and the record (still admitted) and a
  Warning Event name it.
* An admitted group one of whose own pods has not asked what its role was admitted with
  for a few seconds (``core.admission.conformance.overdue``) cannot be whole: it is given
  back. Its record says ``Admitted=False``, reason ``NotAsAdmitted``, with a retry time;
  its running pods stop, and once none is left its PodGroup goes (so the Queue's room comes
  back only when nothing runs on it); after the retry it is offered again, its pods made
  again by the LWS from its own templates.
* Volcano leaves it ``Pending``: its pods stay gated, and its record says why in
  Volcano's words (the PodGroup's ``Unschedulable`` condition, or Volcano's latest Event
  on it, e.g. "queue resource quota insufficient").
* A leaving group (scaled down, LWS deleted) keeps its record (and so its PodGroup) until
  its last pod is gone, terminating ones included; then the record's finalizer is removed
  and it is deleted (``core.writes.finalizers``), and the PodGroup goes with it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gatekeeper.core.admission.conformance import Departed, conforming, overdue
from gatekeeper.core.admission.deadline import whole
from gatekeeper.core.admission.fit import Misfit, NodeTable
from gatekeeper.core.admission.members import Stranger, strangers_said
from gatekeeper.core.admission.membership import membership
from gatekeeper.core.admission.reasons import STRANGER_REASONS, Reason
from gatekeeper.core.admission.record_cap import DEFAULT_MAX_RECORDS_PER_NAMESPACE, RecordRoom
from gatekeeper.core.backends.volcano.giveback import Back, Given, give_back, giving_back, timed_out
from gatekeeper.core.backends.volcano.podgroup import (
    pod_group_belongs,
    pod_group_name,
    volcano_state,
)
from gatekeeper.core.backends.volcano.status import VolcanoStatus, said_surge
from gatekeeper.core.kube.keys import INVALID_SPEC_REASON
from gatekeeper.core.kube.objects import as_map, index_by_key, meta, object_key
from gatekeeper.core.model.charge import Charge, charge_toleration, charged
from gatekeeper.core.model.claims import NO_CLAIMS, ClaimBook
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.devices import DeviceRoom, with_devices
from gatekeeper.core.model.gating import Ungate
from gatekeeper.core.model.group import GroupKey, InvalidDemand
from gatekeeper.core.model.groups import DemandMemo, GroupState, LwsGroup, PodsByGroup, lws_groups
from gatekeeper.core.model.lws import priority
from gatekeeper.core.model.nodes import Node, node_usage_skipping
from gatekeeper.core.model.pool import DEFAULT_ADMISSION_TIMEOUT
from gatekeeper.core.model.record import is_admitted
from gatekeeper.core.plugin.decided import GroupActions

__all__ = [
    "NOT_ON_NODES",
    "VOLCANO_INQUEUE_REASON",
    "WAITING_FOR_VOLCANO",
    "VolcanoActions",
    "VolcanoSnapshot",
    "decide_volcano",
]

#: Record reasons of the volcano backend.
VOLCANO_INQUEUE_REASON = "Inqueue"
WAITING_FOR_VOLCANO = "WaitingForVolcano"
NOT_ON_NODES = "NoNodeFitsNow"

_ALL = "all"


@dataclass(frozen=True)
class VolcanoSnapshot:
    """What one pass of the ``volcano`` backend sees (API-shaped dicts, as informers hold them)."""

    lwss: Sequence[Mapping[str, Any]]
    pods: Sequence[Mapping[str, Any]]
    """Pods of opted-in LWSs."""
    records: Sequence[Mapping[str, Any]]
    pod_groups: Sequence[Mapping[str, Any]]
    """PodGroups made by the gatekeeper (they carry ``lws-gatekeeper.io/pool``)."""
    events: Sequence[Mapping[str, Any]] = ()
    """Events whose involved object is a PodGroup (Volcano's words)."""
    nodes: Sequence[Node] = ()
    bound_pods: Sequence[Mapping[str, Any]] = ()
    """Every pod on a node, anyone's: the room they take."""
    priorities: Mapping[str, int] = field(default_factory=dict)
    """PriorityClass name -> value: which waiting group of a Queue is offered first."""
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
    now: datetime | None = None
    """The time of the pass, for give-backs and their retry (None: nothing is given back)."""
    retry_seconds: int = 60
    """First delay before a group given back is offered again (doubled per retry, up to 30 min)."""
    admission_timeout: int = DEFAULT_ADMISSION_TIMEOUT
    """Seconds an admitted group may lack bound pods before it is given back
    (``core.admission.timeout``)."""


@dataclass(frozen=True, kw_only=True)
class VolcanoActions(GroupActions):
    """Everything one pass decided, in the order the I/O layer carries it out (the group
    lifecycle's fields, ``problems`` and ``look_again`` are ``GroupActions``'; ``release``
    deletes a record, its PodGroup following, and ``stop`` the running pods of a group given
    back, after its record)."""

    create_pod_groups: tuple[tuple[GroupState, str], ...] = ()
    """(group, record UID): PodGroups to create, owned by the record."""
    over_cap: tuple[GroupState, ...] = ()
    """Groups past their namespace's record cap: no record, no PodGroup; their LWS is told."""
    withdraw_pod_groups: tuple[tuple[str, str, str], ...] = ()
    """(namespace, PodGroup, its UID): offers Volcano has not let in, deleted for a group of a
    higher priority waiting in the same Queue."""
    retire_pod_groups: tuple[tuple[str, str, str], ...] = ()
    """(namespace, PodGroup, its UID): PodGroups of groups given back, none of whose pods is
    left: the Queue's room comes back."""
    ungate: tuple[Ungate, ...] = ()
    statuses: tuple[VolcanoStatus, ...] = ()


def _events_by_object(events: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for ev in events:
        obj = as_map(ev.get("involvedObject"))
        if obj.get("kind") == "PodGroup" and isinstance(obj.get("name"), str):
            out[(str(obj.get("namespace") or meta(ev).get("namespace") or ""), str(obj["name"]))].append(ev)
    return out


def _misfit(m: Misfit) -> str:
    what = m.resource or "room on one node"
    return f"pod {m.pod} ({m.role}) finds no node with {what}; {m.placed} pods placed of the group"


def _higher_waiting(
    g: LwsGroup, waiting: Sequence[LwsGroup], rank: Mapping[tuple[str, str], tuple[int, str]]
) -> LwsGroup | None:
    """The first group of ``waiting`` (no PodGroup yet, same Queue) whose LWS has a strictly
    higher priority than ``g``'s; ``None`` when there is none."""

    def value(one: LwsGroup) -> int:
        return -rank.get((one.state.key.namespace, one.state.key.name), (0, ""))[0]

    mine = value(g)
    ahead = [w for w in waiting if value(w) > mine]
    return min(ahead, key=lambda w: (-value(w), w.state.key)) if ahead else None


Rank = Mapping[tuple[str, str], tuple[int, str]]
"""Per LWS: (minus its priority, its creation time), the order its groups are offered in."""


def decide_volcano(snap: VolcanoSnapshot, demands: DemandMemo | None = None) -> VolcanoActions:
    """One pass of the ``volcano`` backend (see the module docstring), in named stages:
    the groups and their order; each sorted by where its PodGroup stands; the groups Volcano
    holds judged; the records no group claims released; the next offer of each Queue made."""
    problems: list[str] = []
    records = index_by_key(snap.records)
    lws_by_key = {key: obj for obj in snap.lwss if (key := object_key(obj)) is not None}
    memo = demands if demands is not None else DemandMemo()
    memo.use_cluster(snap.limit_ranges, snap.runtime_classes, snap.claim_book)
    who = membership(lws_by_key, snap.pods, snap.statefulsets, snap.bound_pods, memo.pods)
    table = NodeTable(
        *with_devices(snap.nodes, node_usage_skipping(snap.bound_pods, problems), snap.device_room)
    )
    table.add_view(_ALL, lambda _node: True)
    groups, rank = _groups(snap, memo, who.pods_of, records, problems)
    said = _events_by_object(snap.events)
    room = RecordRoom((ns for ns, _ in records), snap.max_records_per_namespace)
    where = _where(groups, index_by_key(snap.pod_groups), said, snap.now, who.charges, room)
    back = Back(snap.now, snap.retry_seconds, who.charges, snap.admission_timeout)
    held = [
        _judge(
            g,
            pg,
            said,
            where.offers,
            rank,
            table,
            lws_by_key,
            who.strangers,
            (snap.default_priority, snap.claim_book),
            back,
        )
        for g, pg in where.live
    ]
    create_pod_groups, offered = _offer(where.offers, where.busy, rank)
    dues = [h.look_again for h in held if h.look_again is not None]
    return VolcanoActions(
        create_records=tuple(where.create_records),
        over_cap=tuple(where.over_cap),
        create_pod_groups=tuple(create_pod_groups),
        withdraw_pod_groups=tuple(h.withdraw for h in held if h.withdraw is not None),
        retire_pod_groups=tuple(where.retire),
        release=tuple(_unclaimed(records, groups, who.pods_of, who.charges)),
        ungate=tuple(u for h in held for u in h.ungate),
        statuses=tuple(
            said_surge(st, lws_by_key) for st in (*where.statuses, *(h.status for h in held), *offered)
        ),
        problems=tuple(problems),
        stop=tuple(sorted({*where.stop, *(p for h in held for p in h.stop)})),
        look_again=min(dues) if dues else None,
    )


def _groups(
    snap: VolcanoSnapshot,
    memo: DemandMemo,
    pods_of: PodsByGroup,
    records: Mapping[tuple[str, str], Mapping[str, Any]],
    problems: list[str],
) -> tuple[list[LwsGroup], dict[tuple[str, str], tuple[int, str]]]:
    """Every group of every LWS, and each LWS's rank; one bad LWS never stops the others."""
    groups: list[LwsGroup] = []
    rank: dict[tuple[str, str], tuple[int, str]] = {}
    for lws in sorted(snap.lwss, key=lambda o: object_key(o) or ("", "")):
        key = object_key(lws)
        if key is None:
            continue
        value = priority(lws, snap.priorities).value or 0
        created = meta(lws).get("creationTimestamp")
        rank[key] = (-max(min(value, 10**9), -(10**9)), created if isinstance(created, str) else "")
        try:
            groups.extend(lws_groups(key[0], key[1], lws, pods_of, records, lambda *_: set(), memo))
        except (ValueError, TypeError) as exc:
            problems.append(f"LeaderWorkerSet {key[0]}/{key[1]}: {exc}")
    return groups, rank


@dataclass
class _Where:
    """The staying groups, sorted by where their PodGroup stands."""

    create_records: list[GroupState] = field(default_factory=list)
    over_cap: list[GroupState] = field(default_factory=list)
    """Groups past their namespace's record cap: no record, no PodGroup."""
    statuses: list[VolcanoStatus] = field(default_factory=list)
    """Of groups whose demand cannot be read."""
    offers: dict[str, list[LwsGroup]] = field(default_factory=lambda: defaultdict(list))
    """Per Queue: the groups without a PodGroup of theirs, to be offered."""
    live: list[tuple[LwsGroup, Mapping[str, Any]]] = field(default_factory=list)
    """The groups with their PodGroup."""
    busy: set[str] = field(default_factory=set)
    """Queues with a PodGroup of ours that Volcano has not let in, or let in with gated pods."""
    stop: list[tuple[str, str]] = field(default_factory=list)
    """Running pods of groups given back."""
    retire: list[tuple[str, str, str]] = field(default_factory=list)
    """PodGroups of groups given back whose pods are all gone."""


def _where(
    groups: Sequence[LwsGroup],
    pgs: Mapping[tuple[str, str], Mapping[str, Any]],
    said: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    now: datetime | None = None,
    charges: Mapping[Charge, tuple[str, ...]] | None = None,
    room: RecordRoom | None = None,
) -> _Where:
    out = _Where()
    room = room if room is not None else RecordRoom((), DEFAULT_MAX_RECORDS_PER_NAMESPACE)
    for g in groups:
        st = g.state
        ns = st.key.namespace
        if not g.staying:
            continue  # released by _unclaimed once no pod of it lives, terminating ones included
        if g.record is None:
            (out.create_records if room.take(ns) else out.over_cap).append(st)
            continue
        back = giving_back(g, pgs, now, charges or {})
        if back is not None:
            out.stop.extend(back.stop)
            out.retire.extend([back.retire] if back.retire is not None else [])
            out.busy.update([st.pool] if back.busy else [])
            out.statuses.append(VolcanoStatus(st, False, back.reason, back.message, warning=True))
            continue
        if isinstance(st.demand, InvalidDemand):
            out.statuses.append(
                VolcanoStatus(st, False, INVALID_SPEC_REASON, st.demand.message, warning=True)
            )
            continue
        pg_name = pod_group_name(st.key.name, st.key.index)
        pg = pgs.get((ns, pg_name))
        if pg is not None and not pod_group_belongs(pg, st.key.name, st.lws_uid, st.key.index):
            pg = None  # an earlier incarnation's, going with its record
        if pg is None:
            out.offers[st.pool].append(g)
            continue
        out.live.append((g, pg))
        answer = volcano_state(pg, tuple(said.get((ns, pg_name), ())))
        if not answer.admitted or st.gated:
            out.busy.add(st.pool)
    return out


@dataclass(frozen=True)
class _Judged:
    """What becomes of a group with its PodGroup."""

    status: VolcanoStatus
    ungate: tuple[Ungate, ...] = ()
    withdraw: tuple[str, str, str] | None = None
    """(namespace, PodGroup, its UID): the offer withdrawn for a group of a higher priority."""
    stop: tuple[tuple[str, str], ...] = ()
    """(namespace, pod): its running pods, when it is given back."""
    look_again: datetime | None = None
    """When its own pod not as admitted is due to give it back."""


def _judge(
    g: LwsGroup,
    pg: Mapping[str, Any],
    said: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    offers: Mapping[str, Sequence[LwsGroup]],
    rank: Rank,
    table: NodeTable,
    lws_by_key: Mapping[tuple[str, str], Mapping[str, Any]],
    stranger_pods: dict[GroupKey, list[Stranger]],
    judged_by: tuple[int, ClaimBook],
    back: Back | None = None,
) -> _Judged:
    """A group whose PodGroup Volcano holds: withdrawn for a higher priority, waiting in
    Volcano's words, waiting for the nodes, or let through (only the pods its LWS said)."""
    st = g.state
    ns, pg_name = st.key.namespace, str(meta(pg).get("name"))
    answer = volcano_state(pg, tuple(said.get((ns, pg_name), ())))
    started = any(p.live and not p.gated for p in g.present) or is_admitted(g.record)
    if not answer.admitted and not started:
        ahead = _higher_waiting(g, offers.get(st.pool, []), rank)
        if ahead is not None:
            message = (
                f"group {st.key.index} waits in Volcano Queue {st.pool}: its PodGroup {pg_name} "
                f"is withdrawn for group {ahead.state.key.index} of LWS {ahead.state.key.name}, "
                "of a higher priority"
            )
            withdraw = (ns, pg_name, str(meta(pg).get("uid") or ""))
            return _Judged(VolcanoStatus(st, False, WAITING_FOR_VOLCANO, message), withdraw=withdraw)
    if not answer.admitted:
        words = f": {answer.message}" if answer.message else ""
        message = (
            f"group {st.key.index} waits in Volcano Queue {st.pool} (PodGroup {pg_name}, "
            f"{answer.phase}){words}"
        )
        why = answer.reason if answer.message else WAITING_FOR_VOLCANO
        return _Judged(VolcanoStatus(st, False, why, message, pod_group=pg_name))
    if st.gated and not started:
        assert isinstance(st.demand, GroupDemand)
        placed = table.place(_ALL, st.demand.pods)
        if isinstance(placed, Misfit):
            message = (
                f"group {st.key.index} is Inqueue in Volcano Queue {st.pool} but the whole group "
                f"does not fit the nodes now ({_misfit(placed)})"
            )
            return _Judged(VolcanoStatus(st, False, NOT_ON_NODES, message, pod_group=pg_name))
    made_by = lws_by_key.get((ns, st.key.name))
    if made_by is not None and isinstance(st.demand, GroupDemand):  # a hand-edited StatefulSet's pods
        st, off = conforming(st, g.present, made_by, st.demand, *judged_by)
        stranger_pods.setdefault(st.key, []).extend(off)
    due = overdue(g.present, stranger_pods.get(st.key, ()), back.now) if back is not None else None
    if isinstance(due, Departed) and back is not None:
        stranger_pods.pop(st.key, None)  # the give-back's own words say it
        given = give_back(g, due, back)
        status = VolcanoStatus(
            st, False, Reason.NOT_AS_ADMITTED, given.message, pod_group=pg_name, warning=True,
            retry_at=given.retry_at, retries=given.retries,
        )  # fmt: skip
        return _Judged(status, stop=given.stop)
    late = timed_out(g, made_by, back) if made_by is not None and back is not None else None
    if isinstance(late, Given):
        status = VolcanoStatus(
            st, False, Reason.ADMISSION_TIMEOUT, late.message, pod_group=pg_name, warning=True,
            retry_at=late.retry_at, retries=late.retries,
        )  # fmt: skip
        return _Judged(status, stop=late.stop)
    if isinstance(late, datetime):
        due = late if not isinstance(due, datetime) else min(due, late)
    mark = charge_toleration(st.lws_uid, st.key.index)
    ungate = tuple(Ungate(ns, name, {}, (mark,)) for name in st.gated)
    reason: str = VOLCANO_INQUEUE_REASON
    message = f"group {st.key.index} admitted by Volcano Queue {st.pool} (PodGroup {pg_name}, {answer.phase})"
    if stranger_pods.get(st.key):
        reason, words = strangers_said(stranger_pods[st.key])
        message = f"{message}; {words}"
    warn = reason in STRANGER_REASONS
    bound = isinstance(st.demand, GroupDemand) and whole(g.present, st.demand)
    status = VolcanoStatus(st, True, reason, message, pod_group=pg_name, warning=warn, placed=bound)
    return _Judged(status, ungate, look_again=due if isinstance(due, datetime) else None)


def _unclaimed(
    records: Mapping[tuple[str, str], Mapping[str, Any]],
    groups: Sequence[LwsGroup],
    pods_of: PodsByGroup,
    charges: Mapping[Charge, tuple[str, ...]],
) -> list[tuple[str, str]]:
    """Records no group of a present LWS claims (a group scaled away whose last pod went, an
    LWS deleted): released once no live pod of their group is left, by its labels or by
    the charge it was let through with (``core.model.charge``: its labels changed since)."""
    claimed = {(g.state.key.namespace, g.state.record) for g in groups if g.staying}
    release: list[tuple[str, str]] = []
    for (ns, name), rec in sorted(records.items()):
        spec = as_map(rec.get("spec"))
        lws_name, index = spec.get("leaderWorkerSet"), spec.get("groupIndex")
        if (ns, name) in claimed or not isinstance(lws_name, str):
            continue
        members = pods_of.get((ns, lws_name), {}).get(index, []) if isinstance(index, int) else []
        if not any(p.live for p in members) and not (is_admitted(rec) and charged(rec, charges)):
            release.append((ns, name))
    return release


def _offer(
    offers: Mapping[str, list[LwsGroup]], busy: set[str], rank: Rank
) -> tuple[list[tuple[GroupState, str]], list[VolcanoStatus]]:
    """Per Queue that has none in flight, its first waiting group's PodGroup made; the others
    told that they wait for their turn."""
    create: list[tuple[GroupState, str]] = []
    statuses: list[VolcanoStatus] = []
    for pool, waiting in sorted(offers.items()):
        waiting.sort(
            key=lambda g: (rank.get((g.state.key.namespace, g.state.key.name), (0, "")), g.state.key)
        )
        for i, g in enumerate(waiting):
            st = g.state
            if i == 0 and pool not in busy:
                uid = str(meta(g.record).get("uid") or "") if g.record is not None else ""
                if uid:
                    create.append((st, uid))
                message = f"group {st.key.index}: its PodGroup is being made in Volcano Queue {pool}"
            else:
                message = (
                    f"group {st.key.index} waits for its turn in Volcano Queue {pool}: one PodGroup "
                    "at a time is offered to Volcano"
                )
            statuses.append(VolcanoStatus(st, False, WAITING_FOR_VOLCANO, message))
    return create, statuses
