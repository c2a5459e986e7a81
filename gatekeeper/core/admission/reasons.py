"""Why a group is not admitted: a small closed set of reasons, each with a fixed meaning.

Conditions and Events carry both a machine-readable reason (these values, CamelCase as
Kubernetes condition reasons are) and a sentence for people. The set separates groups
that wait for something that will come back (quota, node room, their turn) from groups
that cannot be admitted as things stand, however long they wait (bad input, too big).
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Why a waiting group was not admitted in a planning pass."""

    POOL_NOT_FOUND = "PoolNotFound"
    """The LWS names a pool that does not exist."""
    NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
    """The pool's ``spec.namespaceSelector`` does not admit the LWS's namespace."""
    PRIORITY_CLASS_NOT_ALLOWED = "PriorityClassNotAllowed"
    """The LWS's templates name a PriorityClass (or none) that the pool's
    ``spec.allowedPriorityClasses`` does not list."""
    NOT_MADE_BY_LWS = "NotMadeByLeaderWorkerSet"
    """A pod claims an admitted group by its labels but was not made by the LWS's
    StatefulSets: it stays gated (the group keeps its admission)."""
    BEYOND_GROUP_SIZE = "BeyondGroupSize"
    """Pods made through the LWS's own chain claim worker indices at or past its ``size`` (a
    worker StatefulSet scaled by hand): they stay gated (the group keeps its admission)."""
    NOT_AS_ADMITTED = "NotAsAdmitted"
    """A pod made by the LWS asks more than its role was admitted with, or another
    RuntimeClass or PriorityClass (its StatefulSet's template edited by hand): it stays
    gated (the group keeps its admission). A group whose own pod stays so for a few seconds
    is given back (``Admitted=False``, every backend), as on ``AdmissionTimeout``."""
    INVALID_SPEC = "InvalidSpec"
    """The group's demand could not be computed from the LWS (malformed template)."""
    RESOURCE_NOT_IN_QUOTA = "ResourceNotInQuota"
    """The group requests a resource the pool's quota does not cover at all."""
    EXCEEDS_QUOTA = "ExceedsQuota"
    """The group needs more than the pool's quota, even with nothing else admitted."""
    NO_MATCHING_NODE = "NoMatchingNode"
    """A pod matches no node of the pool (nodeSelector, node affinity, taints), or the pool has none."""
    NODES_TOO_SMALL = "NodesTooSmall"
    """Even on empty nodes the group's pods cannot be placed: a pod is larger than any node."""
    WAITING_FOR_QUOTA = "WaitingForQuota"
    """The pool's quota is held by admitted groups; the group waits for some to leave."""
    WAITING_FOR_NODES = "WaitingForNodes"
    """Quota fits, but the nodes lack room for every pod at once (1+1+1+1 GPUs free, a pod needs 2)."""
    BLOCKED_BY_STRICT_FIFO = "BlockedByStrictFIFO"
    """A StrictFIFO pool holds the group behind an earlier group that does not fit yet."""
    TEMPLATE_CHANGED = "TemplateChanged"
    """An admitted group's LWS now asks another demand: its new pods wait for its old ones to go."""
    WAITING_FOR_RESERVATION = "WaitingForReservation"
    """The group fits its pool, whose ``spec.reservation`` names a hub Reservation: it waits
    for the hub to grant its claim."""
    HUB_UNREACHABLE = "HubUnreachable"
    """The group's pool is charged to a hub Reservation and the hub cannot be reached (or was
    not read yet): no new group of such a pool is admitted meanwhile."""
    KARPENTER_UNAVAILABLE = "KarpenterUnavailable"
    """The group's pool plans on Karpenter's NodePools (``spec.nodePools``) and they cannot be
    read: no new group of such a pool is admitted meanwhile; other pools go on."""
    ADMISSION_TIMEOUT = "AdmissionTimeout"
    """An admitted group's pods were not all bound within its pool's ``spec.admissionTimeout``:
    it was given back (its pods deleted) and is tried again after a delay."""
    STRANDED = "Stranded"
    """A group once placed whole has a pod that no node of its pool has room for any more (the
    scheduler's preemption, a pod the gatekeeper did not admit, a node lost): given back whole,
    its pods deleted; it waits in the queue again."""
    WAITING_FOR_GANG = "WaitingForGang"
    """A group of a gang (``lws-gatekeeper.io/gang``, a DisaggregatedSet's roles) waits until all
    the LWSs its gang says it has (``lws-gatekeeper.io/gang-size``) are there."""
    TOPOLOGY_NOT_IN_POOL = "TopologyNotInPool"
    """The LWS asks for its groups to be placed in one domain of a topology level (annotation
    ``lws-gatekeeper.io/topology-required`` or ``-preferred``) that is not one of its Pool's
    ``spec.topology.levels``."""
    PREEMPTED = "Preempted"
    """An admitted group was preempted for a waiting group of higher priority (its Pool's
    ``spec.preemption.withinPool``): given back, its pods deleted; it waits in the queue again."""

    @property
    def permanent(self) -> bool:
        """True when waiting alone will not help: the input or the pool must change.

        Such groups are reported and skipped; they never block a StrictFIFO queue.
        """
        return self not in _TRANSIENT


_TRANSIENT = frozenset(
    {
        Reason.WAITING_FOR_QUOTA,
        Reason.WAITING_FOR_NODES,
        Reason.WAITING_FOR_GANG,
        Reason.BLOCKED_BY_STRICT_FIFO,
        Reason.TEMPLATE_CHANGED,
        Reason.NOT_MADE_BY_LWS,
        Reason.BEYOND_GROUP_SIZE,
        Reason.NOT_AS_ADMITTED,
        Reason.WAITING_FOR_RESERVATION,
        Reason.HUB_UNREACHABLE,
        Reason.KARPENTER_UNAVAILABLE,
        Reason.ADMISSION_TIMEOUT,
        Reason.PREEMPTED,
        Reason.STRANDED,
    }
)


STRANGER_REASONS = frozenset({Reason.NOT_MADE_BY_LWS, Reason.BEYOND_GROUP_SIZE, Reason.NOT_AS_ADMITTED})
"""Why some gated pods of a group that keeps its admission are not let through on it
(``core.admission.members.strangers_said``): a Warning, and the record's reason until they are gone."""
