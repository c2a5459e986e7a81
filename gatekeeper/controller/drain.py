"""A clean stop: no pass starts once the process is told to stop, and the passes in flight
finish their writes (bounded) before it goes.

Why this exists: a pass writes its records first, then lifts the groups' gates, and tells
each LWS last (its ``Admitted`` Events). A SIGTERM (a rollout, a node drain) that cancelled
the pass wherever it stood left groups admitted whose gates the next leader had to lift and
whose admission nobody ever announced: the next leader reads the record and has nothing to
say. ``app.run`` calls ``stop`` on the first SIGTERM or SIGINT and cancels everything once it
returns; each ``loop.PassLoop`` runs its passes inside ``in_flight``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio

__all__ = ["Drain"]


class Drain:
    """Counts the passes in flight; once ``stopping``, a loop starts none."""

    def __init__(self) -> None:
        self.stopping = False
        self._in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        """Around one pass."""
        if self._in_flight == 0:
            self._idle = anyio.Event()
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def stop(self, within: float) -> bool:
        """Start no more passes; wait up to ``within`` seconds for those in flight. True when
        none is left in flight."""
        self.stopping = True
        with anyio.move_on_after(within):
            await self._idle.wait()
        return self._in_flight == 0
