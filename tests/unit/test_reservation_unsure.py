"""Table tests of ``core.reservation.unsure``: what a claim read back says about a grant
that got no answer, the fence's patch, and what a new term fences."""

from __future__ import annotations

from typing import Any

import pytest
from reservation_builders import claim

from gatekeeper.core.reservation.unsure import FENCE_ANNOTATION, Fate, fate_of, fence_patch, term_start


def at(version: str, state: str | None = None) -> dict[str, Any]:
    obj = claim("a", state=state)
    obj["metadata"]["resourceVersion"] = version
    return obj


@pytest.mark.parametrize(
    ("read", "decided", "fate"),
    [
        (None, "7", Fate.SETTLED),  # gone: nothing to hold
        (at("7"), "7", Fate.FENCE),  # still at the version decided on: the grant may land yet
        (at("7", "Pending"), "7", Fate.FENCE),
        (at("9"), "7", Fate.SETTLED),  # changed since: the late grant fails its precondition
        (at("9", "Granted"), "7", Fate.SETTLED),  # it landed: the cache will show it
        ({"metadata": {}}, "7", Fate.SETTLED),
    ],
)
def test_a_claim_read_back_decides_the_fate_of_an_unanswered_grant(
    read: dict[str, Any] | None, decided: str, fate: Fate
) -> None:
    assert fate_of(read, decided) is fate


def test_the_fence_is_guarded_and_always_a_change() -> None:
    one, two = fence_patch("7", "n1"), fence_patch("7", "n2")
    assert one["metadata"]["resourceVersion"] == "7"
    assert one["metadata"]["annotations"][FENCE_ANNOTATION] == "7/n1"
    assert one != two, "a second fence at the same version is still a write the API server makes"


def test_a_new_term_fences_every_pending_claim_and_nothing_else() -> None:
    claims = [
        at("3"),
        at("4", "Pending"),
        at("5", "Granted"),
        at("6", "Orphaned"),
        at("8", "Released"),
        {"metadata": {"name": "no-uid", "resourceVersion": "1"}, "spec": {}},
    ]
    for i, c in enumerate(claims[:5]):
        c["metadata"]["name"] = f"c{i}"
        c["metadata"]["uid"] = f"u{i}"
    assert term_start(claims) == [("u0", "c0", "3"), ("u1", "c1", "4")]
