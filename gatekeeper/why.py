"""``lws-gatekeeper why`` (and ``kubectl lws-gatekeeper why``): why an LWS or a pool waits.

Why this exists: the answer to "why is my LWS not running?" spans the LWS, its pods, its
groups' records, the pool and the groups that hold it. This module reads those objects
with the user's own kubeconfig (read-only: list and get, nothing written) and hands them
to ``core.plugin.explain``, which puts the answer together; ``cli.py`` prints it as text or
JSON. It works for every backend: each backend's ``why`` viewer (``core.plugin.backend.Backend.pool_view``)
says whether the name the LWS's label gives is one of its pools (a ``Pool``, a LocalQueue
and its ClusterQueue, ...) and how it looks; the first that knows it
answers. A tenant's rights do not reach the Pool or other namespaces: what may not be read
is left out and said (``LwsAnswer.not_shown``), and only a refused read of the LWS or its
pods ends the answer (``Forbidden``). Called by ``why_cli.why_cmd`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

import anyio
import kr8s
import kr8s.asyncio

from gatekeeper.core.backends import BACKENDS
from gatekeeper.core.kube.keys import API_GROUP, LWS_NAME_LABEL, POOL_LABEL, RECORD_PLURAL
from gatekeeper.core.kube.objects import as_map, meta
from gatekeeper.core.plugin.explain import LwsAnswer, PoolView, explain_lws, explain_pool

__all__ = [
    "Forbidden",
    "LwsAnswer",
    "NotFound",
    "PoolView",
    "as_json",
    "client",
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


class Forbidden(Exception):
    """The reader may not read what the answer cannot go without (the LWS, its pods); the
    message is the API server's, which names the missing permission."""


def _refusal(exc: kr8s.ServerError) -> str:
    """The API server's own words for a refused read (they name the verb, resource and scope)."""
    try:
        said = exc.response.json().get("message") if exc.response is not None else None
    except ValueError:
        said = None
    return str(said or exc)


class _Reader:
    """``core.plugin.explain.Reader`` on kr8s, with the user's kubeconfig.

    A tenant may read its namespace and nothing cluster-wide: what it may not read is left
    out and said (``not_shown``), and a list across namespaces it may not make is made in
    ``home`` (the namespace asked about) instead. Only ``strict`` reads raise ``Forbidden``.
    """

    def __init__(self, api: kr8s.asyncio.Api, home: str | None = None) -> None:
        self.api = api
        self.home = home
        self.not_shown: list[str] = []
        self.refused_one = False
        """A single object (a pool: a Pool, a Queue, a ClusterQueue) was not readable."""
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
                if code == 403:
                    raise Forbidden(_refusal(exc)) from None
                if code != 429 or tries >= _TRIES:
                    raise
                await anyio.sleep(_retry_after(exc.response))

    def _note(self, what: str) -> None:
        if what not in self.not_shown:
            self.not_shown.append(what)

    async def strict(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """One object the answer needs; ``Forbidden`` when it may not be read."""
        found = await self._list(kind, field_selector=f"metadata.name={name}", namespace=namespace)
        return found[0] if found else None

    async def one(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        where = {"namespace": namespace} if namespace else {}
        try:
            found = await self._list(kind, field_selector=f"metadata.name={name}", **where)
        except Forbidden as exc:
            self.refused_one = True
            self._note(f"{kind} {name}: {exc}")
            return None
        return found[0] if found else None

    async def every(self, kind: str, **selectors: Any) -> list[dict[str, Any]]:
        try:
            return await self._list(kind, namespace=kr8s.ALL, **selectors)
        except Forbidden as exc:
            if self.home is None:
                self._note(f"{kind} in every namespace: {exc}")
                return []
            self._note(f"{kind} outside namespace {self.home}: {exc}")
        try:
            return await self._list(kind, namespace=self.home, **selectors)
        except Forbidden as exc:
            self._note(f"{kind} in namespace {self.home}: {exc}")
            return []

    async def pods(self, namespace: str, lws: str) -> list[dict[str, Any]]:
        return await self._list("pods", namespace=namespace, label_selector={LWS_NAME_LABEL: lws})

    async def opted_in(self, pool: str) -> list[dict[str, Any]]:
        return await self.every(LWS_KIND, label_selector={POOL_LABEL: pool})

    async def classes(self) -> Mapping[str, int]:
        if self._classes is None:
            self._classes = {}
            try:
                found = await self._list("priorityclasses.scheduling.k8s.io")
            except Forbidden as exc:
                self._note(f"priorityclasses (the queue's order by priority): {exc}")
                found = []
            for pc in found:
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


async def client(kubeconfig: str | None, context: str | None = None) -> kr8s.asyncio.Api:
    """The user's API client: ``kubeconfig`` (else $KUBECONFIG or ~/.kube/config) and
    ``context`` (else its current one), as kubectl takes them."""
    return await kr8s.asyncio.api(kubeconfig=kubeconfig, context=context)


def default_namespace(api: kr8s.asyncio.Api) -> str:
    """The namespace of the kubeconfig's context, as kubectl takes it."""
    return str(api.namespace or "default")


async def why_lws(api: kr8s.asyncio.Api, namespace: str, name: str) -> LwsAnswer:
    read = _Reader(api, home=namespace)
    lws = await read.strict(LWS_KIND, name, namespace)
    if lws is None:
        raise NotFound(f"LeaderWorkerSet {namespace}/{name} not found")
    pool = str(as_map(meta(lws).get("labels")).get(POOL_LABEL) or "")
    records = await read.every(RECORD_KIND)
    pods = await read.pods(namespace, name)
    view = None
    if pool:
        view = await _pool_view(read, pool, namespace, records)
        if view is None and not read.refused_one:  # no pool of that name: say so
            view = explain_pool(None, pool, records, await read.opted_in(pool), await read.classes())
    return replace(explain_lws(lws, records, pods, view), not_shown=tuple(read.not_shown))


async def why_pool(api: kr8s.asyncio.Api, name: str, home: str | None = None) -> PoolView:
    """``home``: where to read the groups when the reader may not read every namespace's."""
    read = _Reader(api, home=home)
    records = await read.every(RECORD_KIND)
    view = await _pool_view(read, name, None, records)
    if view is not None:
        return replace(view, not_shown=tuple(read.not_shown))
    if read.refused_one:
        raise Forbidden("; ".join(read.not_shown))
    if not any(as_map(r.get("status")).get("pool") == name for r in records):
        raise NotFound(f"Pool {name} not found")
    view = explain_pool(None, name, records, await read.opted_in(name), await read.classes())
    return replace(view, not_shown=tuple(read.not_shown))


def as_json(value: LwsAnswer | PoolView) -> Mapping[str, Any]:
    """The answer as plain data (``-o json``)."""
    return asdict(value)
