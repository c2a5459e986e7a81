"""Which watched changes are news: a bounded memory of one fact per object.

Why this exists: a pass loop asks its controller, for each watched change, whether it
calls for a pass at once (``controller/loop.PassLoop``'s ``urgent``). Most changes of a
busy object are not news: the LWS controller and the gatekeeper rewrite an LWS's or a
Pool's status, Kueue rewrites a Workload's. What is news is a change of one fact of the
object (an LWS's ``metadata.generation``, a Workload's admission conditions). ``Facts``
remembers that fact per object and says when it changed. Used by each backend's and
check's urgency (``core.backends.*.urgency``, ``core.checks.node_fit.urgency``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from gatekeeper.core.kube.objects import meta

__all__ = ["Facts", "object_ref"]


def object_ref(plural: str, obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """The kind, namespace and name of a watched object."""
    m = meta(obj)
    return plural, str(m.get("namespace") or ""), str(m.get("name") or "")


class Facts:
    """One remembered fact per object, at most ``limit`` objects (the memory is emptied
    when full: every object is news once more, which costs a pass, never a missed one)."""

    def __init__(self, limit: int = 100_000) -> None:
        self._facts: dict[Hashable, object] = {}
        self._limit = limit

    def changed(self, key: Hashable, fact: object) -> bool:
        """Remember ``fact`` for ``key``; True when it is new or differs from the last one."""
        if key in self._facts and self._facts[key] == fact:
            return False
        if key not in self._facts and len(self._facts) >= self._limit:
            self._facts.clear()
        self._facts[key] = fact
        return True

    def forget(self, key: Hashable) -> None:
        self._facts.pop(key, None)

    def __len__(self) -> int:
        return len(self._facts)
