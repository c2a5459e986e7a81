"""List-then-watch caches of cluster objects, kept as plain dicts.

Why this exists: the planner needs a consistent view of LWSs, pods, nodes, pools and
admission records on every pass, and asking the API server for all of it on every
pass would not scale. An informer lists a kind once, then follows its watch from the
list's resourceVersion, with bookmarks; on ``410 Gone`` or a broken stream it lists
again. kr8s' own ``watch`` restarts from a stale version after a 410, so the
informer speaks to the API through ``call_api`` directly. Each change calls
``on_change`` so the reconciler knows a new pass is due.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import kr8s
import kr8s.asyncio

__all__ = ["RETRYABLE", "ApiError", "Informer", "Resource", "check"]

log = logging.getLogger("gatekeeper.informer")

Key = tuple[str, str]


class ApiError(Exception):
    """The API server answered with an error status; a later attempt may succeed."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


#: Errors after which a later attempt may succeed: the API server is away, slow or overloaded.
RETRYABLE = (ApiError, kr8s.ServerError, kr8s.APITimeoutError, httpx.HTTPError, OSError)


def check(resp: httpx.Response) -> None:
    """Raise ``ApiError`` for an error status.

    Every call passes ``raise_for_status=False`` to kr8s: on a 401/403 kr8s would
    re-authenticate and rebuild its HTTP session, which breaks the other requests in
    flight (a 403 also answers a create in a namespace being deleted, not only a
    credentials problem). We read the status ourselves instead.
    """
    if resp.status_code < 400:
        return
    try:
        message = str(resp.json().get("message", ""))
    except ValueError:
        message = resp.text[:300]
    raise ApiError(resp.status_code, message)


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: ``version`` as kr8s takes it ("v1", "apps/v1")."""

    plural: str
    version: str = "v1"
    namespaced: bool = True

    @property
    def base(self) -> str:
        return "/api" if self.version == "v1" else "/apis"


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
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_change: Callable[[str, dict[str, Any]], None] | None = None,
        watch_seconds: int = 240,
    ) -> None:
        self.api = api
        self.resource = resource
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.on_change = on_change
        self.watch_seconds = watch_seconds
        self.objects: dict[Key, dict[str, Any]] = {}
        self.synced = anyio.Event()
        self.relists = 0

    def __repr__(self) -> str:
        return f"Informer({self.resource.plural}, {len(self.objects)} objects)"

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

    async def _list(self) -> str:
        """Replace the cache with a fresh list (paged); return the list's resourceVersion."""
        items: dict[Key, dict[str, Any]] = {}
        params = self._params(limit=500)
        while True:
            async with self.api.call_api(
                "GET",
                version=self.resource.version,
                base=self.resource.base,
                url=self.resource.plural,
                params=params,
                raise_for_status=False,
            ) as resp:
                check(resp)
                body = resp.json()
            for item in body.get("items", []):
                items[key_of(item)] = item
            cont = body.get("metadata", {}).get("continue")
            if not cont:
                break
            params = self._params(limit=500, **{"continue": cont})
        old, self.objects = self.objects, items
        self.relists += 1
        if self.on_change is not None:
            for k, obj in items.items():
                if old.get(k, {}).get("metadata", {}).get("resourceVersion") != obj["metadata"].get(
                    "resourceVersion"
                ):
                    self.on_change("SYNC", obj)
            for k in old.keys() - items.keys():
                self.on_change("DELETED", old[k])
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
        async with self.api.call_api(
            "GET",
            version=self.resource.version,
            base=self.resource.base,
            url=self.resource.plural,
            params=params,
            stream=True,
            timeout=timeout,
            raise_for_status=False,
        ) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                check(resp)
            async for line in resp.aiter_lines():
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object", {})
                if kind == "ERROR":
                    code = obj.get("code")
                    log.info("watch of %s ended: %s (%s)", self.resource.plural, obj.get("message"), code)
                    return None
                rv = obj.get("metadata", {}).get("resourceVersion")
                if kind == "BOOKMARK":
                    since = rv or since
                    continue
                k = key_of(obj)
                if kind == "DELETED":
                    self.objects.pop(k, None)
                else:
                    self.objects[k] = obj
                since = rv or since
                if self.on_change is not None:
                    self.on_change(str(kind), obj)
        return since

    async def run(self) -> None:
        """List and watch until cancelled; relist after errors with a growing pause."""
        backoff = 0.5
        since: str | None = None
        while True:
            try:
                if since is None:
                    since = await self._list()
                    self.synced.set()
                since = await self._watch(since)
                backoff = 0.5
            except (*RETRYABLE, json.JSONDecodeError) as exc:
                # An error status is retryable too: a 429 "storage is (re)initializing"
                # answers every watch while the API server's watch cache warms up, and a
                # 5xx while it restarts. Only cancellation ends an informer.
                log.warning("%s watch failed, relisting in %.1fs: %s", self.resource.plural, backoff, exc)
                since = None
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
