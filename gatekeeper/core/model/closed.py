"""Closed pools: which tolerations open the nodes tainted ``lws-gatekeeper.io/pool``.

Why this exists: a pool's nodes are closed by a taint of the reserved key
``POOL_TAINT_KEY`` (value: the pool's name), and the gatekeeper adds the toleration for it
(the Pool's ``spec.tolerations``, or a Kueue flavor's) only to the pods of a group admitted
there. A toleration the pod's own author wrote that tolerates such a taint (its key is the
reserved one, or it has no key and ``operator: Exists``, which tolerates every taint) would
let the pod onto the pool's nodes without an admission. The admission policy
``lws-gatekeeper-closed-pools`` refuses it on pods that are not opted in and on updates;
this module is the same rule for the gatekeeper's own checks: the pod webhook refuses an
opted-in pod written with one (``webhook.server``), and a gated pod carrying one is not let
through (``conformance.departure``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.core.kube.keys import POOL_TAINT_KEY
from gatekeeper.core.kube.objects import as_list, as_map

__all__ = ["describe", "opening_tolerations", "opens_closed_pools", "what_opens"]


def opens_closed_pools(toleration: Mapping[str, Any]) -> bool:
    """Whether ``toleration`` tolerates a closed pool's taint: its key is ``POOL_TAINT_KEY``
    (any operator, value or effect), or it has no key and operator ``Exists``."""
    key = toleration.get("key") or ""
    if key == POOL_TAINT_KEY:
        return True
    return key == "" and toleration.get("operator") == "Exists"


def opening_tolerations(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The tolerations of a pod ``spec`` that tolerate a closed pool's taint, in order."""
    return [t for t in map(as_map, as_list(spec.get("tolerations"))) if opens_closed_pools(t)]


def describe(toleration: Mapping[str, Any]) -> str:
    """A toleration as a person reads it: ``lws-gatekeeper.io/pool=a:NoSchedule``,
    ``lws-gatekeeper.io/pool (Exists)``, ``every taint (Exists, no key)``."""
    key = str(toleration.get("key") or "")
    effect = str(toleration.get("effect") or "")
    suffix = f":{effect}" if effect else ""
    if not key:
        return f"every taint{suffix} (operator Exists, no key)"
    if toleration.get("operator") == "Exists":
        return f"{key}{suffix} (operator Exists)"
    return f"{key}={toleration.get('value') or ''}{suffix}"


def what_opens(spec: Mapping[str, Any]) -> str | None:
    """Why a pod ``spec`` as its author wrote it may not run, in words for that author;
    None when none of its tolerations tolerates a closed pool's taint."""
    opening = opening_tolerations(spec)
    if not opening:
        return None
    named = ", ".join(describe(t) for t in opening)
    return (
        f"its toleration {named} tolerates the taint {POOL_TAINT_KEY} of closed pools' nodes: only "
        "the lws-gatekeeper gives a pod that toleration, as it lets the pod's group into its pool"
    )
