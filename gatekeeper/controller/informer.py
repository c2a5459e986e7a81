"""List-then-watch caches of cluster objects, kept as plain dicts.

Why this exists: the planner needs a consistent view of LWSs, pods, nodes, pools and
admission records on every pass, and asking the API server for all of it on every
pass would not scale. An informer lists a kind once, then follows its watch from the
list's resourceVersion, with bookmarks; on ``410 Gone`` or a broken stream it lists
again. kr8s' own ``watch`` restarts from a stale version after a 410, so the
informer speaks to the API through ``call_api`` directly. A list or watch that fails is
counted in ``lws_gatekeeper_api_errors_total`` (a watch that ends with a 410 is not: it only
asks for a new list). Each change calls its
listeners (every loop that reads the kind adds its ``poke``), so a new pass is due.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import httpx
import kr8s.asyncio

from gatekeeper.controller.credentials import Credentials
from gatekeeper.controller.errors import (
    TRANSPORT_ERRORS,
    PermanentError,
    TemporaryError,
    count_failure,
    raise_for_status,
)
from gatekeeper.controller.resources import Resource
from gatekeeper.metrics import WATCH_BYTES, WATCH_EVENTS

__all__ = ["Informer", "Resource"]

log = logging.getLogger("gatekeeper.informer")

_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})

Key = tuple[str, str]

PAGE_SIZE = 100
"""Objects per page of a list. A page is parsed on the event loop that also serves the
webhook and renews the Lease: at 500 pods a page, a relist of 6,000 pods under load held
the loop for up to 0.6 s at a time (asyncio's slow-callback log)."""

#: What makes an informer list again after a pause, rather than end.
_RELIST_ON: tuple[type[Exception], ...] = (
    TemporaryError,
    PermanentError,
    *TRANSPORT_ERRORS,
    json.JSONDecodeError,
)


def _lean(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as cached: without ``metadata.managedFields``, which nothing reads and which
    is often the larger part of an object (every bound pod of the cluster is cached)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return (str(meta.get("namespace", "")), str(meta["name"]))


class Informer:
    """A watched cache of one kind (optionally narrowed by label or field selectors)."""

    def __init__(
        self,
        api: kr8s.asyncio.Api,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_change: Callable[[str, dict[str, Any]], None] | None = None,
        watch_seconds: int = 240,
        credentials: Credentials | None = None,
        view: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.api = api
        self.resource = resource
        self.namespace = namespace
        """Only this namespace's objects (None: every namespace)."""
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_seconds = watch_seconds
        self.credentials = credentials or Credentials(api)
        self.view = view
        """What of each object is cached (all of it but managedFields when None)."""
        self.max_backoff = 30.0
        """The longest pause between two attempts to list again after an error."""
        self.objects: dict[Key, dict[str, Any]] = {}
        self.synced = anyio.Event()
        self.relists = 0
        self.changes = 0
        """Counts every change seen (a list counts as one): a parsed view is fresh while it is the same."""
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = [on_change] if on_change else []
        self.failing_since: float | None = None
        """Wall-clock time of the first failure since the last good list or watch (None: fine)."""
        self.last_error = ""
        self._attempt: anyio.CancelScope | None = None
        self._relist = False
        # The counters' series, looked up once: every watch event counts on them.
        plural = resource.plural
        self._events = {t: WATCH_EVENTS.labels(plural, t) for t in (*_EVENT_TYPES, "other")}
        self._bytes = WATCH_BYTES.labels(plural)

    def restart(self) -> None:
        """End the list or watch in flight and list again (with a new ``api``: the hub's
        client after its credentials were rotated, ``controller.hub_link``)."""
        self._relist = True
        if self._attempt is not None:
            self._attempt.cancel()

    def __repr__(self) -> str:
        return f"Informer({self.resource.plural}, {len(self.objects)} objects)"

    def _notify(self, kind: str, obj: dict[str, Any]) -> None:
        for listener in self.listeners:
            listener(kind, obj)

    def _cached(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = _lean(obj)
        return self.view(obj) if self.view is not None else obj

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def values(self) -> list[dict[str, Any]]:
        return list(self.objects.values())

    def _params(self, **extra: Any) -> dict[str, Any]:
        params: dict[str, Any] = dict(extra)
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        return params

    def _get(self, params: dict[str, Any], **extra: Any) -> Any:
        """A GET of the resource's collection (a list, or with ``watch`` a stream), status unchecked."""
        return self.api.call_api(
            "GET",
            version=self.resource.version,
            base=self.resource.base,
            url=self.resource.plural,
            namespace=self.namespace,
            params=params,
            raise_for_status=False,
            **extra,
        )

    async def _list(self) -> str:
        """Replace the cache with a fresh list (paged); return the list's resourceVersion."""
        items: dict[Key, dict[str, Any]] = {}
        params = self._params(limit=PAGE_SIZE)
        while True:
            async with self._get(params) as resp:
                raise_for_status(resp)
                body = resp.json()
            for item in body.get("items", []):
                items[key_of(item)] = self._cached(item)
            cont = body.get("metadata", {}).get("continue")
            if not cont:
                break
            params = self._params(limit=PAGE_SIZE, **{"continue": cont})
        old, self.objects = self.objects, items
        self.relists += 1
        self.changes += 1
        for k, obj in items.items():
            if old.get(k, {}).get("metadata", {}).get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                self._notify("SYNC", obj)
        for k in old.keys() - items.keys():
            self._notify("DELETED", old[k])
        return str(body.get("metadata", {}).get("resourceVersion", ""))

    async def _watch(self, since: str) -> str | None:
        """Follow the watch from ``since``; return the last version seen, None to relist."""
        params = self._params(
            watch="true",
            resourceVersion=since,
            allowWatchBookmarks="true",
            timeoutSeconds=str(self.watch_seconds),
        )
        timeout = httpx.Timeout(10.0, read=self.watch_seconds + 30.0)
        async with self._get(params, stream=True, timeout=timeout) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise_for_status(resp)
            async for line in resp.aiter_lines():
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object", {})
                self._events.get(str(kind), self._events["other"]).inc()
                self._bytes.inc(len(line))
                if kind == "ERROR":
                    code = obj.get("code")
                    log.info("watch of %s ended: %s (%s)", self.resource.plural, obj.get("message"), code)
                    return None
                rv = obj.get("metadata", {}).get("resourceVersion")
                if kind == "BOOKMARK":
                    since = rv or since
                    continue
                k = key_of(obj)
                obj = self._cached(obj)
                if kind == "DELETED":
                    self.objects.pop(k, None)
                else:
                    self.objects[k] = obj
                since = rv or since
                self.changes += 1
                self._notify(str(kind), obj)
        return since

    async def run(self) -> None:
        """List and watch until cancelled; relist after errors with a growing pause."""
        backoff = 0.5
        since: str | None = None
        while True:
            if self._relist:
                self._relist, since = False, None
            with anyio.CancelScope() as self._attempt:
                since, backoff = await self._attempt_once(since, backoff)

    async def _attempt_once(self, since: str | None, backoff: float) -> tuple[str | None, float]:
        """One list (when ``since`` is None) and watch; after an error, the pause before the
        next. Returns (the version to watch from, None to list again; the next pause)."""
        verb = "list"
        try:
            if since is None:
                since = await self._list()
                self.synced.set()
                self.failing_since = None
            verb = "watch"
            since = await self._watch(since)
            backoff = 0.5
        except _RELIST_ON as exc:
            count_failure(verb, self.resource.plural, exc)
            if self.failing_since is None:
                self.failing_since = time.time()
            self.last_error = str(exc)[:300] or type(exc).__name__
            if getattr(exc, "code", None) == 401:
                await self.credentials.refresh()
            # Every error status is retried with backoff, even a permanent one: a 429
            # "storage is (re)initializing" answers every watch while the API server's
            # watch cache warms up, a 5xx while it restarts, a 403 until RBAC is
            # applied. A cache must come back; only cancellation ends an informer.
            log.warning("%s watch failed, relisting in %.1fs: %s", self.resource.plural, backoff, exc)
            since = None
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff)
        return since, backoff
