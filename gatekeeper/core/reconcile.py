"""From a snapshot of the cluster to the list of things to do: the controller's whole decision.

Why this exists: the controller must be restartable at any moment and never admit a
group twice, so every pass starts from what the cluster shows (LWSs, their pods, the
admission records, pools, nodes) and nothing else. This module turns such a snapshot
into ``Actions`` without any I/O, in the order they must happen: records first, then
gates. The I/O layer only carries them out (Kueue's "plan, then act").

The model:

* An opted-in LWS (label ``lws-gatekeeper.io/pool``) has groups ``0..replicas-1``,
  plus any index that still has a pod not in phase Succeeded/Failed (surge, or a
  scale-down in progress; a terminating pod still counts, it still holds its node).
* Each group has one ``GroupAdmission`` record, named after the LWS, its UID and the
  index. The record's status condition ``Admitted`` says whether the group holds its
  reservation; a record that says so is what counts against the pool's quota. A record
  whose ``spec.leaderWorkerSetUID`` names another UID belongs to an earlier LWS of the
  same name and is never taken for the current one's (even if the short UID prefix in
  the name collides).
* A group is released (its record deleted) when its index is no longer wanted and
  none of its pods is left, or when its LWS is gone or was replaced (other UID).
* Pods of admitted groups lose their gate; pods of waiting groups keep it.

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
* **Bad input is reported, never fatal.** An object the core cannot read (a bound pod
  with unreadable requests, an LWS without a name) is skipped and named in
  ``Actions.problems``; one bad object must not stop admission for everyone else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gatekeeper.core.demand import GroupDemand, PodDemand, group_demand
from gatekeeper.core.names import API_GROUP, API_VERSION, POOL_LABEL, SCHEDULING_GATE
from gatekeeper.core.nodes import Node, node_usage_skipping
from gatekeeper.core.planner import Plan, PoolStatus, plan
from gatekeeper.core.pool import Pool, parse_pool
from gatekeeper.core.quantity import format_amount, format_resources, parse_units
from gatekeeper.core.queue import AdmittedGroup, GroupKey, InvalidDemand, WaitingGroup
from gatekeeper.core.reasons import Reason

__all__ = [
    "ADMITTED",
    "GROUP_INDEX_LABEL",
    "LWS_NAME_LABEL",
    "RECORD_KIND",
    "REVISION_LABEL",
    "WORKER_INDEX_LABEL",
    "Actions",
    "Admit",
    "GroupState",
    "Snapshot",
    "WaitStatus",
    "admitted_condition",
    "decide",
    "demand_status",
    "record_name",
    "replacing_map",
]

LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
REVISION_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"
"""The LWS template revision a pod was made from (the leader's, copied to its workers)."""
RECORD_KIND = "GroupAdmission"
RECORD_API_VERSION = f"{API_GROUP}/{API_VERSION}"
ADMITTED = "Admitted"
_MAX_NAME = 253
_EPOCH = datetime.fromtimestamp(0, UTC)


def record_name(lws_name: str, lws_uid: str, index: int) -> str:
    """The record of one group: readable, unique per LWS incarnation, at most 253 characters."""
    tail = f"-{lws_uid[:5]}-{index}"
    if len(lws_name) + len(tail) <= _MAX_NAME:
        return f"{lws_name}{tail}"
    # Too long for a name: keep a readable head and make it unique with a digest.
    head = lws_name[: _MAX_NAME - len(tail) - 11].rstrip("-.")
    return f"{head}-{digest(lws_name)}{tail}"


def _map(value: object) -> Mapping[str, Any]:
    """``value`` if it is an object, else empty: the core reads what it can, never crashes."""
    if type(value) is dict:  # the usual case, without the slower ABC check
        return value
    return value if isinstance(value, Mapping) else {}


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(obj.get("metadata"))


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(_meta(obj).get("labels"))


def _object_key(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    meta = _meta(obj)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    return str(meta.get("namespace") or ""), name


def _parse_time(value: object) -> datetime:
    if isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return _EPOCH
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return _EPOCH


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = _map(pod.get("spec")).get("schedulingGates") or []
    return isinstance(gates, list) and any(_map(g).get("name") == SCHEDULING_GATE for g in gates)


def _live(pod: Mapping[str, Any]) -> bool:
    """Not in a terminal phase: the pod exists and may hold (or get) node room."""
    return _map(pod.get("status")).get("phase") not in ("Succeeded", "Failed")


def _terminating(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    conditions = _map(obj.get("status")).get("conditions") or []
    if not isinstance(conditions, list):
        return None
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return dict(cond)
    return None


def _is_admitted(record: Mapping[str, Any] | None) -> bool:
    cond = _condition(record, ADMITTED) if record is not None else None
    return cond is not None and cond.get("status") == "True"


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
    pools: Sequence[Mapping[str, Any]]
    records: Sequence[Mapping[str, Any]]
    priorities: Mapping[str, int] = field(default_factory=dict)
    """PriorityClass name -> value."""


@dataclass(frozen=True)
class GroupState:
    """What the pass found about one group, for its record and events."""

    key: GroupKey
    lws_uid: str
    pool: str
    record: str
    demand: GroupDemand | InvalidDemand
    pods: tuple[str, ...]
    gated: tuple[str, ...]
    revision: str = ""
    """The LWS template revision of the group's pods (its leader's when present)."""


@dataclass(frozen=True)
class Admit:
    """Admit a group now: write its record's ``Admitted=True`` first, then lift its pods' gates."""

    group: GroupState
    nodes: tuple[str, ...]
    """Tentative node of each pod, leader first."""
    summary: str


@dataclass(frozen=True)
class WaitStatus:
    """A group that waits: its record's ``Admitted=False`` condition."""

    group: GroupState
    reason: Reason
    message: str
    position: int


@dataclass(frozen=True)
class Actions:
    """Everything one pass decided, in the order the I/O layer must carry it out."""

    create_records: tuple[GroupState, ...]
    """Groups seen for the first time: create their records (not yet admitted)."""
    admit: tuple[Admit, ...]
    ungate: tuple[tuple[str, str], ...]
    """(namespace, pod) of already admitted groups whose pods still carry the gate."""
    waiting: tuple[WaitStatus, ...]
    release: tuple[tuple[str, str], ...]
    """(namespace, record) to delete: groups scaled away, LWSs gone or replaced."""
    pools: Mapping[str, PoolStatus]
    invalid_pools: Mapping[str, str]
    """Pools that could not be read, with the reason."""
    plan: Plan
    held_invalid: tuple[WaitStatus, ...] = ()
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
    """Admitted groups whose demand can no longer be computed. They keep their record
    (``Admitted=True``, never to be overwritten) and hold their recorded demand; their
    gated pods stay gated. Report them (an event); do not write their condition."""
    problems: tuple[str, ...] = ()
    """Objects this pass could not read and skipped, in words (for logs)."""


def _pool_of(lws: Mapping[str, Any]) -> str:
    return str(_labels(lws).get(POOL_LABEL, ""))


def _priority(lws: Mapping[str, Any], priorities: Mapping[str, int]) -> int:
    lwt = _map(_map(lws.get("spec")).get("leaderWorkerTemplate"))
    for tmpl in (lwt.get("leaderTemplate"), lwt.get("workerTemplate")):
        spec = _map(_map(tmpl).get("spec"))
        value = spec.get("priority")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        name = spec.get("priorityClassName")
        if name:
            return int(priorities.get(str(name), 0))
    return 0


def _replicas(lws: Mapping[str, Any]) -> int:
    value = _map(lws.get("spec")).get("replicas")
    if value is None:
        return 1  # the API server's default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"spec.replicas: expected a non-negative integer, got {value!r}")
    return value


def _group_index(pod: Mapping[str, Any]) -> int | None:
    try:
        index = int(str(_labels(pod)[GROUP_INDEX_LABEL]))
    except (KeyError, ValueError):
        return None
    return index if index >= 0 else None


def _pod_index(pod: Mapping[str, Any]) -> int:
    try:
        return int(str(_labels(pod).get(WORKER_INDEX_LABEL, "0")))
    except ValueError:
        return 0


@dataclass(frozen=True)
class _Pod:
    """What a pass needs of one pod of an opted-in LWS, read once."""

    name: str
    live: bool
    """Not Succeeded/Failed."""
    terminating: bool
    gated: bool
    bound: bool
    worker: int
    revision: str

    @classmethod
    def read(cls, pod: Mapping[str, Any], name: str) -> _Pod:
        return cls(
            name=name,
            live=_live(pod),
            terminating=_terminating(pod),
            gated=_gated(pod),
            bound=bool(_map(pod.get("spec")).get("nodeName")),
            worker=_pod_index(pod),
            revision=str(_labels(pod).get(REVISION_LABEL) or ""),
        )


#: Demands already computed, by LWS (uid, generation): the spec cannot change without a
#: new generation, and a pass reads every opted-in LWS.
_DEMANDS_SEEN: dict[tuple[str, int], GroupDemand | InvalidDemand] = {}
_DEMANDS_SEEN_MAX = 20_000


def _demand(lws: Mapping[str, Any]) -> GroupDemand | InvalidDemand:
    meta = _meta(lws)
    uid, generation = meta.get("uid"), meta.get("generation")
    key = (uid, generation) if isinstance(uid, str) and uid and type(generation) is int else None
    if key is not None and key in _DEMANDS_SEEN:
        return _DEMANDS_SEEN[key]
    try:
        demand: GroupDemand | InvalidDemand = group_demand(lws)
    except ValueError as exc:
        demand = InvalidDemand(str(exc))
    if key is not None:
        if len(_DEMANDS_SEEN) >= _DEMANDS_SEEN_MAX:
            _DEMANDS_SEEN.clear()
        _DEMANDS_SEEN[key] = demand
    return demand


def _recorded_demand(record: Mapping[str, Any]) -> GroupDemand:
    """What an admitted group holds by its record's status (for a demand that cannot be recomputed).

    The per-pod split is unknown, so the whole total sits on the leader; unreadable amounts
    are left out (the group is reported anyway).
    """
    status = _map(record.get("status"))
    total: dict[str, int] = {}
    for resource, raw in _map(status.get("demand")).items():
        try:
            amount = parse_units(str(resource), raw)
        except (ValueError, TypeError):
            continue
        if amount > 0 and resource != "pods":
            total[str(resource)] = amount
    count = status.get("pods")
    count = count if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else 1
    pods = (PodDemand("leader", total), *(PodDemand("worker", {}) for _ in range(count - 1)))
    return GroupDemand(pods)


def _units(resources: Mapping[str, int]) -> dict[str, int]:
    """Resources as compared with a record: no pod count, no zeros."""
    return {r: v for r, v in resources.items() if v > 0 and r != "pods"}


def _recorded_shape(record: Mapping[str, Any]) -> tuple[dict[str, int], int] | None:
    """(total per resource, pods) the record says the group was admitted with; None when it
    does not say (a record written before demand was recorded) or says it unreadably."""
    status = _map(record.get("status"))
    raw = status.get("demand")
    count = status.get("pods")
    if not isinstance(raw, Mapping) or not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return None
    total: dict[str, int] = {}
    for resource, value in raw.items():
        if value is None:
            continue
        try:
            total[str(resource)] = parse_units(str(resource), value)
        except (ValueError, TypeError):
            return None
    return _units(total), count


def _revision_of(pods: Sequence[_Pod]) -> str:
    """The template revision of a group: its leader's, else its first pod's that has one."""
    for pod in sorted(pods, key=lambda p: p.worker):
        if pod.revision:
            return pod.revision
    return ""


def _record_belongs(record: Mapping[str, Any], name: str, uid: str, index: int) -> bool:
    """Does ``record`` (found by name) belong to this LWS incarnation and group?

    Fields absent from the record are not held against it.
    """
    spec = _map(record.get("spec"))
    checks = (
        ("leaderWorkerSetUID", uid),
        ("leaderWorkerSet", name),
        ("groupIndex", index),
    )
    return all(spec.get(key) is None or spec.get(key) == want for key, want in checks)


def _parse_pools(objs: Iterable[Mapping[str, Any]]) -> tuple[list[Pool], dict[str, str]]:
    pools: list[Pool] = []
    invalid: dict[str, str] = {}
    seen: set[str] = set()
    for obj in objs:
        try:
            parsed = parse_pool(obj)
        except ValueError as exc:
            invalid[str(_meta(obj).get("name", ""))] = str(exc)
            continue
        if parsed.name not in seen:  # cluster-scoped names are unique; never let the planner raise
            seen.add(parsed.name)
            pools.append(parsed)
    return pools, invalid


def _pods_by_group(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], dict[int, list[_Pod]]]:
    """Pods per (namespace, LWS) and group index. Pods without the LWS labels (or a sane
    index) are not ours to count."""
    pods_of: dict[tuple[str, str], dict[int, list[_Pod]]] = {}
    for pod in pods:
        meta = _meta(pod)
        labels = _map(meta.get("labels"))
        index = _group_index(pod)
        pod_name = meta.get("name")
        if LWS_NAME_LABEL not in labels or index is None or not isinstance(pod_name, str) or not pod_name:
            continue
        owner = (str(meta.get("namespace") or ""), str(labels[LWS_NAME_LABEL]))
        pods_of.setdefault(owner, {}).setdefault(index, []).append(_Pod.read(pod, pod_name))
    return pods_of


@dataclass(frozen=True)
class _Group:
    """One group of an LWS as both backends see it, before they decide anything."""

    state: GroupState
    members: Sequence[_Pod]
    """Every pod with the group's index, terminating ones included."""
    present: Sequence[_Pod]
    """Those not terminating, by name."""
    staying: bool
    """Wanted (index below ``replicas``, or a surge group with a live pod) and its LWS not
    being deleted; a group that is not staying is on its way out."""
    record: Mapping[str, Any] | None
    """Its record, unless there is none or it belongs to an earlier LWS of that name."""


def _lws_groups(
    ns: str,
    name: str,
    lws: Mapping[str, Any],
    pods_of: Mapping[tuple[str, str], Mapping[int, list[_Pod]]],
    records: Mapping[tuple[str, str], Mapping[str, Any]],
    held_when_unreadable: Callable[[str, str, str], set[int]],
) -> list[_Group]:
    """The groups of one LWS: ``0..replicas-1`` plus any index that still has a live pod.

    When ``spec.replicas`` cannot be read, which groups are wanted is unknown: every group
    gets an ``InvalidSpec`` demand and ``held_when_unreadable(ns, name, uid)`` names the
    indices that hold something (admitted records, or Workloads), so they are kept.
    """
    uid = str(_meta(lws).get("uid") or "")
    deleting = _terminating(lws)
    demand = _demand(lws)
    pool = _pool_of(lws)
    by_index = pods_of.get((ns, name), {})
    indices = {i for i, ps in by_index.items() if any(p.live for p in ps)}
    try:
        replicas = _replicas(lws)
    except ValueError as exc:
        replicas = 0
        demand = InvalidDemand(f"LeaderWorkerSet {ns}/{name}: {exc}")
        indices |= held_when_unreadable(ns, name, uid)
    if not deleting:
        indices |= set(range(replicas))
    groups: list[_Group] = []
    for index in sorted(indices):
        rname = record_name(name, uid, index)
        members = by_index.get(index, [])
        present = sorted((p for p in members if not p.terminating), key=lambda p: p.name)
        record = records.get((ns, rname))
        if record is not None and not _record_belongs(record, name, uid, index):
            record = None  # an earlier incarnation's record: released, then created afresh
        state = GroupState(
            key=GroupKey(ns, name, index),
            lws_uid=uid,
            pool=pool,
            record=rname,
            demand=demand,
            pods=tuple(p.name for p in present),
            gated=tuple(p.name for p in present if p.gated),
            revision=_revision_of([p for p in present if p.live]),
        )
        staying = not deleting and (index < replicas or any(p.live for p in present))
        groups.append(_Group(state, members, present, staying, record))
    return groups


def decide(snap: Snapshot) -> Actions:
    """The whole decision of one pass. Pure: the same snapshot gives the same actions."""
    problems: list[str] = []
    pools, invalid_pools = _parse_pools(snap.pools)

    lws_by_key: dict[tuple[str, str], Mapping[str, Any]] = {}
    for obj in snap.lwss:
        lkey = _object_key(obj)
        if lkey is None:
            problems.append("a LeaderWorkerSet without metadata.name was ignored")
            continue
        lws_by_key[lkey] = obj
    records: dict[tuple[str, str], Mapping[str, Any]] = {}
    for rec in snap.records:
        rkey = _object_key(rec)
        if rkey is not None:
            records[rkey] = rec

    pods_of = _pods_by_group(snap.pods)

    groups: list[GroupState] = []
    wanted_records: set[tuple[str, str]] = set()
    waiting_groups: list[WaitingGroup] = []
    admitted_groups: list[AdmittedGroup] = []
    ungate_keys: list[GroupKey] = []
    held_invalid: list[WaitStatus] = []
    held_changed: list[WaitStatus] = []
    restore: list[tuple[str, str, str]] = []
    partial_ungate: list[tuple[str, str]] = []
    revisions: list[tuple[str, str, str]] = []
    readmitted: dict[GroupKey, str] = {}
    state_of: dict[GroupKey, GroupState] = {}
    for (ns, name), lws in sorted(lws_by_key.items()):
        meta = _meta(lws)
        created = _parse_time(meta.get("creationTimestamp"))
        priority = _priority(lws, snap.priorities)
        for group in _lws_groups(
            ns, name, lws, pods_of, records, lambda n, lw, u: _admitted_indices(records, n, lw, u)
        ):
            gs, record, pods, staying = group.state, group.record, group.members, group.staying
            key, rname, index, pool, demand = gs.key, gs.record, gs.key.index, gs.pool, gs.demand
            admitted = _is_admitted(record)
            if not (staying or admitted):
                continue  # leaving and holding nothing: its record (if any) goes now
            groups.append(gs)
            state_of[key] = gs
            if record is not None:
                wanted_records.add((ns, rname))
            changed = (
                _changed_template(record, demand, pods, gs, priority, created)
                if record is not None and admitted and isinstance(demand, GroupDemand)
                else None
            )
            if changed is not None:
                if isinstance(changed, WaitingGroup):
                    waiting_groups.append(changed)
                    was = _recorded_shape(record or {})
                    readmitted[key] = format_resources(was[0]) if was else ""
                else:
                    admitted_groups.append(changed[0])
                    partial_ungate.extend((ns, pod) for pod in changed[1])
                    if changed[2] is not None:
                        held_changed.append(changed[2])
                    elif record is not None and _said_changed(record):
                        restore.append(_restored(gs, record))
            elif record is not None and admitted:
                if _said_changed(record):
                    restore.append(_restored(gs, record))
                status = _map(record.get("status"))
                held_pool = str(status.get("pool") or pool)
                if isinstance(demand, GroupDemand):
                    admitted_groups.append(
                        AdmittedGroup(
                            key=key,
                            pool=held_pool,
                            demand=demand,
                            nodes=_placement(status.get("placement")),
                            bound=frozenset(p.worker for p in pods if p.bound and p.live),
                        )
                    )
                    if staying:
                        ungate_keys.append(key)
                        recorded_revision = str(status.get("templateRevision") or "")
                        if gs.revision and gs.revision != recorded_revision:
                            revisions.append((ns, rname, gs.revision))
                else:
                    held = _recorded_demand(record)
                    admitted_groups.append(
                        AdmittedGroup(
                            key=key,
                            pool=held_pool,
                            demand=held,
                            bound=frozenset(range(held.pod_count)),
                        )
                    )
                    summary = format_resources(held.total) or "nothing recorded"
                    message = (
                        f"group {index} keeps its admission into pool {held_pool} ({summary}), "
                        f"but its demand cannot be computed any more: {demand.message}; "
                        "its new pods stay gated until the LeaderWorkerSet is fixed"
                    )
                    held_invalid.append(WaitStatus(gs, Reason.INVALID_SPEC, message, 0))
            else:
                waiting_groups.append(
                    WaitingGroup(key=key, pool=pool, demand=demand, created=created, priority=priority)
                )

    result = plan(
        pools, snap.nodes, node_usage_skipping(snap.bound_pods, problems), admitted_groups, waiting_groups
    )

    create = tuple(g for g in groups if (g.key.namespace, g.record) not in wanted_records)
    admit: list[Admit] = []
    for a in result.admit:
        gs = state_of[a.key]
        summary = format_resources(gs.demand.total) if isinstance(gs.demand, GroupDemand) else ""
        admit.append(Admit(group=gs, nodes=tuple(a.nodes), summary=summary))
    ungate = tuple(
        sorted({(k.namespace, pod) for k in ungate_keys for pod in state_of[k].gated} | set(partial_ungate))
    )
    waiting: list[WaitStatus] = []
    for w in result.waiting:
        message = w.message
        if w.reason is Reason.POOL_NOT_FOUND and w.pool in invalid_pools:
            message = f"group {w.key.index} waits: pool {w.pool} is invalid: {invalid_pools[w.pool]}"
        if w.key in readmitted:
            before = readmitted[w.key] or "an unrecorded demand"
            message = (
                f"{message}; it was admitted with {before} before its LeaderWorkerSet's templates "
                "changed, and gave that back when its last old pod went"
            )
        waiting.append(WaitStatus(state_of[w.key], w.reason, message, w.position))
    release = tuple(sorted(k for k in records if k not in wanted_records))
    return Actions(
        create_records=create,
        admit=tuple(admit),
        ungate=ungate,
        waiting=tuple(waiting),
        release=release,
        pools=result.pools,
        invalid_pools=invalid_pools,
        plan=result,
        held_invalid=tuple(held_invalid),
        held_changed=tuple(held_changed),
        restore_admitted=tuple(sorted(restore)),
        revisions=tuple(sorted(revisions)),
        problems=tuple(sorted(problems)),
    )


def _said_changed(record: Mapping[str, Any]) -> bool:
    cond = _condition(record, ADMITTED)
    return cond is not None and cond.get("reason") == str(Reason.TEMPLATE_CHANGED)


def _restored(group: GroupState, record: Mapping[str, Any]) -> tuple[str, str, str]:
    status = _map(record.get("status"))
    held = str(status.get("demandSummary") or "") or format_resources(_recorded_demand(record).total)
    pool = str(status.get("pool") or group.pool)
    message = f"group {group.key.index} holds its admission into pool {pool}: {held}"
    return group.key.namespace, group.record, message


def _changed_template(
    record: Mapping[str, Any],
    demand: GroupDemand,
    pods: Sequence[_Pod],
    gs: GroupState,
    priority: int,
    created: datetime,
) -> WaitingGroup | tuple[AdmittedGroup, list[str], WaitStatus | None] | None:
    """An admitted group whose LWS now asks another demand than its record holds.

    None: the demand did not change (or the record does not say what it was): as before.
    A ``WaitingGroup``: only new pods are left; plan it again at its new demand.
    Otherwise (the group held at its recorded demand, its gated old pods to let through, a
    status to report when new pods wait).
    """
    recorded = _recorded_shape(record)
    if recorded is None or recorded == (_units(demand.total), demand.pod_count):
        return None
    status = _map(record.get("status"))
    through = {p.revision for p in pods if p.live and not p.gated}
    old_revisions = through | {str(status.get("templateRevision") or "")}

    def is_old(pod: _Pod) -> bool:
        return not pod.revision or pod.revision in old_revisions

    live = [p for p in pods if p.live]
    new = [p for p in live if not p.terminating and not is_old(p)]
    if new and not any(is_old(p) for p in live):
        return WaitingGroup(key=gs.key, pool=gs.pool, demand=demand, created=created, priority=priority)
    held = _recorded_demand(record)
    pool = str(status.get("pool") or gs.pool)
    group = AdmittedGroup(key=gs.key, pool=pool, demand=held, bound=frozenset(range(held.pod_count)))
    let_through = sorted(p.name for p in live if p.gated and not p.terminating and is_old(p))
    report = None
    if new:
        old_count = sum(1 for p in live if is_old(p))
        old_pods = f"{old_count} old pod remains" if old_count == 1 else f"{old_count} old pods remain"
        new_pods = f"{len(new)} new pod waits" if len(new) == 1 else f"{len(new)} new pods wait"
        message = (
            f"group {gs.key.index}'s LeaderWorkerSet changed: it now needs {format_resources(demand.total)} "
            f"for {demand.pod_count} pods (admitted with {format_resources(recorded[0])} for "
            f"{recorded[1]}); it keeps its admission while its {old_pods}, and its {new_pods} "
            "to be admitted again when they are gone"
        )
        report = WaitStatus(gs, Reason.TEMPLATE_CHANGED, message, 0)
    return group, let_through, report


def _admitted_indices(
    records: Mapping[tuple[str, str], Mapping[str, Any]], ns: str, name: str, uid: str
) -> set[int]:
    """Indices of this LWS incarnation's groups whose records say Admitted=True."""
    found: set[int] = set()
    for (rns, _), record in records.items():
        spec = _map(record.get("spec"))
        index = spec.get("groupIndex")
        if (
            rns == ns
            and spec.get("leaderWorkerSet") == name
            and spec.get("leaderWorkerSetUID") == uid
            and isinstance(index, int)
            and not isinstance(index, bool)
            and index >= 0
            and _is_admitted(record)
        ):
            found.add(index)
    return found


def _placement(value: object) -> dict[int, str]:
    """A record's ``status.placement`` (pod index -> node), skipping unreadable entries."""
    nodes: dict[int, str] = {}
    for k, v in _map(value).items():
        try:
            nodes[int(k)] = str(v)
        except ValueError:
            continue
    return nodes


def new_record(group: GroupState, lws: Mapping[str, Any]) -> dict[str, Any]:
    """The GroupAdmission object for a group seen for the first time (owned by its LWS)."""
    meta = lws["metadata"]
    return {
        "apiVersion": RECORD_API_VERSION,
        "kind": RECORD_KIND,
        "metadata": {
            "name": group.record,
            "namespace": group.key.namespace,
            "labels": {LWS_NAME_LABEL: group.key.name, GROUP_INDEX_LABEL: str(group.key.index)},
            "ownerReferences": [
                {
                    "apiVersion": str(lws.get("apiVersion", "leaderworkerset.x-k8s.io/v1")),
                    "kind": "LeaderWorkerSet",
                    "name": str(meta["name"]),
                    "uid": str(meta["uid"]),
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {
            "leaderWorkerSet": group.key.name,
            "leaderWorkerSetUID": group.lws_uid,
            "groupIndex": group.key.index,
        },
    }


def replacing_map(before: object, after: Mapping[str, str]) -> dict[str, str | None]:
    """A merge patch that makes a map field exactly ``after``: keys it no longer has are
    set to null (a merge patch otherwise keeps them, and a resource a group stopped asking
    for would stay in its recorded demand)."""
    gone = {str(key): None for key in before} if isinstance(before, Mapping) else {}
    return gone | dict(sorted(after.items()))


def demand_status(group: GroupState, before: Mapping[str, Any] | None) -> dict[str, Any]:
    """The part of a record's status that says what the group asks for, as a merge patch
    over ``before`` (the record's status now): pool, pods, demand and its summary."""
    demand = group.demand if isinstance(group.demand, GroupDemand) else None
    total = demand.total if demand is not None else {}
    return {
        "pool": group.pool,
        "pods": demand.pod_count if demand is not None else 0,
        "demand": replacing_map(
            _map(before).get("demand"), {r: format_amount(r, v) for r, v in total.items()}
        ),
        "demandSummary": format_resources(total) if total else "",
    }


def admitted_condition(
    admitted: bool, reason: str, message: str, current: Mapping[str, Any], now: str
) -> dict[str, Any]:
    """A record's ``Admitted`` condition; its transition time moves only when its status does."""
    status = "True" if admitted else "False"
    kept = current.get("lastTransitionTime") if current.get("status") == status else None
    return {
        "type": ADMITTED,
        "status": status,
        "reason": reason,
        "message": message[:32000],
        "lastTransitionTime": kept or now,
    }


def digest(*parts: object) -> str:
    """A short stable digest, for names of events and change detection."""
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:10]
