"""What ``lws-gatekeeper why`` shows of a pool with the ``pools`` backend: the Pool.

Why this exists: the backend's ``why`` viewer (``core.plugin.backend.Backend.pool_view``); the view
itself is ``core.plugin.explain.explain_pool``, which also shows a pool that is not there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gatekeeper.core.kube.keys import API_GROUP, POOL_PLURAL
from gatekeeper.core.plugin.explain import PoolView, Reader, explain_pool

__all__ = ["pool_view"]


async def pool_view(
    read: Reader, pool: str, namespace: str | None, records: Sequence[Mapping[str, Any]]
) -> PoolView | None:
    """A Pool of that name, with its status and the groups that hold and wait for it."""
    obj = await read.one(f"{POOL_PLURAL}.{API_GROUP}", pool)
    if obj is None:
        return None
    return explain_pool(obj, pool, records, await read.opted_in(pool), await read.classes())
