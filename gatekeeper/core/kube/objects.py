"""Lenient readers of API objects (as dicts): what the decisions read of any object.

Why this exists: a decision pass reads thousands of objects that tenants wrote, and one
malformed field must never stop it. These readers return an empty value for anything of the
wrong shape instead of raising (the strict readers that name the bad field are in
``core.kube.fields``, for the spec parts whose errors a person must see). Every backend, the
node-fit check and the record module read objects through them, so metadata, conditions,
times and JSON-pointer escaping are each handled once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from gatekeeper.core.kube.keys import TERMINAL_PHASES

__all__ = [
    "EPOCH",
    "as_list",
    "as_map",
    "condition",
    "conditions",
    "digest",
    "generation_of",
    "index_by_key",
    "is_live",
    "is_terminating",
    "is_true",
    "json_pointer",
    "labels",
    "meta",
    "name_of",
    "object_key",
    "parse_time",
    "replacing_map",
    "resource_version",
    "uid_of",
]

EPOCH = datetime.fromtimestamp(0, UTC)
"""The time of an object whose time cannot be read: it sorts first."""


def as_map(value: object) -> Mapping[str, Any]:
    """``value`` if it is an object, else empty: read what can be read, never crash."""
    if type(value) is dict:  # the usual case, without the slower ABC check
        return value
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    """``value`` if it is a list, else empty."""
    return list(value) if isinstance(value, list | tuple) else []


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_map(obj.get("metadata"))


def labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_map(meta(obj).get("labels"))


def name_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name") or "")


def object_key(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name); None for an object without a name (it cannot be addressed)."""
    m = meta(obj)
    name = m.get("name")
    if not isinstance(name, str) or not name:
        return None
    return str(m.get("namespace") or ""), name


def index_by_key(objs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """Objects by (namespace, name), those without a name left out."""
    found: dict[tuple[str, str], Mapping[str, Any]] = {}
    for obj in objs:
        key = object_key(obj)
        if key is not None:
            found[key] = obj
    return found


def parse_time(value: object) -> datetime:
    """An RFC 3339 time; ``EPOCH`` when absent or unreadable."""
    if isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return EPOCH
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return EPOCH


def uid_of(obj: Mapping[str, Any] | None) -> str | None:
    """The object's UID, for a delete that must not hit a new object of the same name."""
    return str(meta(obj).get("uid") or "") or None if obj is not None else None


def resource_version(obj: Mapping[str, Any]) -> str | None:
    """The object's resourceVersion, for a write guarded by it; None when it has none."""
    return str(meta(obj).get("resourceVersion") or "") or None


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def is_live(pod: Mapping[str, Any]) -> bool:
    """Not in a terminal phase: the pod exists and may hold (or get) node room."""
    phase = as_map(pod.get("status")).get("phase")
    return not (isinstance(phase, str) and phase in TERMINAL_PHASES)


def conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """``status.conditions`` by type (the last one of a type wins)."""
    found: dict[str, Mapping[str, Any]] = {}
    for cond in as_list(as_map(obj.get("status")).get("conditions")):
        if isinstance(cond, Mapping) and isinstance(cond.get("type"), str):
            found[cond["type"]] = cond
    return found


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    """The condition of type ``kind``; empty when there is none."""
    if obj is None:
        return {}
    for cond in as_list(as_map(obj.get("status")).get("conditions")):
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return {}


def is_true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    return condition(obj, kind).get("status") == "True"


def json_pointer(key: str) -> str:
    """``key`` as one JSON-pointer reference token (RFC 6901: ``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


def replacing_map(before: object, after: Mapping[str, str]) -> dict[str, str | None]:
    """A merge patch that makes a map field exactly ``after``: keys it no longer has are
    set to null (a merge patch otherwise keeps them, and a resource a group stopped asking
    for would stay in its recorded demand)."""
    gone = {str(key): None for key in before} if isinstance(before, Mapping) else {}
    return gone | dict(sorted(after.items()))


def digest(*parts: object) -> str:
    """A short stable digest, for names of events and change detection."""
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:10]


def generation_of(obj: Mapping[str, Any]) -> int:
    """``metadata.generation`` (0 when absent or unreadable): what a condition written of the
    object observes."""
    generation = meta(obj).get("generation")
    return generation if type(generation) is int and generation > 0 else 0
