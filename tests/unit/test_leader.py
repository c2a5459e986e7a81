"""Leader election as client-go does it: judged by the local monotonic clock, never by the
holder's wall clock, and a leader that cannot renew stops before its Lease can be taken.

A fake ``Kube`` stands in for the API server: this tests the elector's timing rules.
"""

from __future__ import annotations

import copy
from typing import Any

import anyio
import pytest

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.leader import LeaderElector


class LeaseStore:
    """One Lease, with resourceVersions; ``hang`` makes every call block (a black hole)."""

    def __init__(self, spec: dict[str, Any] | None = None) -> None:
        self.lease: dict[str, Any] | None = (
            {"metadata": {"name": "l", "namespace": "ns", "resourceVersion": "1"}, "spec": spec}
            if spec
            else None
        )
        self.hang = False
        self.writes = 0

    async def _maybe_hang(self) -> None:
        if self.hang:
            await anyio.sleep_forever()

    async def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        await self._maybe_hang()
        if self.lease is None:
            raise k.Conflict("404: not found")
        return copy.deepcopy(self.lease)

    async def create(self, res: Any, obj: dict[str, Any]) -> dict[str, Any]:
        await self._maybe_hang()
        self.lease = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "1"}}
        self.writes += 1
        return copy.deepcopy(self.lease)

    async def replace(self, res: Any, obj: dict[str, Any]) -> dict[str, Any]:
        await self._maybe_hang()
        assert self.lease is not None
        if obj["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise k.Conflict("409: changed")
        version = str(int(self.lease["metadata"]["resourceVersion"]) + 1)
        self.lease = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}
        self.writes += 1
        return copy.deepcopy(self.lease)

    def renew_as_other(self) -> None:
        """The other replica renews: its record changes (whatever its clock says)."""
        assert self.lease is not None
        self.lease["spec"]["renewTime"] = "2001-01-01T00:00:00.000000Z"  # a clock years behind
        self.lease["spec"]["leaseTransitions"] = self.lease["spec"].get("leaseTransitions", 0) + 1
        self.lease["metadata"]["resourceVersion"] = str(int(self.lease["metadata"]["resourceVersion"]) + 1)


def elector(store: LeaseStore, identity: str = "me", **timing: float) -> LeaderElector:
    timing = {"lease_seconds": 1.5, "renew_deadline": 1.0, "retry_seconds": 0.1, **timing}
    return LeaderElector(store, namespace="ns", name="l", identity=identity, **timing)  # type: ignore[arg-type]


OTHER = {"holderIdentity": "other", "leaseDurationSeconds": 1, "renewTime": "2001-01-01T00:00:00.000000Z"}


@pytest.mark.anyio
async def test_a_challenger_does_not_take_a_lease_that_keeps_being_renewed_however_old_its_renew_time() -> (
    None
):
    """The holder's clock is years behind: by wall clock its Lease looks long expired."""
    store = LeaseStore(dict(OTHER))
    me = elector(store)
    for _ in range(15):  # 1.5 s, more than the lease's 1 s
        assert not await me.try_acquire_or_renew()
        store.renew_as_other()
        await anyio.sleep(0.1)
    assert store.lease is not None and store.lease["spec"]["holderIdentity"] == "other"


@pytest.mark.anyio
async def test_a_challenger_takes_a_lease_that_stood_still_for_its_duration_by_its_own_clock() -> None:
    store = LeaseStore(dict(OTHER))
    me = elector(store)
    assert not await me.try_acquire_or_renew(), "first sight: it has not stood still yet"
    await anyio.sleep(0.6)
    assert not await me.try_acquire_or_renew()
    await anyio.sleep(0.5)
    assert await me.try_acquire_or_renew()
    assert store.lease is not None and store.lease["spec"]["holderIdentity"] == "me"


@pytest.mark.anyio
async def test_a_leader_whose_renewals_hang_stops_leading_within_its_renew_deadline() -> None:
    """A black-holed connection: every call hangs. The leader must stop before a challenger
    could take the Lease (lease 1.5 s), not wait on the hung call for ever."""
    store = LeaseStore()
    me = elector(store)
    stopped_after: list[float] = []

    async def lead() -> None:
        began = anyio.current_time()
        store.hang = True
        try:
            await anyio.sleep_forever()
        finally:
            stopped_after.append(anyio.current_time() - began)

    with anyio.move_on_after(3):
        await me.run(lead)
    assert stopped_after, "the admission loop was never stopped"
    assert stopped_after[0] < 1.5, (
        f"stopped after {stopped_after[0]:.2f}s, not before the lease could be taken"
    )


def test_timing_that_could_overlap_is_refused() -> None:
    with pytest.raises(ValueError, match="renew_deadline"):
        elector(LeaseStore(), renew_deadline=2.0)


@pytest.mark.anyio
async def test_a_leader_paused_past_its_deadline_may_not_write_before_its_loop_is_stopped() -> None:
    """SIGSTOP: the clock jumps past the renew deadline while nothing ran. On waking, the
    admission loop may run before the elector notices; the fence must already say no."""
    now = [100.0]
    store = LeaseStore()
    me = elector(store, clock=lambda: now[0])
    seen: list[bool] = []

    async def lead() -> None:
        seen.append(me.may_write())
        now[0] += 1.0  # paused for the whole renew deadline
        seen.append(me.may_write())
        await anyio.sleep_forever()

    with anyio.move_on_after(0.5):
        await me.run(lead)
    assert seen[:2] == [True, False]  # (then it stepped down and, alone, led again)


class NoApi:
    """An API client that must not be called."""

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a write was sent past the fence")


@pytest.mark.anyio
async def test_a_fenced_kube_sends_no_write_once_the_fence_says_no() -> None:
    kube = k.Kube(NoApi(), credentials=object()).fenced(lambda: False)  # type: ignore[arg-type]
    pod = {"metadata": {"name": "p", "namespace": "ns"}}
    with pytest.raises(k.NotLeading):
        await kube.create(r.LEASES, pod)
    with pytest.raises(k.NotLeading):
        await kube.delete(r.LEASES, "p", "ns", uid="u")
    with pytest.raises(AssertionError, match="past the fence"):  # reads are not fenced
        await kube.get(r.LEASES, "p", "ns")


@pytest.mark.anyio
async def test_a_write_is_abandoned_if_the_fence_closes_before_it_goes_on_the_wire() -> None:
    """The fence passed when the call began, then the process was paused (the connection
    was still being opened): the request must not reach the server when it wakes."""
    import httpx
    from aiohttp import web

    received: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        received.append(request.method)
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        answers = iter([False])  # the check at the top passed already; now it says no
        trace = k.fence_trace(lambda: next(answers, False), "POST pods")
        async with httpx.AsyncClient() as client:
            with pytest.raises(k.NotLeading):
                await client.post(f"http://127.0.0.1:{port}/x", content=b"{}", extensions={"trace": trace})
            await client.post(f"http://127.0.0.1:{port}/y", content=b"{}")  # unfenced: sent
    finally:
        await runner.cleanup()
    assert received == ["POST"], "only the unfenced request reached the server"
