"""Informers plus a debounced pass: the shape shared by every loop of the gatekeeper.

Why this exists: the ``pools`` admission loop, the ``kueue`` backend and the node-fit
check all work the same way: start their informers, wait for the first lists, then run
one pass whenever a watched object changed (a burst of changes makes one pass) and at
least every ``resync`` seconds. A pass that fails on a retryable error is tried again
after a second; anything else ends the loop (a bug, not a condition to hide).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import anyio

from gatekeeper.controller.informer import RETRYABLE, Informer
from gatekeeper.controller.kube import Conflict

__all__ = ["PassLoop"]


class PassLoop:
    """Wakes a pass when ``poke`` is called (from informers or from a write that must be retried)."""

    def __init__(
        self,
        log: logging.Logger,
        *,
        resync: float,
        debounce: float,
        retry_on: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.log = log
        self.resync = resync
        self.debounce = debounce
        self.retry_on: tuple[type[BaseException], ...] = (*RETRYABLE, *retry_on)
        self._dirty = anyio.Event()

    def poke(self, _kind: str = "", _obj: Any = None) -> None:
        """Ask for a pass soon (the signature of an informer's ``on_change``)."""
        self._dirty.set()

    def writer(self, concurrency: int) -> Callable[..., Coroutine[Any, Any, bool]]:
        """How one pass runs its writes: at most ``concurrency`` in flight. A write that meets
        a Conflict or a retryable error is logged and asks for another pass; it is never
        raised (an exception in one task would cancel the others of the pass). The wrapper
        returns whether the write went through."""
        limiter = anyio.CapacityLimiter(concurrency)

        async def write(fn: Callable[..., Awaitable[object]], *args: Any) -> bool:
            async with limiter:
                try:
                    await fn(*args)
                except Conflict as exc:
                    self.log.info("deferred to the next pass: %s", exc)
                except self.retry_on as exc:
                    self.log.warning("write failed, retrying in the next pass: %s", exc)
                else:
                    return True
            self.poke()
            return False

        return write

    async def run(self, informers: Sequence[Informer], one_pass: Callable[[], Awaitable[object]]) -> None:
        """Run the informers and ``one_pass`` until cancelled."""
        async with anyio.create_task_group() as tg:
            for inf in informers:
                tg.start_soon(inf.run)
            for inf in informers:
                await inf.synced.wait()
            self.log.info("caches synced")
            while True:
                with anyio.move_on_after(self.resync):
                    await self._dirty.wait()
                await anyio.sleep(self.debounce)
                self._dirty = anyio.Event()
                try:
                    await one_pass()
                except self.retry_on as exc:
                    self.log.warning("pass failed, retrying: %s", exc)
                    self._dirty.set()
                    await anyio.sleep(1.0)
