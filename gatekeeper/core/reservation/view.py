"""What a member knows of the hub in one pass, and the claim writes it plans there.

Why this exists: two deciders on a member charge groups to the hub's Reservations, the
``pools`` backend (``core.backends.pools.hub_member``) and the Kueue AdmissionCheck
``lws-gatekeeper.io/shared-reservation`` (``core.checks.shared_reservation``); both read
the hub through the same connection (``controller.hub_link``), which hands each pass a
:class:`HubView`, and both return :class:`ClaimWrites` for it to send. Claims the
AdmissionCheck makes carry ``SOURCE_LABEL``, so that each decider gives back only its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gatekeeper.core.kube.keys import API_GROUP

__all__ = ["SOURCE_CHECK", "SOURCE_LABEL", "ClaimWrites", "HubView"]

SOURCE_LABEL = f"{API_GROUP}/claimed-by"
"""On claims made by the shared-reservation AdmissionCheck (value ``SOURCE_CHECK``); the
``pools`` backend's claims have none."""
SOURCE_CHECK = "admission-check"


@dataclass(frozen=True)
class HubView:
    """What the member knows of the hub this pass."""

    cluster: str
    reachable: bool
    claims: Sequence[Mapping[str, Any]] = ()
    """This cluster's claims as last seen on the hub."""
    reservations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    unreachable_since: datetime | None = None
    error: str = ""
    given_back: frozenset[str] = frozenset()
    """UIDs of claims this member deleted that its cache still shows: never admitted on (the
    hub may have granted their room to another cluster already)."""
    undeleted: frozenset[str] = frozenset()
    """Those of ``given_back`` whose delete failed without saying whether it applied (the hub
    went away mid-request): deleted again, else one that is still there would hold its room
    on the hub for the rest of the term, with no group on it."""


@dataclass(frozen=True)
class ClaimWrites:
    """Claims to create on the hub (whole objects) and to delete (name, uid)."""

    create: tuple[dict[str, Any], ...] = ()
    delete: tuple[tuple[str, str], ...] = ()
