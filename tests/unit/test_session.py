"""The API client keeps its connections while watches hold more than 20 open.

A local HTTP server stands in for the API server and counts the connections it is asked
on; the client is kr8s' own, built from a kubeconfig, as the controller builds it. The
same run without ``keep_connections`` shows the fault it mends (httpcore closing every
connection that finishes while more than 20 are open): should httpcore mend it, that half
fails, and the workaround can go.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio
import pytest
from aiohttp import web

from gatekeeper.controller.session import LIMITS, Pools, env_proxy, keep_connections

WATCHES = 24
"""More than httpx's 20 kept connections, as the controller's informers and writes are."""
WRITES, AT_ONCE = 200, 16


class CountingServer:
    def __init__(self) -> None:
        self.peers: set[tuple[str, int]] = set()
        self.release = asyncio.Event()
        self.app = web.Application()
        self.app.router.add_get("/version", self.version)
        self.app.router.add_get("/version/", self.version)
        self.app.router.add_get("/api/v1/pods", self.watch)
        self.app.router.add_get("/api/v1/namespaces/default/configmaps/one", self.one)

    def _seen(self, request: web.Request) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer is not None:
            self.peers.add((str(peer[0]), int(peer[1])))

    async def version(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.json_response({"major": "1", "minor": "35", "gitVersion": "v1.35.0"})

    async def watch(self, request: web.Request) -> web.StreamResponse:
        self._seen(request)
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b'{"type":"BOOKMARK","object":{}}\n')
        await self.release.wait()
        return response

    async def one(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": "one"}})


async def _connections_for_writes(tmp_path: Path, keep: bool) -> tuple[int, int]:
    """New connections the writes made, and the most open at once in the pool they used."""
    server = CountingServer()
    runner = web.AppRunner(server.app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = tmp_path / f"kubeconfig-{keep}"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    api: Any = await kr8s.asyncio.api(kubeconfig=str(kubeconfig))
    if keep:
        await keep_connections(api)
    watching = anyio.Event()
    opened = 0

    async def watch() -> None:
        nonlocal opened
        async with api.call_api("GET", url="pods", params={"watch": "1"}, stream=True) as response:
            async for _line in response.aiter_lines():
                opened += 1
                if opened == WATCHES:
                    watching.set()
                await server.release.wait()
                return

    limiter = anyio.CapacityLimiter(AT_ONCE)

    async def write() -> None:
        async with limiter, api.call_api("GET", url="configmaps/one", namespace="default") as response:
            response.json()

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(WATCHES):
                tg.start_soon(watch)
            with anyio.fail_after(10):
                await watching.wait()
            before = len(server.peers)
            async with anyio.create_task_group() as writes:
                for _ in range(WRITES):
                    writes.start_soon(write)
            made = len(server.peers) - before
            transport = api._session._transport
            pool = transport.requests if isinstance(transport, Pools) else transport
            shared = len(pool._pool.connections)
            server.release.set()
    finally:
        await api._session.aclose()
        await runner.cleanup()
    return made, shared


@pytest.mark.anyio
async def test_writes_reuse_connections_while_watches_hold_many(tmp_path: Path) -> None:
    made, _ = await _connections_for_writes(tmp_path, keep=True)
    assert made <= AT_ONCE
    # Without it, httpcore closes nearly every connection a write finishes with.
    made, _ = await _connections_for_writes(tmp_path, keep=False)
    assert made > WRITES // 2


@pytest.mark.anyio
async def test_writes_never_share_a_pool_with_watches(tmp_path: Path) -> None:
    """httpcore walks its pool's connections on every request: the writes' walk must not
    cover the watches' (the watches' stay open in a pool of their own)."""
    _, shared = await _connections_for_writes(tmp_path, keep=True)
    assert shared <= AT_ONCE
    _, shared = await _connections_for_writes(tmp_path, keep=False)
    assert shared >= WATCHES  # kr8s' own client: every watch in the writes' pool


def test_every_connection_may_be_kept() -> None:
    assert LIMITS.max_keepalive_connections == LIMITS.max_connections


def test_a_proxy_from_the_environment_is_still_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pools are built by hand, where httpx would have read ``HTTPS_PROXY`` itself."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "10.96.0.1")
    assert env_proxy("https://api.example:6443") == "http://proxy.internal:3128"
    assert env_proxy("https://10.96.0.1:443") is None
    monkeypatch.delenv("HTTPS_PROXY")
    assert env_proxy("https://api.example:6443") is None
