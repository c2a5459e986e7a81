"""``core.backends.pools.urgency``: which watched changes call for a pass at once."""

from __future__ import annotations

from typing import Any

import pytest

from gatekeeper.core.backends.pools.urgency import Urgency


def obj(generation: int | None = None, phase: str | None = None, name: str = "x") -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"namespace": "ns", "name": name}}
    if generation is not None:
        out["metadata"]["generation"] = generation
    if phase is not None:
        out["status"] = {"phase": phase}
    return out


@pytest.mark.parametrize(
    ("plural", "kind", "o", "urgent"),
    [
        ("pods", "DELETED", obj(), True),
        ("pods", "MODIFIED", obj(phase="Running"), False),
        ("pods", "MODIFIED", obj(phase="Succeeded"), True),
        ("pods", "MODIFIED", obj(phase="Failed"), True),
        ("pods", "ADDED", obj(phase="Pending"), False),
        ("pods", "SYNC", obj(phase="Failed"), False),
        ("groupadmissions", "MODIFIED", obj(), False),
        ("groupadmissions", "DELETED", obj(), True),
        ("nodes", "ADDED", obj(), True),
        ("nodes", "MODIFIED", obj(), False),
        ("statefulsets", "ADDED", obj(), False),
        ("reservationclaims", "MODIFIED", obj(), True),
        ("leaderworkersets", "ADDED", obj(1), True),
        ("pools", "ADDED", obj(1), True),
    ],
)
def test_a_change_is_urgent_when_it_may_let_a_group_in(plural: str, kind: str, o: Any, urgent: bool) -> None:
    assert Urgency()(plural, kind, o) is urgent


@pytest.mark.parametrize("plural", ["leaderworkersets", "pools", "reservations"])
def test_a_status_rewrite_is_not_urgent_and_a_new_generation_is(plural: str) -> None:
    urgent = Urgency()
    assert urgent(plural, "ADDED", obj(1))
    assert not urgent(plural, "MODIFIED", obj(1)), "the same spec: its status changed"
    assert urgent(plural, "MODIFIED", obj(2)), "scaled, or its template changed"
    assert not urgent(plural, "MODIFIED", obj(2))
    assert urgent(plural, "MODIFIED", obj(2, name="other")), "another object"
    assert urgent(plural, "DELETED", obj(2))
    assert urgent(plural, "ADDED", obj(2)), "made again after its deletion"


def test_the_memory_of_generations_is_bounded() -> None:
    urgent = Urgency(limit=10)
    for i in range(25):
        assert urgent("leaderworkersets", "ADDED", obj(1, name=f"l{i}"))
    assert len(urgent._generations) <= 10
