"""What ``lws-gatekeeper why`` shows of a pool with the ``volcano`` backend: the Volcano Queue.

Why this exists: this is the backend's part of ``core.plugin.explain``; ``pool_view`` is its ``why``
viewer (``core.plugin.backend.Backend.pool_view``), which reads the Queue through the reader ``why``
gives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gatekeeper.core.backends.volcano.keys import QUEUE_PLURAL, VOLCANO_API_VERSION
from gatekeeper.core.kube.objects import as_map, is_terminating, meta
from gatekeeper.core.plugin.explain import (
    PoolView,
    Reader,
    amounts,
    by_admission,
    formatted,
    holder,
    is_admitted,
    waiting_order,
)

__all__ = ["pool_view", "volcano_queue_view"]


def volcano_queue_view(
    queue: Mapping[str, Any],
    name: str,
    records: Iterable[Mapping[str, Any]],
    lwss: Iterable[Mapping[str, Any]] = (),
    classes: Mapping[str, int] | None = None,
) -> PoolView:
    """With the ``volcano`` backend: the Volcano Queue ``name`` the LWS's label names, its
    ``capability`` as quota and what Volcano's scheduler reports allocated in it (its running
    pods', anyone's: ``status.allocated``, written at each session's close), the groups of
    ours it admitted and those that wait, in the order the backend offers them to Volcano
    (highest priority, then oldest LWS: ``lwss`` and ``classes`` give it). With no
    capability the Queue is bounded by the cluster only: used is all it reports, free is
    not known."""
    capability = amounts(as_map(queue.get("spec")).get("capability"))
    allocated = amounts(as_map(queue.get("status")).get("allocated"))
    used = {k: allocated.get(k, 0) for k in capability} if capability else allocated
    mine = [r for r in records if as_map(r.get("status")).get("pool") == name and not is_terminating(r)]
    by_key = {(str(meta(o).get("namespace") or ""), str(meta(o).get("name") or "")): o for o in lwss}
    held = by_admission(r for r in mine if is_admitted(r))
    waiting = waiting_order((r for r in mine if not is_admitted(r)), by_key, classes or {})
    return PoolView(
        name,
        "Queue",
        quota=formatted(capability),
        used=formatted(used),
        free=formatted({k: max(0, v - used.get(k, 0)) for k, v in capability.items()}),
        admitted=tuple(map(holder, held)),
        waiting=tuple(map(holder, waiting)),
    )


async def pool_view(
    read: Reader, pool: str, namespace: str | None, records: Sequence[Mapping[str, Any]]
) -> PoolView | None:
    """The Volcano Queue of that name, with what Volcano reports allocated in it."""
    queue = await read.one(f"{QUEUE_PLURAL}.{VOLCANO_API_VERSION.split('/')[0]}", pool)
    if queue is None:
        return None
    return volcano_queue_view(queue, pool, records, await read.opted_in(pool), await read.classes())
