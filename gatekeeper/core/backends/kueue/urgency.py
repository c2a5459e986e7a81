"""Which watched changes call for a pass of the ``kueue`` backend at once.

Why this exists: every watched change asks for a pass, and passes are spaced by up to a
second (``controller/loop.PassLoop``); in a scale-up Kueue rewrites Workloads and the
LWS controller its LWSs all the time. Two kinds of change move a group along: a new or
rescaled LWS (its groups' Workloads are to be made) and a Workload whose admission
changed (Kueue admitted or evicted it: gates to lift, pods to stop).
For those the loop waits only as long as the last pass's cost asks; a scale-up of 100
groups through Kueue measured 43.9 s with every change waiting a second against 33.3 s
for Kueue's own LWS integration (``benchmarks/bench_backends.py``, one run). Called by
``controller/backends/kueue.py`` for each change its informers see.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.core.kube.changes import Facts, object_ref
from gatekeeper.core.kube.keys import EVICTED, KUEUE_ADMITTED
from gatekeeper.core.kube.objects import is_true, meta

__all__ = ["KueueUrgency"]


class KueueUrgency:
    """``urgent(plural, kind, obj)``: does this change move a group along? It remembers
    each LWS's generation and each Workload's admission conditions."""

    def __init__(self, limit: int = 100_000) -> None:
        self._facts = Facts(limit)

    def __call__(self, plural: str, kind: str, obj: Mapping[str, Any]) -> bool:
        if plural not in ("leaderworkersets", "workloads"):
            return False  # pods, records, StatefulSets, flavors: Kueue's decision moves a group
        key = object_ref(plural, obj)
        if kind == "DELETED":
            self._facts.forget(key)
            return True
        if kind not in ("ADDED", "MODIFIED"):
            return False  # a list's items: the loop waits for the list anyway
        if plural == "leaderworkersets":
            return self._facts.changed(key, meta(obj).get("generation"))
        # A Workload: a quota reserved alone is the checks' turn, not this backend's.
        now = (is_true(obj, KUEUE_ADMITTED), is_true(obj, EVICTED))
        news = self._facts.changed(key, now)
        # One the gatekeeper has just made is news only if Kueue has already moved it.
        return news and (kind == "MODIFIED" or any(now))
