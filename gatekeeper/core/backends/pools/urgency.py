"""Which watched changes may let a waiting group in, and so call for a pass at once.

Why this exists: every watched change asks the pools backend for a pass, and in a busy
cluster something always changes, so passes are spaced by up to a second
(``controller/loop.PassLoop``). Most changes cannot admit anything: a pod turning
Running, a pod bound, a record the pass wrote itself, a node's heartbeat. A few can: room
freed (a pod gone or finished, a record released, a node gone), a new node or Pool, a new
or rescaled LWS (the HPA's scale-up), a hub's grant. For those the loop waits only as
long as the last pass's cost asks (in a churning pool, one gang's end is the next one's
start: ``benchmarks/bench_churn.py`` measured 4% of the nodes' time free while a waiting
gang fit, with every change waiting a second). Called by ``controller/backends/pools.py``
for each change its informers see.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.core.kube.changes import Facts, object_ref
from gatekeeper.core.kube.keys import POOL_PLURAL
from gatekeeper.core.kube.objects import is_live, meta

__all__ = ["Urgency"]


class Urgency:
    """``urgent(plural, kind, obj)``: may this change let a waiting group in? It remembers
    the generation of each LWS, Pool and Reservation, so that a rewrite of their status
    (the LWS controller's, or this gatekeeper's own) is told apart from a change of spec."""

    def __init__(self, limit: int = 100_000) -> None:
        self._generations = Facts(limit)

    def __call__(self, plural: str, kind: str, obj: Mapping[str, Any]) -> bool:
        if kind == "DELETED":
            self._generations.forget(object_ref(plural, obj))
            return True
        if kind not in ("ADDED", "MODIFIED"):
            return False  # a list's items: the loop waits for the list anyway
        if plural in SPEC_KINDS:  # their status is rewritten often, by their controllers and by us
            return self._generations.changed(object_ref(plural, obj), meta(obj).get("generation"))
        if plural == "pods":
            return not is_live(obj)  # finished: its node's room is free
        if plural == "nodes":
            return kind == "ADDED"
        return plural == "reservationclaims"  # the hub's grants (and this cluster's own claims)


SPEC_KINDS = frozenset({"leaderworkersets", POOL_PLURAL, "reservations"})
"""Kinds whose change of spec (a new ``metadata.generation``) is urgent, and not of status."""
