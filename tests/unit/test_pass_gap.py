"""``PassLoop``'s wait between passes: a second for most changes; for an urgent one (the
controller says which), a gap that follows what the last pass cost the process in CPU.

Why this exists: with a fixed second for every change (a churn of 20,000 pods
needed the pause), a group whose room was freed in a quiet pool waited up to a second for
a pass that costs milliseconds; with the short gap for every change, a scale-up's pod
updates ran 45 passes instead of 11.
"""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from gatekeeper.controller.informer import Informer
from gatekeeper.controller.loop import PassLoop, Write, next_gap
from gatekeeper.core.plugin.decided import Decided


@pytest.mark.parametrize(
    ("cpu", "gap"),
    [
        (0.0, 0.05),  # an idle pass: the debounce only
        (0.005, 0.05),
        (0.02, 0.12),
        (0.1, 0.6),
        (0.2, 1.0),  # a heavy pass: the full second
        (3.0, 1.0),
    ],
)
def test_the_gap_is_a_multiple_of_the_last_passs_cpu_between_the_debounce_and_the_second(
    cpu: float, gap: float
) -> None:
    assert next_gap(cpu, debounce=0.05, min_interval=1.0, factor=6.0) == pytest.approx(gap)


class Burner:
    """A controller whose pass burns ``cpu`` seconds of CPU and counts its passes; a pod
    deleted is urgent to it."""

    log = logging.getLogger("test")

    @staticmethod
    def urgent(plural: str, kind: str, obj: Any) -> bool:
        return plural == "pods" and kind == "DELETED"

    def __init__(self, cpu: float) -> None:
        self.cpu = cpu
        self.starts: list[float] = []
        self.informer = Informer(SimpleNamespace(), SimpleNamespace(plural="pods"))  # type: ignore[arg-type]
        self.informer.synced.set()

    @property
    def informers(self) -> list[Informer]:
        return [self.informer]

    async def reconcile_once(self, write: Write) -> Any:
        self.starts.append(anyio.current_time())
        end = time.process_time() + self.cpu
        while time.process_time() < end:
            pass
        return Decided()


POD = {"metadata": {"namespace": "ns", "name": "p"}}


async def between_passes(controller: Burner, *changes: tuple[float, str]) -> float:
    """Seconds from the first pass's start to the second's, the ``changes`` (a pause, then
    a change of that kind to a pod) seen right after the first pass."""
    loop = PassLoop(controller, resync=60.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        controller.informer._notify("MODIFIED", POD)
        with anyio.fail_after(10):
            while len(controller.starts) < 1:
                await anyio.sleep(0.01)
            for pause, kind in changes:
                await anyio.sleep(pause)
                controller.informer._notify(kind, POD)
            while len(controller.starts) < 2:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    return controller.starts[1] - controller.starts[0]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("cpu", "change", "least", "most"),
    [
        (0.0, "DELETED", 0.0, 0.5),  # urgent, after a light pass: at once
        (0.3, "DELETED", 0.95, 10.0),  # urgent, after a heavy pass: the full second
        (0.0, "MODIFIED", 0.95, 10.0),  # not urgent: the full second
    ],
)
async def test_an_urgent_change_after_a_light_pass_is_passed_on_at_once_and_anything_else_after_a_second(
    cpu: float, change: str, least: float, most: float
) -> None:
    between = await between_passes(Burner(cpu), (0.0, change))
    assert least <= between <= most, between


@pytest.mark.anyio
async def test_an_urgent_change_cuts_short_the_wait_for_a_change_that_was_not() -> None:
    between = await between_passes(Burner(0.0), (0.0, "MODIFIED"), (0.2, "DELETED"))
    assert 0.2 <= between <= 0.6, between
