"""Builders of the hub's objects (Reservation, ReservationClaim) for the ledger's table tests.

Why this exists: the tests of ``core.reservation`` describe a hub in a few lines each;
these build the API-shaped dicts the hub's informers would hold.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.core.kube.keys import GATEKEEPER_API_VERSION


def reservation(
    name: str = "p5-odcr",
    capacity: dict[str, Any] | None = None,
    strategy: str | None = None,
    orphan_timeout: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"capacity": capacity if capacity is not None else {"nvidia.com/gpu": "4"}}
    if strategy is not None:
        spec["queueingStrategy"] = strategy
    if orphan_timeout is not None:
        spec["orphanTimeout"] = orphan_timeout
    return {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": "Reservation",
        "metadata": {"name": name},
        "spec": spec,
    }


def claim(
    name: str,
    *,
    cluster: str = "cluster-a",
    gpus: Any = 2,
    state: str | None = None,
    priority: int | None = None,
    created: str = "2026-01-01T00:00:00Z",
    group: Any = 0,
    reservation: str = "p5-odcr",
    demand: dict[str, Any] | None = None,
    uid: str | None = None,
    orphaned_at: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "reservation": reservation,
        "cluster": cluster,
        "namespace": "team",
        "leaderWorkerSet": "vllm",
        "leaderWorkerSetUID": "u1",
        "groupIndex": group,
        "groupCreated": created,
        "demand": demand if demand is not None else {"nvidia.com/gpu": gpus, "cpu": "4"},
    }
    if priority is not None:
        spec["priority"] = priority
    obj: dict[str, Any] = {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": "ReservationClaim",
        "metadata": {
            "name": name,
            "namespace": f"lws-gatekeeper-member-{cluster}",
            "uid": uid or f"uid-{name}",
            "resourceVersion": "7",
        },
        "spec": spec,
    }
    if state is not None:
        obj["status"] = {"state": state}
    if orphaned_at is not None:
        obj.setdefault("status", {})["orphanedAt"] = orphaned_at
    return obj


def lease(
    cluster: str,
    version: str = "1",
    duration: Any = 40,
    name: str | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A member's heartbeat Lease on the hub (in its own namespace unless ``namespace``)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name if name is not None else f"lws-gatekeeper-member-{cluster}",
            "namespace": namespace if namespace is not None else f"lws-gatekeeper-member-{cluster}",
            "labels": {"lws-gatekeeper.io/cluster": cluster},
            "resourceVersion": version,
        },
        "spec": {
            "holderIdentity": cluster,
            "leaseDurationSeconds": duration,
            "renewTime": "2026-01-01T00:00:00.000000Z",
        },
    }
