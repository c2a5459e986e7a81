"""The API client's HTTP connections: kept and reused, not made again for each request.

Why this exists: kr8s builds its httpx client with httpx's default limits (at most 100
connections, 20 of them kept idle). httpcore (1.0.9, the newest) counts *all* of a pool's
connections against the idle bound, not only the idle ones (encode/httpcore pull 1000,
open), so while more than 20 are open every connection that finishes a request is closed.
The gatekeeper always has more: each informer's watch holds one for as long as it runs,
and a pass has up to 16 writes in flight. Measured in one scale-up of 100 groups of 4
(``benchmarks/bench_timeline.py``): 473 new TLS connections for 532 writes, a handshake on
both sides of nearly every write, on an API server that was the busiest process.

:func:`keep_connections` gives the client a pool that may keep as many idle connections as
it may open (so the faulty count never closes one), and makes kr8s build it so again
whenever it rebuilds its session (it does after a 401 or a certificate error). The client
is built from the same parts kr8s uses (its ``auth``: server, token, TLS context, proxy).

Behind the one client are two pools (:class:`Pools`): the watches' and everyone else's.
httpcore walks every connection of a pool, and for each idle one every connection again,
each time a request starts or ends; with the informers' watches in the same pool as the
pass's writes, that walk took 11% of a profile's samples in a scale-up of 250 groups of 8
(py-spy, ``benchmarks/profile_scale.py``). Apart, a write's walk covers only the writes'
connections, and the watches' pool sees a request only when a watch starts again.

``controller/app.py`` calls it on each API client it makes (the cluster's and the hub's).
"""

from __future__ import annotations

import contextlib
import urllib.parse
import urllib.request
from typing import Any

import httpx

__all__ = ["LIMITS", "Pools", "env_proxy", "keep_connections"]

LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100, keepalive_expiry=30.0)
"""At most 100 connections (httpx's default), every one of them kept while idle, for 30 s
(the API server keeps an idle connection for 90 s)."""


class Pools(httpx.AsyncBaseTransport):
    """Two connection pools behind one client: one for watches (``watch=true`` or ``1``),
    each holding its connection for minutes, one for every other request."""

    def __init__(self, watches: httpx.AsyncBaseTransport, requests: httpx.AsyncBaseTransport) -> None:
        self.watches = watches
        self.requests = requests

    @classmethod
    def over_tls(cls, verify: Any, proxy: Any) -> Pools:
        def pool() -> httpx.AsyncHTTPTransport:
            return httpx.AsyncHTTPTransport(verify=verify, proxy=proxy, limits=LIMITS)

        return cls(pool(), pool())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        watch = request.url.params.get("watch") in ("true", "1")
        return await (self.watches if watch else self.requests).handle_async_request(request)

    async def aclose(self) -> None:
        await self.requests.aclose()
        await self.watches.aclose()


def env_proxy(server: str) -> str | None:
    """The proxy the environment names for ``server`` (``HTTPS_PROXY``, unless ``NO_PROXY``
    exempts it), as httpx reads it for a client without a transport of its own."""
    url = urllib.parse.urlsplit(server)
    proxy = urllib.request.getproxies().get(url.scheme or "https")
    if not proxy or urllib.request.proxy_bypass(url.hostname or ""):
        return None
    return str(proxy)


async def keep_connections(api: Any) -> None:
    """Make ``api`` (a kr8s ``Api``) keep its connections, now and after any rebuild."""

    async def create_session() -> None:
        auth = api.auth
        headers = {"content-type": "application/json"}
        if auth.token:
            headers["Authorization"] = f"Bearer {auth.token}"
        old: httpx.AsyncClient | None = api._session
        api._session = httpx.AsyncClient(
            base_url=auth.server,
            headers=headers,
            timeout=api.timeout,
            follow_redirects=True,
            transport=Pools.over_tls(await auth.ssl_context(), auth.proxy or env_proxy(auth.server)),
        )
        if old is not None:
            with contextlib.suppress(RuntimeError):
                await old.aclose()

    api._create_session = create_session
    await create_session()
