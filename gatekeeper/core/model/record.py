"""The ``GroupAdmission`` record: one per LWS group, the gatekeeper's memory in the cluster.

Why this exists: the controller must be restartable at any moment and never admit a group
twice, so what a group holds lives in its record, not in memory. Every backend writes the
same record (``kubectl get groupadmissions`` reads alike with each), so how a record is
named, made, read back and written lives here once: its name, the object made for a group
seen for the first time, what it says the group holds (``status.demand``, ``status.pods``,
``status.pool``), its ``Admitted`` condition, and whether a record found by name belongs to
the current LWS or to an earlier one of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from gatekeeper.core.kube.keys import (
    ADMITTED,
    GATEKEEPER_API_VERSION,
    GROUP_INDEX_LABEL,
    HOLD_FINALIZER,
    LWS_API_VERSION,
    LWS_KIND,
    LWS_NAME_LABEL,
    RECORD_KIND,
)
from gatekeeper.core.kube.objects import as_map, condition, digest, replacing_map
from gatekeeper.core.kube.quantity import format_amount, format_resources, parse_units
from gatekeeper.core.model.demand import MAX_GROUP_SIZE, GroupDemand, PodDemand
from gatekeeper.core.model.group import InvalidDemand

__all__ = [
    "MAX_DOMAIN_LABELS",
    "admitted_condition",
    "admitted_indices",
    "demand_status",
    "is_admitted",
    "new_record",
    "placement",
    "record_belongs",
    "record_name",
    "recorded_demand",
    "recorded_domain",
    "recorded_shape",
    "without_pod_count",
]

_MAX_NAME = 253


def record_name(lws_name: str, lws_uid: str, index: int) -> str:
    """The record of one group: readable, unique per LWS incarnation, at most 253 characters."""
    tail = f"-{lws_uid[:5]}-{index}"
    if len(lws_name) + len(tail) <= _MAX_NAME:
        return f"{lws_name}{tail}"
    # Too long for a name: keep a readable head and make it unique with a digest.
    head = lws_name[: _MAX_NAME - len(tail) - 11].rstrip("-.")
    return f"{head}-{digest(lws_name)}{tail}"


def new_record(lws: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The GroupAdmission object of group ``index`` of ``lws``, seen for the first time: owned by
    the LWS, and held by the gatekeeper's finalizer (``core.writes.finalizers``) while its pods live."""
    m = lws["metadata"]
    name, uid = str(m["name"]), str(m["uid"])
    return {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": RECORD_KIND,
        "metadata": {
            "name": record_name(name, uid, index),
            "namespace": str(m.get("namespace") or ""),
            "labels": {LWS_NAME_LABEL: name, GROUP_INDEX_LABEL: str(index)},
            "finalizers": [HOLD_FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": str(lws.get("apiVersion", LWS_API_VERSION)),
                    "kind": LWS_KIND,
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {"leaderWorkerSet": name, "leaderWorkerSetUID": uid, "groupIndex": index},
    }


def record_belongs(record: Mapping[str, Any], name: str, uid: str, index: int) -> bool:
    """Does ``record`` (found by name) belong to this LWS incarnation and group?

    Fields absent from the record are not held against it.
    """
    spec = as_map(record.get("spec"))
    checks = (("leaderWorkerSetUID", uid), ("leaderWorkerSet", name), ("groupIndex", index))
    return all(spec.get(key) is None or spec.get(key) == want for key, want in checks)


def is_admitted(record: Mapping[str, Any] | None) -> bool:
    """Does the record say the group holds its reservation (``Admitted=True``)?"""
    return condition(record, ADMITTED).get("status") == "True"


def held_in(record: Mapping[str, Any], default: str) -> tuple[str, str]:
    """(pool, lender) of a record: the pool its group was admitted for (``status.pool``, else
    ``default``) and the pool of its cohort that lent it room (``status.borrowedFrom``; "" when
    it runs in its own). Its pods run on, and count against, the lender's room when it has one."""
    status = as_map(record.get("status"))
    pool = str(status.get("pool") or default)
    lender = status.get("borrowedFrom")
    return pool, lender if isinstance(lender, str) and lender != pool else ""


MAX_DOMAIN_LABELS = 17
"""``status.domain`` holds at most this many labels (16 topology levels, or an exclusive key)."""


def recorded_domain(record: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The topology domain a record says its group's pods are pinned to (``status.domain``, node
    labels), or () when none or when it cannot be read (the CRD bounds it; a record written by
    hand past that is taken as pinned nowhere rather than trusted)."""
    domain = as_map(record.get("status")).get("domain")
    if not isinstance(domain, Mapping) or len(domain) > MAX_DOMAIN_LABELS:
        return ()
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in domain.items()):
        return ()
    return tuple((str(k), str(v)) for k, v in domain.items())


def admitted_indices(
    records: Mapping[tuple[str, str], Mapping[str, Any]], ns: str, name: str, uid: str
) -> set[int]:
    """Indices of this LWS incarnation's groups whose records say Admitted=True."""
    found: set[int] = set()
    for (rns, _), record in records.items():
        spec = as_map(record.get("spec"))
        index = spec.get("groupIndex")
        if (
            rns == ns
            and spec.get("leaderWorkerSet") == name
            and spec.get("leaderWorkerSetUID") == uid
            and isinstance(index, int)
            and not isinstance(index, bool)
            and index >= 0
            and is_admitted(record)
        ):
            found.add(index)
    return found


def without_pod_count(resources: Mapping[str, int]) -> dict[str, int]:
    """Resources as compared with a record: no pod count, no zeros."""
    return {r: v for r, v in resources.items() if v > 0 and r != "pods"}


def _pod_count(value: object) -> TypeGuard[int]:
    """A readable ``status.pods``: 1 to ``MAX_GROUP_SIZE`` (a record is an object anyone with
    rights in its namespace can write: its numbers are bounded like an LWS's)."""
    return type(value) is int and 1 <= value <= MAX_GROUP_SIZE


def recorded_demand(record: Mapping[str, Any]) -> GroupDemand:
    """What an admitted group holds by its record's status (for a demand that cannot be recomputed).

    The per-pod split is unknown, so the whole total sits on the leader; unreadable amounts
    are left out (the group is reported anyway).
    """
    status = as_map(record.get("status"))
    total: dict[str, int] = {}
    for resource, raw in as_map(status.get("demand")).items():
        try:
            amount = parse_units(str(resource), raw)
        except (ValueError, TypeError):
            continue
        if amount > 0 and resource != "pods":
            total[str(resource)] = amount
    count = status.get("pods")
    count = count if _pod_count(count) else 1
    pods = (PodDemand("leader", total), *(PodDemand("worker", {}) for _ in range(count - 1)))
    return GroupDemand(pods)


def recorded_shape(record: Mapping[str, Any]) -> tuple[dict[str, int], int] | None:
    """(total per resource, pods) the record says the group was admitted with; None when it
    does not say (a record written before demand was recorded) or says it unreadably."""
    status = as_map(record.get("status"))
    raw = status.get("demand")
    count = status.get("pods")
    if not isinstance(raw, Mapping) or not _pod_count(count):
        return None
    total: dict[str, int] = {}
    for resource, value in raw.items():
        if value is None:
            continue
        try:
            total[str(resource)] = parse_units(str(resource), value)
        except (ValueError, TypeError):
            return None
    return without_pod_count(total), count


def placement(value: object) -> dict[int, str]:
    """A record's ``status.placement`` (pod index -> node), skipping unreadable entries."""
    nodes: dict[int, str] = {}
    for k, v in as_map(value).items():
        try:
            nodes[int(k)] = str(v)
        except ValueError:
            continue
    return nodes


def demand_status(
    pool: str, demand: GroupDemand | InvalidDemand, before: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The part of a record's status that says what the group asks for, as a merge patch
    over ``before`` (the record's status now): pool, pods, demand and its summary."""
    known = demand if isinstance(demand, GroupDemand) else None
    total = known.total if known is not None else {}
    return {
        "pool": pool,
        "pods": known.pod_count if known is not None else 0,
        "demand": replacing_map(
            as_map(before).get("demand"), {r: format_amount(r, v) for r, v in total.items()}
        ),
        "demandSummary": format_resources(total) if total else "",
    }


RECORD_GENERATION = 1
"""A record's ``metadata.generation`` for its whole life: its spec never changes (the CRD refuses
it), so the generation the API server gave it at create is the one every condition observes."""


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
        "observedGeneration": RECORD_GENERATION,
    }
