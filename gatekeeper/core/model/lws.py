"""What the decisions read of a LeaderWorkerSet and of its pods, each rule written once.

Why this exists: every backend needs the same facts of an LWS (its pool, its priority, its
replicas, its templates) and of its pods (group, worker index, template revision, gated,
bound, terminating). Reading them in one place keeps the backends from drifting apart: the
priority of a pod, for one, is read by the rule the API server applies (a PriorityClass
name decides; a bare ``priority`` counts only without one), for both backends alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.core.kube.keys import (
    DISAGGREGATED_REVISION_LABEL,
    DISAGGREGATED_SET_LABEL,
    DISAGGREGATED_SLICE_LABEL,
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    GANG_LABEL,
    GANG_SIZE_ANNOTATION,
    GROUP_INDEX_LABEL,
    POOL_LABEL,
    REVISION_LABEL,
    SCHEDULING_GATE,
    SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    WORKER_INDEX_LABEL,
)
from gatekeeper.core.kube.objects import as_list, as_map, is_live, is_terminating, labels, meta
from gatekeeper.core.kube.selectors import is_label_key
from gatekeeper.core.model.claims import made_claims

__all__ = [
    "LEADER_READY",
    "MAX_REPLICAS",
    "GroupPod",
    "Priority",
    "Subgroups",
    "TopologyRequest",
    "exclusive_topology",
    "gang_of",
    "gang_size",
    "group_index",
    "is_gated",
    "pool_of",
    "priority",
    "priority_classes",
    "replicas",
    "size",
    "startup_policy",
    "subgroups",
    "templates",
    "topology_request",
    "worker_index",
]


def pool_of(lws: Mapping[str, Any]) -> str:
    """The value of the opt-in label: the pool (or LocalQueue) the LWS asks for."""
    return str(labels(lws).get(POOL_LABEL, ""))


def _label_key(annotations: Mapping[str, Any], annotation: str) -> str:
    key = annotations[annotation]
    if not is_label_key(key):
        shown = key[:80] if isinstance(key, str) else type(key).__name__
        raise ValueError(f"annotation {annotation} is not a node label key: {shown!r}")
    return str(key)


def exclusive_topology(lws: Mapping[str, Any]) -> str:
    """The node label key of the LWS's exclusive placement (annotation
    ``leaderworkerset.sigs.k8s.io/exclusive-topology``: each group alone in one domain of it),
    or "" when it has none. Raises ValueError when the value is no label key: LWS would
    write it into each pod's affinity, and the API server refuses such pods."""
    annotations = as_map(meta(lws).get("annotations"))
    if EXCLUSIVE_TOPOLOGY_ANNOTATION not in annotations:
        return ""
    return _label_key(annotations, EXCLUSIVE_TOPOLOGY_ANNOTATION)


@dataclass(frozen=True)
class TopologyRequest:
    """The topology level an LWS's groups ask to be placed in (``core.admission.topology``)."""

    key: str
    """A node label key: one of the Pool's ``spec.topology.levels``."""
    required: bool
    """Required (``topology-required``): one domain of ``key`` or not admitted; preferred: one
    domain of ``key`` if one has room, else of a wider level, else anywhere."""


def topology_request(lws: Mapping[str, Any]) -> TopologyRequest | None:
    """The LWS's ``lws-gatekeeper.io/topology-required`` or ``-preferred`` annotation, or None.

    Raises ValueError when a value is no label key, when both are set, or when the required
    key is not the LWS's own ``exclusive-topology`` key while that is set (its groups would be
    asked to lie in one domain of each: not modelled, so refused rather than admitted into
    room the scheduler may not bind)."""
    annotations = as_map(meta(lws).get("annotations"))
    given = [a for a in (TOPOLOGY_REQUIRED_ANNOTATION, TOPOLOGY_PREFERRED_ANNOTATION) if a in annotations]
    if not given:
        return None
    if len(given) == 2:
        raise ValueError(f"annotations {given[0]} and {given[1]}: set one, not both")
    request = TopologyRequest(_label_key(annotations, given[0]), given[0] == TOPOLOGY_REQUIRED_ANNOTATION)
    exclusive = exclusive_topology(lws)
    if request.required and exclusive and exclusive != request.key:
        raise ValueError(
            f"annotation {TOPOLOGY_REQUIRED_ANNOTATION} names {request.key} but "
            f"{EXCLUSIVE_TOPOLOGY_ANNOTATION} names {exclusive}: a group is placed in one domain of one key"
        )
    return request


def templates(lws: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(leader template, worker template); the leader's is the worker's when absent."""
    lwt = as_map(as_map(lws.get("spec")).get("leaderWorkerTemplate"))
    worker = as_map(lwt.get("workerTemplate"))
    return as_map(lwt.get("leaderTemplate")) or worker, worker


def size(lws: Mapping[str, Any]) -> int:
    """Pods per group (leader included); 1 when unreadable (the demand says why)."""
    value = as_map(as_map(lws.get("spec")).get("leaderWorkerTemplate")).get("size", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


@dataclass(frozen=True)
class Subgroups:
    """An LWS's subgroup exclusive placement: each of ``parts`` (pod indices, 0 the leader) alone
    in one domain of ``key``; the pods of ``loose`` (a leader of ``LeaderExcluded``) in none."""

    key: str
    parts: tuple[tuple[int, ...], ...]
    loose: tuple[int, ...] = ()


def subgroups(lws: Mapping[str, Any]) -> Subgroups | None:
    """The LWS's ``subgroup-exclusive-topology`` over its ``subGroupPolicy``, its pods split as
    LWS's pod webhook labels them, or None without the annotation. Raises ValueError when the
    key is no label key or the policy cannot be read (LWS's own webhook refuses such an LWS)."""
    annotations = as_map(meta(lws).get("annotations"))
    if SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION not in annotations:
        return None
    key = _label_key(annotations, SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION)
    template = as_map(as_map(lws.get("spec")).get("leaderWorkerTemplate"))
    policy = as_map(template.get("subGroupPolicy"))
    every, count = policy.get("subGroupSize"), size(lws)
    if type(every) is not int or not 1 <= every <= count:
        raise ValueError(
            f"spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize: expected 1 to {count} with "
            f"annotation {SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION}, got {every!r}"
        )
    excluded = policy.get("subGroupPolicyType") == "LeaderExcluded"
    extra = (count - 1) % every == 0  # the leader is the extra pod, in the first subgroup
    parts: dict[int, list[int]] = {} if excluded else {0: [0]}
    for worker in range(1, count):
        parts.setdefault((worker - 1) // every if extra else worker // every, []).append(worker)
    return Subgroups(key, tuple(tuple(parts[i]) for i in sorted(parts)), (0,) if excluded else ())


_GANG_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def gang_of(lws: Mapping[str, Any], index: int) -> str:
    """The unit group ``index`` of the LWS is admitted in with groups of other LWSs of its
    namespace, or "" when it is admitted alone: the LWSs of one DisaggregatedSet revision (its
    roles), or of one ``lws-gatekeeper.io/gang`` label value. With a slice label every group of
    the slice's LWSs is one unit; without, the first group of each role is, and later groups go
    one by one. Raises ValueError when a label's value is no label value."""
    lbl = labels(lws)
    if GANG_LABEL in lbl:
        name = f"gang {_gang_value(lbl[GANG_LABEL], GANG_LABEL)}"
    elif DISAGGREGATED_SET_LABEL in lbl:
        revision = lbl.get(DISAGGREGATED_REVISION_LABEL, "")
        name = f"DisaggregatedSet {_gang_value(lbl[DISAGGREGATED_SET_LABEL], DISAGGREGATED_SET_LABEL)}"
        if revision:
            name += f" revision {_gang_value(revision, DISAGGREGATED_REVISION_LABEL)}"
    else:
        return ""
    if DISAGGREGATED_SLICE_LABEL in lbl:
        return f"{name} slice {_gang_value(lbl[DISAGGREGATED_SLICE_LABEL], DISAGGREGATED_SLICE_LABEL)}"
    return name if index == 0 else ""


MAX_GANG_SIZE = 64
"""The most LWSs one gang may say it has (a DisaggregatedSet has at most 10 roles)."""


def gang_size(lws: Mapping[str, Any]) -> int:
    """How many LWSs the LWS's gang has (annotation ``lws-gatekeeper.io/gang-size``), 0 when it
    does not say. Raises ValueError when it is not a number from 1 to ``MAX_GANG_SIZE``."""
    raw = as_map(meta(lws).get("annotations")).get(GANG_SIZE_ANNOTATION)
    if raw is None:
        return 0
    if not isinstance(raw, str) or not raw.isdigit() or not 1 <= int(raw) <= MAX_GANG_SIZE:
        shown = raw[:20] if isinstance(raw, str) else type(raw).__name__
        raise ValueError(f"annotation {GANG_SIZE_ANNOTATION}: expected 1 to {MAX_GANG_SIZE}, got {shown!r}")
    return int(raw)


def _gang_value(value: object, key: str) -> str:
    if not isinstance(value, str) or not _GANG_VALUE.fullmatch(value):
        shown = value[:80] if isinstance(value, str) else type(value).__name__
        raise ValueError(f"label {key} is not a label value: {shown!r}")
    return value


MAX_REPLICAS = 10_000
"""The most groups one LWS may ask for: with more, which groups are wanted is taken as
unreadable (``InvalidSpec``; groups already admitted keep their reservation). Each group is
a record and a place in the queue, and ``replicas`` can be raised by anyone who may scale."""


def replicas(lws: Mapping[str, Any]) -> int:
    """``spec.replicas`` (1 when absent, the API server's default); ValueError when unreadable
    or above ``MAX_REPLICAS``."""
    value = as_map(lws.get("spec")).get("replicas")
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"spec.replicas: expected a non-negative integer, got {value!r}")
    if value > MAX_REPLICAS:
        raise ValueError(
            f"spec.replicas: at most {MAX_REPLICAS} groups per LeaderWorkerSet are supported, got {value}"
        )
    return value


@dataclass(frozen=True)
class Priority:
    """The priority of an LWS's pods: a value (None when unknown) and the PriorityClass that gave it."""

    value: int | None = None
    class_name: str | None = None

    @property
    def order(self) -> int:
        """The value queues sort by: an unknown priority counts as 0, as the API server's default."""
        return self.value if self.value is not None else 0


def priority(lws: Mapping[str, Any], classes: Mapping[str, int]) -> Priority:
    """The priority of the LWS's pods, leader template first.

    The API server's rule: a ``priorityClassName`` decides the value (a pod whose explicit
    ``priority`` differs is refused); a bare ``priority`` counts only without a class name.
    A class that does not exist (yet) gives an unknown value.
    """
    spec_tmpl = as_map(as_map(lws.get("spec")).get("leaderWorkerTemplate"))
    for tmpl in (spec_tmpl.get("leaderTemplate"), spec_tmpl.get("workerTemplate")):
        spec = as_map(as_map(tmpl).get("spec"))
        name = spec.get("priorityClassName")
        if isinstance(name, str) and name:
            return Priority(classes.get(name), name)
        value = spec.get("priority")
        if isinstance(value, int) and not isinstance(value, bool):
            return Priority(value)
    return Priority()


def priority_classes(lws: Mapping[str, Any]) -> tuple[str, ...]:
    """The PriorityClass each of the LWS's templates names, leader's then worker's, each once
    ("" for a template that names none: its pods get the cluster's default). The leader's
    template is the worker's when the LWS has none, as its pods are made."""
    leader, worker = templates(lws)
    named: list[str] = []
    for tmpl in (leader, worker):
        name = as_map(as_map(tmpl).get("spec")).get("priorityClassName")
        value = name if isinstance(name, str) else ""
        if value not in named:
            named.append(value)
    return tuple(named)


LEADER_READY = "LeaderReady"
"""``spec.startupPolicy`` under which the LWS makes a group's workers only once its leader is Ready."""


def startup_policy(lws: Mapping[str, Any]) -> str:
    """``spec.startupPolicy``; ``LeaderCreated`` (the LWS default) when absent or unreadable."""
    value = as_map(lws.get("spec")).get("startupPolicy")
    return value if isinstance(value, str) else "LeaderCreated"


def group_index(pod: Mapping[str, Any]) -> int | None:
    """The pod's group index; None when it has none or an unreadable one."""
    try:
        index = int(str(labels(pod)[GROUP_INDEX_LABEL]))
    except (KeyError, ValueError):
        return None
    return index if index >= 0 else None


def worker_index(pod: Mapping[str, Any]) -> int:
    """The pod's index in its group (0: the leader); 0 when unreadable."""
    try:
        return int(str(labels(pod).get(WORKER_INDEX_LABEL, "0")))
    except ValueError:
        return 0


def is_gated(pod: Mapping[str, Any]) -> bool:
    """Does the pod still carry the gatekeeper's scheduling gate?"""
    gates = as_list(as_map(pod.get("spec")).get("schedulingGates"))
    return any(as_map(g).get("name") == SCHEDULING_GATE for g in gates)


@dataclass(frozen=True)
class GroupPod:
    """What a pass needs of one pod of an opted-in LWS, read once."""

    name: str
    live: bool
    """Not Succeeded/Failed."""
    terminating: bool
    gated: bool
    bound: bool
    worker: int
    revision: str
    spec: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """The pod's spec (not copied), for ``core.admission.conformance`` to check a gated pod
    against its role before the gate is lifted, and what a group's pods ask in all."""
    created: str = field(default="", compare=False, repr=False)
    """The pod's ``metadata.creationTimestamp`` as written (parsed only when needed): how long a
    gated pod that does not ask what its role was admitted with has waited
    (``backends.pools.giveback.departed``), or an unbound one of a placed group that no node has
    room for (``backends.pools.giveback.displaced``)."""
    claims_made: Mapping[str, str | None] = field(default_factory=dict, compare=False, repr=False)
    """The pod's DRA claims as made for it (``core.model.claims.made_claims``), for
    ``core.admission.conformance`` to count what they ask."""
    ready_since: str = field(default="", compare=False, repr=False)
    """A bound leader's ``Ready=True`` condition's ``lastTransitionTime`` as written; "" when
    it is not Ready (or not a bound leader): under ``LeaderReady`` its workers are made only
    from then (``backends.pools.giveback``)."""

    @classmethod
    def read(cls, pod: Mapping[str, Any], name: str) -> GroupPod:
        spec = as_map(pod.get("spec"))
        gated = is_gated(pod)
        bound = bool(spec.get("nodeName"))
        worker = worker_index(pod)
        return cls(
            name=name,
            live=is_live(pod),
            terminating=is_terminating(pod),
            gated=gated,
            bound=bound,
            worker=worker,
            revision=str(labels(pod).get(REVISION_LABEL) or ""),
            spec=spec,
            created=str(as_map(pod.get("metadata")).get("creationTimestamp") or ""),
            claims_made=made_claims(pod) if spec.get("resourceClaims") else {},
            ready_since=_ready_since(pod) if bound and worker == 0 else "",
        )


def _ready_since(pod: Mapping[str, Any]) -> str:
    for c in as_list(as_map(pod.get("status")).get("conditions")):
        said = as_map(c)
        if said.get("type") == "Ready":
            return str(said.get("lastTransitionTime") or "") if said.get("status") == "True" else ""
    return ""
