"""The order in which one LWS's groups are offered to Kueue: lowest group index first.

Why this exists: Kueue orders the Workloads of a ClusterQueue by priority, then creation
time, then UID (``baseCompareFunc`` in Kueue v0.19.2's ``pkg/cache/queue``). Creation
times have one-second resolution, so Workloads made in the same second are taken in UID
order, which is random: an LWS scaled up whose Workloads were all made at once ran
groups 0 and 2, not 0 and 1. The groups of one LWS ask the same (same spec), so there is
no gain in offering a higher group while a lower one waits, and the order is kept thus:

* **Offer in a widening window.** An LWS's groups without a Workload get one, lowest
  first, only while none of its Workloads waits unreserved; then as many as it has
  groups holding quota (at least one). A scale-up of 100 groups that all fit takes
  1, 1, 2, 4, ... Workloads: eight round trips, not a hundred. Only groups that ask the
  same spec are ever tied, and only the last window can be admitted in part.
* **Trim what cannot go first.** Once Kueue has found the lowest waiting Workload (or
  a higher waiting one of the same spec, tried first) inadmissible, the waiting
  Workloads of higher groups of the same spec are deleted: they could not fit either,
  and would tie with it when room frees (or, at the head of a StrictFIFO queue, keep
  the lowest from ever being tried).
* **Hold one admitted out of order.** A group whose Workload Kueue admitted while a
  lower group of the same spec still waits keeps its gates. Once Kueue has found the
  lower one inadmissible, the higher one's Workload is deleted, so its quota goes to
  the lower one (it is offered again after it, in a later second).

Groups being adopted (``adopt``) run already: they are never held or trimmed, but their
waiting Workloads keep the window shut, so that Kueue admits them before new groups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gatekeeper.core.backends.kueue.adopt import adopted_elsewhere
from gatekeeper.core.backends.kueue.workload import workload_belongs
from gatekeeper.core.kube.keys import QUOTA_RESERVED, SPEC_HASH_ANNOTATION
from gatekeeper.core.kube.objects import as_map, conditions, meta
from gatekeeper.core.model.groups import LwsGroup

__all__ = ["Offers", "Waiting", "evaluated", "queue_state", "spec_of", "unreserved"]


def spec_of(wl: Mapping[str, Any]) -> str:
    """The spec digest a Workload of ours was made with ("" when it does not say)."""
    return str(as_map(meta(wl).get("annotations")).get(SPEC_HASH_ANNOTATION) or "")


def unreserved(wl: Mapping[str, Any]) -> bool:
    """Does the Workload wait for Kueue (no quota reserved, no admission)?"""
    reserved = conditions(wl).get(QUOTA_RESERVED, {}).get("status") == "True"
    return not reserved and not as_map(wl.get("status")).get("admission")


def evaluated(wl: Mapping[str, Any]) -> bool:
    """Has Kueue tried the waiting Workload and found no room (``QuotaReserved=False``)?"""
    return conditions(wl).get(QUOTA_RESERVED, {}).get("status") == "False"


@dataclass(frozen=True)
class Waiting:
    """The lowest staying group of an LWS whose Workload waits unreserved."""

    index: int
    spec: str
    evaluated: bool
    """Kueue found it inadmissible: nothing of the same spec behind it can fit now."""

    def ahead_of(self, index: int, wl: Mapping[str, Any]) -> bool:
        """Does it come before group ``index`` (whose Workload is ``wl``) of the same spec?"""
        return self.index < index and bool(self.spec) and spec_of(wl) == self.spec


class Offers:
    """How many of an LWS's groups without a Workload get one in this pass (lowest first)."""

    def __init__(self, waiting: Waiting | None, holding: int) -> None:
        self.left = 0 if waiting is not None else max(1, holding)

    def take(self) -> bool:
        """May the next group (in index order) get its Workload now?"""
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def queue_state(
    groups: Sequence[LwsGroup], workloads: Mapping[tuple[str, str], Mapping[str, Any]]
) -> tuple[Waiting | None, int]:
    """(the lowest staying group whose Workload waits unreserved, how many hold quota) of one LWS.

    A group to be adopted whose Workload is not made yet waits too (with no spec: it holds
    nothing back but the window).
    """
    waiting: Waiting | None = None
    holding = 0
    for group in groups:
        gs = group.state
        wl = workloads.get((gs.key.namespace, gs.record))
        if wl is not None and not workload_belongs(wl, gs.key.name, gs.lws_uid, gs.key.index):
            wl = None
        if not group.staying:
            continue
        if wl is None:
            runs = any(p.live and not p.gated for p in group.present)
            if waiting is None and runs and adopted_elsewhere(group.record):
                waiting = Waiting(gs.key.index, "", evaluated=False)
            continue
        if not unreserved(wl):
            holding += 1
        elif waiting is None:
            waiting = Waiting(gs.key.index, spec_of(wl), evaluated(wl))
        elif not waiting.evaluated and waiting.spec and spec_of(wl) == waiting.spec and evaluated(wl):
            # Kueue tried a higher group of the same spec first (same-second tie, or the head
            # of a StrictFIFO queue) and found no room: the lowest one cannot fit either, and
            # may never be tried while the higher one blocks the queue.
            waiting = replace(waiting, evaluated=True)
    return waiting, holding
