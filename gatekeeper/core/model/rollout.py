"""A rolling update's surge: which groups of an LWS exist only for its update, and whether
the update can go on while they wait.

Why this exists: with ``maxSurge`` the LWS controller makes groups beyond ``spec.replicas``
and deletes an old group only once a new one is ready; with ``maxUnavailable: 0`` too, it
deletes none before. On a full pool a surge group waits for quota and the update waits for
it: it stalls for ever, and the record alone says only "needs 2 nvidia.com/gpu; pool has 0
free". ``surge_words`` names it as what it is and what would let it go on; each backend's
decision adds them to a waiting surge group's words (``surge_said``, called by every
backend's decision or record statuses), and the LWS is warned once
(``ROLLOUT_STALLED``). Pure. A group beyond ``replicas`` while ``replicas`` shrinks looks
the same for a moment (the snapshot cannot tell a scale-down from a surge): with ``maxSurge``
set it is named a surge group until the LWS controller deletes it.

The figures are the LWS controller's: ``maxSurge`` and ``maxUnavailable`` are a count or a
percentage of ``spec.replicas`` (maxSurge rounded up, maxUnavailable down), by default 0
and 1.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.kube.objects import as_map
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.lws import MAX_REPLICAS, replicas

__all__ = ["ROLLOUT_STALLED", "Rollout", "rollout", "surge_said", "surge_words"]

ROLLOUT_STALLED = "RolloutStalled"
"""The reason of the Warning Event on an LWS whose rolling update waits for a surge group
that waits for room, with no old group to go first (``maxUnavailable: 0``)."""

_PERCENT = re.compile(r"^(\d{1,3})%$")


@dataclass(frozen=True)
class Rollout:
    """An LWS's rolling update settings, resolved to counts of groups."""

    replicas: int
    max_surge: int
    max_unavailable: int


def _count(value: object, of: int, default: int, *, up: bool) -> int | None:
    """An IntOrString as the LWS controller resolves it; None when unreadable."""
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value <= MAX_REPLICAS else None
    found = _PERCENT.match(value) if isinstance(value, str) else None
    if found is None or int(found.group(1)) > 100:
        return None
    scaled = int(found.group(1)) * of / 100
    return math.ceil(scaled) if up else math.floor(scaled)


def rollout(lws: Mapping[str, Any]) -> Rollout | None:
    """The LWS's rolling update, or None when its spec cannot be read."""
    try:
        wanted = replicas(lws)
    except ValueError:
        return None
    config = as_map(as_map(as_map(lws.get("spec")).get("rolloutStrategy")).get("rollingUpdateConfiguration"))
    surge = _count(config.get("maxSurge"), wanted, 0, up=True)
    unavailable = _count(config.get("maxUnavailable"), wanted, 1, up=False)
    if surge is None or unavailable is None:
        return None
    return Rollout(wanted, surge, unavailable)


def surge_words(lws: Mapping[str, Any], name: str, index: int) -> tuple[str, bool] | None:
    """What a waiting group ``index`` of LWS ``name`` adds when it is a surge group: the words,
    and whether the update is stalled by it (``maxUnavailable`` 0: no old group goes first).
    None when it is not one (below ``replicas``, or no surge: a scale-down in progress)."""
    found = rollout(lws)
    if found is None or index < found.replicas or found.max_surge == 0:
        return None
    said = (
        f"group {index} is a surge group of LeaderWorkerSet {name}'s rolling update "
        f"(replicas {found.replicas}, maxSurge {found.max_surge}, maxUnavailable {found.max_unavailable})"
    )
    if found.max_unavailable > 0:
        return f"{said}: the update goes on meanwhile, an old group at a time", False
    return (
        f"{said}: the update waits for it and no old group goes first, so it waits for as long as "
        "this group does; room for this group in its pool, or "
        "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable of at least 1 "
        "(an old group then goes before its new one comes), lets it go on",
        True,
    )


def surge_said(
    message: str, lwss: Mapping[tuple[str, str], Mapping[str, Any]], key: GroupKey
) -> tuple[str, bool]:
    """A waiting group's ``message`` with its surge words added, if it is a surge group of
    its LWS (in ``lwss``, by namespace and name), and whether its LWS's update is stalled."""
    said = surge_words(lwss.get((key.namespace, key.name), {}), key.name, key.index)
    return (message, False) if said is None else (f"{message}; {said[0]}", said[1])
