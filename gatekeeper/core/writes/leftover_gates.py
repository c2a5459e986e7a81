"""Gates left behind: what ``lws-gatekeeper ungate`` lifts once the gatekeeper is gone for good.

Why this exists: the gate ``lws-gatekeeper.io/admission`` is lifted only by the gatekeeper.
Uninstalled while pods of opted-in LeaderWorkerSets were still gated, it leaves them
Pending for ever, and nothing else in the cluster knows the gate is ours to lift. This
decides, with no I/O, which pods to free and when not to: while a gatekeeper still renews
its Lease, lifting its gates behind its back would let groups run past their quota, so the
command refuses (unless forced) and says who holds the Lease. Each write removes our gate
only (other schedulers' gates stay), guarded by the pod's resourceVersion, so a pod that
changed since it was read is left as it is and said so. Called by ``gatekeeper.ungate``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gatekeeper.core.kube.objects import as_map, parse_time
from gatekeeper.core.model.gating import ungate_patch

__all__ = ["LeftoverGates", "Unstick", "plan_leftover_gates"]


@dataclass(frozen=True)
class Unstick:
    """One pod to free: its JSON patch (our gate removed, the resourceVersion tested first)."""

    namespace: str
    name: str
    ops: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class LeftoverGates:
    """What ``ungate`` does: free ``pods``, or nothing with the reason ``refused``."""

    pods: tuple[Unstick, ...] = ()
    refused: str = ""


def lease_holder(lease: Mapping[str, Any] | None, now: datetime) -> str:
    """Who renews the gatekeeper's Lease still (renewed within its duration of ``now``), or ""."""
    spec = as_map(as_map(lease).get("spec"))
    holder = spec.get("holderIdentity")
    duration = spec.get("leaseDurationSeconds")
    if not isinstance(holder, str) or not holder or not isinstance(duration, int):
        return ""
    renewed = parse_time(spec.get("renewTime"))
    return holder if now - renewed < timedelta(seconds=duration) else ""


def plan_leftover_gates(
    pods: Iterable[Mapping[str, Any]], lease: Mapping[str, Any] | None, now: datetime, *, force: bool = False
) -> LeftoverGates:
    """The pods among ``pods`` that carry our gate, each with its patch; refused while
    ``lease`` (the gatekeeper's, None if there is none) is renewed, unless ``force``."""
    holder = lease_holder(lease, now)
    if holder and not force:
        return LeftoverGates(
            refused=f"a gatekeeper still renews its Lease (holder {holder}): it lifts its own gates; "
            "uninstall it first, or --force if you know it is gone"
        )
    found: list[Unstick] = []
    for pod in pods:
        ops = ungate_patch(pod)
        meta = as_map(pod.get("metadata"))
        version, namespace, name = meta.get("resourceVersion"), meta.get("namespace"), meta.get("name")
        if ops is None or not all(isinstance(v, str) and v for v in (version, namespace, name)):
            continue
        guard = {"op": "test", "path": "/metadata/resourceVersion", "value": version}
        found.append(Unstick(str(namespace), str(name), (guard, *ops)))
    return LeftoverGates(pods=tuple(sorted(found, key=lambda u: (u.namespace, u.name))))
