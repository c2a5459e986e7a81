"""The member side of a shared Reservation (``core.backends.pools.hub_member``): admitted only once granted,
a claim per group that passes its local checks, given back when it cannot run here."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from core_builders import gpu_nodes, lws, lws_pod, lws_statefulsets, pool, read_pools, record
from reservation_builders import reservation

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools import Snapshot, decide
from gatekeeper.core.backends.pools.hub_member import HubView, charge_reservations
from gatekeeper.core.reservation import asked_of, claim_name, member_namespace, status_body
from gatekeeper.core.reservation import decide as ledger

POOL = "on-demand"
RES = "p5-odcr"
UID = "uid-vllm"


def scene(replicas: int = 3, records: list[dict[str, Any]] | None = None, reserved: bool = True) -> Snapshot:
    the_lws = lws("vllm").pool(POOL).uid(UID).size(2).replicas(replicas).worker(gpu_limit=1).obj()
    p = pool(POOL).quota(gpu=4).obj()
    if reserved:
        p["spec"]["reservation"] = RES
    pods = [lws_pod("vllm", g, w, pool=POOL) for g in range(replicas) for w in range(2)]

    return Snapshot(
        lwss=[the_lws],
        pods=pods,
        bound_pods=[],
        nodes=gpu_nodes(4, pool=POOL),
        pools=read_pools([p]),
        records=records if records is not None else [record(the_lws, g) for g in range(replicas)],
        statefulsets=lws_statefulsets([the_lws], pods),
    )


def claim_of(group: int, state: str | None = None, cluster: str = "cluster-a") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "name": claim_name(cluster, "default", "vllm", UID, group),
            "namespace": member_namespace(cluster),
            "uid": f"c{group}",
            "resourceVersion": "1",
        },
        "spec": {
            "reservation": RES,
            "cluster": cluster,
            "namespace": "default",
            "leaderWorkerSet": "vllm",
            "leaderWorkerSetUID": UID,
            "groupIndex": group,
            "demand": {"nvidia.com/gpu": "2"},
        },
    }
    if state:
        obj["status"] = {"state": state, "reason": "Granted" if state == "Granted" else "WaitingForCapacity"}
    return obj


def hub(*claims: dict[str, Any], reachable: bool = True) -> HubView:
    res = reservation(RES, capacity={"nvidia.com/gpu": 4})
    decided = ledger(res, list(claims))
    assert decided.status is not None
    res["status"] = status_body(decided.status)
    return HubView(
        cluster="cluster-a",
        reachable=reachable,
        claims=list(claims),
        reservations={RES: res},
        unreachable_since=datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
        error="connection refused",
    )


def test_a_pool_without_reservation_is_left_alone() -> None:
    snap = scene(reserved=False)
    actions = decide(snap)
    after, writes = charge_reservations(actions, snap, hub())
    assert after == actions and writes.create == () and writes.delete == ()


def test_groups_that_fit_locally_get_claims_and_wait_for_the_grant() -> None:
    snap = scene()
    after, writes = charge_reservations(decide(snap), snap, hub())
    assert after.admit == ()
    assert [w.reason for w in after.waiting if w.reason is Reason.WAITING_FOR_RESERVATION] == [
        Reason.WAITING_FOR_RESERVATION
    ] * 2
    assert sorted(c["spec"]["groupIndex"] for c in writes.create) == [0, 1]  # group 2 fails locally
    assert all(c["spec"]["cluster"] == "cluster-a" and c["spec"]["reservation"] == RES for c in writes.create)


def test_granted_groups_are_admitted_pending_ones_wait_in_words() -> None:
    snap = scene()
    other = claim_of(0, "Granted", cluster="cluster-b")
    after, writes = charge_reservations(
        decide(snap), snap, hub(claim_of(0, "Granted"), claim_of(1, "Pending"), other)
    )
    assert [a.group.key.index for a in after.admit] == [0]
    (said,) = [w for w in after.waiting if w.reason is Reason.WAITING_FOR_RESERVATION]
    assert said.message == (
        "group 1 waits for reservation p5-odcr on the hub: 0 of 4 nvidia.com/gpu free "
        "(cluster-a holds 2, cluster-b 2)"
    )
    assert writes.create == () and writes.delete == ()  # another cluster's claim is never touched


def test_a_claim_the_hub_has_not_judged_gives_no_numbers() -> None:
    snap = scene()
    after, _ = charge_reservations(
        decide(snap), snap, hub(claim_of(0, "Granted", cluster="cluster-b"), claim_of(1))
    )
    said = {w.group.key.index: w.message for w in after.waiting if w.reason is Reason.WAITING_FOR_RESERVATION}
    assert said[1] == "group 1 waits for reservation p5-odcr on the hub: its claim is not decided yet"


def test_a_granted_claim_whose_group_cannot_run_here_is_given_back() -> None:
    snap = scene()
    after, writes = charge_reservations(decide(snap), snap, hub(claim_of(2, "Granted")))
    assert writes.delete == ((claim_of(2)["metadata"]["name"], "c2"),)
    assert 2 not in [a.group.key.index for a in after.admit]


def test_an_admitted_group_keeps_its_claim_and_a_released_one_gives_it_back() -> None:
    the_lws = lws("vllm").pool(POOL).uid(UID).size(2).replicas(1).worker(gpu_limit=1).obj()
    records = [record(the_lws, 0, admitted=True, pool=POOL)]
    snap = scene(replicas=1, records=records)
    _, writes = charge_reservations(decide(snap), snap, hub(claim_of(0, "Granted"), claim_of(5, "Granted")))
    assert writes.delete == ((claim_of(5)["metadata"]["name"], "c5"),)


@pytest.mark.parametrize("leader_left", [True, False], ids=["its-leader-terminates", "its-pods-gone"])
def test_a_given_back_group_keeps_its_claim_while_its_pods_terminate(leader_left: bool) -> None:
    """Given back (its own pod not as admitted, or past its Pool's admission timeout), a group
    whose let-through leader still terminates holds its demand here and its claim on the
    hub: no other cluster is granted that room before its pods are gone."""
    the_lws = lws("vllm").pool(POOL).uid(UID).size(2).replicas(1).worker(gpu_limit=1).obj()
    given = record(the_lws, 0, admitted=False, pool=POOL)
    given["status"]["conditions"][0].update(reason="NotAsAdmitted", message="given back")
    given["status"].update(retryAt="2999-01-01T00:00:00Z", retries=1, demand={"nvidia.com/gpu": "2"}, pods=2)
    snap = scene(replicas=1, records=[given])
    leader = lws_pod("vllm", 0, 0, pool=POOL, gated=False, node_name="n0", phase="Running")
    leader["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    pods = [leader, snap.pods[1]] if leader_left else [snap.pods[1]]
    snap = replace(
        snap,
        pods=pods,
        bound_pods=[leader] if leader_left else [],
        statefulsets=lws_statefulsets(list(snap.lwss), pods),
        now=datetime(2026, 12, 1, tzinfo=UTC),
    )
    _, writes = charge_reservations(decide(snap), snap, hub(claim_of(0, "Granted")))
    assert writes.delete == (() if leader_left else ((claim_of(0)["metadata"]["name"], "c0"),))


def test_hub_unreachable_new_groups_wait_and_nothing_is_written() -> None:
    snap = scene()
    after, writes = charge_reservations(decide(snap), snap, hub(claim_of(0, "Granted"), reachable=False))
    assert after.admit == () and writes.create == () and writes.delete == ()
    reasons = {w.group.key.index: (w.reason, w.message) for w in after.waiting}
    assert reasons[0][0] is Reason.HUB_UNREACHABLE
    assert "since 2026-01-01T12:00:00Z" in reasons[0][1] and "connection refused" in reasons[0][1]


def test_hub_unreachable_admitted_groups_still_let_their_later_pods_through() -> None:
    the_lws = lws("vllm").pool(POOL).uid(UID).size(2).replicas(1).worker(gpu_limit=1).obj()
    snap = scene(replicas=1, records=[record(the_lws, 0, admitted=True, pool=POOL)])
    actions = decide(snap)
    after, _ = charge_reservations(actions, snap, hub(reachable=False))
    assert after.ungate == actions.ungate and len(after.ungate) == 2


def test_without_a_hub_a_reservation_pool_admits_nothing_new() -> None:
    snap = scene()
    no_hub = HubView(cluster="", reachable=False, error="this gatekeeper runs without --hub-kubeconfig")
    after, writes = charge_reservations(decide(snap), snap, no_hub)
    assert after.admit == () and writes.create == () and writes.delete == ()
    said = {w.group.key.index: w.message for w in after.waiting if w.reason is Reason.HUB_UNREACHABLE}
    assert said[0] == (
        "group 0 waits for reservation p5-odcr: no hub to charge it on "
        "(this gatekeeper runs without --hub-kubeconfig)"
    )


def test_the_pool_status_counts_groups_that_wait_for_the_hub_as_waiting() -> None:
    snap = scene()
    before = decide(snap)
    after, _ = charge_reservations(before, snap, hub(claim_of(0, "Granted")))
    st, was = after.pools[POOL], before.pools[POOL]
    assert (was.admitted, st.admitted) == (2, 1)
    assert st.waiting == was.waiting + 1
    assert st.used["nvidia.com/gpu"] == 2 and st.free["nvidia.com/gpu"] == 2


def test_a_claim_given_back_is_never_admitted_on_while_the_cache_still_shows_it() -> None:
    snap = scene()
    granted = claim_of(0, "Granted")
    view = hub(granted)
    after, writes = charge_reservations(decide(snap), snap, replace(view, given_back=frozenset({"c0"})))
    assert 0 not in [a.group.key.index for a in after.admit]
    assert sorted(c["spec"]["groupIndex"] for c in writes.create) == [
        0,
        1,
    ]  # asked again (409 if still there)


@pytest.mark.parametrize(
    ("undeleted", "deleted_again"),
    [
        (frozenset(), False),  # its delete applied: the cache is only late
        (frozenset({"c0"}), True),  # its delete failed without an answer: sent again
    ],
)
def test_a_claim_given_back_is_deleted_again_only_while_its_delete_may_not_have_applied(
    undeleted: frozenset[str], deleted_again: bool
) -> None:
    snap = scene(replicas=1, records=[])  # group 0 fits locally, but its claim was given back
    view = replace(hub(claim_of(0, "Granted")), given_back=frozenset({"c0"}), undeleted=undeleted)
    after, writes = charge_reservations(decide(snap), snap, view)
    assert after.admit == ()  # never admitted on, either way
    name = claim_name("cluster-a", "default", "vllm", UID, 0)
    assert ((name, "c0") in writes.delete) is deleted_again
    other = replace(view, cluster="cluster-b")  # never another cluster's
    assert charge_reservations(decide(snap), snap, other)[1].delete == ()


# ----- the hub asks a claim back --------------------------------------------------------


ASKED = "asked back for a claim of priority 1000 (its own: 0)"


def _asked(group: int) -> dict[str, Any]:
    obj = claim_of(group, "Granted")
    obj["status"].update(
        reason="GiveBackRequested", message="asked back for a claim of priority 1000 (its own: 0)"
    )
    return obj


def _admitted_scene() -> Snapshot:
    """Group 0 admitted and running on its granted claim; group 1 waits."""
    the_lws = lws("vllm").pool(POOL).uid(UID).size(2).replicas(2).worker(gpu_limit=1).obj()
    snap = scene(replicas=2)
    pods = [
        lws_pod("vllm", 0, w, pool=POOL, gated=False, node_name=f"n{w}", phase="Running") for w in range(2)
    ]
    pods += [lws_pod("vllm", 1, w, pool=POOL) for w in range(2)]
    rec = record(the_lws, 0, admitted=True, pool=POOL, demand={"nvidia.com/gpu": "2"}, pods=2)
    rec["metadata"]["resourceVersion"] = "r0"
    return replace(
        snap,
        pods=pods,
        bound_pods=[p for p in pods if p["spec"].get("nodeName")],
        records=[rec, record(the_lws, 1)],
        statefulsets=lws_statefulsets([the_lws], pods),
        now=datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
    )


def test_a_group_whose_claim_the_hub_asks_back_is_given_back_whole() -> None:
    snap = _admitted_scene()
    view = hub(_asked(0))
    snap = replace(snap, asked_back=asked_of(view.claims, "cluster-a"))
    actions = decide(snap)
    [give] = actions.give_back
    assert (give.group.key.index, give.reason, give.pods) == (0, Reason.PREEMPTED, ("vllm-0", "vllm-0-1"))
    assert give.message.startswith("group 0 was preempted: the hub asked its claim back (asked back for")
    assert not any(a.group.key.index == 0 for a in actions.admit)
    _, writes = charge_reservations(actions, snap, view)
    assert writes.delete == (), "the claim holds while the group's pods live"


def test_asked_of_reads_only_this_members_claims_asked_back() -> None:
    other = _asked(1)
    other["spec"]["cluster"] = "cluster-b"
    claims = [_asked(0), claim_of(1, "Granted"), other]
    assert asked_of(claims, "cluster-a") == {
        ("default", UID, 0): "asked back for a claim of priority 1000 (its own: 0)"
    }


def test_a_claim_asked_back_is_never_admitted_on_and_goes_once_its_group_holds_nothing() -> None:
    """The group was given back and its pods are gone: the local plan would admit it, but its
    claim is asked back: it waits, and the claim is deleted (a new one is made next pass)."""
    snap = scene(replicas=1)
    after, writes = charge_reservations(decide(snap), snap, hub(_asked(0)))
    assert after.admit == ()
    [said] = [w for w in after.waiting if w.reason is Reason.WAITING_FOR_RESERVATION]
    assert "the hub asked its claim on Reservation p5-odcr back" in said.message
    assert writes.delete == ((claim_name("cluster-a", "default", "vllm", UID, 0), "c0"),)
    assert writes.create == ()
