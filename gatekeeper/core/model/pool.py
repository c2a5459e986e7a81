"""Pools: the shared, reserved sets of nodes that LWS groups are admitted into.

A ``Pool`` (cluster-scoped, ``lws-gatekeeper.io/v1alpha1``) names its nodes by
``spec.nodeSelector`` and may cap what admitted groups hold with ``spec.quota``; with
no quota, the cap is the allocatable capacity of the pool's schedulable nodes. This
module parses Pool objects strictly (so a typo is reported, not silently ignored),
matches nodes to pools and computes the pool's capacity.

An empty or absent ``spec.nodeSelector`` selects every node, as an empty label
selector does in Kubernetes.

**The tenant boundary.** A group admitted into a pool is steered to it: when its gates are
lifted, each pod's node selector gains the pool's ``spec.nodeSelector`` and its
tolerations the pool's ``spec.tolerations`` (as Kueue does with a ResourceFlavor's
``nodeLabels`` and ``tolerations``), and the node-fit check places its pods with those
(``Pool.steer``). ``spec.namespaceSelector`` says which namespaces may use the pool, with
the meaning a Kueue ClusterQueue gives it: absent, none; ``{}``, every namespace
(``Pool.admits``).

``spec.nodeFit`` says whether a group must also fit the free room of the pool's nodes
(``Required``, the default) or only its quota (``QuotaOnly``). The second is for pools
whose nodes an autoscaler adds when pods are Pending (Cluster Autoscaler, Karpenter):
autoscalers ignore gated pods, so a pool that waits for free nodes before it ungates
would never grow. Such a pool needs an explicit quota (its nodes come and go).

``spec.nodePools`` names the Karpenter NodePools whose nodes belong to the pool (their
template labels must carry the pool's ``nodeSelector``). Node fit then counts, beside the
free room of the existing nodes, what those NodePools can still launch
(``provisioning.py``): a group is admitted only when all its pods fit the two together,
so Karpenter buys nodes for whole groups only. Without ``spec.quota`` such a pool has no
quota of its own: the room decides. It cannot be combined with ``QuotaOnly``.
``spec.reservation`` names a ``Reservation`` on the hub cluster (``core.reservation``):
the pool's groups are charged to it as well as to the pool's own quota and node fit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from gatekeeper.core.kube.fields import mapping, sequence, string
from gatekeeper.core.kube.keys import GATEKEEPER_API_VERSION, POOL_KIND
from gatekeeper.core.kube.quantity import amounts
from gatekeeper.core.kube.selectors import (
    LabelSelector,
    NodeConstraints,
    Toleration,
    is_label_key,
    parse_label_map,
    parse_label_selector,
    parse_tolerations,
)
from gatekeeper.core.model.demand import GroupDemand, PodDemand, Resources
from gatekeeper.core.model.nodes import Node

E = TypeVar("E", bound=StrEnum)

MAX_NAME = 253
"""The longest object name Kubernetes has (a DNS subdomain)."""


class QueueingStrategy(StrEnum):
    """How a pool's queue treats a group that does not fit (Kueue's two strategies)."""

    BEST_EFFORT_FIFO = "BestEffortFIFO"
    """A group that does not fit is passed by later groups that do."""
    STRICT_FIFO = "StrictFIFO"
    """The first group that does not fit holds every later group of the pool."""


class NodeFit(StrEnum):
    """Whether admission into a pool also needs room on its nodes."""

    REQUIRED = "Required"
    """Every pod of the group must fit the free room of the pool's nodes now."""
    QUOTA_ONLY = "QuotaOnly"
    """The quota alone decides; the pods go Pending until nodes come (an autoscaled pool)."""


class WithinPool(StrEnum):
    """Whether a waiting group may take room from the pool's admitted groups (Kueue's
    ``withinClusterQueue``, its two values that need no cohort)."""

    NEVER = "Never"
    """Nothing admitted is ever taken back for a waiting group (the default)."""
    LOWER_PRIORITY = "LowerPriority"
    """A waiting group that fits only if admitted groups of lower priority go preempts them,
    whole groups only (``backends.pools.preemption``)."""


class ReclaimWithinCohort(StrEnum):
    """Whether a waiting group may take back what its pool lent to the other pools of its cohort
    (Kueue's ``reclaimWithinCohort``)."""

    NEVER = "Never"
    """What was lent stays lent until the borrowers' groups go of themselves (the default)."""
    LOWER_PRIORITY = "LowerPriority"
    """Borrowers' groups of lower priority are preempted, whole, to make room."""
    ANY = "Any"
    """Borrowers' groups are preempted whatever their priority: what is lent is the lender's."""


#: ``spec.topology.levels`` holds at most this many keys (the CRD says so too; Kueue's Topology too).
MAX_LEVELS = 16

#: ``spec.minRunSeconds`` is at most this (the CRD says so too): a day.
MAX_MIN_RUN_SECONDS = 86400

#: ``spec.admissionTimeout`` is between these, in seconds (the CRD says so too): a group needs
#: some seconds to be bound, and a day is longer than any cloud takes to launch a node.
MIN_ADMISSION_TIMEOUT = 1
MAX_ADMISSION_TIMEOUT = 86400

#: ``spec.admissionTimeout`` when a Pool does not say (the CRD defaults it to ``10m`` too):
#: no admitted group holds its quota for ever on pods that are never made or never bound.
DEFAULT_ADMISSION_TIMEOUT = 600


@dataclass(frozen=True)
class Pool:
    """A parsed Pool. ``quota`` None means "the pool nodes' allocatable"."""

    name: str
    node_selector: Mapping[str, str] = field(default_factory=dict)
    quota: Resources | None = None
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    node_fit: NodeFit = NodeFit.REQUIRED
    tolerations: tuple[Mapping[str, Any], ...] = ()
    """``spec.tolerations`` as written: added to the pods' tolerations when their gates are lifted."""
    namespace_selector: LabelSelector | None = field(default_factory=LabelSelector)
    """Which namespaces may use the pool; None (the field absent from a Pool object): none."""
    node_pools: tuple[str, ...] = ()
    """``spec.nodePools``: the Karpenter NodePools whose nodes belong to the pool (``provisioning.py``)."""
    reservation: str = ""
    """``spec.reservation``: the hub Reservation the pool's groups are charged to as well; "": none."""
    admission_timeout: int = DEFAULT_ADMISSION_TIMEOUT
    """``spec.admissionTimeout`` in seconds: an admitted group whose pods are not all bound by
    then is given back (``backends.pools.giveback``); ``DEFAULT_ADMISSION_TIMEOUT`` when the
    Pool does not say."""
    allowed_priority_classes: frozenset[str] | None = None
    """``spec.allowedPriorityClasses``: the PriorityClasses the pool's groups may name; None: any."""
    within_pool: WithinPool = WithinPool.NEVER
    """``spec.preemption.withinPool``: may a waiting group preempt admitted groups of lower priority?"""
    min_run_seconds: int = 0
    """``spec.minRunSeconds``: an admitted group is not preempted before it has held its admission
    this long (so a pool under churn does not thrash)."""
    cohort: str = ""
    """``spec.cohort``: the pools that lend one another unused room; "": none (``backends.pools.cohort``)."""
    lending_limit: Resources | None = None
    """``spec.lendingLimit``: at most this of each resource named is lent; None (or a resource
    not named): all that is unused."""
    borrowing_limit: Resources | None = None
    """``spec.borrowingLimit``: the pool's groups borrow at most this of each resource named;
    None (or a resource not named): no limit."""
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    """``spec.preemption.reclaimWithinCohort``: may a waiting group preempt borrowers' groups?"""
    levels: tuple[str, ...] = ()
    """``spec.topology.levels``: node label keys from the widest topology domain to the narrowest
    (block, rack, host); an LWS's groups may ask for one domain of a level
    (``core.admission.topology``)."""

    @property
    def lends(self) -> bool:
        """Does the pool lend or borrow at all? It names a cohort (its nodes decide its room)."""
        return bool(self.cohort)

    def disallowed(self, classes: Iterable[str]) -> tuple[str, ...]:
        """The classes of ``classes`` (those a group's templates name, "" for none) the pool
        does not allow: with ``spec.allowedPriorityClasses`` set, a template must name one of
        them (naming none would give its pods the cluster's default, whatever that is)."""
        if self.allowed_priority_classes is None:
            return ()
        return tuple(c for c in classes if c not in self.allowed_priority_classes)

    def selects(self, node: Node) -> bool:
        """Does ``spec.nodeSelector`` select this node?"""
        labels = node.labels
        return all(labels.get(key) == value for key, value in self.node_selector.items())

    def admits(self, namespace_labels: Mapping[str, str] | None) -> bool:
        """May a namespace with these labels use the pool? None: the namespace is not known."""
        if self.namespace_selector is None:
            return False
        if not self.namespace_selector.match_labels and not self.namespace_selector.expressions:
            return True
        return namespace_labels is not None and self.namespace_selector.matches(namespace_labels)

    def steer(self, demand: GroupDemand) -> GroupDemand:
        """``demand`` with its pods as they are once ungated into this pool: the pool's node
        selector added to theirs (a key the pod already selects keeps the pod's value) and its
        tolerations to theirs. Hard topology spread constraints are kept only where the pool's
        nodes are the nodes there will be (``nodeFit: Required``, no ``nodePools``): nodes bought
        or added later are not there to count them on."""
        rules = parse_tolerations(list(self.tolerations), "spec.tolerations")
        spreading = self.node_fit is NodeFit.REQUIRED and not self.node_pools
        pods = []
        for pod in demand.pods:
            c = pod.constraints
            own = dict(c.node_selector)
            selector = {**{k: v for k, v in self.node_selector.items() if k not in own}, **own}
            tolerations = c.tolerations + tuple(t for t in rules if t not in c.tolerations)
            steered = NodeConstraints(tuple(sorted(selector.items())), tolerations, c.affinity)
            if spreading:
                pods.append(PodDemand(pod.role, pod.requests, steered, pod.spreads, pod.counted_in))
            else:
                pods.append(PodDemand(pod.role, pod.requests, steered))
        return GroupDemand(tuple(pods))


def parse_pool(obj: Mapping[str, Any]) -> Pool:
    """A ``Pool`` from a Pool object dict; ValueError names the pool and the bad field."""
    meta = mapping(obj.get("metadata"), "metadata")
    name = meta.get("name")
    label = f"Pool {name}" if isinstance(name, str) and name else "Pool"
    try:
        if not isinstance(name, str) or not name:
            raise ValueError("metadata.name: missing")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version is not None and api_version != GATEKEEPER_API_VERSION:
            raise ValueError(f"apiVersion: expected {GATEKEEPER_API_VERSION}, got {api_version!r}")
        if kind is not None and kind != POOL_KIND:
            raise ValueError(f"kind: expected {POOL_KIND}, got {kind!r}")
        spec = mapping(obj.get("spec"), "spec")
        selector = parse_label_map(spec.get("nodeSelector"), "spec.nodeSelector")
        strategy = _choice(
            spec.get("queueingStrategy"), "spec.queueingStrategy", QueueingStrategy.BEST_EFFORT_FIFO
        )
        quota: dict[str, int] | None = None
        if spec.get("quota") is not None:
            quota = amounts(mapping(spec.get("quota"), "spec.quota"), "spec.quota")
        node_fit = _choice(spec.get("nodeFit"), "spec.nodeFit", NodeFit.REQUIRED)
        tolerations = tuple(
            dict(mapping(t, f"spec.tolerations[{i}]"))
            for i, t in enumerate(sequence(spec.get("tolerations"), "spec.tolerations"))
        )
        _check_tolerations(parse_tolerations(list(tolerations), "spec.tolerations"))
        namespaces = (
            parse_label_selector(spec["namespaceSelector"], "spec.namespaceSelector")
            if spec.get("namespaceSelector") is not None
            else None
        )
        node_pools = tuple(
            _node_pool_name(n, f"spec.nodePools[{i}]")
            for i, n in enumerate(sequence(spec.get("nodePools"), "spec.nodePools"))
        )
        if len(node_pools) > MAX_NODE_POOLS:
            raise ValueError(f"spec.nodePools: {len(node_pools)} NodePools, at most {MAX_NODE_POOLS}")
        timeout = (
            parse_duration(spec["admissionTimeout"], "spec.admissionTimeout")
            if spec.get("admissionTimeout") is not None
            else DEFAULT_ADMISSION_TIMEOUT
        )
        if node_pools and node_fit is NodeFit.QUOTA_ONLY:
            raise ValueError(
                "spec.nodePools: not with spec.nodeFit QuotaOnly (the NodePools say what nodes can come)"
            )
        classes = _allowed_classes(spec.get("allowedPriorityClasses"))
        reservation = string(spec.get("reservation"), "spec.reservation", "")
        if len(reservation) > MAX_NAME:
            raise ValueError(f"spec.reservation: longer than {MAX_NAME} characters")
        within_pool, min_run = _preemption(spec)
        cohort, lending, borrowing, reclaim = _cohort(spec)
        if cohort and (reservation or node_pools or node_fit is NodeFit.QUOTA_ONLY):
            raise ValueError(
                "spec.cohort: only a pool whose own nodes decide its room lends and borrows "
                "(not with spec.reservation, spec.nodePools or spec.nodeFit QuotaOnly)"
            )
        levels = _levels(spec, bool(node_pools) or node_fit is NodeFit.QUOTA_ONLY)
        if node_fit is NodeFit.QUOTA_ONLY and quota is None:
            raise ValueError(
                "spec.quota: required when spec.nodeFit is QuotaOnly (the pool's nodes come and go, "
                "so they cannot be its quota)"
            )
    except ValueError as err:
        raise ValueError(f"{label}: {err}") from None
    return Pool(
        name=name,
        node_selector=selector,
        quota=quota,
        queueing_strategy=strategy,
        node_fit=node_fit,
        tolerations=tolerations,
        namespace_selector=namespaces,
        node_pools=node_pools,
        reservation=reservation,
        admission_timeout=timeout,
        allowed_priority_classes=classes,
        within_pool=within_pool,
        min_run_seconds=min_run,
        cohort=cohort,
        lending_limit=lending,
        borrowing_limit=borrowing,
        reclaim_within_cohort=reclaim,
        levels=levels,
    )


def _choice(value: object, where: str, default: E) -> E:
    """One of an enum's values, ``default`` when absent; the error lists the allowed ones."""
    kind = type(default)
    name = string(value, where, default.value)
    try:
        return kind(name)
    except ValueError:
        allowed = ", ".join(v.value for v in kind)
        raise ValueError(f"{where}: {name!r} is not one of {allowed}") from None


def _levels(spec: Mapping[str, Any], nodes_to_come: bool) -> tuple[str, ...]:
    """``spec.topology.levels``: distinct node label keys, at most ``MAX_LEVELS``; () when absent.
    Not for a pool whose nodes are still to come (``nodes_to_come``: NodePools, QuotaOnly)."""
    topology = mapping(spec.get("topology"), "spec.topology")
    if spec.get("topology") is not None and nodes_to_come:
        raise ValueError(
            "spec.topology: only a pool whose nodes are there to be placed on has topology "
            "domains (not with spec.nodePools or spec.nodeFit QuotaOnly)"
        )
    raw = sequence(topology.get("levels"), "spec.topology.levels")
    if len(raw) > MAX_LEVELS:
        raise ValueError(f"spec.topology.levels: {len(raw)} levels, at most {MAX_LEVELS}")
    levels: list[str] = []
    for i, key in enumerate(raw):
        if not is_label_key(key):
            shown = key[:80] if isinstance(key, str) else type(key).__name__
            raise ValueError(f"spec.topology.levels[{i}]: not a node label key: {shown!r}")
        if key in levels:
            raise ValueError(f"spec.topology.levels[{i}]: {key} is named twice")
        levels.append(key)
    return tuple(levels)


def _preemption(spec: Mapping[str, Any]) -> tuple[WithinPool, int]:
    """``spec.preemption.withinPool`` (``Never`` when absent) and ``spec.minRunSeconds`` (0)."""
    preemption = mapping(spec.get("preemption"), "spec.preemption")
    within = _choice(preemption.get("withinPool"), "spec.preemption.withinPool", WithinPool.NEVER)
    raw = spec.get("minRunSeconds", 0)
    if type(raw) is not int or not 0 <= raw <= MAX_MIN_RUN_SECONDS:
        raise ValueError(f"spec.minRunSeconds: expected 0 to {MAX_MIN_RUN_SECONDS} seconds, got {raw!r}")
    return within, raw


_COHORT = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _cohort(spec: Mapping[str, Any]) -> tuple[str, Resources | None, Resources | None, ReclaimWithinCohort]:
    """``spec.cohort`` (a DNS label, "" when absent), ``spec.lendingLimit``, ``spec.borrowingLimit``
    and ``spec.preemption.reclaimWithinCohort``; the last three only with a cohort."""
    cohort = string(spec.get("cohort"), "spec.cohort", "")
    if cohort and not _COHORT.fullmatch(cohort):
        raise ValueError(
            f"spec.cohort: expected a DNS label (lower case, at most 63 characters), got {cohort!r}"
        )
    limits: list[Resources | None] = []
    for key in ("lendingLimit", "borrowingLimit"):
        raw = spec.get(key)
        if raw is not None and not cohort:
            raise ValueError(f"spec.{key}: only with spec.cohort")
        limits.append(None if raw is None else amounts(mapping(raw, f"spec.{key}"), f"spec.{key}"))
    preemption = mapping(spec.get("preemption"), "spec.preemption")
    where = "spec.preemption.reclaimWithinCohort"
    reclaim = _choice(preemption.get("reclaimWithinCohort"), where, ReclaimWithinCohort.NEVER)
    if reclaim is not ReclaimWithinCohort.NEVER and not cohort:
        raise ValueError(f"{where}: only with spec.cohort")
    return cohort, limits[0], limits[1], reclaim


#: At most this many PriorityClasses in ``spec.allowedPriorityClasses`` (the CRD says so too).
MAX_ALLOWED_PRIORITY_CLASSES = 32


def _allowed_classes(raw: object) -> frozenset[str] | None:
    """``spec.allowedPriorityClasses``: None when absent; each a PriorityClass name."""
    if raw is None:
        return None
    names = sequence(raw, "spec.allowedPriorityClasses")
    if len(names) > MAX_ALLOWED_PRIORITY_CLASSES:
        raise ValueError(
            f"spec.allowedPriorityClasses: {len(names)} classes, at most {MAX_ALLOWED_PRIORITY_CLASSES}"
        )
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            raise ValueError(f"spec.allowedPriorityClasses[{i}]: expected a PriorityClass name, got {name!r}")
    return frozenset(str(n) for n in names)


#: At most this many NodePools per Pool (the CRD says so too).
MAX_NODE_POOLS = 16


_DURATION = re.compile(r"(?:(\d{1,5})h)?(?:(\d{1,5})m)?(?:(\d{1,5})s)?")


def parse_duration(value: object, where: str) -> int:
    """Seconds from a duration as Kubernetes writes one (``90s``, ``2m``, ``1h30m``), bounded
    by ``MIN_ADMISSION_TIMEOUT`` and ``MAX_ADMISSION_TIMEOUT``."""
    found = _DURATION.fullmatch(value) if isinstance(value, str) and value else None
    if found is None or not any(found.groups()):
        raise ValueError(f"{where}: expected a duration such as 90s, 2m or 1h30m, got {value!r}")
    hours, minutes, seconds = (int(g or 0) for g in found.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not MIN_ADMISSION_TIMEOUT <= total <= MAX_ADMISSION_TIMEOUT:
        raise ValueError(
            f"{where}: {value!r} is {total} s; "
            f"it must be {MIN_ADMISSION_TIMEOUT} s to {MAX_ADMISSION_TIMEOUT} s"
        )
    return total


def _node_pool_name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 253:
        raise ValueError(f"{where}: expected a NodePool name of 1-253 characters, got {value!r}")
    return value


def _check_tolerations(tolerations: tuple[Toleration, ...]) -> None:
    for i, t in enumerate(tolerations):
        if t.operator not in ("Equal", "Exists"):
            raise ValueError(f"spec.tolerations[{i}].operator: {t.operator!r} is not one of Equal, Exists")


def sum_allocatable(nodes: Iterable[Node]) -> dict[str, int]:
    """Total allocatable of ``nodes``, per resource."""
    total: dict[str, int] = {}
    for node in nodes:
        for resource, amount in node.allocatable.items():
            total[resource] = total.get(resource, 0) + amount
    return total


def pool_capacity(pool: Pool, nodes: Iterable[Node]) -> dict[str, int]:
    """What the pool's admitted groups may hold at most right now.

    The explicit quota when given; otherwise the allocatable of the pool's
    schedulable nodes (cordoned and NotReady nodes do not count).
    """
    if pool.quota is not None:
        return dict(pool.quota)
    return sum_allocatable(n for n in nodes if n.schedulable and pool.selects(n))
