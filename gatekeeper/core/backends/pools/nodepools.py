"""Karpenter's objects as the core reads them: NodePools, NodeClaims, instance types.

Why this exists: pools with ``spec.nodePools`` plan on what Karpenter can launch
(``provisioning.py``), and that is read from three sources the gatekeeper does not own:
Karpenter's NodePools and NodeClaims (``karpenter.sh/v1``, from the API) and the
instance types (a file in the format Karpenter's KWOK provider reads, since Karpenter
publishes them in no object). This module parses them strictly into small frozen values,
each number bounded (:data:`MAX_INSTANCE_TYPES`, :data:`MAX_OFFERINGS`,
:data:`MAX_REQUIREMENTS`, :data:`MAX_VALUES`, quantities by ``quantity.parse_units``);
a bad object raises ValueError naming it and the field, and the caller skips it.
``provisioning.py`` and the ``pools`` decision call it; the CLI reads the file with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.core.kube.fields import mapping, sequence, string
from gatekeeper.core.kube.quantity import parse_units
from gatekeeper.core.kube.selectors import Requirement, Taint, parse_label_map, parse_taints
from gatekeeper.core.model.demand import Resources

__all__ = [
    "CAPACITY_TYPE_LABEL",
    "INSTANCE_TYPE_LABEL",
    "NODE_POOL_LABEL",
    "UNREGISTERED_TAINT",
    "ZONE_LABEL",
    "InstanceType",
    "NodeClaim",
    "NodePool",
    "Offering",
    "parse_instance_types",
    "parse_node_claim",
    "parse_node_pool",
]

NODE_POOL_LABEL = "karpenter.sh/nodepool"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ARCH_LABEL = "kubernetes.io/arch"
OS_LABEL = "kubernetes.io/os"
#: Karpenter taints a node it made until it has registered it.
UNREGISTERED_TAINT = "karpenter.sh/unregistered"

MAX_INSTANCE_TYPES = 1000
MAX_OFFERINGS = 100
MAX_REQUIREMENTS = 100
MAX_VALUES = 100
MAX_NAME = 253
_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True)
class Offering:
    """One way to buy an instance type: capacity type, zone, price, and whether it is offered now."""

    capacity_type: str
    zone: str
    price: float
    available: bool = True


@dataclass(frozen=True)
class InstanceType:
    """A type Karpenter can launch: its labels, its capacity and allocatable, its offerings."""

    name: str
    capacity: Resources
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    offerings: tuple[Offering, ...] = ()
    overhead_given: bool = True
    """The file states the type's ``overhead``; otherwise ``allocatable`` is its whole capacity
    and the room is estimated (``kubelet.planned_room``)."""


@dataclass(frozen=True)
class NodePool:
    """A parsed Karpenter NodePool: what its nodes look like and how much it may hold."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    requirements: tuple[Requirement, ...] = ()
    taints: tuple[Taint, ...] = ()
    limits: Resources | None = None
    """``spec.limits``; None: no cap."""

    def allows(self, key: str, value: str | None) -> bool:
        return all(r.matches(value) for r in self.requirements if r.key == key)


@dataclass(frozen=True)
class NodeClaim:
    """A parsed NodeClaim: the NodePool it counts against, what it holds, the node it becomes."""

    name: str
    node_pool: str
    capacity: Resources
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    node_name: str = ""
    deleting: bool = False
    provider_id: str = ""
    """``status.providerID``, set at launch: its node has it before the claim names the node."""


def _name(value: object, where: str) -> str:
    text = string(value, where)
    if not text or len(text) > MAX_NAME:
        raise ValueError(f"{where}: expected a name of 1-{MAX_NAME} characters, got {value!r}")
    return text


def _resources(value: object, where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for resource, raw in mapping(value, where).items():
        try:
            out[str(resource)] = parse_units(str(resource), raw)
        except ValueError as err:
            raise ValueError(f"{where}[{resource}]: {err}") from None
        if out[str(resource)] < 0:
            raise ValueError(f"{where}[{resource}]: {raw!r} is negative")
    return out


def _requirements(value: object, where: str) -> tuple[Requirement, ...]:
    items = sequence(value, where)
    if len(items) > MAX_REQUIREMENTS:
        raise ValueError(f"{where}: {len(items)} requirements, at most {MAX_REQUIREMENTS}")
    out = []
    for i, item in enumerate(items):
        entry = mapping(item, f"{where}[{i}]")
        op = string(entry.get("operator"), f"{where}[{i}].operator")
        if op not in _OPERATORS:
            raise ValueError(f"{where}[{i}].operator: {op!r} is not one of {', '.join(sorted(_OPERATORS))}")
        values = sequence(entry.get("values"), f"{where}[{i}].values")
        if len(values) > MAX_VALUES:
            raise ValueError(f"{where}[{i}].values: {len(values)} values, at most {MAX_VALUES}")
        out.append(
            Requirement(
                key=_name(entry.get("key"), f"{where}[{i}].key"),
                operator=op,
                values=tuple(string(v, f"{where}[{i}].values") for v in values),
            )
        )
    return tuple(out)


def parse_node_pool(obj: Mapping[str, Any]) -> NodePool:
    """A ``NodePool`` from a ``karpenter.sh/v1`` NodePool dict; ValueError names the field."""
    name = string(mapping(obj.get("metadata"), "metadata").get("name"), "metadata.name")
    try:
        spec = mapping(obj.get("spec"), "spec")
        template = mapping(spec.get("template"), "spec.template")
        tmeta = mapping(template.get("metadata"), "spec.template.metadata")
        tspec = mapping(template.get("spec"), "spec.template.spec")
        return NodePool(
            name=_name(name, "metadata.name"),
            labels=parse_label_map(tmeta.get("labels"), "spec.template.metadata.labels"),
            requirements=_requirements(tspec.get("requirements"), "spec.template.spec.requirements"),
            taints=parse_taints(tspec.get("taints"), "spec.template.spec.taints"),
            limits=_resources(spec["limits"], "spec.limits") if spec.get("limits") is not None else None,
        )
    except ValueError as err:
        raise ValueError(f"NodePool {name}: {err}") from None


def parse_node_claim(obj: Mapping[str, Any]) -> NodeClaim:
    """A ``NodeClaim`` from a ``karpenter.sh/v1`` NodeClaim dict; ValueError names the field."""
    meta = mapping(obj.get("metadata"), "metadata")
    name = string(meta.get("name"), "metadata.name")
    try:
        labels = parse_label_map(meta.get("labels"), "metadata.labels")
        spec = mapping(obj.get("spec"), "spec")
        status = mapping(obj.get("status"), "status")
        capacity = _resources(status.get("capacity"), "status.capacity")
        if not capacity:
            requests = mapping(spec.get("resources"), "spec.resources").get("requests")
            capacity = _resources(requests, "spec.resources.requests")
        # The single values its requirements name are labels of the node it becomes.
        for req in _requirements(spec.get("requirements"), "spec.requirements"):
            if req.operator == "In" and len(req.values) == 1:
                labels.setdefault(req.key, req.values[0])
        return NodeClaim(
            name=_name(name, "metadata.name"),
            node_pool=labels.get(NODE_POOL_LABEL, ""),
            capacity=capacity,
            allocatable=_resources(status.get("allocatable"), "status.allocatable"),
            labels=labels,
            taints=parse_taints(spec.get("taints"), "spec.taints"),
            node_name=string(status.get("nodeName"), "status.nodeName"),
            deleting=meta.get("deletionTimestamp") is not None,
            provider_id=string(status.get("providerID"), "status.providerID")[:512],
        )
    except ValueError as err:
        raise ValueError(f"NodeClaim {name}: {err}") from None


def parse_instance_types(data: object) -> tuple[InstanceType, ...]:
    """Instance types from the JSON Karpenter's KWOK provider reads (``--instance-types-file-path``).

    Each entry: ``name``, ``architecture``, ``operatingSystems``, ``resources`` (capacity)
    and ``offerings`` (``Price``, ``Available``, ``Requirements`` naming the capacity type
    and zone), and, our own, an optional ``overhead``: what the cloud's nodes of that type
    keep for themselves (kube-reserved, system-reserved, eviction threshold; it differs
    by cloud and type, so nothing is assumed). Allocatable is capacity minus ``overhead``.
    Unlike the KWOK provider (which makes every offering available), ``Available: false``
    is kept: a type offered nowhere is never planned on.
    """
    entries = sequence(data, "instance types")
    if len(entries) > MAX_INSTANCE_TYPES:
        raise ValueError(f"instance types: {len(entries)}, at most {MAX_INSTANCE_TYPES}")
    out = []
    for i, raw in enumerate(entries):
        where = f"instance types[{i}]"
        entry = mapping(raw, where)
        name = _name(entry.get("name"), f"{where}.name")
        capacity = _resources(entry.get("resources"), f"{where}.resources")
        capacity.setdefault("pods", 110)
        overhead = _resources(entry.get("overhead") or {}, f"{where}.overhead")
        allocatable = {r: max(a - overhead.get(r, 0), 0) for r, a in capacity.items()}
        labels = {INSTANCE_TYPE_LABEL: name}
        arch = string(entry.get("architecture"), f"{where}.architecture")
        if arch:
            labels[ARCH_LABEL] = arch
        systems = [
            string(s, f"{where}.operatingSystems") for s in sequence(entry.get("operatingSystems"), where)
        ]
        if systems:
            labels[OS_LABEL] = systems[0]
        offers = sequence(entry.get("offerings"), f"{where}.offerings")
        if len(offers) > MAX_OFFERINGS:
            raise ValueError(f"{where}.offerings: {len(offers)}, at most {MAX_OFFERINGS}")
        offerings = []
        for j, offer in enumerate(offers):
            o = mapping(offer, f"{where}.offerings[{j}]")
            reqs = {r.key: r.values for r in _requirements(o.get("Requirements"), f"{where}.offerings[{j}]")}
            price = o.get("Price", 0.0)
            if isinstance(price, bool) or not isinstance(price, int | float) or not math.isfinite(price):
                raise ValueError(f"{where}.offerings[{j}].Price: expected a number, got {price!r}")
            offerings.append(
                Offering(
                    capacity_type=(reqs.get(CAPACITY_TYPE_LABEL) or ("",))[0],
                    zone=(reqs.get(ZONE_LABEL) or ("",))[0],
                    price=float(price),
                    available=o.get("Available", True) is not False,
                )
            )
        out.append(InstanceType(name, capacity, allocatable, labels, tuple(offerings), "overhead" in entry))
    return tuple(out)
