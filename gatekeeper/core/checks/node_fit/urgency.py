"""Which watched changes call for a pass of the node-fit AdmissionCheck at once.

Why this exists: Kueue admits a Workload whose ClusterQueue requires the check only
once this controller says ``Ready``, so each second a pass waits is a second added to
every admission through Kueue (``controller/loop.PassLoop`` spaces passes by up to a
second). What the check answers is a Workload whose quota was just reserved (or whose
admission changed); what may change its answer is room: a node added or gone, a bound
pod gone or finished, a new AdmissionCheck to mark Active. Called by
``controller/checks/node_fit.py`` for each change its informers see.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.core.kube.changes import Facts, object_ref
from gatekeeper.core.kube.keys import QUOTA_RESERVED
from gatekeeper.core.kube.objects import is_live, is_true

__all__ = ["NodeFitUrgency"]


class NodeFitUrgency:
    """``urgent(plural, kind, obj)``: may this change alter a check's answer? It remembers
    whether each Workload's quota is reserved."""

    def __init__(self, limit: int = 100_000) -> None:
        self._facts = Facts(limit)

    def __call__(self, plural: str, kind: str, obj: Mapping[str, Any]) -> bool:
        if plural == "workloads":
            key = object_ref(plural, obj)
            if kind == "DELETED":
                self._facts.forget(key)
                return False
            if kind not in ("ADDED", "MODIFIED"):
                return False
            reserved = is_true(obj, QUOTA_RESERVED)
            return self._facts.changed(key, reserved) and reserved  # the check's turn
        if kind == "DELETED":
            return plural in ("nodes", "pods")
        if kind == "ADDED":
            return plural in ("nodes", "admissionchecks")
        return kind == "MODIFIED" and plural == "pods" and not is_live(obj)  # finished
