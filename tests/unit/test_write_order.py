"""The order a pass's writes go out in: a group's chain first, Events last.

A fake ``Kube`` that answers each write after a yield stands in for the API server: this
tests the order ``act.execute`` and the loop's ``Slots`` let writes through, not what the
API server does with them.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from gatekeeper.controller.act import execute
from gatekeeper.controller.loop import PassLoop, Slots
from gatekeeper.core.writes.plan import Event, Memory, Op, Plan, Write
from gatekeeper.metrics import WRITES


class OrderKube:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def _answer(self, name: str) -> dict[str, Any]:
        self.sent.append(name)
        await anyio.lowlevel.checkpoint()
        return {"metadata": {"name": name, "resourceVersion": "1", "uid": "u"}}

    async def create(self, _res: Any, body: Any) -> dict[str, Any]:
        return await self._answer(body["metadata"]["name"])

    async def patch_status(self, _res: Any, name: str, *_a: Any, **_k: Any) -> dict[str, Any]:
        return await self._answer(f"admit {name}")

    async def json_patch(self, _res: Any, name: str, *_a: Any) -> dict[str, Any]:
        return await self._answer(f"ungate {name}")

    async def event(self, about: Any, *, reason: str, message: str, warning: bool = False) -> None:
        await self._answer(f"event {message}")


def group(n: int) -> Write:
    told = Write(Op.EVENT, "events", "team", "", Event("Admitted", f"g{n}"))
    ungate = Write(Op.JSON_PATCH, "pods", "team", f"g{n}-0", [], tag="ungate")
    admit = Write(Op.MERGE_STATUS, "groupadmissions", "team", f"g{n}", {}, then=(ungate, told))
    body = {"metadata": {"name": f"g{n}"}}
    return Write(Op.CREATE, "groupadmissions", "team", f"g{n}", body, then=(admit,))


class Quiet:
    log = logging.getLogger("test.write_order")
    informers: tuple[()] = ()


@pytest.mark.anyio
async def test_a_groups_admission_and_gates_overtake_the_records_still_to_be_made() -> None:
    kube = OrderKube()
    plan: Plan = (tuple(group(n) for n in range(4)),)
    write = PassLoop(Quiet(), concurrency=1).writer()  # type: ignore[arg-type]
    await execute(kube, plan, write, Memory())  # type: ignore[arg-type]
    at = kube.sent.index
    # First come, first served would make all four records before admitting any group.
    # A write's follow-ups are queued when it ends, so they overtake from the next slot on.
    assert at("admit g0") < at("g2") and at("ungate g0-0") < at("g2")
    assert at("admit g1") < at("g2") and at("ungate g1-0") < at("g2")
    # The four groups' Events are about one LWS for one reason: one Event tells them all.
    assert kube.sent[-1] == "event g0; g1; g2; g3"
    assert not any(sent.startswith("event") for sent in kube.sent[:-1])


@pytest.mark.anyio
async def test_events_wait_for_every_stage_but_a_failed_write_earns_none() -> None:
    kube = OrderKube()
    failing = Write(Op.CREATE, "groupadmissions", "team", "bad", {"metadata": {"name": "bad"}})
    told = Write(Op.EVENT, "events", "team", "", Event("Admitted", "never"))
    plan: Plan = ((group(0), replace(failing, then=(told,))), (group(1),))

    async def write(fn: Any, *args: Any, rank: int = 0) -> bool:
        if args[1].name == "bad":
            return False
        await fn(*args)
        return True

    await execute(kube, plan, write, Memory())  # type: ignore[arg-type]
    assert kube.sent[-1] == "event g0; g1", "Events come after the last stage"
    assert "event never" not in kube.sent


@pytest.mark.anyio
async def test_slots_let_the_lowest_rank_in_first_then_the_earliest() -> None:
    slots, order = Slots(1), []

    async def take(name: str, rank: int, hold: anyio.Event | None = None) -> None:
        async with slots.slot(rank):
            order.append(name)
            if hold is not None:
                await hold.wait()

    hold = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(take, "holder", 0, hold)
        await anyio.sleep(0.01)
        for name, rank in [("a", 0), ("deep", -1), ("b", 0), ("deeper", -2)]:
            tg.start_soon(take, name, rank)
            await anyio.sleep(0.01)
        hold.set()
    assert order == ["holder", "deeper", "deep", "a", "b"]


@pytest.mark.anyio
async def test_a_waiter_cancelled_takes_no_slot_and_keeps_none() -> None:
    slots, order = Slots(1), []
    hold = anyio.Event()

    async def take(name: str, hold: anyio.Event | None = None) -> None:
        async with slots.slot():
            order.append(name)
            if hold is not None:
                await hold.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(take, "holder", hold)
        await anyio.sleep(0.01)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as inner:
                inner.start_soon(take, "cancelled")
                await anyio.sleep(0.01)
                scope.cancel()
        tg.start_soon(take, "after")
        await anyio.sleep(0.01)
        hold.set()
    assert order == ["holder", "after"]
    assert slots.free == 1, "every slot is back"


@pytest.mark.anyio
async def test_each_write_that_went_through_is_counted_by_what_it_was_for() -> None:
    def seen(resource: str, purpose: str) -> float:
        return WRITES.labels(resource, purpose)._value.get()

    before = {k: seen(*k) for k in (("pods", "ungate"), ("groupadmissions", "create"), ("events", "event"))}
    write = PassLoop(Quiet(), concurrency=2).writer()  # type: ignore[arg-type]
    await execute(OrderKube(), (tuple(group(n) for n in range(3)),), write, Memory())  # type: ignore[arg-type]
    assert {k: seen(*k) - v for k, v in before.items()} == {
        ("pods", "ungate"): 3,
        ("groupadmissions", "create"): 3,
        ("events", "event"): 1,  # the three groups' Events, about one LWS, told as one
    }
