"""Deadlines on the webhook's connections, so that a client that opens one and waits holds nothing.

Why this exists: the webhook's port is reachable from the cluster's network (the chart's
NetworkPolicy narrows it, a cluster without one does not), and aiohttp waits for a
connection's first request, and for a request's body, without end; asyncio gives a TLS
handshake a minute. A hundred clients that connect and send nothing would hold a hundred
sockets, and eight that send a request head and then trickle its body would hold every
review slot (``MAX_CONCURRENT_REVIEWS``), so that the API server's own reviews, and with them
every opted-in pod's creation, wait behind them. So:

* a TLS handshake must end within ``HANDSHAKE_SECONDS`` (asyncio's ``ssl_handshake_timeout``);
* a connection must bring its first request's head within ``READ_SECONDS`` of its handshake,
  else it is closed (``FirstRequest``: the server's protocol, told by the handler when a
  request arrives);
* a request's body must be read within ``READ_SECONDS`` (the handler's ``read_body``), else
  it is answered 408 and its connection closed at once (``close_after``: aiohttp would
  otherwise wait up to 10 s more for the rest of the body); while it is read it holds only the bytes it
  sent (``BodyBudget``), never a review slot, so a client that sends a head and then nothing
  keeps no review waiting;
* an idle connection between requests is closed after ``KEEPALIVE_SECONDS`` (aiohttp's
  keep-alive), longer than the API server's client keeps one idle (90 s), so that the client
  closes first and never sends a review on a connection being closed.

Closed connections are counted in ``lws_gatekeeper_webhook_connections_closed_total{why}``.
``server.start_webhook_server`` serves through ``DeadlineSite``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from gatekeeper.metrics import WEBHOOK_CONNECTIONS_CLOSED

__all__ = [
    "HANDSHAKE_SECONDS",
    "KEEPALIVE_SECONDS",
    "READ_SECONDS",
    "BodyBudget",
    "DeadlineRunner",
    "DeadlineServer",
    "DeadlineSite",
    "FirstRequest",
    "OverBudget",
    "TooLarge",
    "close_after",
    "read_body",
    "request_arrived",
]

HANDSHAKE_SECONDS = 10.0
READ_SECONDS = 10.0
KEEPALIVE_SECONDS = 120.0

WEBHOOK_CONNECTIONS_CLOSED.labels("no_request")
WEBHOOK_CONNECTIONS_CLOSED.labels("slow_body")


class FirstRequest(RequestHandler):
    """aiohttp's connection protocol, closed unless a request arrives within ``READ_SECONDS``
    of the connection (for TLS, of the end of its handshake)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            READ_SECONDS, self._no_request, transport
        )

    def request_arrived(self) -> None:
        deadline = getattr(self, "_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._deadline = None

    def _no_request(self, transport: asyncio.BaseTransport) -> None:
        self._deadline = None
        WEBHOOK_CONNECTIONS_CLOSED.labels("no_request").inc()
        transport.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.request_arrived()
        super().connection_lost(exc)


class DeadlineServer(web.Server):
    """aiohttp's server, making ``FirstRequest`` protocols."""

    def __call__(self) -> RequestHandler:
        return FirstRequest(self, loop=self._loop, **self._kwargs)


class DeadlineRunner(web.AppRunner):
    """An ``AppRunner`` whose server makes ``FirstRequest`` protocols (with the keep-alive)."""

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()
        return DeadlineServer(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            loop=made._loop,
            **made._kwargs,
        )


class DeadlineSite(web.TCPSite):
    """A TLS site whose handshakes must end within ``HANDSHAKE_SECONDS``."""

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            server,
            self._host,
            self._port,
            ssl=self._ssl_context,
            ssl_handshake_timeout=HANDSHAKE_SECONDS if self._ssl_context is not None else None,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


def request_arrived(request: web.BaseRequest) -> None:
    """Tell the connection's protocol a request came (its first-request deadline is off)."""
    protocol: Any = request.protocol
    if isinstance(protocol, FirstRequest):
        protocol.request_arrived()


class TooLarge(Exception):
    """The body grew past the bound it is read to."""


class OverBudget(Exception):
    """The bodies being read and answered at once already hold the whole byte budget."""


class BodyBudget:
    """Bytes of request bodies held at once (being read, or answered), against a bound.

    A body takes its bytes as they arrive, not as its head announces them, so a client that
    sends a head and then nothing holds nothing, and one that sends much and stalls holds what
    it sent until its read deadline."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, n: int) -> None:
        if self.used + n > self.limit:
            raise OverBudget(f"{self.used} of {self.limit} bytes of bodies held")
        self.used += n

    def give(self, n: int) -> None:
        self.used = max(self.used - n, 0)


async def read_body(request: web.BaseRequest, budget: BodyBudget, max_body: int) -> bytes | None:
    """The request's body, read within ``READ_SECONDS`` (None when it did not come), its bytes
    taken from ``budget`` as they arrive (the caller gives ``len(body)`` back when done);
    ``TooLarge`` past ``max_body``, ``OverBudget`` when the budget is spent (both give back
    what they took)."""
    chunks: list[bytes] = []
    taken = 0
    try:
        async with asyncio.timeout(READ_SECONDS):
            while chunk := await request.content.read(64 * 1024):
                if taken + len(chunk) > max_body:
                    raise TooLarge(f"more than {max_body} bytes")
                budget.take(len(chunk))
                taken += len(chunk)
                chunks.append(chunk)
    except TimeoutError:
        budget.give(taken)
        WEBHOOK_CONNECTIONS_CLOSED.labels("slow_body").inc()
        return None
    except (TooLarge, OverBudget):
        budget.give(taken)
        raise
    return b"".join(chunks)


async def close_after(request: web.BaseRequest, response: web.Response) -> web.Response:
    """``response`` sent, then its connection closed: no wait for the rest of a body that is
    not coming (aiohttp drains what a client still sends of a refused body for up to 10 s,
    which lets a client that is sending a too large one read its 413)."""
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    protocol: Any = request.protocol
    if protocol is not None:
        protocol.force_close()  # its transport closes once the answer is written out
    return response
