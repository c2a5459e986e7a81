"""A stopping process lets the pass in flight finish and starts no other (``controller.drain``).

What a SIGTERM does to the process in a cluster is shown by ``tests/e2e/test_clean_stop.py``;
here the rule itself, on a ``PassLoop`` whose pass waits on a write the test controls.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from gatekeeper.controller.drain import Drain
from gatekeeper.controller.loop import PassLoop
from gatekeeper.core.plugin.decided import Decided

pytestmark = pytest.mark.anyio


class Slow:
    """A controller whose pass writes, then tells (as a pass's Events come last); the write
    takes ``write_seconds``."""

    log = logging.getLogger("gatekeeper.test")
    informers: tuple[Any, ...] = ()

    def __init__(self, write_seconds: float) -> None:
        self.write_seconds = write_seconds
        self.started = 0
        self.told = 0
        self.running = anyio.Event()

    async def reconcile_once(self, write: Any) -> Decided:
        self.started += 1
        self.running.set()
        await anyio.sleep(self.write_seconds)
        self.told += 1
        return Decided()


async def _stop_mid_pass(controller: Slow, within: float) -> tuple[bool, float]:
    drain = Drain()
    loop = PassLoop(controller, resync=60.0, min_interval=0.01, drain=drain)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        loop.poke()
        await controller.running.wait()
        loop.poke()  # a change while stopping: no second pass for it
        start = anyio.current_time()
        finished = await drain.stop(within)
        took = anyio.current_time() - start
        await anyio.sleep(0.2)
        tg.cancel_scope.cancel()
    return finished, took


async def test_the_pass_in_flight_finishes_and_no_other_starts() -> None:
    controller = Slow(write_seconds=0.3)
    finished, took = await _stop_mid_pass(controller, within=5.0)
    assert finished
    assert (controller.started, controller.told) == (1, 1)
    assert took < 1.0


async def test_a_pass_past_the_drain_time_is_cut_off() -> None:
    controller = Slow(write_seconds=30.0)
    finished, took = await _stop_mid_pass(controller, within=0.2)
    assert not finished
    assert (controller.started, controller.told) == (1, 0)
    assert took < 1.0


async def test_stopping_with_no_pass_in_flight_returns_at_once() -> None:
    drain = Drain()
    with anyio.fail_after(0.5):
        assert await drain.stop(10.0)
    with drain.in_flight():
        assert not await drain.stop(0.05)
    assert await drain.stop(0.05)
