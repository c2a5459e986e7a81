"""The one retry rule of every backend's give-back: a doubling delay, and a count read bounded."""

from __future__ import annotations

from typing import Any

import pytest

from gatekeeper.core.model.retry import MAX_RETRIES, RETRY_MAX_SECONDS, recorded_retries, retry_delay


@pytest.mark.parametrize(
    ("retries", "base", "most", "delay"),
    [
        (1, 60, RETRY_MAX_SECONDS, 60),
        (2, 60, RETRY_MAX_SECONDS, 120),
        (6, 60, RETRY_MAX_SECONDS, 1800),
        (10**6, 60, RETRY_MAX_SECONDS, 1800),  # the shift is bounded too
        (0, 0, RETRY_MAX_SECONDS, 1),  # at least a second
        (3, 2, 5, 5),
    ],
)
def test_the_delay_doubles_up_to_its_bound(retries: int, base: int, most: int, delay: int) -> None:
    assert retry_delay(retries, base, most) == delay


@pytest.mark.parametrize(
    ("written", "read"),
    [(3, 3), (None, 0), ("3", 0), (True, 0), (-2, 0), (2.5, 0), (10**12, MAX_RETRIES), ([1], 0)],
)
def test_a_recorded_count_anyone_may_write_is_read_bounded(written: Any, read: int) -> None:
    assert recorded_retries({"status": {"retries": written}}) == read
    assert recorded_retries(None) == 0 and recorded_retries({"status": "x"}) == 0
