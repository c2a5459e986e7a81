"""The hub's controller and a member's hub link against a fake Kube: a stale cache never
frees capacity twice, a grant of unknown fate is read back, an unconnected hub is unreachable."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from reservation_builders import claim, reservation
from test_loops import FakeKube, fill, loop_of

from gatekeeper.controller import resources as r
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.errors import Conflict, TemporaryError
from gatekeeper.controller.hub import HubController
from gatekeeper.controller.hub_link import HubLink
from gatekeeper.core.reservation.unsure import FENCE_ANNOTATION


class ReadBack(FakeKube):
    """A FakeKube whose ``get`` answers with what the API server holds now."""

    def __init__(self, held: dict[str, dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.held = held

    async def get(self, res: r.Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        if name not in self.held:
            raise Conflict("not found")
        return self.held[name]


def grants(kube: FakeKube) -> list[str]:
    return [
        name
        for verb, plural, name, body in kube.writes
        if verb == "patch_status" and plural == "reservationclaims" and body["status"]["state"] == "Granted"
    ]


@pytest.mark.anyio
async def test_a_grant_the_cache_does_not_show_yet_still_holds() -> None:
    kube = FakeKube()
    hub = HubController(kube, Caches(None))  # type: ignore[arg-type]
    fill(hub.reservations, reservation(capacity={"nvidia.com/gpu": 2}))
    fill(hub.claims, claim("a", gpus=2), claim("b", gpus=2, created="2026-02-01T00:00:00Z"))
    loop = loop_of(hub)
    await loop.pass_once()
    assert grants(kube) == ["a"]
    # The cache still shows "a" Pending at the version decided on, and an urgent claim comes:
    # it must not get the place "a" holds (that would be 4 GPUs granted of 2).
    fill(hub.claims, claim("urgent", gpus=2, priority=1000))
    await loop.pass_once()
    assert grants(kube) == ["a"]
    # The member gives "a" back (the cache shows it gone): now "b" is granted.
    del hub.claims.objects[("lws-gatekeeper-member-cluster-a", "a")]
    await loop.pass_once()
    assert grants(kube) == ["a", "urgent"]


@pytest.mark.anyio
async def test_claims_are_written_in_their_members_namespace_and_counted_only_there() -> None:
    """Each member's claims are in its own namespace on the hub (RBAC bound there): the hub
    writes each claim where it is, and a claim of cluster-a made in cluster-b's namespace
    (RBAC bound to the wrong member) is never granted: it is told why."""
    kube = FakeKube()
    hub = HubController(kube, Caches(None))  # type: ignore[arg-type]
    fill(hub.reservations, reservation(capacity={"nvidia.com/gpu": 8}))
    astray = claim("astray", gpus=2)
    astray["metadata"]["namespace"] = "lws-gatekeeper-member-cluster-b"
    fill(hub.claims, claim("a", gpus=2), claim("b", cluster="cluster-b", gpus=2), astray)
    await loop_of(hub).pass_once()
    assert sorted(grants(kube)) == ["a", "b"]
    assert sorted(w for w in kube.where if w[0] == "patch_status" and w[1] is not None) == [
        ("patch_status", "lws-gatekeeper-member-cluster-a", "a"),
        ("patch_status", "lws-gatekeeper-member-cluster-b", "astray"),
        ("patch_status", "lws-gatekeeper-member-cluster-b", "b"),
    ]
    [told] = [body for verb, _, name, body in kube.writes if verb == "patch_status" and name == "astray"]
    assert "counts only in namespace lws-gatekeeper-member-cluster-a" in told["status"]["message"], told


@pytest.mark.anyio
async def test_a_grant_of_unknown_fate_holds_until_read_back() -> None:
    pending = claim("a", gpus=2)
    kube = ReadBack({"a": pending}, fail={"patch_status reservationclaims": TemporaryError("timeout")})
    hub = HubController(kube, Caches(None))  # type: ignore[arg-type]
    fill(hub.reservations, reservation(capacity={"nvidia.com/gpu": 2}))
    fill(hub.claims, pending, claim("b", gpus=2, created="2026-02-01T00:00:00Z"))
    loop = loop_of(hub)
    await loop.pass_once()
    # Read back: "a" is still Pending at the same version, so the write never applied; it is
    # decided again (first in the queue), never "b" in its place.
    kube.fail = {}
    await loop.pass_once()
    assert grants(kube) == ["a", "a"]


class LateGrants(FakeKube):
    """The hub's API server as far as claims go: each write is guarded by the
    resourceVersion it carries and gives the claim a new one. A grant sent while ``late`` is
    not answered (the client times out) but kept, and lands when the test says so, as a
    request queued past the client's deadline does."""

    def __init__(self, *claims: dict[str, Any]) -> None:
        super().__init__()
        self.store = {c["metadata"]["name"]: copy.deepcopy(c) for c in claims}
        self.version = 100
        self.late = False
        self.in_flight: list[tuple[str, dict[str, Any], str | None]] = []

    def _apply(self, name: str, change: dict[str, Any], guard: str | None) -> dict[str, Any]:
        held = self.store.get(name)
        if held is None:
            raise Conflict("not found")
        if guard is not None and guard != held["metadata"]["resourceVersion"]:
            raise Conflict(
                f"the object has been modified (at {held['metadata']['resourceVersion']}, not {guard})"
            )
        for key, value in change.items():
            merged = {**held.get(key, {}), **value}
            if key == "metadata":
                merged["annotations"] = {
                    **held["metadata"].get("annotations", {}),
                    **value.get("annotations", {}),
                }
            held[key] = merged
        self.version += 1
        held["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(held)

    async def get(self, res: r.Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        if name not in self.store:
            raise Conflict("not found")
        return copy.deepcopy(self.store[name])

    async def patch_status(
        self,
        res: r.Resource,
        name: str,
        namespace: str | None,
        status: Any,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        self._record("patch_status", res, name, {"status": status, "guard": resource_version})
        if self.late and status.get("state") == "Granted":
            self.in_flight.append((name, {"status": dict(status)}, resource_version))
            raise TemporaryError("context deadline exceeded")
        return self._apply(name, {"status": dict(status)}, resource_version)

    async def merge_patch(
        self, res: r.Resource, name: str, namespace: str | None, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self._record("merge_patch", res, name, patch)
        guard = patch.get("metadata", {}).get("resourceVersion")
        body = {"metadata": {k: v for k, v in patch.get("metadata", {}).items() if k != "resourceVersion"}}
        return self._apply(name, body, guard)

    def land(self) -> list[str]:
        """The requests that sat past their deadline reach etcd now: what each one did."""
        done = []
        for name, change, guard in self.in_flight:
            try:
                self._apply(name, change, guard)
                done.append(f"{name}: applied")
            except Conflict:
                done.append(f"{name}: refused")
        self.in_flight = []
        return done

    def granted(self) -> list[str]:
        return sorted(n for n, c in self.store.items() if c.get("status", {}).get("state") == "Granted")


def waiting(name: str) -> dict[str, Any]:
    """A 2-GPU claim already told what it is told again while it waits behind 2 GPUs held
    (so no message write moves its resourceVersion by chance)."""
    obj = claim(name, gpus=2)
    obj["status"] = {
        "state": "Pending",
        "reason": "WaitingForCapacity",
        "message": "needs 2 nvidia.com/gpu; 0 of 2 nvidia.com/gpu free",
    }
    return obj


def late_hub(*claims: dict[str, Any]) -> tuple[LateGrants, HubController, Any]:
    """A hub of a 2-GPU Reservation over ``LateGrants`` holding ``claims``, its cache filled."""
    api = LateGrants(*claims)
    hub = HubController(api, Caches(None))  # type: ignore[arg-type]
    fill(hub.reservations, reservation(capacity={"nvidia.com/gpu": 2}))
    fill(hub.claims, *claims)
    return api, hub, loop_of(hub)


@pytest.mark.anyio
async def test_a_grant_that_lands_after_its_timeout_cannot_over_commit() -> None:
    """The race the read-back alone leaves open: a grant of "a" times out but is still
    queued in the API server; the hub reads "a" back, still Pending at the version it decided
    on, and gives the room to an urgent claim; then the queued grant lands. Without a fence
    both are Granted: 4 GPUs of 2. ("a" waited before, in the words it is told again, so
    no message write moves it past that version by chance.)"""
    api, hub, loop = late_hub(waiting("a"))
    api.late = True
    await loop.pass_once()
    assert grants(api) == ["a"] and api.granted() == []  # sent, unanswered, not applied yet
    api.late = False
    # An urgent claim comes; the cache still shows "a" Pending at the version decided on.
    urgent = claim("urgent", gpus=2, priority=1000, cluster="cluster-b")
    api.store["urgent"] = copy.deepcopy(urgent)
    fill(hub.claims, urgent)
    await loop.pass_once()
    assert api.granted() == ["urgent"], "the read-back found a not granted: the room went to urgent"
    assert api.land() == ["a: refused"], "the fence moved a past the version its grant was guarded by"
    assert api.granted() == ["urgent"], "never more granted than the Reservation holds"
    # The cache catches up: "a" is Pending at its new version, and waits behind urgent.
    fill(hub.claims, *(copy.deepcopy(c) for c in api.store.values()))
    await loop.pass_once()
    assert api.granted() == ["urgent"]


@pytest.mark.anyio
async def test_a_fence_that_gets_no_answer_keeps_the_room_held() -> None:
    api, hub, loop = late_hub(claim("a", gpus=2))
    api.late = True
    await loop.pass_once()
    api.late = False
    api.fail = {"merge_patch reservationclaims": TemporaryError("connection reset by peer")}
    urgent = claim("urgent", gpus=2, priority=1000, cluster="cluster-b")
    api.store["urgent"] = copy.deepcopy(urgent)
    fill(hub.claims, urgent)
    await loop.pass_once()
    assert api.granted() == [], "the fence's fate is unknown too: a still holds the room"
    assert api.land() == ["a: applied"] and api.granted() == ["a"]
    fill(hub.claims, *(copy.deepcopy(c) for c in api.store.values()))
    api.fail = {}
    await loop.pass_once()
    assert api.granted() == ["a"], "the late grant counted: urgent waits"


@pytest.mark.anyio
async def test_a_new_term_fences_what_the_last_term_may_have_granted() -> None:
    """The last leader sent a grant of "a" just before it stopped; the request is still on
    its way. The new leader lists "a" Pending and an urgent claim: its first pass fences
    "a" before anything is granted, so the late grant is refused when it lands."""
    api, _, loop = late_hub(waiting("a"), claim("urgent", gpus=2, priority=1000, cluster="cluster-b"))
    api.in_flight.append(("a", {"status": {"state": "Granted", "reason": "Granted"}}, "7"))
    await loop.pass_once()
    assert api.granted() == ["urgent"]
    assert api.land() == ["a: refused"] and api.granted() == ["urgent"]


@pytest.mark.anyio
async def test_a_new_term_grants_in_its_first_pass_at_the_fenced_version() -> None:
    """Fencing costs a write per Pending claim, not a pass: the grant that follows in the
    same pass is guarded by the version the fence gave, so it applies."""
    api, _, loop = late_hub(claim("a", gpus=2))
    await loop.pass_once()
    assert [v for v, p, n in api.verbs() if p == "reservationclaims"] == ["merge_patch", "patch_status"]
    assert api.granted() == ["a"], "granted in the term's first pass"
    assert FENCE_ANNOTATION in api.store["a"]["metadata"]["annotations"]


@pytest.mark.anyio
async def test_a_hub_not_connected_is_unreachable_and_says_why() -> None:
    async def never() -> Any:
        raise OSError("connection refused")

    link = HubLink(never, "cluster-a")
    view = link.view()
    assert not view.reachable and view.unreachable_since is not None
    assert view.error == "not connected yet"


@pytest.mark.anyio
async def test_a_reservation_it_cannot_read_says_why_and_grants_nothing() -> None:
    kube = FakeKube()
    hub = HubController(kube, Caches(None))  # type: ignore[arg-type]
    fill(hub.reservations, reservation(capacity={"nvidia.com/gpu": "1" * 60}))
    fill(hub.claims, claim("a", gpus=1))
    await loop_of(hub).pass_once()
    assert grants(kube) == []
    (status,) = [b["status"] for v, p, n, b in kube.writes if p == "reservations"]
    assert status["conditions"][0]["status"] == "False" and "40 digits" in status["conditions"][0]["message"]
    (said,) = [b["status"] for v, p, n, b in kube.writes if (v, p) == ("patch_status", "reservationclaims")]
    assert said["reason"] == "ReservationInvalid"


@pytest.mark.anyio
async def test_a_give_back_whose_delete_failed_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim of this cluster that no group wants, Granted on the hub: the member deletes it,
    and the hub goes away mid-request (the delete never applied). Once the hub answers again
    the claim must be deleted again: left alone, it would hold its room in the Reservation for
    the rest of the term while no group runs on it (and the group, were it wanted again, could
    never be admitted: the claim is skipped as given back, and a new one is refused as a name
    taken)."""
    from test_hub_member import claim_of, scene
    from test_hub_member import hub as hub_view

    from gatekeeper.controller import hub_link
    from gatekeeper.core.backends.pools import decide
    from gatekeeper.core.backends.pools.hub_member import charge_reservations

    kube = FakeKube(fail={"delete reservationclaims": TemporaryError("connection reset by peer")})

    async def connect() -> Any:
        return kube

    link = HubLink(connect, "cluster-a")
    link.kube = kube  # type: ignore[assignment]
    unwanted = claim_of(5, "Granted")  # group 5 of an LWS of 3 replicas: no group wants it
    fill(link.claims, unwanted)
    fill(link.reservations, *hub_view(unwanted).reservations.values())
    for inf in link.informers:
        inf.synced.set()
    snap = scene()

    async def write(fn: Any, *args: Any) -> None:
        await fn(*args)

    def deletes() -> tuple[tuple[str, str], ...]:
        _, writes = charge_reservations(decide(snap), snap, link.view())
        return writes.delete

    name = unwanted["metadata"]["name"]
    assert deletes() == ((name, "c5"),)
    with pytest.raises(TemporaryError):
        await link.execute(hub_link.ClaimWrites(delete=deletes()), write)
    kube.fail = {}
    monkeypatch.setattr(hub_link, "WRITE_FAILURE_SECONDS", 0.0)  # the failure is long past
    assert link.view().reachable
    assert deletes() == ((name, "c5"),)  # still on the hub: given back again
    await link.execute(hub_link.ClaimWrites(delete=deletes()), write)
    assert [v for v, p, n in kube.verbs() if p == "reservationclaims"] == ["delete", "delete"]
    # Deleted for sure now, the cache not showing it yet: not sent a third time.
    assert deletes() == ()


@pytest.mark.anyio
async def test_a_member_tries_the_hub_again_at_least_every_five_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hub down for a minute: the member's caches of it list again at most RELIST_SECONDS
    apart (the informers' usual pauses double to 30 s, and the hub was found back up to 30 s
    after it returned)."""
    from gatekeeper.controller import hub_link
    from gatekeeper.controller import informer as informer_module

    async def never() -> Any:
        raise OSError("connection refused")

    link = HubLink(never, "cluster-a")
    pauses: list[float] = []

    async def down() -> str:
        raise TemporaryError("connection refused")

    async def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 8:
            raise RuntimeError("enough")

    monkeypatch.setattr(informer_module.anyio, "sleep", pause)
    inf = link.claims
    monkeypatch.setattr(inf, "_list", down)
    with pytest.raises(RuntimeError, match="enough"):
        await inf.run()
    assert pauses == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0]
    assert all(i.max_backoff == hub_link.RELIST_SECONDS == 5.0 for i in link.informers)
