"""``core.admission.stopping``: a given-back group's pods that still run past the grace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from core_builders import group_pod

from gatekeeper.core.admission.stopping import STOP_GRACE_SECONDS, not_stopped, not_stopped_message, stop_due
from gatekeeper.core.model.lws import GroupPod

GIVEN_BACK = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
RECORD: dict[str, Any] = {
    "status": {
        "conditions": [
            {
                "type": "Admitted",
                "status": "False",
                "reason": "AdmissionTimeout",
                "message": "group 0 was given back",
                "lastTransitionTime": GIVEN_BACK.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        ]
    }
}


def pod(name: str, *, gated: bool = False, live: bool = True, terminating: bool = False) -> GroupPod:
    return group_pod(name, "", gated=gated, live=live, terminating=terminating)


AFTER = GIVEN_BACK + timedelta(seconds=STOP_GRACE_SECONDS)


@pytest.mark.parametrize(
    ("pods", "now", "running"),
    [
        pytest.param([pod("a"), pod("b")], AFTER, ("a", "b"), id="both-still-run"),
        pytest.param([pod("a")], AFTER - timedelta(seconds=1), (), id="within-the-grace"),
        pytest.param([pod("a", terminating=True)], AFTER, (), id="on-its-way-out"),
        pytest.param([pod("a", gated=True)], AFTER, (), id="made-again-gated"),
        pytest.param([pod("a", live=False)], AFTER, (), id="finished"),
        pytest.param([pod("a")], None, (), id="no-time"),
    ],
)
def test_only_pods_that_show_no_deletion_past_the_grace_are_named(
    pods: list[GroupPod], now: datetime | None, running: tuple[str, ...]
) -> None:
    assert not_stopped(RECORD, pods, now) == running


def test_a_record_without_a_transition_time_names_nothing() -> None:
    assert stop_due({}) is None and not_stopped({}, [pod("a")], AFTER) == ()
    assert stop_due(RECORD) == AFTER


def test_the_message_keeps_what_the_record_said_and_is_said_once() -> None:
    first = not_stopped_message("group 0 was given back", ["a", "b"])
    assert first.startswith("group 0 was given back; not stopped: pods a, b still run after")
    assert "lws_gatekeeper_api_forbidden_total" in first and first.endswith(
        "the quota stays held until they are gone"
    )
    assert not_stopped_message(first, ["a", "b"]) == first, "said again, not appended again"
    many = not_stopped_message("x", [f"p{i}" for i in range(8)])
    assert "p0, p1, p2, p3, p4 and 3 more" in many
