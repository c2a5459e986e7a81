"""Table tests of the hub's ledger (``core.reservation``): grants, order, strategy, words."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reservation_builders import claim, reservation

from gatekeeper.core.reservation import (
    BadClaim,
    Claim,
    ClaimReason,
    ClaimState,
    claim_body,
    claim_name,
    decide,
    group_waits,
    parse_claim,
    parse_reservation,
    parse_shares,
    status_body,
)

GPU = "nvidia.com/gpu"


def granted(ledger: Any) -> list[str]:
    return [g.name for g in ledger.grants]


@pytest.mark.parametrize(
    ("claims", "capacity", "strategy", "expected"),
    [
        pytest.param([claim("a"), claim("b"), claim("c")], 4, None, ["a", "b"], id="two of three fit"),
        pytest.param(
            [claim("a", state="Granted"), claim("b"), claim("c")], 4, None, ["b"], id="granted holds"
        ),
        pytest.param(
            [claim("a", state="Orphaned"), claim("b"), claim("c")], 4, None, ["b"], id="orphaned still holds"
        ),
        pytest.param(
            [claim("a", state="Released"), claim("b"), claim("c")],
            4,
            None,
            ["b", "c"],
            id="released holds nothing",
        ),
        pytest.param(
            [
                claim("big", gpus=3, created="2026-01-01T00:00:00Z"),
                claim("s1", created="2026-01-02T00:00:00Z"),
            ],
            4,
            None,
            ["big"],
            id="the older first; the smaller then waits",
        ),
        pytest.param(
            [
                claim("held", gpus=2, state="Granted"),
                claim("big", gpus=3, created="2026-01-01T00:00:00Z"),
                claim("small", gpus=1, created="2026-01-02T00:00:00Z"),
            ],
            4,
            None,
            ["small"],
            id="best effort lets a smaller one pass",
        ),
        pytest.param(
            [
                claim("held", gpus=2, state="Granted"),
                claim("big", gpus=3, created="2026-01-01T00:00:00Z"),
                claim("small", gpus=1, created="2026-01-02T00:00:00Z"),
            ],
            4,
            "StrictFIFO",
            [],
            id="strict keeps the order",
        ),
        pytest.param(
            [
                claim("huge", gpus=9, created="2026-01-01T00:00:00Z"),
                claim("s", created="2026-01-02T00:00:00Z"),
            ],
            4,
            "StrictFIFO",
            ["s"],
            id="one that can never fit does not block",
        ),
        pytest.param(
            [claim("young", created="2026-01-03T00:00:00Z", cluster="cluster-b"), claim("old", gpus=4)],
            4,
            None,
            ["old"],
            id="age across clusters",
        ),
        pytest.param(
            [claim("old", gpus=4), claim("urgent", gpus=4, priority=100, created="2026-02-01T00:00:00Z")],
            4,
            None,
            ["urgent"],
            id="priority before age",
        ),
        pytest.param(
            [claim("cpu-only", demand={"cpu": "64"})], 4, None, ["cpu-only"], id="charged only what it lists"
        ),
        pytest.param([claim("zero", gpus=0)], 0, None, ["zero"], id="nothing asked fits nothing"),
    ],
)
def test_grants(
    claims: list[dict[str, Any]], capacity: int, strategy: str | None, expected: list[str]
) -> None:
    ledger = decide(reservation(capacity={GPU: capacity}, strategy=strategy), claims)
    assert granted(ledger) == expected


def test_granted_total_never_exceeds_capacity_whatever_the_mix() -> None:
    for capacity in range(0, 9):
        claims = [
            claim(f"c{i}", gpus=(i % 3) + 1, cluster=f"m{i % 3}", created=f"2026-01-0{1 + i % 9}T00:00:00Z")
            for i in range(12)
        ]
        ledger = decide(reservation(capacity={GPU: capacity}), claims)
        total = sum((i % 3) + 1 for i in range(12) if f"c{i}" in granted(ledger))
        assert total <= capacity
        assert ledger.status is not None and ledger.status.claimed[GPU] == total


def test_a_claim_counted_as_granted_holds_though_the_cache_says_pending() -> None:
    ledger = decide(
        reservation(), [claim("a"), claim("b"), claim("c")], counted_granted=frozenset({"uid-a", "uid-b"})
    )
    assert granted(ledger) == []
    assert [w.reason for w in ledger.waiting] == [ClaimReason.WAITING_FOR_CAPACITY]


def test_status_per_cluster() -> None:
    claims = [
        claim("a1", state="Granted"),
        claim("b1", cluster="cluster-b", created="2026-01-02T00:00:00Z"),
        claim("b2", cluster="cluster-b", created="2026-01-03T00:00:00Z"),
    ]
    ledger = decide(reservation(), claims)
    assert ledger.status is not None
    shares = {s.name: (dict(s.claimed), s.granted, s.pending) for s in ledger.status.clusters}
    assert shares == {"cluster-a": ({GPU: 2}, 1, 0), "cluster-b": ({GPU: 2}, 1, 1)}
    body = status_body(ledger.status)
    assert body["free"] == {GPU: "0"} and body["claimedSummary"] == f"4 {GPU}"
    assert body["clustersSummary"] == "cluster-a 2, cluster-b 2"


def test_the_words_a_member_shows() -> None:
    claims = [claim(f"a{i}", gpus=8, state="Granted", group=i) for i in range(4)]
    claims += [claim(f"b{i}", gpus=8, state="Granted", cluster="cluster-b", group=i) for i in range(4)]
    ledger = decide(reservation(capacity={GPU: 64}), claims)
    assert ledger.status is not None
    shares = parse_shares({"status": status_body(ledger.status)})
    text = group_waits(3, "p5-odcr", {GPU: 8, "cpu": 4000}, shares)
    assert text == (
        "group 3 waits for reservation p5-odcr on the hub: 0 of 64 nvidia.com/gpu free "
        "(cluster-a holds 32, cluster-b 32)"
    )


def test_words_without_status_and_for_a_claim_that_never_fits() -> None:
    assert (
        group_waits(1, "r", {GPU: 1}, None)
        == "group 1 waits for reservation r on the hub: its claim is not decided yet"
    )
    said = group_waits(1, "r", {GPU: 9}, None, ClaimReason.EXCEEDS_CAPACITY, "can never be granted: needs 9")
    assert said == "group 1 waits for reservation r on the hub: can never be granted: needs 9"


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        pytest.param({"groupIndex": 10_001}, "spec.groupIndex", id="group index beyond 10,000"),
        pytest.param({"groupIndex": True}, "spec.groupIndex", id="a boolean group index"),
        pytest.param({"priority": 2**40}, "spec.priority", id="priority beyond int32"),
        pytest.param({"demand": {GPU: "1" * 50}}, "40 digits", id="a quantity of 50 digits"),
        pytest.param({"demand": {GPU: "-1"}}, "negative", id="negative demand"),
        pytest.param({"demand": {f"r{i}": "1" for i in range(40)}}, "more than 32", id="too many resources"),
        pytest.param({"cluster": "Not_A_Name"}, "spec.cluster", id="bad cluster name"),
        pytest.param({"demand": "lots"}, "spec.demand", id="demand not a map"),
    ],
)
def test_a_bad_claim_gets_a_reason_and_the_others_go_on(change: dict[str, Any], fragment: str) -> None:
    bad = claim("bad", created="2025-01-01T00:00:00Z")
    bad["spec"].update(change)
    parsed = parse_claim(bad)
    assert isinstance(parsed, BadClaim) and fragment in parsed.message
    ledger = decide(reservation(), [bad, claim("good")])
    assert granted(ledger) == ["good"]
    assert [(w.name, w.reason) for w in ledger.waiting] == [("bad", ClaimReason.INVALID_SPEC)]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        pytest.param({"capacity": {}}, "empty", id="empty capacity"),
        pytest.param({"capacity": {GPU: "9" * 50}}, "40 digits", id="a huge capacity"),
        pytest.param(
            {"capacity": {GPU: 4}, "queueingStrategy": "Lottery"}, "queueingStrategy", id="bad strategy"
        ),
        pytest.param({"capacity": {GPU: 4}, "orphanTimeout": "forever"}, "orphanTimeout", id="bad timeout"),
        pytest.param({"capacity": {GPU: 4}, "orphanTimeout": "999999h"}, "366 days", id="timeout too long"),
    ],
)
def test_a_bad_reservation_grants_nothing_and_says_why(spec: dict[str, Any], fragment: str) -> None:
    obj = {"metadata": {"name": "r"}, "spec": spec}
    with pytest.raises(ValueError, match=fragment):
        parse_reservation(obj)
    ledger = decide(obj, [claim("a", reservation="r")])
    assert ledger.grants == () and fragment in ledger.invalid
    assert [w.reason for w in ledger.waiting] == [ClaimReason.RESERVATION_INVALID]


def test_reservation_fields() -> None:
    parsed = parse_reservation(
        reservation(capacity={GPU: 64, "cpu": "500m"}, strategy="StrictFIFO", orphan_timeout="1h30m")
    )
    assert parsed.capacity == {GPU: 64, "cpu": 500} and parsed.orphan_timeout == 5400


def test_a_member_builds_a_claim_the_hub_reads_back() -> None:
    from datetime import UTC, datetime

    body = claim_body(
        reservation="p5-odcr",
        cluster="cluster-a",
        namespace="team",
        lws="vllm",
        lws_uid="0123",
        group=3,
        demand={GPU: 2, "cpu": 1500, "memory": 2**34},
        priority=5,
        created=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    body["metadata"]["uid"] = "x"
    parsed = parse_claim(body)
    assert isinstance(parsed, Claim)
    assert parsed.demand == {GPU: 2, "cpu": 1500, "memory": 2**34} and parsed.group == 3
    assert parsed.state is ClaimState.PENDING and parsed.priority == 5
    assert body["metadata"]["name"] == claim_name("cluster-a", "team", "vllm", "0123", 3)
    assert claim_name("cluster-a", "team", "vllm", "0123", 3) != claim_name(
        "cluster-b", "team", "vllm", "0123", 3
    )
    long = claim_name("c" * 63, "n" * 63, "l" * 253, "u", 10_000)
    assert len(long) <= 253


def test_a_pool_names_its_reservation() -> None:
    from gatekeeper.core.model.pool import parse_pool

    pool = {"metadata": {"name": "p"}, "spec": {"nodeSelector": {"a": "b"}, "reservation": "p5-odcr"}}
    assert parse_pool(pool).reservation == "p5-odcr"
    pool["spec"]["reservation"] = "x" * 300
    with pytest.raises(ValueError, match=r"spec\.reservation"):
        parse_pool(pool)
    pool["spec"]["reservation"] = 7
    with pytest.raises(ValueError, match=r"spec\.reservation"):
        parse_pool(pool)


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=60),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
)
CLAIM_FIELDS = [
    "reservation",
    "cluster",
    "namespace",
    "leaderWorkerSet",
    "groupIndex",
    "priority",
    "groupCreated",
    "demand",
]


@settings(max_examples=300, deadline=None)
@given(
    breaks=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(CLAIM_FIELDS), JUNK), max_size=6),
    capacity=JUNK,
    status=JUNK,
)
def test_no_broken_claim_or_reservation_makes_the_ledger_raise(
    breaks: list[tuple[int, str, Any]], capacity: Any, status: Any
) -> None:
    claims = [claim(f"c{i}", gpus=i % 3 + 1, created=f"2026-01-0{i + 1}T00:00:00Z") for i in range(6)]
    for index, key, value in breaks:
        claims[index]["spec"][key] = value
    claims[0]["status"] = status
    for res in (reservation(), reservation(capacity={GPU: capacity})):
        ledger = decide(res, claims)
        if ledger.status is not None:
            assert ledger.status.claimed[GPU] <= ledger.status.capacity[GPU] or ledger.grants == ()
            status_body(ledger.status)
    parse_shares(
        {
            "status": {
                "capacity": capacity,
                "free": status,
                "clusters": [status, {"name": "x", "claimed": capacity}],
            }
        }
    )
