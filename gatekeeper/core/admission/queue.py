"""The groups a pass reasons about, waiting or admitted, and the order in which waiting groups are served.

Waiting groups are served by priority (higher first), then by age of their
LeaderWorkerSet (older first), then by namespace and name (a stable tie-break), then
by group index (group 0 before group 1 within one LWS). That is what users expect from
"first come, first served" and what Kueue does with workload priority and creation time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey, InvalidDemand
from gatekeeper.core.model.lws import Subgroups, TopologyRequest


@dataclass(frozen=True)
class WaitingGroup:
    """A group whose pods are gated, waiting for admission into ``pool``.

    ``created`` is the LWS's creation time (naive datetimes are taken as UTC);
    ``priority`` the value of the pods' PriorityClass (0 when none).
    """

    key: GroupKey
    pool: str
    demand: GroupDemand | InvalidDemand
    created: datetime
    priority: int = 0
    classes: tuple[str, ...] = ()
    """The PriorityClass names its pods get (``core.model.lws.priority_classes``; "" for none),
    for a Pool's ``spec.allowedPriorityClasses``."""
    exclusive: str = ""
    """Its LWS's exclusive topology key (one group to a domain, ``core.admission.exclusive``), or ""."""
    topology: TopologyRequest | None = None
    """The topology level its LWS asks for (``core.admission.topology``), or None."""
    subgroups: Subgroups | None = None
    """Its LWS's subgroup exclusive placement (``core.admission.subgroups``), or None."""
    gang: str = ""
    """The unit it is admitted in with the waiting groups of other LWSs of its namespace with the
    same ``gang`` (``core.model.lws.gang_of``), all or none; "": alone."""
    gang_size: int = 0
    """How many LWSs its gang has (0: as many as there are): it waits until they are there."""


@dataclass(frozen=True)
class AdmittedGroup:
    """A group already admitted into ``pool``: it holds its whole demand in the pool's quota.

    Node room is held for its pods not yet bound to a node: every pod index not in
    ``bound`` (whose requests are assumed to be in the bound-pod usage already), on its
    recorded node in ``nodes`` (pod index -> node name) when it still fits there. The
    default, nothing bound, errs on the side of holding too much rather than admitting
    twice onto the same room.
    """

    key: GroupKey
    pool: str
    demand: GroupDemand
    nodes: Mapping[int, str] = field(default_factory=dict)
    bound: frozenset[int] = frozenset()
    exclusive: str = ""
    """As ``WaitingGroup.exclusive``: the room it holds for its unbound pods counts in its domain."""
    lender: str = ""
    """The pool of its cohort it was admitted into when its own had no room (its record's
    ``status.borrowedFrom``): it holds that pool's quota and node room; "": its own pool's."""
    domain: tuple[tuple[str, str], ...] = ()
    """The topology domain its pods are pinned to (its record's ``status.domain``, as node
    labels): the room it holds for its unbound pods is held there."""
    subgroups: bool = False
    """Its pods carry LWS's subgroup key (its LWS's subgroup exclusive placement): where they are
    held, other exclusive subgroups of the namespace are not."""
    gang: str = ""
    """Its gang (``WaitingGroup.gang``): counted among the LWSs its gang has."""

    @property
    def held_in(self) -> str:
        """The pool whose quota and nodes the group holds."""
        return self.lender or self.pool


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def queue_order(group: WaitingGroup) -> tuple[int, datetime, str, str, int]:
    """Sort key: priority desc, LWS creation time asc, namespace, name, group index asc."""
    key = group.key
    return (-group.priority, _utc(group.created), key.namespace, key.name, key.index)
