"""The webhook server on an event loop of its own, in a thread of its own.

Why this exists: the API server waits for every opted-in pod's review (10 s at most, then
the create fails), so the webhook's latency is the pod's creation latency. On the
process's main event loop a review waits behind whatever the loop is doing: decoding a
page of 100 pods or a burst of watch events holds it for hundreds of milliseconds at a
time (measured with 20,000 pods: webhook p99 482 ms). On a loop of its own, a review
waits only for the interpreter's thread switch at each of its awaits (set to
:data:`GIL_SWITCH_SECONDS`), whatever the main loop does. The webhook shares
only the metrics registry (thread-safe) and the leader's table of admitted groups
(``pass_through``: one reference, swapped whole by the controller's thread).

``controller/app.py`` starts it with :meth:`WebhookThread.start` and stops it with
:meth:`WebhookThread.cleanup`, as it does the metrics server's runner.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

import anyio.to_thread
from aiohttp import web

from gatekeeper.core.plugin.backend import PodPatch
from gatekeeper.webhook.guard import Lookup
from gatekeeper.webhook.pass_through import PassThrough
from gatekeeper.webhook.server import start_webhook_server

__all__ = ["GIL_SWITCH_SECONDS", "WebhookThread"]

GIL_SWITCH_SECONDS = 0.001
"""How long another thread may hold the interpreter before the webhook's thread gets it
(Python's default is 5 ms). A review takes the interpreter back at each of its awaits
(read, decode, answer, TLS), a dozen times, so under a busy controller thread the default
alone adds tens of milliseconds to every review."""


class WebhookThread:
    """A started webhook server running in its own thread; ``await cleanup()`` stops it."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def addresses(self) -> list[Any]:
        return list(self._runner.addresses) if self._runner else []

    @classmethod
    async def start(
        cls,
        host: str,
        port: int,
        cert_file: Path,
        key_file: Path,
        pass_through: PassThrough | None = None,
        *,
        pod_patch: PodPatch | None = None,
        lookup: Lookup | None = None,
    ) -> WebhookThread:
        """Start serving; returns once the server listens (or raises what kept it from it)."""
        self = cls()
        sys.setswitchinterval(GIL_SWITCH_SECONDS)
        started = threading.Event()
        failed: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                self._runner = loop.run_until_complete(
                    start_webhook_server(
                        host, port, cert_file, key_file, pass_through, pod_patch=pod_patch, lookup=lookup
                    )
                )
            except BaseException as exc:  # reported to the caller, which fails the start
                failed.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._runner.cleanup())
                loop.close()

        self._thread = threading.Thread(target=main, name="webhook", daemon=True)
        self._thread.start()
        await anyio.to_thread.run_sync(started.wait)
        if failed:
            raise failed[0]
        return self

    async def cleanup(self) -> None:
        """Stop the server and its loop, and wait for the thread (at most 10 s)."""
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            await anyio.to_thread.run_sync(self._thread.join, 10.0)
