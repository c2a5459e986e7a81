"""Preemption across the members of a Reservation (``spec.preemption.withinReservation``): which
granted claims a waiting claim asks back, that nothing is granted until they are gone, and when
nothing is asked."""

from __future__ import annotations

from typing import Any

import pytest
from reservation_builders import claim, reservation

from gatekeeper.core.reservation import Claim, ClaimReason, ClaimState, decide, parse_claim, parse_reservation

GPU = "nvidia.com/gpu"


def _res(within: str | None = "LowerPriority", **kw: Any) -> dict[str, Any]:
    res = reservation(capacity={GPU: "4"}, **kw)
    if within is not None:
        res["spec"]["preemption"] = {"withinReservation": within}
    return res


def _granted(name: str, *, priority: int, at: str, reason: str = "Granted", **kw: Any) -> dict[str, Any]:
    obj = claim(name, state="Granted", priority=priority, **kw)
    obj["status"].update(reason=reason, grantedAt=at)
    return obj


def _two_low() -> list[dict[str, Any]]:
    """cluster-a holds the whole Reservation with two claims of priority 10, ``late`` granted last."""
    return [
        _granted("early", priority=10, at="2026-01-01T00:00:00Z"),
        _granted("late", priority=10, at="2026-01-01T01:00:00Z", group=1),
    ]


def test_a_waiting_claim_of_higher_priority_asks_the_most_recently_granted_lower_one_back() -> None:
    high = claim("high", cluster="cluster-b", priority=1000)
    ledger = decide(_res(), [*_two_low(), high])
    assert ledger.grants == (), "nothing is granted until the room is really free"
    [change] = ledger.changes
    assert (change.name, change.state, change.reason) == (
        "late",
        ClaimState.GRANTED,
        ClaimReason.GIVE_BACK_REQUESTED,
    )
    assert change.message.startswith("asked back for a claim of priority 1000 (its own: 10)")
    assert "cluster-b" not in change.message, "the member asked is not told who asked"
    [wait] = ledger.waiting
    assert wait.name == "high" and wait.reason is ClaimReason.WAITING_FOR_CAPACITY
    assert wait.message.endswith(
        "; asked 1 granted claim(s) of lower priority (from 10) to be given back; "
        "granted once their members have given them back"
    )
    assert ledger.status is not None and ledger.status.free == {GPU: 0}


def test_while_the_claim_asked_back_holds_nothing_more_is_asked_and_nothing_granted() -> None:
    claims = _two_low()
    claims[1]["status"]["reason"] = "GiveBackRequested"
    high = claim("high", cluster="cluster-b", priority=1000)
    ledger = decide(_res(), [*claims, high])
    assert ledger.grants == () and ledger.changes == ()
    [wait] = ledger.waiting
    assert wait.message.endswith("; waits for 1 claim(s) of lower priority asked back to be given back")


def test_once_the_claim_is_given_back_the_higher_one_is_granted_first() -> None:
    low_again = claim("late-again", priority=10, group=1, created="2025-01-01T00:00:00Z")
    high = claim("high", cluster="cluster-b", priority=1000, created="2026-06-01T00:00:00Z")
    ledger = decide(_res(), [_two_low()[0], low_again, high])
    assert [g.name for g in ledger.grants] == ["high"], "priority first, whatever the age"
    assert ledger.changes == ()


@pytest.mark.parametrize(
    ("within", "high_priority", "high_gpus", "why"),
    [
        (None, 1000, 2, "the Reservation does not preempt (the default)"),
        ("Never", 1000, 2, "the Reservation says Never"),
        ("LowerPriority", 10, 2, "equal priority never preempts"),
        ("LowerPriority", 5, 2, "lower priority never preempts"),
        ("LowerPriority", 1000, 5, "it would not fit even with every claim gone"),
    ],
)
def test_nothing_is_asked(within: str | None, high_priority: int, high_gpus: int, why: str) -> None:
    high = claim("high", cluster="cluster-b", priority=high_priority, gpus=high_gpus)
    ledger = decide(_res(within), [*_two_low(), high])
    assert ledger.changes == () and ledger.grants == (), why


def test_the_lowest_priority_goes_first_and_one_not_needed_is_put_back() -> None:
    claims = [
        _granted("mid", priority=100, at="2026-01-01T02:00:00Z", gpus=1),
        _granted("low-big", priority=10, at="2026-01-01T00:00:00Z", gpus=2),
        _granted("low-small", priority=10, at="2026-01-01T01:00:00Z", gpus=1, group=1),
    ]
    high = claim("high", cluster="cluster-b", priority=1000, gpus=2)
    ledger = decide(_res(), [*claims, high])
    assert [c.name for c in ledger.changes] == ["low-big"], (
        "low-small first, then low-big; low-small not needed"
    )


def test_orphaned_claims_and_those_of_a_member_gone_are_not_asked() -> None:
    orphan = claim("orphan", state="Orphaned", priority=10, gpus=2)
    gone = _granted("gone", priority=10, at="2026-01-01T00:00:00Z", cluster="cluster-c")
    high = claim("high", cluster="cluster-b", priority=1000)
    members_gone = {"cluster-a": "heartbeat expired", "cluster-c": "heartbeat expired"}
    ledger = decide(_res(), [orphan, gone, high], gone=members_gone)
    assert [(c.name, c.state) for c in ledger.changes] == [("gone", ClaimState.ORPHANED)]
    assert ledger.grants == ()


def test_a_member_cannot_outrank_the_others_beyond_its_bounds() -> None:
    """cluster-b's claims are clamped to priority 10 by the hub: equal, so nothing is asked."""
    res = _res()
    res["spec"]["members"] = [{"cluster": "cluster-a"}, {"cluster": "cluster-b", "maxPriority": 10}]
    high = claim("high", cluster="cluster-b", priority=1_000_000)
    ledger = decide(res, [*_two_low(), high])
    assert ledger.changes == ()


def test_two_waiting_claims_in_one_pass_ask_different_claims() -> None:
    claims = [*_two_low()]
    first = claim("first", cluster="cluster-b", priority=1000, created="2026-01-01T00:00:00Z")
    second = claim("second", cluster="cluster-b", priority=1000, group=1, created="2026-01-02T00:00:00Z")
    ledger = decide(_res(), [*claims, first, second])
    assert sorted(c.name for c in ledger.changes) == ["early", "late"]


def test_the_field_and_the_granted_time_are_read() -> None:
    assert parse_reservation(_res()).within.value == "LowerPriority"
    assert parse_reservation(_res(None)).within.value == "Never"
    with pytest.raises(ValueError, match="withinReservation: 'Any' is not one of Never, LowerPriority"):
        parse_reservation(_res("Any"))
    parsed = parse_claim(_granted("x", priority=1, at="2026-01-01T00:00:00Z"))
    assert isinstance(parsed, Claim) and parsed.granted_at is not None
    assert parsed.granted_at.isoformat() == "2026-01-01T00:00:00+00:00"


def test_a_claim_of_the_kueue_admission_check_is_never_asked_back() -> None:
    """The shared-reservation AdmissionCheck gives claims back only as Kueue evicts: asking it would
    hold the waiting claim for ever."""
    claims = _two_low()
    for c in claims:
        c["metadata"]["labels"] = {"lws-gatekeeper.io/claimed-by": "admission-check"}
    high = claim("high", cluster="cluster-b", priority=1000)
    assert decide(_res(), [*claims, high]).changes == ()
