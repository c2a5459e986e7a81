"""How many group records one namespace may have: its other groups wait without one.

Why this exists: every group of an opted-in LWS gets a GroupAdmission record, admitted or
waiting, and the pass reads every record. One LWS may ask at most ``MAX_REPLICAS`` groups,
but a namespace may hold any number of LWSs: a tenant's hundred LWSs of ten thousand
replicas would be a million records, in etcd and in every pass, for everyone. So records are
capped per namespace (``--max-records-per-namespace``, by default as many as one LWS may ask
groups, 10,000). A group past the cap
gets no record, is not queued and holds nothing; its LWS gets a Warning Event
(``RecordLimitReached``) that says why; it gets its record once others go. Groups that
have a record keep it. Among those that have none, the pass's own order decides (LWS by
name, then group index). Called by every backend's ``decide``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.lws import MAX_REPLICAS

__all__ = [
    "DEFAULT_MAX_RECORDS_PER_NAMESPACE",
    "RECORD_LIMIT_REACHED",
    "RecordRoom",
    "over_cap",
    "over_cap_message",
]

DEFAULT_MAX_RECORDS_PER_NAMESPACE = MAX_REPLICAS
"""Records one namespace may have: as many groups as one LWS may ask (each group of
multi-host inference holds several GPU nodes, so no real namespace comes near)."""

RECORD_LIMIT_REACHED = "RecordLimitReached"
"""The Event reason on an LWS some of whose groups wait without a record."""


def over_cap(
    groups: Iterable[GroupState], has_record: Callable[[GroupState], bool], cap: int
) -> tuple[GroupState, ...]:
    """The groups, in order, that would get a new record past ``cap`` in their namespace
    (``RecordRoom`` taken group by group, after every record the groups already have)."""
    listed = list(groups)
    room = RecordRoom((g.key.namespace for g in listed if has_record(g)), cap)
    return tuple(g for g in listed if not has_record(g) and not room.take(g.key.namespace))


class RecordRoom:
    """Room for new records per namespace, taken as a pass makes them (for a backend that
    decides group by group)."""

    def __init__(self, existing: Iterable[str], cap: int) -> None:
        """``existing``: the namespace of every record there is."""
        self.held = Counter(existing)
        self.cap = cap

    def take(self, namespace: str) -> bool:
        """Room for one more record in ``namespace`` (taken), or False: the cap is reached."""
        if self.held[namespace] >= self.cap:
            return False
        self.held[namespace] += 1
        return True


def over_cap_message(group: GroupState, cap: int) -> str:
    """What the LWS of a group past the cap is told."""
    return (
        f"group {group.key.index} and later ones wait without a record: namespace "
        f"{group.key.namespace} has {cap} group records, the most the gatekeeper keeps per "
        f"namespace (--max-records-per-namespace); they are queued once others go"
    )
