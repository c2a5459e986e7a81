"""How long a group given back waits before it is tried again: one rule for every backend.

Why this exists: a group is given back (its pods not all bound in its Pool's
``spec.admissionTimeout``; its own pod not as admitted; with ``kueue``, its Workload found
never to fit), and tried again after a delay that doubles with each give-back, as Kueue's
``waitForPodsReady`` requeueing does. The count lives on the group's record
(``status.retries``), which anyone with rights in the namespace can write, so it is read
bounded. Called by each backend's give-back (``core.backends``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.core.kube.objects import as_map

__all__ = ["MAX_RETRIES", "RETRY_MAX_SECONDS", "recorded_retries", "retry_delay"]

RETRY_MAX_SECONDS = 1800
"""The delay doubles up to this (30 minutes)."""

MAX_RETRIES = 1000
"""A record's ``status.retries`` above this is read as this."""


def retry_delay(retries: int, base: int, most: int = RETRY_MAX_SECONDS) -> int:
    """Seconds before the ``retries``-th retry: ``base`` (at least 1), doubled per earlier
    one, at most ``most``."""
    return min(most, max(1, base) << min(max(retries, 1) - 1, 20))


def recorded_retries(record: Mapping[str, Any] | None) -> int:
    """How many times the record's group was given back since it last ran (0 when unread)."""
    value = as_map(as_map(record).get("status")).get("retries")
    return min(value, MAX_RETRIES) if type(value) is int and value > 0 else 0
