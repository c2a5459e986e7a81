"""Table tests of members' heartbeats on the hub and what the ledger does with a member gone.

``core.reservation.heartbeat`` says which clusters are gone, by the hub's own monotonic
clock; ``core.reservation.decide`` then orphans, restores and releases their claims.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from reservation_builders import claim, lease, reservation

from gatekeeper.core.reservation import (
    ClaimReason,
    ClaimState,
    Heartbeats,
    decide,
    heartbeat_body,
    moves_without_reservation,
    parse_claim,
    parse_heartbeat,
    plan_release,
)

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("steps", "at", "expected"),
    [
        pytest.param([], 30.0, set(), id="never seen, within the default duration from the term's start"),
        pytest.param([], 41.0, {"a"}, id="never seen, longer than the default duration"),
        pytest.param([(0.0, lease("a"))], 39.0, set(), id="seen, within its duration"),
        pytest.param([(0.0, lease("a"))], 41.0, {"a"}, id="seen once, then quiet for longer than it"),
        pytest.param(
            [(0.0, lease("a", "1")), (30.0, lease("a", "2"))],
            60.0,
            set(),
            id="renewed: the clock starts again",
        ),
        pytest.param(
            [(0.0, lease("a", "1")), (30.0, lease("a", "1"))],
            41.0,
            {"a"},
            id="the same version seen again is no renewal",
        ),
        pytest.param([(0.0, lease("a", duration=10))], 11.0, {"a"}, id="its own leaseDurationSeconds"),
        pytest.param([(0.0, lease("a", duration=1))], 4.0, set(), id="a duration below 5s counts as 5s"),
        pytest.param(
            [(0.0, lease("a", duration="10"))], 30.0, set(), id="an unreadable duration: the default"
        ),
        pytest.param(
            [(0.0, lease("a", name="lws-gatekeeper-member-b"))],
            41.0,
            {"a"},
            id="a Lease that names another cluster is no heartbeat of either",
        ),
        pytest.param(
            [(0.0, lease("a", namespace="lws-gatekeeper-member-b")), (30.0, lease("a", "2", namespace="x"))],
            41.0,
            {"a"},
            id="only a Lease in the cluster's own namespace is its heartbeat",
        ),
    ],
)
def test_which_members_are_gone(steps: list[tuple[float, Any]], at: float, expected: set[str]) -> None:
    beats = Heartbeats(started=0.0)
    for when, obj in steps:
        beats.observe([obj], when)
    assert set(beats.gone(["a"], at)) == expected


def test_the_words_say_which_lease_and_for_how_long() -> None:
    beats = Heartbeats(started=0.0)
    beats.observe([lease("a")], 0.0)
    assert beats.gone(["a"], 50.0)["a"] == (
        "the heartbeat of cluster a (Lease lws-gatekeeper-member-a, last renewed at "
        "2026-01-01T00:00:00.000000Z) has not changed for 50s, longer than its 40s"
    )
    assert "no heartbeat of cluster b" in Heartbeats(started=0.0).gone(["b"], 41.0)["b"]


def test_heartbeat_body_is_a_lease_the_hub_reads_back() -> None:
    body = heartbeat_body("cluster-a", "gatekeeper-0", 100_000, NOW)
    assert body["spec"]["leaseDurationSeconds"] == 3600
    assert body["spec"]["renewTime"] == "2026-01-01T12:00:00.000000Z"
    beat = parse_heartbeat({**body, "metadata": {**body["metadata"], "resourceVersion": "5"}})
    assert beat is not None and (beat.cluster, beat.duration, beat.version) == ("cluster-a", 3600, "5")


GONE = {"cluster-a": "cluster-a's heartbeat expired"}


def moves(ledger: Any) -> list[tuple[str, str, str]]:
    return [(c.name, str(c.state), str(c.reason)) for c in ledger.changes]


@pytest.mark.parametrize(
    ("claims", "gone", "timeout", "expected_moves", "expected_grants"),
    [
        pytest.param(
            [claim("a1", state="Granted"), claim("b1", cluster="cluster-b", gpus=3)],
            GONE,
            None,
            [("a1", "Orphaned", "MemberHeartbeatExpired")],
            [],
            id="a gone member's granted claim is orphaned and still holds",
        ),
        pytest.param(
            [claim("a1", state="Orphaned", orphaned_at="2026-01-01T11:00:00Z")],
            {},
            "30m",
            [("a1", "Granted", "Granted")],
            [],
            id="its heartbeat back: granted again, however long it was orphaned",
        ),
        pytest.param(
            [
                claim("a1", state="Orphaned", orphaned_at="2026-01-01T11:00:00Z"),
                claim("b1", cluster="cluster-b", gpus=3),
            ],
            GONE,
            "30m",
            [("a1", "Released", "OrphanTimeout")],
            [],
            id="orphaned past orphanTimeout: released, its room free only from the next pass",
        ),
        pytest.param(
            [claim("a1", state="Orphaned", orphaned_at="2026-01-01T11:45:00Z")],
            GONE,
            "30m",
            [],
            [],
            id="orphaned within orphanTimeout: held",
        ),
        pytest.param(
            [claim("a1", state="Orphaned", orphaned_at="2026-01-01T00:00:00Z")],
            GONE,
            None,
            [],
            [],
            id="no orphanTimeout: held until released by hand",
        ),
        pytest.param(
            [claim("a1"), claim("b1", cluster="cluster-b")],
            GONE,
            None,
            [],
            ["b1"],
            id="a gone member's pending claim is not granted; the live member's is",
        ),
        pytest.param(
            [claim("a1", state="Released"), claim("b1", cluster="cluster-b", gpus=4)],
            GONE,
            None,
            [],
            ["b1"],
            id="a released claim holds nothing",
        ),
    ],
)
def test_the_ledger_with_a_member_gone(
    claims: list[dict[str, Any]],
    gone: dict[str, str],
    timeout: str | None,
    expected_moves: list[tuple[str, str, str]],
    expected_grants: list[str],
) -> None:
    ledger = decide(reservation(orphan_timeout=timeout), claims, gone=gone, now=NOW)
    assert moves(ledger) == expected_moves
    assert [g.name for g in ledger.grants] == expected_grants


def test_a_gone_members_pending_claim_says_why_and_is_counted_pending() -> None:
    ledger = decide(reservation(), [claim("a1")], gone=GONE, now=NOW)
    (waiting,) = ledger.waiting
    assert waiting.reason is ClaimReason.MEMBER_GONE
    assert waiting.message == "not granted while its member is gone: cluster-a's heartbeat expired"
    assert ledger.status is not None and ledger.status.pending == 1


def test_orphaned_claims_are_counted_as_such_and_hold_their_room() -> None:
    claims = [claim("a1", state="Granted"), claim("a2", state="Orphaned", orphaned_at="2026-01-01T11:59:00Z")]
    ledger = decide(reservation(), claims, gone=GONE, now=NOW)
    assert ledger.status is not None
    (share,) = ledger.status.clusters
    assert (share.granted, share.orphaned) == (0, 2)
    assert ledger.status.free == {"nvidia.com/gpu": 0}
    message = ledger.changes[0].message
    assert message.startswith("still counted (its machines may still run): cluster-a's heartbeat expired")
    assert "lws-gatekeeper hub release --cluster cluster-a" in message


def test_orphaned_at_is_read_from_the_claims_status() -> None:
    c = parse_claim(claim("a1", state="Orphaned", orphaned_at="2026-01-01T11:00:00Z"))
    assert not isinstance(c, type(None)) and getattr(c, "orphaned_at", None) == datetime(
        2026, 1, 1, 11, 0, tzinfo=UTC
    )
    assert getattr(parse_claim(claim("a2", state="Granted")), "orphaned_at", "x") is None
    assert ClaimState("Orphaned").holds


@pytest.mark.parametrize(
    ("claims", "force", "released", "refused"),
    [
        pytest.param(
            [
                claim("a1", state="Orphaned"),
                claim("a2"),
                claim("a3", state="Released"),
                claim("b1", cluster="cluster-b", state="Granted"),
            ],
            False,
            ["a1", "a2"],
            False,
            id="the orphaned and pending claims of that cluster, not released ones or another's",
        ),
        pytest.param(
            [claim("a1", state="Granted"), claim("a2", state="Orphaned")],
            False,
            [],
            True,
            id="refused while the hub still hears it (a claim Granted)",
        ),
        pytest.param(
            [claim("a1", state="Granted"), claim("a2", state="Orphaned")],
            True,
            ["a1", "a2"],
            False,
            id="forced",
        ),
        pytest.param([], False, [], False, id="nothing to release"),
    ],
)
def test_hub_release_plan(
    claims: list[dict[str, Any]], force: bool, released: list[str], refused: bool
) -> None:
    plan = plan_release(claims, "cluster-a", force=force)
    assert [name for name, _, _ in plan.release] == released
    assert bool(plan.refused) is refused
    if refused:
        assert "--force" in plan.refused and "a1" in plan.refused


def test_claims_of_a_deleted_reservation_are_orphaned_and_restored_too() -> None:
    claims = [
        claim("a1", state="Granted", reservation="gone"),
        claim("a2", state="Orphaned", reservation="gone"),
        claim("a3", state="Granted", reservation="p5-odcr"),
        claim("b1", cluster="cluster-b", state="Orphaned", reservation="gone"),
    ]
    moved = moves_without_reservation(claims, frozenset({"p5-odcr"}), GONE)
    assert [(c.name, str(c.state)) for c in moved] == [("a1", "Orphaned"), ("b1", "Granted")]


def test_a_gone_members_claim_that_can_never_fit_says_so_and_blocks_no_one() -> None:
    claims = [
        claim("a-huge", gpus=9, created="2026-01-01T00:00:00Z"),
        claim("a-small", gpus=1, created="2026-01-01T00:00:01Z"),
        claim("b1", cluster="cluster-b", gpus=2, created="2026-01-02T00:00:00Z"),
    ]
    ledger = decide(reservation(strategy="StrictFIFO"), claims, gone=GONE, now=NOW)
    reasons = {w.name: w.reason for w in ledger.waiting}
    assert reasons == {"a-huge": ClaimReason.EXCEEDS_CAPACITY, "a-small": ClaimReason.MEMBER_GONE}
    assert [g.name for g in ledger.grants] == ["b1"]
