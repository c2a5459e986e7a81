"""Which claims ``lws-gatekeeper hub release --cluster NAME`` releases, and when it refuses.

Why this exists: the claims of a member gone for good go on holding their room on the hub
(Orphaned: its machines may still run) until an operator, who knows the machines are gone,
releases them, or until the Reservation's ``spec.orphanTimeout``. Releasing the claims of
a member that still runs would let the hub grant its room to another cluster while its
groups run, so the command releases only once the hub has marked every held claim of
that cluster Orphaned (its heartbeat expired), unless told ``force``. Pure: called by
``gatekeeper.hub_release`` with the claims it listed on the hub.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.reservation.objects import ClaimState, parse_claim

__all__ = ["ReleasePlan", "plan_release"]


@dataclass(frozen=True)
class ReleasePlan:
    """Claims to mark Released (name, uid, resourceVersion decided on), or why not."""

    release: tuple[tuple[str, str, str], ...] = ()
    refused: str = ""
    held: int = 0
    """Of ``release``, how many held room (Granted or Orphaned)."""


def plan_release(claims: Iterable[Mapping[str, Any]], cluster: str, *, force: bool = False) -> ReleasePlan:
    """Every claim of ``cluster`` that is not Released yet; refused while any of them is
    Granted (the hub still hears the member's heartbeat), unless ``force``."""
    mine = [c for c in (parse_claim(o) for o in claims) if c.cluster == cluster and c.name]
    live = [c for c in mine if c.state is not ClaimState.RELEASED]
    granted = [c for c in live if c.state is ClaimState.GRANTED]
    if granted and not force:
        names = ", ".join(c.name for c in granted[:3]) + (" ..." if len(granted) > 3 else "")
        return ReleasePlan(
            refused=(
                f"cluster {cluster} still holds {len(granted)} Granted claim(s) ({names}): the hub hears "
                f"its heartbeat, so its groups may run. Its claims become Orphaned once its heartbeat "
                f"expires; release them then, or with --force if you know its machines are gone"
            )
        )
    held = sum(1 for c in live if c.state.holds)
    return ReleasePlan(tuple((c.name, c.uid, c.resource_version) for c in live), held=held)
