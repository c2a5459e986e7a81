"""A Reservation's ``spec.members``: only listed clusters are granted, each within its
``maxPriority``, ``maxClaims`` and ``quota``, whatever its claims say; and a claim's age is
never earlier than the claim itself."""

from __future__ import annotations

from typing import Any

import pytest
from reservation_builders import claim, reservation

from gatekeeper.core.reservation.ledger import ClaimReason, decide
from gatekeeper.core.reservation.members import MAX_MEMBERS, parse_members
from gatekeeper.core.reservation.objects import Claim, parse_claim, parse_reservation


def _res(
    members: list[dict[str, Any]] | None, strategy: str | None = None, gpus: str = "8"
) -> dict[str, Any]:
    obj = reservation(capacity={"nvidia.com/gpu": gpus}, strategy=strategy)
    if members is not None:
        obj["spec"]["members"] = members
    return obj


def _outcome(res: dict[str, Any], claims: list[dict[str, Any]]) -> dict[str, str]:
    ledger = decide(res, claims)
    out = {g.name: "Granted" for g in ledger.grants}
    out.update({w.name: str(w.reason) for w in ledger.waiting})
    return out


def test_without_members_any_cluster_claims_unbounded() -> None:
    claims = [claim("a", cluster="cluster-a", priority=10**9), claim("z", cluster="cluster-z")]
    assert _outcome(_res(None), claims) == {"a": "Granted", "z": "Granted"}


def test_a_cluster_not_listed_is_never_granted_and_blocks_no_one() -> None:
    res = _res([{"cluster": "cluster-a"}], strategy="StrictFIFO")
    claims = [
        claim("z", cluster="cluster-z", created="2020-01-01T00:00:00Z"),
        claim("a", cluster="cluster-a"),
    ]
    assert _outcome(res, claims) == {"z": str(ClaimReason.MEMBER_NOT_ALLOWED), "a": "Granted"}
    [wait] = decide(res, claims).waiting
    assert (
        "cluster cluster-z is not a member of Reservation p5-odcr (spec.members: cluster-a)" in wait.message
    )


def test_a_priority_above_the_members_bound_is_read_as_the_bound() -> None:
    """Capacity for one claim of 8 GPUs; a claims priority 1,000,000, b 500. With a's bound at
    100, b goes first; with it at 1,000, a does."""
    claims = [
        claim("a", cluster="cluster-a", priority=1_000_000, gpus=8, created="2026-01-02T00:00:00Z"),
        claim("b", cluster="cluster-b", priority=500, gpus=8),
    ]
    low = _res([{"cluster": "cluster-a", "maxPriority": 100}, {"cluster": "cluster-b"}])
    assert _outcome(low, claims) == {"b": "Granted", "a": str(ClaimReason.WAITING_FOR_CAPACITY)}
    high = _res([{"cluster": "cluster-a", "maxPriority": 1000}, {"cluster": "cluster-b"}])
    assert _outcome(high, claims) == {"a": "Granted", "b": str(ClaimReason.WAITING_FOR_CAPACITY)}


def test_a_member_holds_at_most_its_quota_and_its_claims() -> None:
    res = _res(
        [{"cluster": "cluster-a", "quota": {"nvidia.com/gpu": "4"}, "maxClaims": 3}, {"cluster": "cluster-b"}]
    )
    claims = [
        claim("a1", cluster="cluster-a", gpus=2, state="Granted"),
        claim("a2", cluster="cluster-a", gpus=2, created="2026-01-02T00:00:00Z"),
        claim("a3", cluster="cluster-a", gpus=1, created="2026-01-03T00:00:00Z"),
        claim("b1", cluster="cluster-b", gpus=2, created="2026-01-04T00:00:00Z"),
    ]
    out = _outcome(res, claims)
    assert out == {"a2": "Granted", "a3": str(ClaimReason.MEMBER_LIMIT_REACHED), "b1": "Granted"}
    words = {w.name: w.message for w in decide(res, claims).waiting}
    assert words["a3"] == (
        "cluster cluster-a holds 4 of its quota of 4 nvidia.com/gpu on p5-odcr; this claim asks 1 more"
    )
    many = [
        claim(f"a{i}", cluster="cluster-a", gpus=1, created=f"2026-01-0{i}T00:00:00Z") for i in range(1, 6)
    ]
    capped = _res([{"cluster": "cluster-a", "maxClaims": 3}])
    assert (
        sorted(_outcome(capped, many).values())
        == ["Granted"] * 3 + [str(ClaimReason.MEMBER_LIMIT_REACHED)] * 2
    )


def test_a_claims_age_is_never_earlier_than_the_claim() -> None:
    forged = claim("a", created="2000-01-01T00:00:00Z")
    forged["metadata"]["creationTimestamp"] = "2026-06-01T00:00:00Z"
    parsed = parse_claim(forged)
    assert isinstance(parsed, Claim) and parsed.created.year == 2026
    honest = claim("b", created="2026-06-01T00:00:00Z")
    honest["metadata"]["creationTimestamp"] = "2026-06-01T00:00:05Z"
    parsed = parse_claim(honest)
    assert isinstance(parsed, Claim) and parsed.created.second == 5


@pytest.mark.parametrize(
    ("members", "error"),
    [
        ("cluster-a", "spec.members: expected a list"),
        ([{"cluster": "Cluster_A"}], r"spec.members\[0\].cluster: not a cluster name"),
        # a member of 42 characters could never claim: its namespace on the hub is no DNS label
        ([{"cluster": "c" * 42}], r"spec.members\[0\].cluster: not a cluster name"),
        ([{"cluster": "a"}, {"cluster": "a"}], "listed twice"),
        ([{"cluster": "a", "maxPriority": "high"}], r"maxPriority: 'high' is not an integer"),
        ([{"cluster": "a", "maxClaims": -1}], "maxClaims"),
        ([{"cluster": "a", "quota": {"cpu": "4"}}], r"quota: cpu not in spec.capacity"),
        ([{"cluster": "a", "quota": {"nvidia.com/gpu": "x"}}], r"quota\[nvidia.com/gpu\]"),
        ([{"cluster": f"c{i}"} for i in range(MAX_MEMBERS + 1)], "at most 64"),
    ],
)
def test_a_bad_members_list_makes_the_reservation_invalid(members: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_reservation(_res(members))


def test_members_parse() -> None:
    parsed = parse_members(
        [{"cluster": "a", "maxPriority": 10, "maxClaims": 2, "quota": {"nvidia.com/gpu": "4"}}]
    )
    assert (
        parsed is not None and parsed["a"].max_priority == 10 and parsed["a"].quota == {"nvidia.com/gpu": 4}
    )
