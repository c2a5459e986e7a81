"""``lws-gatekeeper why`` (and ``kubectl lws-gatekeeper why``): why an LWS or a pool waits.

Why this exists: the answer to "why is my LWS not running?" spans the LWS, its pods, its
groups' records, the pool and the groups that hold it. This module reads those objects
with the user's own kubeconfig (read-only: list and get, nothing written) and hands them
to ``core.plugin.explain``, which puts the answer together; ``cli.py`` prints it as text or
JSON. It works for every backend: each backend's ``why`` viewer (``core.plugin.backend.Backend.pool_view``)
says whether the name the LWS's label gives is one of its pools (a ``Pool``, a LocalQueue
and its ClusterQueue, ...) and how it looks; the first that knows it
answers. Called by ``cli.why_cmd`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import anyio
import kr8s
import kr8s.asyncio

from gatekeeper.core.backends import BACKENDS
from gatekeeper.core.kube.keys import API_GROUP, LWS_NAME_LABEL, POOL_LABEL, RECORD_PLURAL
from gatekeeper.core.kube.objects import as_map, meta
from gatekeeper.core.plugin.explain import LwsAnswer, PoolView, explain_lws, explain_pool

__all__ = [
    "LwsAnswer",
    "NotFound",
    "PoolView",
    "as_json",
    "default_namespace",
    "pool_kinds",
    "why_lws",
    "why_pool",
]

LWS_KIND = "leaderworkersets.leaderworkerset.x-k8s.io"
RECORD_KIND = f"{RECORD_PLURAL}.{API_GROUP}"


_TRIES = 5
"""Reads an API server answers with 429 (too many requests, or a resource's storage being
initialized after its CRD changed) are tried this many times before ``why`` gives up."""


def _retry_after(response: Any) -> float:
    """The seconds the API server asks a 429's client to wait (Retry-After), 1 to 5."""
    try:
        return min(5.0, max(1.0, float(response.headers.get("Retry-After", 1))))
    except (TypeError, ValueError):
        return 1.0


class NotFound(Exception):
    """The object asked about is not there (the message says which)."""


class _Reader:
    """``core.plugin.explain.Reader`` on kr8s, with the user's kubeconfig."""

    def __init__(self, api: kr8s.asyncio.Api) -> None:
        self.api = api
        self._classes: dict[str, int] | None = None

    async def _list(self, kind: str, **selectors: Any) -> list[dict[str, Any]]:
        tries = 0
        while True:
            try:
                return [o async for o in self.api.get(kind, raw=True, **selectors) if isinstance(o, dict)]
            except (kr8s.NotFoundError, ValueError):  # the API is not served (Kueue not installed, say)
                return []
            except kr8s.ServerError as exc:
                tries += 1
                code = exc.response.status_code if exc.response is not None else 0
                if code != 429 or tries >= _TRIES:
                    raise
                await anyio.sleep(_retry_after(exc.response))

    async def one(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        where = {"namespace": namespace} if namespace else {}
        found = await self._list(kind, field_selector=f"metadata.name={name}", **where)
        return found[0] if found else None

    async def every(self, kind: str, **selectors: Any) -> list[dict[str, Any]]:
        return await self._list(kind, namespace=kr8s.ALL, **selectors)

    async def pods(self, namespace: str, lws: str) -> list[dict[str, Any]]:
        return await self._list("pods", namespace=namespace, label_selector={LWS_NAME_LABEL: lws})

    async def opted_in(self, pool: str) -> list[dict[str, Any]]:
        return await self.every(LWS_KIND, label_selector={POOL_LABEL: pool})

    async def classes(self) -> Mapping[str, int]:
        if self._classes is None:
            self._classes = {}
            for pc in await self._list("priorityclasses.scheduling.k8s.io"):
                value = pc.get("value")
                if isinstance(value, int) and not isinstance(value, bool):
                    self._classes[str(meta(pc).get("name"))] = value
        return self._classes


def pool_kinds() -> tuple[str, ...]:
    """What a pool may be, one word per backend (``why`` says none of them was found)."""
    return tuple(b.pool_kind for b in BACKENDS)


async def _pool_view(
    read: _Reader, pool: str, namespace: str | None, records: list[dict[str, Any]]
) -> PoolView | None:
    """The first backend's view of ``pool`` (in the registry's order), or None."""
    for backend in BACKENDS:
        view = await backend.pool_view(read, pool, namespace, records)
        if view is not None:
            return view
    return None


async def default_namespace(kubeconfig: str | None) -> str:
    """The namespace of the kubeconfig's current context, as kubectl takes it."""
    api = await kr8s.asyncio.api(kubeconfig=kubeconfig)
    return str(api.namespace or "default")


async def why_lws(kubeconfig: str | None, namespace: str, name: str) -> LwsAnswer:
    read = _Reader(await kr8s.asyncio.api(kubeconfig=kubeconfig))
    lws = await read.one(LWS_KIND, name, namespace)
    if lws is None:
        raise NotFound(f"LeaderWorkerSet {namespace}/{name} not found")
    pool = str(as_map(meta(lws).get("labels")).get(POOL_LABEL) or "")
    records = await read.every(RECORD_KIND)
    pods = await read.pods(namespace, name)
    view = None
    if pool:
        view = await _pool_view(read, pool, namespace, records) or explain_pool(
            None, pool, records, await read.opted_in(pool), await read.classes()
        )
    return explain_lws(lws, records, pods, view)


async def why_pool(kubeconfig: str | None, name: str) -> PoolView:
    read = _Reader(await kr8s.asyncio.api(kubeconfig=kubeconfig))
    records = await read.every(RECORD_KIND)
    view = await _pool_view(read, name, None, records)
    if view is not None:
        return view
    if not any(as_map(r.get("status")).get("pool") == name for r in records):
        raise NotFound(f"Pool {name} not found")
    return explain_pool(None, name, records, await read.opted_in(name), await read.classes())


def as_json(value: LwsAnswer | PoolView) -> Mapping[str, Any]:
    """The answer as plain data (``-o json``)."""
    return asdict(value)
