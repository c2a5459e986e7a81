"""``lws-gatekeeper ungate``: free the pods left gated by a gatekeeper that is gone for good.

Why this exists: after ``helm uninstall`` (its order is in docs/install.md: opt the
LeaderWorkerSets out first), a pod that was still waiting for admission keeps the gate
``lws-gatekeeper.io/admission`` and stays Pending: only the gatekeeper lifts it. This
command lists the opted-in pods (label ``lws-gatekeeper.io/pool``), has
``core.writes.leftover_gates`` decide which to free and whether a gatekeeper still holds
its Lease, and sends each pod's patch. Called by ``cli.ungate_cmd`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import kr8s.asyncio

from gatekeeper.controller import resources as r
from gatekeeper.controller.errors import Conflict, Forbidden
from gatekeeper.controller.kube import Kube
from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper.core.writes.leftover_gates import plan_leftover_gates

__all__ = ["Freed", "free_left_gates"]


@dataclass(frozen=True)
class Freed:
    """What the command did (or, with ``dry_run``, would do)."""

    freed: tuple[str, ...]
    changed: tuple[str, ...]
    """Pods that changed or went between the listing and the write (left as they are)."""
    refused: str = ""
    denied: tuple[str, ...] = ()
    """Pods whose write the API server refused (a policy of the gatekeeper still installed,
    or RBAC), with its words."""


async def free_left_gates(
    kubeconfig: str | None,
    namespace: str | None,
    *,
    lease_namespace: str,
    lease_name: str,
    force: bool = False,
    dry_run: bool = False,
) -> Freed:
    api = await kr8s.asyncio.api(kubeconfig=kubeconfig)
    kube = Kube(api, user_agent="lws-gatekeeper ungate")
    listing = api.get("pods", namespace=namespace or kr8s.ALL, label_selector=POOL_LABEL, raw=True)
    pods = [p async for p in listing if isinstance(p, dict)]
    leases = api.get(
        "leases", namespace=lease_namespace, field_selector=f"metadata.name={lease_name}", raw=True
    )
    lease = next(iter([o async for o in leases if isinstance(o, dict)]), None)
    plan = plan_leftover_gates(pods, lease, datetime.now(UTC), force=force)
    if plan.refused:
        return Freed((), (), plan.refused)
    freed: list[str] = []
    changed: list[str] = []
    denied: list[str] = []
    for pod in plan.pods:
        where = f"{pod.namespace}/{pod.name}"
        if dry_run:
            freed.append(where)
            continue
        try:
            await kube.json_patch(r.PODS, pod.name, pod.namespace, list(pod.ops))
        except Forbidden as exc:
            denied.append(f"{where}: {exc}")
            continue
        except Conflict as exc:
            if exc.code == 403:
                denied.append(f"{where}: {exc}")
            else:
                changed.append(where)
            continue
        freed.append(where)
    return Freed(tuple(freed), tuple(changed), denied=tuple(denied))
