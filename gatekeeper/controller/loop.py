"""The one loop every controller of the gatekeeper runs: snapshot, decide, act; again.

Why this exists: the ``pools`` and ``kueue`` backends and the node-fit check all work the
same way: wait for their informers' first lists, then run one pass whenever a watched
object changed (a burst of changes makes one pass) and at least every ``resync`` seconds.
A pass takes a snapshot of the caches, hands it to a pure decision of ``core`` and carries
out what it decided. The loop is given those three parts (a ``Controller``); it owns the
timing, the limit on writes in flight and the rule for errors:

* a write that meets a ``TemporaryError`` (``Conflict`` included) is logged and asks for
  another pass; one that meets a ``PermanentError`` is logged as an error and not retried;
  a create in a namespace being deleted (``NamespaceTerminating``) is logged at debug and
  not retried; none stops the other writes of the pass;
* a pass that meets a ``TemporaryError`` is tried again after its delay;
* anything else is a bug and ends the loop (and with it the term: the elector stops).

A decision may say when it falls due with nothing changed (``look_again``, a time: a group
to give back a few seconds from now); the next pass then comes no later than that.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio

from gatekeeper.controller.drain import Drain
from gatekeeper.controller.errors import (
    Conflict,
    Forbidden,
    NamespaceTerminating,
    PermanentError,
    TemporaryError,
)
from gatekeeper.controller.informer import Informer
from gatekeeper.core.plugin.decided import Decided

__all__ = ["Controller", "Decided", "PassLoop", "Slots", "Write", "next_gap"]

Write = Callable[..., Coroutine[Any, Any, bool]]
"""How a pass runs one write: ``await write(fn, *args, rank=0)``; True when it went through.
Of the writes waiting for a slot, the lowest ``rank`` goes first (then the earliest)."""


@dataclass(order=True)
class _Waiter:
    rank: int
    seq: int
    woken: anyio.Event = field(compare=False, default_factory=anyio.Event)
    granted: bool = field(compare=False, default=False)
    gone: bool = field(compare=False, default=False)


class Slots:
    """At most ``size`` holders at once; of those waiting, the lowest rank is let in first,
    and among equals the one that came first (anyio's ``CapacityLimiter`` is first come,
    first served only)."""

    def __init__(self, size: int) -> None:
        self.free = size
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    @asynccontextmanager
    async def slot(self, rank: int = 0) -> AsyncIterator[None]:
        if self.free > 0 and not self._waiting:
            self.free -= 1
        else:
            waiter = _Waiter(rank, next(self._seq))
            heapq.heappush(self._waiting, waiter)
            try:
                await waiter.woken.wait()
            except BaseException:
                waiter.gone = True
                if waiter.granted:
                    self._release()  # let in while being cancelled: pass the slot on
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        while self._waiting:
            waiter = heapq.heappop(self._waiting)
            if not waiter.gone:
                waiter.granted = True
                waiter.woken.set()
                return
        self.free += 1


class Controller(Protocol):
    """The parts a ``PassLoop`` is given."""

    log: logging.Logger

    @property
    def informers(self) -> Sequence[Informer]:
        """The caches a pass reads: the loop waits for their first lists, and a change in
        any of them asks for a pass."""
        ...

    async def reconcile_once(self, write: Write) -> Decided:
        """One pass: snapshot, decide (pure), act through ``write``; returns what it decided."""
        ...


def next_gap(cpu_seconds: float, *, debounce: float, min_interval: float, factor: float) -> float:
    """Seconds from one pass's start to the next one's, at least: ``factor`` times the CPU
    seconds the process spent during the last pass, between ``debounce`` and ``min_interval``."""
    return min(min_interval, max(debounce, factor * cpu_seconds))


class PassLoop:
    """Runs a ``Controller``'s passes: when poked (an informer saw a change, a write must be
    retried) and at least every ``resync`` seconds, but a pass starts no sooner than
    ``gap`` seconds after the last one started.

    Every pod bound to a node, anyone's, is watched for node room: in a big cluster some pod
    changes all the time, and a pass after each burst ran passes back to back (20,000 pods
    being created: 2,178 passes, 324 s of them in 8 minutes), starving the webhook and the
    Lease renewals that share this process. Most changes cannot let a group in (a pod
    turning Running, a record the pass wrote itself): they wait for ``min_interval``. A
    change the controller calls urgent (its ``urgent(plural, kind, obj)``: room freed, a
    new or scaled LWS) waits only for ``gap``, which follows what the last pass cost the
    process in CPU (``cpu_factor`` times it, from ``debounce`` up to ``min_interval``): a
    gang's room freed in a quiet pool is given to the next one at once, and a heavy pass
    is still followed by the full second. A controller without ``urgent`` waits
    ``min_interval`` for every change.
    """

    def __init__(
        self,
        controller: Controller,
        *,
        resync: float = 10.0,
        debounce: float = 0.05,
        concurrency: int = 16,
        min_interval: float = 1.0,
        cpu_factor: float = 6.0,
        drain: Drain | None = None,
    ) -> None:
        self.controller = controller
        self.drain = drain or Drain()
        """Once it is stopping, no pass starts; the one in flight finishes."""
        self.log = controller.log
        self.resync = resync
        self.debounce = debounce
        self.concurrency = concurrency
        self.min_interval = min_interval
        self.cpu_factor = cpu_factor
        self.gap = min_interval
        """The least time from the last pass's start to the next one's (``next_gap``)."""
        self.passes = 0
        self.look_again: float | None = None
        """Seconds from the last pass's end to the moment its decision said it falls due, if any."""
        self._problems: set[str] = set()
        self._dirty = anyio.Event()
        self._urgent = anyio.Event()
        self._is_urgent: Callable[[str, str, Any], bool] | None = getattr(controller, "urgent", None)
        # Side informers (a member's caches of the hub) ask for passes but are not waited for.
        for inf in [*controller.informers, *getattr(controller, "side_informers", ())]:
            inf.listeners.append(self._listener(inf.resource.plural))

    def _listener(self, plural: str) -> Callable[[str, Any], None]:
        def listen(kind: str, obj: Any) -> None:
            self._dirty.set()
            # Asked even when a pass is already urgent: the controller remembers what it saw.
            if self._is_urgent is not None and self._is_urgent(plural, kind, obj):
                self._urgent.set()

        return listen

    def poke(self, _kind: str = "", _obj: Any = None) -> None:
        """Ask for a pass within ``min_interval`` (a write to try again)."""
        self._dirty.set()

    async def _turn(self, last: float) -> None:
        """Wait for the next pass's turn: ``min_interval`` after the last one's start, or
        only ``gap`` once an urgent change came (the controller's ``urgent`` says which)."""
        await anyio.sleep(self.debounce)
        while not self._urgent.is_set():
            left = last + self.min_interval - anyio.current_time()
            if left <= 0:
                return
            with anyio.move_on_after(left):
                await self._urgent.wait()
        left = last + self.gap - anyio.current_time()
        if left > 0:
            await anyio.sleep(left)

    def writer(self) -> Write:
        """How one pass runs its writes: at most ``concurrency`` in flight, the lowest
        ``rank`` first. A write that fails is never raised (an exception in one task would
        cancel the others of the pass)."""
        slots = Slots(self.concurrency)

        async def write(fn: Callable[..., Awaitable[object]], *args: Any, rank: int = 0) -> bool:
            async with slots.slot(rank):
                try:
                    await fn(*args)
                except NamespaceTerminating as exc:  # its deletion's changes start the next pass
                    self.log.debug("not created, its namespace is being deleted: %s", exc)
                    return False
                except Conflict as exc:
                    self.log.info("deferred to the next pass: %s", exc)
                except TemporaryError as exc:
                    self.log.warning("write failed, retrying in the next pass: %s", exc)
                except Forbidden as exc:
                    self.log.error("write not allowed by the gatekeeper's RBAC, not retried: %s", exc)
                    return False
                except PermanentError as exc:
                    self.log.error("write refused, not retried: %s", exc)
                    return False
                else:
                    return True
            self.poke()
            return False

        return write

    async def pass_once(self) -> Decided:
        """One pass of the controller, with this loop's writer; objects it skipped are logged
        once, when they first appear."""
        self.passes += 1
        decided = await self.controller.reconcile_once(self.writer())
        at = decided.look_again
        self.look_again = (at - datetime.now(UTC)).total_seconds() if at is not None else None
        problems = set(decided.problems)
        for problem in sorted(problems - self._problems):
            self.log.warning("ignored: %s", problem)
        self._problems = problems
        return decided

    async def run(self) -> None:
        """Wait for the first lists, then run passes until cancelled (the informers run elsewhere)."""
        for inf in self.controller.informers:
            await inf.synced.wait()
        self.log.info("caches synced")
        last = float("-inf")
        while True:
            wait = self.resync if self.look_again is None else min(self.resync, max(0.0, self.look_again))
            with anyio.move_on_after(wait):
                await self._dirty.wait()
            await self._turn(last)
            if self.drain.stopping:
                await anyio.sleep_forever()  # the process is stopping: cancelled soon
            self._dirty, self._urgent = anyio.Event(), anyio.Event()
            last = anyio.current_time()
            cpu = time.process_time()
            try:
                with self.drain.in_flight():
                    await self.pass_once()
                self.gap = next_gap(
                    time.process_time() - cpu,
                    debounce=self.debounce,
                    min_interval=self.min_interval,
                    factor=self.cpu_factor,
                )
            except TemporaryError as exc:
                self.log.warning("pass failed, retrying: %s", exc)
                self._dirty.set()
                await anyio.sleep(max(exc.delay, 1.0))
