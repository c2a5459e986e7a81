"""Carry out a plan: the only code that turns the core's writes into API calls.

Why this exists: a backend's pass returns a ``core.writes.Plan``; executing one is the
same for every backend. Stages run one after another, the writes of a stage side by side
(at most the loop's limit in flight), and a write's ``then`` only once it went through:
so a group's gates are never lifted before its record says ``Admitted=True``, and a write
guarded by the version of a record made in the same pass uses what that creation
returned. A write that fails is the loop's ``Write`` wrapper's to log and retry; it stops
its own ``then`` and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from gatekeeper.controller.kube import Kube
from gatekeeper.controller.loop import Write as Writer
from gatekeeper.controller.resources import by_plural
from gatekeeper.core.writes import Event, Memory, Op, Plan, Write

__all__ = ["execute"]


async def execute(
    kube: Kube,
    plan: Plan,
    write: Writer,
    memory: Memory,
    done: Callable[[Write], None] = lambda _w: None,
) -> None:
    """Run ``plan``; ``done`` hears of every write that went through."""

    async def run(one: Write, parent: Mapping[str, Any] | None) -> None:
        result: dict[str, Any] = {}
        if not await write(_call, kube, one, parent, result):
            return
        memory.apply(one.marks, time.monotonic())
        done(one)
        if one.then:
            async with anyio.create_task_group() as tg:
                for nxt in one.then:
                    tg.start_soon(run, nxt, result)

    for stage in plan:
        async with anyio.create_task_group() as tg:
            for one in stage:
                tg.start_soon(run, one, None)


async def _call(kube: Kube, one: Write, parent: Mapping[str, Any] | None, result: dict[str, Any]) -> None:
    res = by_plural(one.resource)
    parent_meta = (parent or {}).get("metadata", {})
    guard = str(parent_meta.get("resourceVersion") or "") or None if one.guard_from_parent else one.guard
    if one.op is Op.CREATE:
        body = dict(one.body)
        if one.owner_from_parent:
            meta = dict(body["metadata"])
            meta["ownerReferences"] = [
                {**meta["ownerReferences"][0], "uid": parent_meta.get("uid")},
                *meta["ownerReferences"][1:],
            ]
            body["metadata"] = meta
        result.update(await kube.create(res, body))
    elif one.op is Op.DELETE:
        await kube.delete(res, one.name, one.namespace, uid=one.uid)
    elif one.op is Op.MERGE_STATUS:
        result.update(await kube.patch_status(res, one.name, one.namespace, one.body, resource_version=guard))
    elif one.op is Op.APPLY_STATUS:
        result.update(
            await kube.apply_status(res, one.name, one.namespace, one.body, field_manager=one.field_manager)
        )
    elif one.op is Op.JSON_PATCH:
        result.update(await kube.json_patch(res, one.name, one.namespace, list(one.body)))
    else:
        event: Event = one.body
        await kube.event(event.involved, reason=event.reason, message=event.message, warning=event.warning)
