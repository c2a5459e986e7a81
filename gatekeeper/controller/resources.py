"""Where each kind the controller reads or writes lives in the API, built from ``core.kube.keys``.

Why this exists: informers and writes both address kinds by plural, group/version and
scope; spelling those once, from the same keys the decisions use, keeps a version bump
(Kueue's ``v1beta2``, say) to one line in ``core/kube/keys.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gatekeeper.core.kube.keys import (
    GATEKEEPER_API_VERSION,
    KARPENTER_API_VERSION,
    KUEUE_API_VERSION,
    LEASE_API_VERSION,
    LWS_API_VERSION,
    POOL_PLURAL,
    PRIORITY_CLASS_API_VERSION,
    RECORD_PLURAL,
)

__all__ = [
    "ADMISSION_CHECKS",
    "CLAIMS",
    "DAEMON_SETS",
    "EVENTS",
    "LEASES",
    "LWS",
    "NODES",
    "NODE_CLAIMS",
    "NODE_POOLS",
    "PODS",
    "POOLS",
    "PRIORITY_CLASSES",
    "RECORDS",
    "RESERVATIONS",
    "RESOURCE_FLAVORS",
    "SECRETS",
    "VALIDATING_WEBHOOK_CONFIGURATIONS",
    "WEBHOOK_CONFIGURATIONS",
    "WORKLOADS",
    "Resource",
    "by_plural",
]


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: ``version`` as kr8s takes it ("v1", "apps/v1")."""

    plural: str
    version: str = "v1"
    namespaced: bool = True

    @property
    def base(self) -> str:
        return "/api" if self.version == "v1" else "/apis"


LWS = Resource("leaderworkersets", LWS_API_VERSION)
PODS = Resource("pods")
NAMESPACES = Resource("namespaces", namespaced=False)
STATEFULSETS = Resource("statefulsets", "apps/v1")
LIMIT_RANGES = Resource("limitranges")
RUNTIME_CLASSES = Resource("runtimeclasses", "node.k8s.io/v1", namespaced=False)
DEVICE_CLASSES = Resource("deviceclasses", "resource.k8s.io/v1", namespaced=False)
RESOURCE_SLICES = Resource("resourceslices", "resource.k8s.io/v1", namespaced=False)
RESOURCE_CLAIM_TEMPLATES = Resource("resourceclaimtemplates", "resource.k8s.io/v1")
RESOURCE_CLAIMS = Resource("resourceclaims", "resource.k8s.io/v1")
NODES = Resource("nodes", namespaced=False)
EVENTS = Resource("events")
SECRETS = Resource("secrets")
POOLS = Resource(POOL_PLURAL, GATEKEEPER_API_VERSION, namespaced=False)
RECORDS = Resource(RECORD_PLURAL, GATEKEEPER_API_VERSION)
PRIORITY_CLASSES = Resource("priorityclasses", PRIORITY_CLASS_API_VERSION, namespaced=False)
LEASES = Resource("leases", LEASE_API_VERSION)
WEBHOOK_CONFIGURATIONS = Resource(
    "mutatingwebhookconfigurations", "admissionregistration.k8s.io/v1", namespaced=False
)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    "validatingwebhookconfigurations", "admissionregistration.k8s.io/v1", namespaced=False
)
WORKLOADS = Resource("workloads", KUEUE_API_VERSION)
RESOURCE_FLAVORS = Resource("resourceflavors", KUEUE_API_VERSION, namespaced=False)
ADMISSION_CHECKS = Resource("admissionchecks", KUEUE_API_VERSION, namespaced=False)
NODE_POOLS = Resource("nodepools", KARPENTER_API_VERSION, namespaced=False)
NODE_CLAIMS = Resource("nodeclaims", KARPENTER_API_VERSION, namespaced=False)
DAEMON_SETS = Resource("daemonsets", "apps/v1")
"""With Karpenter's pools: the pods every node it launches will run (``core.model.daemons``)."""
RESERVATIONS = Resource("reservations", GATEKEEPER_API_VERSION, namespaced=False)
"""On the hub: the Reservations members share."""
CLAIMS = Resource("reservationclaims", GATEKEEPER_API_VERSION)
"""On the hub: one claim per group of any member."""

_ALL = (
    LWS, PODS, NAMESPACES, STATEFULSETS, NODES, EVENTS, SECRETS, POOLS, RECORDS, PRIORITY_CLASSES, LEASES,
    WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS, WORKLOADS, RESOURCE_FLAVORS, ADMISSION_CHECKS,
    NODE_POOLS, NODE_CLAIMS, DAEMON_SETS, RESERVATIONS, CLAIMS,
)  # fmt: skip


def by_plural(plural: str) -> Resource:
    """The resource a plan's write names by its plural (KeyError for one the controller never writes)."""
    return _BY_PLURAL[plural]


_BY_PLURAL = {res.plural: res for res in _ALL}
