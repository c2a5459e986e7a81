"""The DRA devices on each node, as node room: what a driver publishes, less what claims hold.

Why this exists: a node whose GPUs a DRA driver serves publishes them in ResourceSlices, not
in ``status.allocatable``, so node fit (``core.admission.fit``) would see no room for a group
whose claims are counted as ``nvidia.com/gpu`` (``core.model.claims``) and call it never
fitting. ``device_room`` counts, per node and counted resource, the devices of the slices on
that node (the newest generation of each pool) whose driver a DeviceClass of that resource
selects, and the devices allocated to claims; ``with_devices`` adds both to the nodes and
their usage as if the node advertised them.

What is modelled: a DeviceClass whose selectors are all ``device.driver == "<driver>"``
(what a driver's own class says); node-local slices (``spec.nodeName``). Not modelled: other
CEL selectors (attributes, capacity), slices shared by several nodes, devices shared between
claims; a class whose devices cannot be told gives no room, so its groups wait with a reason
rather than being admitted where they cannot be placed. A claim the scheduler made for a pod
that asks the resource as an extended resource (annotation
``resource.kubernetes.io/extended-resource-claim``) is not counted again: the pod's requests
already are.

The views (``*_view``) are what the informers keep of each object: only these fields.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gatekeeper.core.kube.objects import as_list, as_map, meta
from gatekeeper.core.model.nodes import Node

__all__ = [
    "DeviceRoom",
    "claim_view",
    "class_view",
    "device_room",
    "slice_view",
    "template_view",
    "with_devices",
]

EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"
_DRIVER_SELECTOR = re.compile(r"""^\s*device\.driver\s*==\s*(?:"([^"\\]+)"|'([^'\\]+)')\s*$""")


@dataclass(frozen=True)
class DeviceRoom:
    """Per node, per counted resource: the devices its slices publish, and those claims hold."""

    capacity: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    used: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


def class_driver(device_class: Mapping[str, Any]) -> str:
    """The one driver whose devices all of a DeviceClass's selectors select; "" otherwise."""
    drivers = set()
    selectors = as_list(as_map(device_class.get("spec")).get("selectors"))
    for selector in selectors:
        found = _DRIVER_SELECTOR.match(str(as_map(as_map(selector).get("cel")).get("expression") or ""))
        if found is None:
            return ""
        drivers.add(found.group(1) or found.group(2))
    return drivers.pop() if len(drivers) == 1 else ""


def _drivers(device_classes: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Counted resource -> the drivers whose devices count as it."""
    out: dict[str, set[str]] = {}
    for c in device_classes:
        resource = str(as_map(c.get("spec")).get("extendedResourceName") or "")
        driver = class_driver(c)
        if resource and driver:
            out.setdefault(resource, set()).add(driver)
    return out


def _newest(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The node-local slices of each (driver, pool) at its newest generation."""
    kept: list[tuple[tuple[str, str], int, Mapping[str, Any]]] = []
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = as_map(s.get("spec"))
        if not spec.get("nodeName"):
            continue
        pool = as_map(spec.get("pool"))
        key = (str(spec.get("driver") or ""), str(pool.get("name") or ""))
        generation = pool.get("generation")
        generation = generation if type(generation) is int else 0
        newest[key] = max(newest.get(key, generation), generation)
        kept.append((key, generation, s))
    return [s for key, generation, s in kept if generation == newest[key]]


def device_room(
    device_classes: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
) -> DeviceRoom:
    """The devices of each node, by counted resource, and those allocated to claims."""
    drivers = _drivers(device_classes)
    if not drivers:
        return DeviceRoom()
    by_driver: dict[str, list[str]] = {}
    for resource, names in drivers.items():
        for driver in names:
            by_driver.setdefault(driver, []).append(resource)
    capacity: dict[str, dict[str, int]] = {}
    where: dict[tuple[str, str, str], str] = {}
    for s in _newest(slices):
        spec = as_map(s.get("spec"))
        driver, node = str(spec.get("driver") or ""), str(spec.get("nodeName"))
        pool = str(as_map(spec.get("pool")).get("name") or "")
        for device in as_list(spec.get("devices")):
            where[(driver, pool, str(as_map(device).get("name") or ""))] = node
            for resource in by_driver.get(driver, ()):
                room = capacity.setdefault(node, {})
                room[resource] = room.get(resource, 0) + 1
    used: dict[str, dict[str, int]] = {}
    for claim in claims:
        if as_map(meta(claim).get("annotations")).get(EXTENDED_RESOURCE_CLAIM) == "true":
            continue
        allocation = as_map(as_map(claim.get("status")).get("allocation"))
        for result in as_list(as_map(allocation.get("devices")).get("results")):
            result = as_map(result)
            if result.get("adminAccess") is True:
                continue
            dev_driver = str(result.get("driver") or "")
            on = where.get((dev_driver, str(result.get("pool") or ""), str(result.get("device") or "")))
            for resource in by_driver.get(dev_driver, ()) if on is not None else ():
                held = used.setdefault(str(on), {})
                held[resource] = held.get(resource, 0) + 1
    return DeviceRoom(capacity, used)


def with_devices(
    nodes: Sequence[Node], usage: Mapping[str, Mapping[str, int]], room: DeviceRoom
) -> tuple[list[Node], dict[str, dict[str, int]]]:
    """``nodes`` with their DRA devices added to allocatable, and ``usage`` with those claims
    hold added, as if each node advertised its devices."""
    out_usage = {node: dict(used) for node, used in usage.items()}
    if not room.capacity:
        return list(nodes), out_usage
    out_nodes = []
    for node in nodes:
        more = room.capacity.get(node.name)
        if more:
            allocatable = dict(node.allocatable)
            for resource, count in more.items():
                allocatable[resource] = allocatable.get(resource, 0) + count
            node = replace(node, allocatable=allocatable)
        out_nodes.append(node)
    for node_name, held in room.used.items():
        into = out_usage.setdefault(node_name, {})
        for resource, count in held.items():
            into[resource] = into.get(resource, 0) + count
    return out_nodes, out_usage


def _kept(value: Any, keys: Iterable[str]) -> dict[str, Any]:
    value = as_map(value)
    return {k: value[k] for k in keys if k in value}


_META = ("name", "namespace", "uid", "resourceVersion")


def _request(request: Any) -> dict[str, Any]:
    request = as_map(request)
    kept = _kept(request, ("name",))
    if "exactly" in request:
        kept["exactly"] = _kept(request["exactly"], ("deviceClassName", "allocationMode", "count"))
    if "firstAvailable" in request:
        kept["firstAvailable"] = []  # refused whatever it holds (core.model.claims)
    return kept


def _requests_only(spec: Any) -> dict[str, Any]:
    """A claim spec with only what ``core.model.claims`` counts of its device requests (no
    selectors, configs or constraints: a tenant writes those, at any size)."""
    requests = as_list(as_map(as_map(spec).get("devices")).get("requests"))
    return {"devices": {"requests": [_request(r) for r in requests]}}


def class_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of a DeviceClass: its name, selectors and counted resource."""
    return {
        "metadata": _kept(obj.get("metadata"), _META),
        "spec": _kept(obj.get("spec"), ("selectors", "extendedResourceName")),
    }


def slice_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of a ResourceSlice: its driver, node, pool and device names."""
    spec = as_map(obj.get("spec"))
    view = _kept(spec, ("driver", "nodeName", "pool"))
    view["devices"] = [{"name": as_map(d).get("name")} for d in as_list(spec.get("devices"))]
    return {"metadata": _kept(obj.get("metadata"), _META), "spec": view}


def template_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of a ResourceClaimTemplate: its name and the requests of its claims."""
    spec = as_map(obj.get("spec"))
    return {"metadata": _kept(obj.get("metadata"), _META), "spec": {"spec": _requests_only(spec.get("spec"))}}


def claim_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of a ResourceClaim: its name, requests, and the devices allocated to it."""
    m = as_map(obj.get("metadata"))
    view_meta = _kept(m, _META)
    if as_map(m.get("annotations")).get(EXTENDED_RESOURCE_CLAIM):
        view_meta["annotations"] = {
            EXTENDED_RESOURCE_CLAIM: as_map(m.get("annotations"))[EXTENDED_RESOURCE_CLAIM]
        }
    results = as_list(
        as_map(as_map(as_map(obj.get("status")).get("allocation")).get("devices")).get("results")
    )
    kept = [_kept(r, ("driver", "pool", "device", "adminAccess")) for r in results]
    view: dict[str, Any] = {"metadata": view_meta, "spec": _requests_only(obj.get("spec"))}
    if kept:
        view["status"] = {"allocation": {"devices": {"results": kept}}}
    return view
