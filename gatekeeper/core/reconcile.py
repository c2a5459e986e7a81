"""From a snapshot of the cluster to the list of things to do: the controller's whole decision.

Why this exists: the controller must be restartable at any moment and never admit a
group twice, so every pass starts from what the cluster shows (LWSs, their pods, the
admission records, pools, nodes) and nothing else. This module turns such a snapshot
into ``Actions`` without any I/O, in the order they must happen: records first, then
gates. The I/O layer only carries them out (Kueue's "plan, then act").

The model:

* An opted-in LWS (label ``lws-gatekeeper.io/pool``) has groups ``0..replicas-1``,
  plus any index that still has pods (surge or scale-down in progress).
* Each group has one ``GroupAdmission`` record, named after the LWS, its UID and the
  index. The record's status condition ``Admitted`` says whether the group holds its
  reservation; a record that says so is what counts against the pool's quota.
* A group is released (its record deleted) when its index is no longer wanted and
  none of its pods is left, or when its LWS is gone or was replaced (other UID).
* Pods of admitted groups lose their gate; pods of waiting groups keep it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gatekeeper.core.demand import GroupDemand, group_demand
from gatekeeper.core.names import API_GROUP, API_VERSION, POOL_LABEL, SCHEDULING_GATE
from gatekeeper.core.nodes import Node, node_usage
from gatekeeper.core.planner import Plan, PoolStatus, plan
from gatekeeper.core.pool import Pool, parse_pool
from gatekeeper.core.quantity import format_resources
from gatekeeper.core.queue import AdmittedGroup, GroupKey, InvalidDemand, WaitingGroup
from gatekeeper.core.reasons import Reason

__all__ = [
    "ADMITTED",
    "GROUP_INDEX_LABEL",
    "LWS_NAME_LABEL",
    "RECORD_KIND",
    "WORKER_INDEX_LABEL",
    "Actions",
    "Admit",
    "GroupState",
    "Snapshot",
    "WaitStatus",
    "decide",
    "record_name",
]

LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
RECORD_KIND = "GroupAdmission"
RECORD_API_VERSION = f"{API_GROUP}/{API_VERSION}"
ADMITTED = "Admitted"


def record_name(lws_name: str, lws_uid: str, index: int) -> str:
    """The record of one group: readable, unique per LWS incarnation, at most 253 characters."""
    return f"{lws_name}-{lws_uid[:5]}-{index}"


def _parse_time(value: object) -> datetime:
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return datetime.fromtimestamp(0, UTC)


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = pod.get("spec", {}).get("schedulingGates") or []
    return any(g.get("name") == SCHEDULING_GATE for g in gates)


def _live(pod: Mapping[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


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


def _pool_of(lws: Mapping[str, Any]) -> str:
    return str(lws.get("metadata", {}).get("labels", {}).get(POOL_LABEL, ""))


def _priority(lws: Mapping[str, Any], priorities: Mapping[str, int]) -> int:
    lwt = lws.get("spec", {}).get("leaderWorkerTemplate", {})
    for tmpl in (lwt.get("leaderTemplate"), lwt.get("workerTemplate")):
        spec = (tmpl or {}).get("spec", {})
        if isinstance(spec.get("priority"), int):
            return int(spec["priority"])
        name = spec.get("priorityClassName")
        if name:
            return int(priorities.get(str(name), 0))
    return 0


def _pod_index(pod: Mapping[str, Any]) -> int:
    labels = pod.get("metadata", {}).get("labels", {})
    try:
        return int(labels.get(WORKER_INDEX_LABEL, "0"))
    except ValueError:
        return 0


def _demand(lws: Mapping[str, Any]) -> GroupDemand | InvalidDemand:
    try:
        return group_demand(lws)
    except ValueError as exc:
        return InvalidDemand(str(exc))


def _parse_pools(objs: Iterable[Mapping[str, Any]]) -> tuple[list[Pool], dict[str, str]]:
    pools: list[Pool] = []
    invalid: dict[str, str] = {}
    for obj in objs:
        try:
            pools.append(parse_pool(obj))
        except ValueError as exc:
            invalid[str(obj.get("metadata", {}).get("name", ""))] = str(exc)
    return pools, invalid


def decide(snap: Snapshot) -> Actions:
    """The whole decision of one pass. Pure: the same snapshot gives the same actions."""
    pools, invalid_pools = _parse_pools(snap.pools)
    lws_by_key = {(str(o["metadata"].get("namespace", "")), str(o["metadata"]["name"])): o for o in snap.lwss}
    records = {(str(r["metadata"].get("namespace", "")), str(r["metadata"]["name"])): r for r in snap.records}

    # Pods per group.
    pods_of: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for pod in snap.pods:
        meta = pod.get("metadata", {})
        labels = meta.get("labels", {})
        if LWS_NAME_LABEL not in labels or GROUP_INDEX_LABEL not in labels:
            continue
        try:
            index = int(labels[GROUP_INDEX_LABEL])
        except ValueError:
            continue
        pods_of.setdefault((str(meta.get("namespace", "")), str(labels[LWS_NAME_LABEL]), index), []).append(
            pod
        )

    groups: list[GroupState] = []
    wanted_records: set[tuple[str, str]] = set()
    waiting_groups: list[WaitingGroup] = []
    admitted_groups: list[AdmittedGroup] = []
    admitted_keys: set[GroupKey] = set()
    state_of: dict[GroupKey, GroupState] = {}
    for (ns, name), lws in sorted(lws_by_key.items()):
        uid = str(lws["metadata"].get("uid", ""))
        replicas = int(lws.get("spec", {}).get("replicas", 1) or 0)
        indices = set(range(replicas)) | {
            i for (pns, pname, i), ps in pods_of.items() if (pns, pname) == (ns, name) and any(map(_live, ps))
        }
        demand = _demand(lws)
        pool = _pool_of(lws)
        created = _parse_time(lws["metadata"].get("creationTimestamp"))
        priority = _priority(lws, snap.priorities)
        for index in sorted(indices):
            key = GroupKey(ns, name, index)
            rname = record_name(name, uid, index)
            wanted_records.add((ns, rname))
            pods = pods_of.get((ns, name, index), [])
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            gs = GroupState(
                key=key,
                lws_uid=uid,
                pool=pool,
                record=rname,
                demand=demand,
                pods=tuple(sorted(str(p["metadata"]["name"]) for p in live)),
                gated=tuple(sorted(str(p["metadata"]["name"]) for p in live if _gated(p))),
            )
            groups.append(gs)
            state_of[key] = gs
            record = records.get((ns, rname))
            cond = _condition(record, ADMITTED) if record else None
            if cond is not None and cond.get("status") == "True" and isinstance(demand, GroupDemand):
                placement = record.get("status", {}).get("placement", {}) if record else {}
                admitted_groups.append(
                    AdmittedGroup(
                        key=key,
                        pool=str((record or {}).get("status", {}).get("pool", pool)),
                        demand=demand,
                        nodes={int(k): str(v) for k, v in (placement or {}).items()},
                        bound=frozenset(
                            _pod_index(p) for p in pods if p.get("spec", {}).get("nodeName") and _live(p)
                        ),
                    )
                )
                admitted_keys.add(key)
            else:
                waiting_groups.append(
                    WaitingGroup(key=key, pool=pool, demand=demand, created=created, priority=priority)
                )

    result = plan(pools, snap.nodes, node_usage(snap.bound_pods), admitted_groups, waiting_groups)

    create = tuple(g for g in groups if (g.key.namespace, g.record) not in records)
    admit: list[Admit] = []
    for a in result.admit:
        gs = state_of[a.key]
        summary = format_resources(gs.demand.total) if isinstance(gs.demand, GroupDemand) else ""
        admit.append(Admit(group=gs, nodes=tuple(a.nodes), summary=summary))
    ungate = tuple((k.namespace, pod) for k in sorted(admitted_keys) for pod in state_of[k].gated)
    waiting: list[WaitStatus] = []
    for w in result.waiting:
        message = w.message
        if w.reason is Reason.POOL_NOT_FOUND and w.pool in invalid_pools:
            message = f"group {w.key.index} waits: pool {w.pool} is invalid: {invalid_pools[w.pool]}"
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
    )


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


def digest(*parts: object) -> str:
    """A short stable digest, for names of events and change detection."""
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:10]
