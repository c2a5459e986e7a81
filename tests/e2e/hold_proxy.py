"""A TCP proxy in front of an API server that can hold requests past their client's deadline.

Why this exists: the hub's one unproven race was a grant whose request times out at the
client but reaches the API server later (a network path or a queue that holds it). To
show it in the sandbox, the hub's gatekeeper talks to its API server through this proxy.
While a *window* is open, the proxy holds the requests sent on its connections; when
the test says ``land``, it sends them on, as if they had sat in a buffer all along.

TLS stays end to end (the proxy sees only records): a connection's requests are its TLS
application-data records after the first one (in TLS 1.3 the client's first such record
is its encrypted Finished, which the handshake needs). A held connection's client gives
up meanwhile and closes; what it sends after the window (its close_notify) and its close
are not passed on, so the API server reads the held request as a whole one, not one whose
client left. Used by ``test_shared_late_grant.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field

APPLICATION_DATA = 23


@dataclass
class _Conn:
    upstream: asyncio.StreamWriter
    pending: bytearray = field(default_factory=bytearray)
    """Client bytes not yet cut into whole TLS records."""
    records_seen: int = 0
    held: list[bytes] = field(default_factory=list)
    holding: bool = False
    client_gone: bool = False


class HoldProxy:
    """``127.0.0.1:<port>`` -> ``127.0.0.1:<upstream>``, on a thread of its own (the test's
    own calls may block its event loop)."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = 0
        self._window = False
        self._conns: list[_Conn] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="hold-proxy", daemon=True)

    def start(self) -> HoldProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the hold proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def open_window(self) -> None:
        """From now on, requests sent on any connection are held."""
        self._window = True

    def close_window(self) -> None:
        """Requests flow again, except on connections already holding some (kept in order)."""
        self._window = False

    @property
    def held_records(self) -> int:
        return sum(len(c.held) for c in self._conns)

    def land(self) -> int:
        """Send every held request on to the API server now; how many records went."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(self._land(), self._loop).result(30)

    async def _land(self) -> int:
        sent = 0
        for conn in self._conns:
            if not conn.held:
                continue
            for record in conn.held:
                conn.upstream.write(record)
                sent += 1
            conn.held.clear()
            conn.holding = False
            await conn.upstream.drain()
        return sent

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # the proxy stopping
            await self._relay(client_r, client_w)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        conn = _Conn(upstream=up_w)
        self._conns.append(conn)
        down = asyncio.create_task(self._pump_down(up_r, client_w, conn))
        try:
            while chunk := await client_r.read(65536):
                conn.pending.extend(chunk)
                for record in _whole_records(conn.pending):
                    self._up(conn, record)
                await up_w.drain()
        except (ConnectionError, OSError):
            pass
        conn.client_gone = True
        if conn.holding:
            # The held request still goes, once landed; the API server hears no close before
            # its answer (the answer is read and dropped).
            with contextlib.suppress(asyncio.TimeoutError, ConnectionError, OSError):
                await asyncio.wait_for(down, timeout=120)
        else:
            down.cancel()
        with contextlib.suppress(ConnectionError, OSError):
            up_w.close()

    def _up(self, conn: _Conn, record: bytes) -> None:
        if record[0] == APPLICATION_DATA:
            conn.records_seen += 1
        request = record[0] == APPLICATION_DATA and conn.records_seen > 1
        if request and self._window:
            conn.holding = True
        if conn.holding:
            if self._window:
                conn.held.append(record)
            return  # sent after the window on a held connection: its client giving up
        conn.upstream.write(record)

    async def _pump_down(
        self, up_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, conn: _Conn
    ) -> None:
        try:
            while chunk := await up_r.read(65536):
                if conn.client_gone:
                    if not conn.holding:
                        return  # a held request's answer came: nobody waits for it
                    continue
                client_w.write(chunk)
                with contextlib.suppress(ConnectionError, OSError):
                    await client_w.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(ConnectionError, OSError):
                client_w.close()


def _whole_records(buf: bytearray) -> list[bytes]:
    """Cut whole TLS records (5-byte header: type, version, length) off the front of ``buf``."""
    out: list[bytes] = []
    while len(buf) >= 5:
        length = int.from_bytes(buf[3:5], "big")
        if len(buf) < 5 + length:
            break
        out.append(bytes(buf[: 5 + length]))
        del buf[: 5 + length]
    return out
