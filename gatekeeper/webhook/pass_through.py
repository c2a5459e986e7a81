"""The table of admitted groups the webhook reads, published by the leader after each pass.

Why this exists: ``core.admission.pass_through`` decides whether a pod being created belongs to a
group that holds its admission, so that it is made without the gate; this is where the
table lives between the controller's thread (which publishes it after a pass) and the
webhook's (which reads it at each pod CREATE). One reference is swapped whole, so a
reader sees one pass's table or the next, never half of one. The table is used only
while ``may_use`` says the process leads (the elector's renew deadline, the same fence
its writes have): a replica that lost its Lease, or cannot renew it, gates every pod as
before, so a stale table never outlives the term that made it. Made by
``controller/app.py``; published and cleared by the backends' controllers (``controller/backends/pools.py``,
``controller/backends/kueue.py``); read by
the webhook (``patch``) and by ``controller/lift.py`` (``lift``: a pod born gated just
before its group's admission has its gate lifted at once, not at the next pass).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gatekeeper.core.admission.pass_through import (
    Passable,
    StatefulSets,
    Table,
    lift_for,
    patch_for,
)
from gatekeeper.metrics import WEBHOOK_PASS_THROUGH

__all__ = ["PassThrough"]


def _none(_namespace: str, _name: str) -> Mapping[str, Any] | None:
    return None


class PassThrough:
    """The last published table, and whether it may be used now."""

    def __init__(self, may_use: Callable[[], bool] = lambda: True) -> None:
        self.may_use = may_use
        self._state: tuple[Table, StatefulSets, StatefulSets] = ({}, _none, _none)

    def publish(
        self,
        table: dict[tuple[str, str, int], Passable],
        statefulsets: StatefulSets,
        pods: StatefulSets = _none,
    ) -> None:
        """Use ``table`` from now on (the holder adds to it: the caller hands it over), with
        the informers' lookups of StatefulSets and pods."""
        self._state = (table, statefulsets, pods)

    def add(self, key: tuple[str, str, int], group: Passable) -> None:
        """A group admitted since the last table: into the current table at once. Only ever
        added to while published (one dict item set: a reader's lookup sees it or not);
        entries go only with a new table."""
        table, statefulsets, _pods = self._state
        if isinstance(table, dict) and statefulsets is not _none:  # published, not cleared
            table[key] = group

    def withdraw(self, key: tuple[str, str, int]) -> None:
        """A group being given back: out of the current table at once, before its record is
        written and its pods deleted, so the pods its LWS makes again are born gated (one dict
        item removed: a reader's lookup sees it or not)."""
        table = self._state[0]
        if isinstance(table, dict):
            table.pop(key, None)

    def clear(self) -> None:
        self._state = ({}, _none, _none)

    def __len__(self) -> int:
        return len(self._state[0])

    def keys(self) -> list[tuple[str, str, int]]:
        """The groups of the current table."""
        return list(self._state[0])

    def lift(self, pod: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The patch that lifts the gate of ``pod`` (gated, existing) now, or None: the pass decides."""
        table, statefulsets, pods = self._state
        if not table or not self.may_use():
            return None
        return lift_for(pod, table, statefulsets, pods)

    def patch(self, pod: Mapping[str, Any], namespace: str) -> list[dict[str, Any]] | None:
        """The patch that creates ``pod`` ungated, or None: gate it."""
        table, statefulsets, pods = self._state
        if not table or not self.may_use():
            return None
        ops = patch_for(pod, namespace, table, statefulsets, pods)
        if ops is not None:
            WEBHOOK_PASS_THROUGH.inc()
        return ops
