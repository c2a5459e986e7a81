"""What the end-to-end tests of a Reservation shared through a hub have in common.

Why this exists: ``test_shared_reservation.py`` (two members sharing one Reservation) and
``test_shared_members_gone.py`` (a member's heartbeat expiring) read the same objects: the
hub's claims, the members' pods, a sampler of held and bound GPUs, and the ``scene``
fixture (a Reservation of 4 GPUs, a Pool charged to it and an LWS in each member).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from gatekeeper.core.kube.quantity import parse_units
from gatekeeper.core.reservation import member_namespace

from .conftest import SharedHub

GPU = "nvidia.com/gpu"
CAPACITY = 4
HOLDING = ("Granted", "Orphaned")
"""Claim states that hold their demand in the Reservation."""


def _json(run: Callable[..., Any], *args: str) -> Any:
    return json.loads(run(*args, "-o", "json").stdout)


def lws_manifest(namespace: str, pool: str, replicas: int) -> dict[str, Any]:
    pod = {
        "containers": [
            {"name": "c", "image": "vllm", "resources": {"limits": {GPU: "1"}, "requests": {"cpu": "100m"}}}
        ]
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": namespace, "labels": {"lws-gatekeeper.io/pool": pool}},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": {"spec": pod},
                "workerTemplate": {"spec": pod},
            },
        },
    }


def granted_gpus(shared: SharedHub, reservation: str) -> tuple[int, list[dict[str, Any]]]:
    """(GPUs held in the Reservation by Granted and Orphaned claims, every claim naming it)."""
    claims = [
        c
        for c in _json(shared.hub.kubectl, "get", "reservationclaims", "-A")["items"]
        if c["spec"]["reservation"] == reservation
    ]
    total = sum(
        parse_units(GPU, c["spec"]["demand"].get(GPU, "0"))
        for c in claims
        if c.get("status", {}).get("state") in HOLDING
    )
    return total, claims


def pods_of(shared: SharedHub, namespace: str) -> dict[str, list[dict[str, Any]]]:
    return {
        name: _json(sb.kubectl, "get", "pods", "-n", namespace)["items"]
        for name, sb in shared.members.items()
    }


def whole_running_groups(pods: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(groups whose 2 pods both run ungated, ungated pods, gated pods) of one cluster."""
    groups: dict[str, int] = {}
    ungated = gated = 0
    for p in pods:
        if p["spec"].get("schedulingGates"):
            gated += 1
            continue
        ungated += 1
        if p["status"].get("phase") == "Running":
            index = p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
            groups[index] = groups.get(index, 0) + 1
    return sum(1 for n in groups.values() if n == 2), ungated, gated


def whole_groups_across(shared: SharedHub, namespace: str) -> tuple[int, int, int]:
    """``whole_running_groups`` summed over the members."""
    counts = [whole_running_groups(p) for p in pods_of(shared, namespace).values()]
    whole, ungated, gated = (sum(c[i] for c in counts) for i in range(3))
    return whole, ungated, gated


def scale_all(shared: SharedHub, namespace: str, replicas: int) -> None:
    """Scale the LWS in every member at once."""
    scalers = [
        threading.Thread(
            target=sb.kubectl, args=("scale", "lws", "vllm", "-n", namespace, f"--replicas={replicas}")
        )
        for sb in shared.members.values()
    ]
    for t in scalers:
        t.start()
    for t in scalers:
        t.join()


def bound_throughout(
    first: dict[str, list[dict[str, Any]] | None], second: dict[str, list[dict[str, Any]] | None]
) -> int:
    """Pods bound in both of two listings of every member, the second begun after the first
    ended: each was bound at every instant between them, so the sum is a count at one instant.

    One listing per member, taken one after another, could count one member's pods just before
    they go and another's just after they bind, more than were ever bound together. This count
    can miss a pod that bound in between, never invents one: sound for "never above capacity".
    A member unread in either listing counts nothing.
    """

    def bound(pods: list[dict[str, Any]] | None) -> set[str]:
        return {p["metadata"]["uid"] for p in pods or () if p["spec"].get("nodeName")}

    return sum(len(bound(first.get(name)) & bound(pods)) for name, pods in second.items())


class Sampler(threading.Thread):
    """Every second: the hub's granted GPUs and the GPUs of ungated pods bound in the members
    (:func:`bound_throughout` of two listings)."""

    def __init__(self, shared: SharedHub, reservation: str, namespace: str) -> None:
        super().__init__(daemon=True)
        self.shared, self.reservation, self.namespace = shared, reservation, namespace
        self.granted: list[int] = []
        self.bound: list[int] = []
        self.at: list[float] = []
        """When each sample was taken (monotonic seconds)."""
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            start = time.monotonic()
            self.granted.append(granted_gpus(self.shared, self.reservation)[0])
            first: dict[str, list[dict[str, Any]] | None] = dict(pods_of(self.shared, self.namespace))
            self.bound.append(bound_throughout(first, dict(pods_of(self.shared, self.namespace))))
            self.at.append(start)
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - start)))


def eventually(check: Callable[[], bool], timeout: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture
def scene(shared_hub: SharedHub) -> Any:
    """A Reservation of 4 GPUs on the hub; in each member a namespace, a Pool charged to it and
    an LWS of groups of two 1-GPU pods at 0 replicas. Removed afterwards."""
    tag = uuid.uuid4().hex[:5]
    reservation, pool, ns = f"odcr-{tag}", f"shared-{tag}", f"shared-{tag}"
    shared_hub.hub.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "lws-gatekeeper.io/v1alpha1",
                "kind": "Reservation",
                "metadata": {"name": reservation},
                "spec": {"capacity": {GPU: CAPACITY}},
            }
        ),
    )
    for sb in shared_hub.members.values():
        sb.kubectl("create", "namespace", ns)
        sb.apply(
            [
                {
                    "apiVersion": "lws-gatekeeper.io/v1alpha1",
                    "kind": "Pool",
                    "metadata": {"name": pool},
                    "spec": {
                        "nodeSelector": {"pool": shared_hub.node_label},
                        "namespaceSelector": {},
                        "quota": {GPU: 4},
                        "reservation": reservation,
                    },
                },
                lws_manifest(ns, pool, 0),
            ]
        )
    yield reservation, pool, ns
    for sb in shared_hub.members.values():
        sb.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        sb.kubectl("delete", "pool", pool, "--wait=false", check=False)
    shared_hub.hub.kubectl("delete", "reservation", reservation, "--wait=false", check=False)


def claim_body(
    reservation: str,
    cluster: str,
    tag: str,
    *,
    gpus: str = "1",
    priority: int | None = None,
    namespace: str | None = None,
) -> str:
    """A ReservationClaim in ``cluster``'s name, as a member would write one (JSON), in that
    member's namespace on the hub unless ``namespace``."""
    spec: dict[str, Any] = {
        "reservation": reservation,
        "cluster": cluster,
        "namespace": "x",
        "leaderWorkerSet": "y",
        "groupIndex": 0,
        "demand": {GPU: gpus},
    }
    if priority is not None:
        spec["priority"] = priority
    return json.dumps(
        {
            "apiVersion": "lws-gatekeeper.io/v1alpha1",
            "kind": "ReservationClaim",
            "metadata": {
                "name": f"{cluster}.{tag}",
                "namespace": namespace or member_namespace(cluster),
                "labels": {"lws-gatekeeper.io/cluster": cluster},
            },
            "spec": spec,
        }
    )
