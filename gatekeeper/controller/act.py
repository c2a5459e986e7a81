"""Carry out a plan: the only code that turns the core's writes into API calls.

Why this exists: a backend's pass returns a ``core.writes.plan.Plan``; executing one is the
same for every backend. Stages run one after another, the writes of a stage side by side
(at most the loop's limit in flight), and a write's ``then`` only once it went through:
so a group's gates are never lifted before its record says ``Admitted=True``, and a write
guarded by the version of a record made in the same pass uses what that creation
returned. A write that fails is the loop's ``Write`` wrapper's to log and retry; it stops
its own ``then`` and nothing else.

Order within a stage, for the time a group waits (measured with 100 new groups in one
pass, ``benchmarks/bench_timeline.py``): a ``then`` goes before any write that waits for a
slot at a lesser depth, so a group's record, admission and gates follow one another and
the first groups are admitted while the last records are still being made, not after all
of them (the webhook makes a group's later pods ungated from its admission on). Events
gate nothing: the Events a stage's writes earn are posted after the last stage, those
about one object for one reason as one (``core.writes.plan.merge_events``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anyio

from gatekeeper.controller.kube import Kube
from gatekeeper.controller.loop import Write as Writer
from gatekeeper.controller.resources import Resource, by_plural
from gatekeeper.core.writes.plan import Event, Memory, Op, Plan, Write, merge_events
from gatekeeper.metrics import WRITES

__all__ = ["execute"]


async def execute(
    kube: Kube,
    plan: Plan,
    write: Writer,
    memory: Memory,
    done: Callable[[Write], None] = lambda _w: None,
    answered: Callable[[Write, Mapping[str, Any]], None] | None = None,
    kinds: Iterable[Resource] = (),
) -> None:
    """Run ``plan``; ``done`` hears of every write that went through, ``answered`` (first)
    of each with the object the API server answered it with. ``kinds``: the resources a
    backend writes beyond those of ``resources`` (the objects only it makes)."""
    own = {res.plural: res for res in kinds}
    told: list[Write] = []  # Events earned, posted after the last stage

    async def run(one: Write, parent: Mapping[str, Any] | None, depth: int) -> None:
        result: dict[str, Any] = {}
        if not await write(_call, kube, one, parent, result, own, rank=-depth):
            return
        memory.apply(one.marks, time.monotonic())
        WRITES.labels(one.resource, one.tag or one.op.value).inc()
        if answered is not None:
            answered(one, result)
        done(one)
        told.extend(nxt for nxt in one.then if _telling(nxt))
        now = [nxt for nxt in one.then if not _telling(nxt)]
        if now:
            async with anyio.create_task_group() as tg:
                for nxt in now:
                    tg.start_soon(run, nxt, result, depth + 1)

    for stage in plan:
        async with anyio.create_task_group() as tg:
            for one in stage:
                tg.start_soon(run, one, None, 0)
    async with anyio.create_task_group() as tg:
        for one in merge_events(told):
            tg.start_soon(run, one, None, 0)


def _telling(one: Write) -> bool:
    """An Event with nothing after it: it waits for the end of the pass."""
    return one.op is Op.EVENT and not one.then


async def _call(
    kube: Kube,
    one: Write,
    parent: Mapping[str, Any] | None,
    result: dict[str, Any],
    own: Mapping[str, Resource],
) -> None:
    res = own.get(one.resource) or by_plural(one.resource)
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
