"""Nodes and what is already running on them, reduced to what node fit needs.

Node fit works on allocatable capacity minus the requests of every pod already bound
to the node: ours, other users', DaemonSets'. This module turns Node and Pod objects
(dicts as the API returns them) into that: a small ``Node`` value per node and a
per-node usage total. The I/O layer can cache both between planning passes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.core.kube.fields import mapping, sequence, string
from gatekeeper.core.kube.keys import (
    CHARGE_KEY,
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    KUEUE_POD_GROUP_KEY,
    KUEUE_ROLE_ANNOTATION,
)
from gatekeeper.core.kube.objects import as_list, as_map, is_live
from gatekeeper.core.kube.quantity import parse_units
from gatekeeper.core.kube.selectors import Taint, parse_label_map, parse_taints
from gatekeeper.core.model.closed import opens_closed_pools
from gatekeeper.core.model.demand import Resources, pod_requests


@dataclass(frozen=True)
class Node:
    """A node as node fit sees it.

    ``ready`` is the status of the Ready condition: True, False, or None (Unknown or
    not reported). A node takes new pods when it is not cordoned and not NotReady.
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Resources = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool | None = True
    provider_id: str = ""
    """``spec.providerID``: how a Karpenter NodeClaim knows its node before it names it."""

    @property
    def schedulable(self) -> bool:
        """Not cordoned (``spec.unschedulable``) and the Ready condition is not False."""
        return not self.unschedulable and self.ready is not False


def parse_node(obj: Mapping[str, Any]) -> Node:
    """A ``Node`` from a Node object dict; allocatable falls back to capacity when absent."""
    meta = mapping(obj.get("metadata"), "metadata")
    name = string(meta.get("name"), "metadata.name")
    try:
        if not name:
            raise ValueError("metadata.name: missing")
        spec = mapping(obj.get("spec"), "spec")
        status = mapping(obj.get("status"), "status")
        raw = status.get("allocatable")
        where = "status.allocatable"
        if raw is None:
            raw, where = status.get("capacity"), "status.capacity"
        allocatable = {}
        for resource, value in mapping(raw, where).items():
            try:
                allocatable[resource] = parse_units(resource, value)
            except ValueError as err:
                raise ValueError(f"{where}[{resource}]: {err}") from None
        ready: bool | None = None
        for condition in sequence(status.get("conditions"), "status.conditions"):
            if isinstance(condition, Mapping) and condition.get("type") == "Ready":
                ready = {"True": True, "False": False}.get(str(condition.get("status")))
        return Node(
            name=name,
            labels=parse_label_map(meta.get("labels"), "metadata.labels"),
            allocatable=allocatable,
            taints=parse_taints(spec.get("taints"), "spec.taints"),
            unschedulable=bool(spec.get("unschedulable", False)),
            ready=ready,
            provider_id=string(spec.get("providerID"), "spec.providerID")[:512],
        )
    except ValueError as err:
        raise ValueError(f"Node {name}: {err}") from None


_BOUND_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "ownerReferences",
    "deletionTimestamp",
)
_BOUND_ANNOTATIONS = (KUEUE_POD_GROUP_KEY, KUEUE_ROLE_ANNOTATION, EXCLUSIVE_TOPOLOGY_ANNOTATION)
_BOUND_SPEC = ("nodeName", "overhead", "resources")
_CONTAINER = ("name", "resources", "restartPolicy")


def _kept(value: Any, keys: Iterable[str]) -> Any:
    """``value`` with only ``keys``, or ``value`` itself when it is no mapping (so that a
    malformed object reads as malformed, not as empty)."""
    if not isinstance(value, Mapping):
        return value
    return {key: value[key] for key in keys if key in value}


def _containers(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    return [_kept(c, _CONTAINER) for c in value]


def bound_pod_view(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the decisions read of a bound pod, anyone's: its requests, node, phase, the
    metadata that ties it to a group or Workload (and its LWS's exclusive placement,
    ``core.admission.exclusive``), the toleration that charges it to one
    (``core.model.charge``) and those that open closed pools (``core.admission.intruders``); nothing else.

    Every pod bound in the cluster is cached for node room, and a whole pod (status,
    env, volumes, probes, annotations) is many times the size of these fields. Reading
    the view gives the same ``node_usage`` and the same node-fit members as the pod.
    """
    meta = pod.get("metadata")
    view_meta = _kept(meta, _BOUND_META)
    if isinstance(meta, Mapping) and "annotations" in meta:
        view_meta["annotations"] = _kept(meta["annotations"], _BOUND_ANNOTATIONS)
    spec = pod.get("spec")
    view_spec = _kept(spec, _BOUND_SPEC)
    if isinstance(spec, Mapping):
        for key in ("containers", "initContainers"):
            if key in spec:
                view_spec[key] = _containers(spec[key])
        marks = [
            t
            for t in as_list(spec.get("tolerations"))
            if as_map(t).get("key") == CHARGE_KEY or opens_closed_pools(as_map(t))
        ]
        # the group it is charged to (core.model.charge), whether it opens closed pools
        # (core.admission.intruders)
        if marks:
            view_spec["tolerations"] = marks
    view: dict[str, Any] = {}
    for key in ("apiVersion", "kind"):
        if key in pod:
            view[key] = pod[key]
    if meta is not None:
        view["metadata"] = view_meta
    if spec is not None:
        view["spec"] = view_spec
    status = pod.get("status")
    if status is not None:
        view["status"] = _kept(status, ("phase",))
    return view


class RequestsMemo:
    """Requests of pods already read, by (uid, resourceVersion); owned by a loop.

    A pod's spec cannot change without a new resourceVersion, and most bound pods are the
    same from one pass to the next: reading requests (quantities as fractions) was 40% of
    a pass at 8,000 pods. It keeps what the last pass read and what this one has read so
    far (``new_pass`` starts a pass), so it holds at most two passes' pods: the versions a
    status update left behind go with the pass after it.
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], dict[str, int]] = {}
        self._before: dict[tuple[str, str], dict[str, int]] = {}

    def __len__(self) -> int:
        return len(self._seen) + len(self._before)

    def new_pass(self) -> None:
        """What the last pass read and this one did not is forgotten; this one starts."""
        self._before, self._seen = self._seen, {}

    def requests(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, int]:
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not (isinstance(uid, str) and uid and isinstance(version, str) and version):
            return pod_requests(spec)
        key = (uid, version)
        seen = self._seen.get(key)
        if seen is None:
            seen = self._before.pop(key, None)
            if seen is None:
                seen = pod_requests(spec)
            self._seen[key] = seen
        return seen


def node_usage(
    pods: Iterable[Mapping[str, Any]], memo: RequestsMemo | None = None
) -> dict[str, dict[str, int]]:
    """Requests of all bound, non-terminal pods, summed per node name, plus a ``pods`` count.

    Any pod counts, not only the gatekeeper's: node fit is about physical room.
    Pods in phase Succeeded or Failed hold nothing; terminating pods still do. With a
    ``memo`` this is a pass of it (``RequestsMemo.new_pass``).
    """
    if memo is not None:
        memo.new_pass()
    usage: dict[str, dict[str, int]] = {}
    for pod in pods:
        spec = mapping(pod.get("spec"), "spec")
        node_name = spec.get("nodeName")
        if not node_name:
            continue
        if not is_live(pod):
            continue
        meta = mapping(pod.get("metadata"), "metadata")
        try:
            requests = memo.requests(meta, spec) if memo is not None else pod_requests(spec)
        except ValueError as err:
            raise ValueError(f"Pod {meta.get('namespace')}/{meta.get('name')}: {err}") from None
        used = usage.setdefault(str(node_name), {})
        for resource, amount in requests.items():
            used[resource] = used.get(resource, 0) + amount
        used["pods"] = used.get("pods", 0) + 1
    return usage


def node_usage_skipping(
    pods: Sequence[Mapping[str, Any]], problems: list[str], memo: RequestsMemo | None = None
) -> dict[str, dict[str, int]]:
    """``node_usage``, skipping (and naming in ``problems``) a pod whose requests cannot be read.

    One unreadable pod must not stop every decision that counts node room.
    """
    try:
        return node_usage(pods, memo)
    except ValueError:
        pass
    usage: dict[str, dict[str, int]] = {}
    for pod in pods:
        try:
            one = node_usage([pod])
        except ValueError as exc:
            problems.append(f"{exc}; its node room is not counted")
            continue
        for node_name, used in one.items():
            into = usage.setdefault(node_name, {})
            for resource, amount in used.items():
                into[resource] = into.get(resource, 0) + amount
    return usage
