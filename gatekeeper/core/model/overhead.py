"""The pod overhead each RuntimeClass adds to the pods that name it.

Why this exists: a template that names a ``runtimeClassName`` asks, at pod creation, that
RuntimeClass's ``overhead.podFixed`` on top of its containers (the RuntimeClass admission
plugin writes it into ``spec.overhead``; the scheduler and a ResourceQuota count it). The
template does not show it, so a demand computed from templates alone lets a Pool admit
groups whose pods then take more than its quota. ``runtime_overheads`` reads the cluster's
RuntimeClasses into what ``core.model.demand`` adds to each pod; called by
``core.model.groups.DemandMemo``. RuntimeClasses are the cluster admin's, not a tenant's: one
whose overhead cannot be read adds nothing here, and the pods that name it are refused by
the API server's own validation anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gatekeeper.core.kube.objects import as_map, meta
from gatekeeper.core.kube.quantity import parse_quantity

__all__ = ["Overheads", "runtime_overheads"]

Overheads = Mapping[str, Mapping[str, str]]
"""RuntimeClass name -> its ``overhead.podFixed`` (resource -> quantity, as written)."""


def runtime_overheads(runtime_classes: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Each RuntimeClass's ``overhead.podFixed`` by name; classes without one are left out."""
    found: dict[str, dict[str, str]] = {}
    for rc in runtime_classes:
        name = meta(rc).get("name")
        fixed = as_map(as_map(rc.get("overhead")).get("podFixed"))
        if not isinstance(name, str) or not name or not fixed:
            continue
        try:
            amounts = {str(k): str(v) for k, v in fixed.items() if parse_quantity(str(v)) >= 0}
        except (ValueError, ArithmeticError):
            continue
        if amounts:
            found[name] = amounts
    return found
