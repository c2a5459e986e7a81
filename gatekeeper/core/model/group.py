"""One group's identity, and the stand-in for a demand that could not be computed.

Why this exists: every room of the core names groups (records, writes, queues, the
backends' passes), so the key lives at the bottom, in the group model, with no
dependency of its own. Who calls it: everything that speaks of one group.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GroupKey", "InvalidDemand"]


@dataclass(frozen=True, order=True)
class GroupKey:
    """Identifies one group: the LWS's namespace and name, and the group index."""

    namespace: str
    name: str
    index: int

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} group {self.index}"


@dataclass(frozen=True)
class InvalidDemand:
    """Stands in for a demand that could not be computed (the ValueError's message).

    Lets the planner report a malformed LWS like any other waiting group.
    """

    message: str
