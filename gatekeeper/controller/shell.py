"""What every backend's controller loop is made of besides its own objects: the group
informers, the memory of its writes, and one pass of decide, plan and execute.

Why this exists: each backend's controller (``controller.backends``) reads the same objects
of the groups (the opted-in LWSs and their pods, the records, PriorityClasses, the LWSs'
StatefulSets, the pods on nodes) beside its own, and runs a pass the same way: the pure
decision and plan in a worker thread (a pass over a large cluster must not hold up the
webhook, the probes and the Lease renewals served by the event loop), then ``act.execute``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import anyio.to_thread

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.act import execute
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.loop import Write as Writer
from gatekeeper.core.kube.keys import LWS_NAME_LABEL, POOL_LABEL
from gatekeeper.core.writes.plan import DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE, Memory, Plan, Write
from gatekeeper.metrics import EVENTS_DROPPED

__all__ = ["GroupInformers", "decide_and_act", "memory_of_writes"]


def memory_of_writes(events_per_minute: int = DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE) -> Memory:
    """A backend's memory between passes, its Events held to ``events_per_minute`` a namespace
    and those not posted counted."""
    return Memory(events_per_minute=events_per_minute, on_drop=lambda _namespace: EVENTS_DROPPED.inc())


A = TypeVar("A")


class GroupInformers:
    """The informers of the groups that every backend's pass reads."""

    def __init__(self, caches: Caches) -> None:
        self.caches = caches
        self.lws = caches.informer(r.LWS, label_selector=POOL_LABEL)
        self.pods, self.bound = caches.bound_informers()
        """Pods of opted-in LWSs (they carry the pool label), and every other pod on a node,
        anyone's: the room they take, and the charge pods let through carry (``bound_pods``)."""
        self.records = caches.informer(r.RECORDS)
        self.priorities = caches.informer(r.PRIORITY_CLASSES)
        # The LWS controller labels its StatefulSets with the LWS's name: only those are read.
        self.statefulsets = caches.informer(r.STATEFULSETS, label_selector=LWS_NAME_LABEL)
        """Which pods an LWS made (``core.admission.members``)."""
        self.limit_ranges = caches.informer(r.LIMIT_RANGES)
        """The requests a container that names none gets: part of a group's demand."""
        self.runtime_classes = caches.informer(r.RUNTIME_CLASSES)
        """The overhead a pod that names a RuntimeClass gets: part of a group's demand."""
        self.dra = caches.dra_informers()
        """What DRA claims ask, and the devices of each node: side informers (``Caches.dra``)."""

    def bound_pods(self) -> list[dict[str, Any]]:
        """Every pod on a node, anyone's, once (``Caches.bound_pods``)."""
        return self.caches.bound_pods()

    @property
    def informers(self) -> list[Informer]:
        return [
            self.lws,
            self.pods,
            self.records,
            self.priorities,
            self.statefulsets,
            self.bound,
            self.limit_ranges,
            self.runtime_classes,
        ]


async def decide_and_act(
    kube: k.Kube,
    write: Writer,
    memory: Memory,
    decide: Callable[[], A],
    plan: Callable[[A], Plan],
    done: Callable[[Write], None],
    *,
    kinds: Iterable[r.Resource] = (),
    before: Callable[[A, Plan, Writer], None] | None = None,
    after: Callable[[], None] | None = None,
) -> A:
    """One pass after its snapshot: ``decide`` and ``plan`` (pure) in a worker thread, then
    the plan executed through ``write`` (``before`` told the decision and the plan first,
    ``after`` told once the writes are done, whatever became of them); returns what was
    decided."""
    actions = await anyio.to_thread.run_sync(decide)
    writes = await anyio.to_thread.run_sync(plan, actions)
    if before is not None:
        before(actions, writes, write)
    try:
        await execute(kube, writes, write, memory, done, kinds=kinds)
    finally:
        if after is not None:
            after()
    return actions
