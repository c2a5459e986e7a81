"""``lws-gatekeeper hub release --cluster NAME``: give back the claims of a member gone for good.

Why this exists: a member cluster that is gone (deleted, cut off for good) leaves claims
on the hub that go on holding their room (Orphaned). An operator with the hub's
kubeconfig releases them with this command; the hub's controller then grants that room
to the other members' waiting claims on its next pass. Which claims, and when it refuses
(the member still beats), is decided by ``core.reservation.plan_release``; this module
lists the cluster's claims on the hub and writes each one's status (``Released``,
guarded by the resourceVersion it decided on, so a claim the hub changed meanwhile is
left alone and said so). Called by ``cli.hub_release_cmd`` only.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from datetime import UTC, datetime

import kr8s.asyncio

from gatekeeper.controller import resources as r
from gatekeeper.controller.errors import Conflict
from gatekeeper.controller.kube import Kube
from gatekeeper.core.reservation import CLUSTER_LABEL, ClaimReason, member_namespace, plan_release

__all__ = ["Released", "release_cluster"]


@dataclass(frozen=True)
class Released:
    """What the command did."""

    released: tuple[str, ...]
    held: int
    changed: tuple[str, ...]
    """Claims the hub changed between the listing and the write (left as they are)."""
    refused: str = ""


async def release_cluster(kubeconfig: str | None, cluster: str, *, force: bool = False) -> Released:
    api = await kr8s.asyncio.api(kubeconfig=kubeconfig)
    kube = Kube(api, user_agent="lws-gatekeeper hub release")
    kind = f"{r.CLAIMS.plural}.lws-gatekeeper.io"
    where = member_namespace(cluster)
    found = api.get(kind, namespace=where, label_selector={CLUSTER_LABEL: cluster}, raw=True)
    listed = [o async for o in found if isinstance(o, dict)]
    plan = plan_release(listed, cluster, force=force)
    if plan.refused:
        return Released((), 0, (), plan.refused)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    who = getpass.getuser()
    done: list[str] = []
    changed: list[str] = []
    for name, _uid, version in plan.release:
        status = {
            "state": "Released",
            "reason": str(ClaimReason.RELEASED_BY_OPERATOR),
            "message": f"released by `lws-gatekeeper hub release --cluster {cluster}` ({who}) at {now}",
            "releasedAt": now,
        }
        try:
            await kube.patch_status(r.CLAIMS, name, where, status, version)
        except Conflict:
            changed.append(name)
            continue
        done.append(name)
    return Released(tuple(done), plan.held, tuple(changed))
