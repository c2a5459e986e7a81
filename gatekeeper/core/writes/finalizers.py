"""The hold: a record (or Workload) stays, deleted or not, while its group's pods live.

Why this exists: what a group holds lives in an object (its ``GroupAdmission`` with the
``pools`` backend, its Workload with ``kueue``), and that object can go while the group's
pods still run: the garbage collector deletes a record after its LWS (a background or
orphaning delete), the namespace controller deletes everything in a namespace being
deleted, and anyone with rights may delete it by hand. Without it, the quota the pods use
is free at once, and another group is admitted over it. So every such object is made with
the finalizer ``lws-gatekeeper.io/group-pods``: deleted, it stays (``deletionTimestamp``
set), and the decisions keep charging what it holds while a live pod of its group is
left; once none is, the pass removes the finalizer and the object goes.

The writes here are JSON patches guarded as the other writes are: they test the object's
UID and the resourceVersion the decision was made on (a 422 when either changed: the next
pass decides again), and the finalizer's place in the list, so no one else's finalizer is
ever removed. ``FINALIZER_WRITES_PER_PASS`` bounds how many a pass sends: a namespace of
thousands of deleted records is released over several passes, never in one that stalls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.core.kube.keys import HOLD_FINALIZER
from gatekeeper.core.kube.objects import as_list, is_terminating, meta, resource_version, uid_of
from gatekeeper.core.writes.plan import Op, Write

__all__ = ["FINALIZER_WRITES_PER_PASS", "hold_patch", "is_held", "release_patch", "release_writes"]

FINALIZER_WRITES_PER_PASS = 500
"""At most this many objects released (and this many older ones given the finalizer) per pass;
the rest in the next passes (each write's watch event asks for one)."""


def is_held(obj: Mapping[str, Any] | None) -> bool:
    """Does the object carry the gatekeeper's finalizer?"""
    return obj is not None and HOLD_FINALIZER in as_list(meta(obj).get("finalizers"))


def _guards(obj: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    uid, version = uid_of(obj), resource_version(obj)
    if uid is None or version is None:
        return None
    return [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
    ]


def release_patch(obj: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The patch that removes the gatekeeper's finalizer from ``obj`` as it was read; None when
    it carries none (or cannot be addressed)."""
    finalizers = as_list(meta(obj).get("finalizers"))
    guards = _guards(obj)
    if HOLD_FINALIZER not in finalizers or guards is None:
        return None
    at = f"/metadata/finalizers/{finalizers.index(HOLD_FINALIZER)}"
    return [*guards, {"op": "test", "path": at, "value": HOLD_FINALIZER}, {"op": "remove", "path": at}]


def hold_patch(obj: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The patch that gives ``obj`` (made before the gatekeeper held its objects) the finalizer;
    None when it has it, or is being deleted (the API server accepts no new finalizer then)."""
    guards = _guards(obj)
    if is_held(obj) or is_terminating(obj) or guards is None:
        return None
    if meta(obj).get("finalizers") is None:
        return [*guards, {"op": "add", "path": "/metadata/finalizers", "value": [HOLD_FINALIZER]}]
    return [*guards, {"op": "add", "path": "/metadata/finalizers/-", "value": HOLD_FINALIZER}]


def release_writes(
    resource: str,
    namespace: str,
    name: str,
    obj: Mapping[str, Any] | None,
    *,
    tag: str,
    then: tuple[Write, ...] = (),
) -> tuple[Write, ...]:
    """How the pass lets go of an object it decided holds nothing any more, ``then`` after it.

    Not deleted yet: its finalizer removed (if it has it), then the delete, guarded by its UID.
    Deleted already: its finalizer removed, and that is all (it is gone then). Deleted, and
    not held by the gatekeeper (someone else's finalizer keeps it): nothing to do but ``then``.
    """
    ops = release_patch(obj) if obj is not None else None
    if obj is not None and is_terminating(obj):
        if ops is None:
            return then
        return (Write(Op.JSON_PATCH, resource, namespace, name, ops, then=then, tag=tag),)
    delete = Write(Op.DELETE, resource, namespace, name, uid=uid_of(obj), then=then, tag=tag)
    if ops is None:
        return (delete,)
    return (Write(Op.JSON_PATCH, resource, namespace, name, ops, then=(delete,), tag="unhold"),)
