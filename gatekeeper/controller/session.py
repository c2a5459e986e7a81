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

``controller/app.py`` calls it on each API client it makes (the cluster's and the hub's).
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx

__all__ = ["LIMITS", "keep_connections"]

LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100, keepalive_expiry=30.0)
"""At most 100 connections (httpx's default), every one of them kept while idle, for 30 s
(the API server keeps an idle connection for 90 s)."""


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
            verify=await auth.ssl_context(),
            timeout=api.timeout,
            follow_redirects=True,
            proxy=auth.proxy,
            limits=LIMITS,
        )
        if old is not None:
            with contextlib.suppress(RuntimeError):
                await old.aclose()

    api._create_session = create_session
    await create_session()
