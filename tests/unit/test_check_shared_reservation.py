"""The shared-reservation AdmissionCheck's decision: Ready only once the hub granted the claim."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from workload_builders import NS, workload

from gatekeeper.core.checks.shared_reservation import decide_shared_reservation
from gatekeeper.core.kube.keys import SHARED_RESERVATION_CONTROLLER
from gatekeeper.core.reservation import SOURCE_CHECK, SOURCE_LABEL, HubView, claim_body

CHECK = "shared"
RESERVATION = "p5-odcr"
CLUSTER = "cluster-k"


def admission_check(params: dict[str, Any] | None = None, name: str = CHECK) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {
            "controllerName": SHARED_RESERVATION_CONTROLLER,
            "parameters": params
            if params is not None
            else {"apiGroup": "lws-gatekeeper.io", "kind": "Reservation", "name": RESERVATION},
        },
    }


def claim_of(wl: dict[str, Any], state: str | None = None, *, ours: bool = True) -> dict[str, Any]:
    body = claim_body(
        reservation=RESERVATION,
        cluster=CLUSTER,
        namespace=NS,
        lws=wl["metadata"]["name"],
        lws_uid=wl["metadata"]["uid"],
        group=0,
        demand={"nvidia.com/gpu": 2},
        priority=0,
        created=datetime(2025, 1, 1, tzinfo=UTC),
    )
    body["metadata"] |= {"uid": "c-" + wl["metadata"]["uid"], "resourceVersion": "3"}
    if ours:
        body["metadata"]["labels"][SOURCE_LABEL] = SOURCE_CHECK
    if state:
        body["status"] = {"state": state, "reason": "Granted" if state == "Granted" else "WaitingForCapacity"}
    return body


def hub(*claims: dict[str, Any], reachable: bool = True) -> HubView:
    status = {
        "capacity": {"nvidia.com/gpu": "4"},
        "free": {"nvidia.com/gpu": "0"},
        "clusters": [{"name": "cluster-a", "claimed": {"nvidia.com/gpu": "4"}}],
    }
    return HubView(
        cluster=CLUSTER,
        reachable=reachable,
        claims=list(claims),
        reservations={RESERVATION: {"metadata": {"name": RESERVATION}, "status": status}},
        unreachable_since=None if reachable else datetime(2026, 12, 1, 15, 0, tzinfo=UTC),
        error="" if reachable else "connection refused",
    )


def asking(name: str = "wl", state: str = "Pending") -> dict[str, Any]:
    return workload(name).pod_set("main", 2, gpus=1).reserved().check(state, name=CHECK).obj()


def test_a_workload_with_quota_reserved_claims_its_whole_demand() -> None:
    wl = asking()
    actions = decide_shared_reservation([wl], [admission_check()], hub())
    (made,) = actions.claims.create
    assert made["spec"]["reservation"] == RESERVATION and made["spec"]["cluster"] == CLUSTER
    assert made["spec"]["demand"]["nvidia.com/gpu"] == "2"
    assert made["spec"]["leaderWorkerSetUID"] == "uid-wl"
    assert made["metadata"]["labels"][SOURCE_LABEL] == SOURCE_CHECK
    (update,) = actions.updates
    assert (update.state, update.message) == (
        "Pending",
        "workload wl claimed 2 cpu, 2Gi memory, 2 nvidia.com/gpu of reservation p5-odcr on the hub; "
        "waiting for its grant",
    )


@pytest.mark.parametrize(
    ("state", "expected_state", "words"),
    [
        ("Granted", "Ready", "granted by reservation p5-odcr on the hub"),
        ("Orphaned", "Ready", "granted by reservation p5-odcr on the hub"),
        (
            None,
            "Pending",
            "workload wl waits for reservation p5-odcr on the hub: its claim is not decided yet",
        ),
        (
            "Pending",
            "Pending",
            "workload wl waits for reservation p5-odcr on the hub: 0 of 4 nvidia.com/gpu free "
            "(cluster-a holds 4)",
        ),
    ],
)
def test_the_check_follows_the_claim(state: str | None, expected_state: str, words: str) -> None:
    wl = asking()
    actions = decide_shared_reservation([wl], [admission_check()], hub(claim_of(wl, state)))
    assert actions.claims.create == () and actions.claims.delete == ()
    (update,) = actions.updates
    assert update.state == expected_state and update.message.startswith(words), update.message


def test_a_ready_check_stays_ready_and_keeps_its_claim_even_with_the_hub_down() -> None:
    wl = asking(state="Ready")
    assert decide_shared_reservation([wl], [admission_check()], hub(claim_of(wl, "Granted"))).updates == ()
    down = decide_shared_reservation([wl], [admission_check()], hub(reachable=False))
    assert down.updates == () and down.claims.create == () and down.ready == 1


def test_the_hub_down_writes_no_claim_and_says_since_when() -> None:
    actions = decide_shared_reservation([asking()], [admission_check()], hub(reachable=False))
    assert actions.claims.create == ()
    (update,) = actions.updates
    assert update.state == "Pending"
    assert "workload wl waits for reservation p5-odcr: the hub is unreachable since 2026-12-01T15:00:00Z" in (
        update.message
    )


def test_claims_no_workload_asks_for_are_given_back_and_only_ours() -> None:
    done = workload("done").pod_set("main", 2).reserved().check("Ready", name=CHECK)
    done = done.condition("Finished", "True").obj()
    evicted = workload("evicted").pod_set("main", 2).reserved().check("Pending", name=CHECK)
    evicted = evicted.condition("Evicted", "True").obj()
    gone = asking("gone")
    pools = claim_of(asking("pools"), "Granted", ours=False)
    claims = [claim_of(done, "Granted"), claim_of(evicted, "Granted"), claim_of(gone, "Pending"), pools]
    actions = decide_shared_reservation([done, evicted], [admission_check()], hub(*claims))
    assert sorted(uid for _, uid in actions.claims.delete) == ["c-uid-done", "c-uid-evicted", "c-uid-gone"]


def test_a_released_claim_is_given_back_and_the_workload_claims_again() -> None:
    wl = asking()
    actions = decide_shared_reservation([wl], [admission_check()], hub(claim_of(wl, "Released")))
    assert [uid for _, uid in actions.claims.delete] == ["c-uid-wl"]
    assert len(actions.claims.create) == 1


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"apiGroup": "kueue.x-k8s.io", "kind": "Reservation", "name": "x"},
        {"apiGroup": "lws-gatekeeper.io", "kind": "Reservation"},
    ],
)
def test_parameters_that_name_no_reservation_make_the_check_inactive_and_say_so(
    params: dict[str, Any],
) -> None:
    actions = decide_shared_reservation([asking()], [admission_check(params)], hub())
    (active,) = actions.activate
    assert (active.status, active.reason) == ("False", "InvalidParameters")
    assert actions.claims.create == ()
    (update,) = actions.updates
    assert update.state == "Pending" and "spec.parameters" in update.message
    assert actions.problems


def test_a_valid_check_is_marked_active_once() -> None:
    (active,) = decide_shared_reservation([], [admission_check()], hub()).activate
    assert active.status == "True" and "reservation p5-odcr on the hub" in active.message
    shown = admission_check()
    shown["status"] = {
        "conditions": [
            {"type": "Active", "status": "True", "reason": active.reason, "message": active.message}
        ]
    }
    assert decide_shared_reservation([], [shown], hub()).activate == ()


def test_a_workload_of_absurd_size_is_not_claimed_and_says_why() -> None:
    wl = workload("huge").pod_set("main", 20_000).reserved().check("Pending", name=CHECK).obj()
    actions = decide_shared_reservation([wl], [admission_check()], hub())
    assert actions.claims.create == ()
    assert "more than 10000 pods" in actions.updates[0].message


def test_workloads_without_our_check_or_quota_are_left_alone() -> None:
    other = workload("other").pod_set("main", 2).reserved().check("Pending", name="node-fit").obj()
    queued = workload("queued").pod_set("main", 2).check("Pending", name=CHECK).obj()
    actions = decide_shared_reservation([other, queued], [admission_check()], hub())
    assert actions.updates == () and actions.claims.create == ()
