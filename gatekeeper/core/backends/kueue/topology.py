"""Kueue's Topology Aware Scheduling for the ``kueue`` backend: what a group's Workload asks,
and the domain Kueue chose for it.

Why this exists: with the ``kueue`` backend Kueue decides, so Kueue also chooses the topology
domain a group goes into (its TAS, with a ``Topology`` and a flavor that names it). The
gatekeeper writes the request into each pod set of the group's Workload (``request``, called
by ``workload.new_workload``) and, once Kueue admits it, pins the group's pods to the domain
Kueue assigned (``assigned_domain``, called by ``workload.flavor_steering``), rather than
choosing again. A user writes the request once, where Kueue's own LWS integration reads it:
Kueue's annotations on the LWS templates (``kueue.x-k8s.io/podset-required-topology``,
``-preferred-topology``, ``-unconstrained-topology``, ``-slice-required-topology`` with
``-slice-size``, and ``podset-group-name`` to place leader and workers together). The pods
carry them too, which is how Kueue tells them from pods it did not place.

Values are checked here as Kueue's Workload validation would (label keys, at most 63
characters, a slice size from 1 to the pod set's count), so a bad template gets its reason on
the group's record (``InvalidSpec``), not a Workload the API server refuses. The LWS's
``lws-gatekeeper.io/topology-*`` annotation (the ``pools`` backend's) is refused here, with
the annotation to write instead.

Pure: no I/O. A Kueue assignment that cannot be read pins nothing (the flavor's node labels
still apply); it never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.core.kube.keys import (
    KUEUE_PODSET_GROUP_ANNOTATION,
    KUEUE_PREFERRED_TOPOLOGY_ANNOTATION,
    KUEUE_REQUIRED_TOPOLOGY_ANNOTATION,
    KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    KUEUE_SLICE_SIZE_ANNOTATION,
    KUEUE_UNCONSTRAINED_TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
)
from gatekeeper.core.kube.objects import as_list, as_map, meta
from gatekeeper.core.kube.selectors import is_label_key
from gatekeeper.core.model.lws import TopologyRequest

__all__ = ["MAX_ASSIGNED_DOMAINS", "assigned_domain", "assigned_domains", "request"]

MAX_LEVEL_CHARS = 63
"""Kueue's limit on a topology level named in a pod set's request."""

MAX_GROUP_NAME_CHARS = 256
"""Kueue's limit on ``podSetGroupName``."""

MAX_LEVELS = 16
"""Kueue's limit on a Topology's (and an assignment's) levels."""

MAX_ASSIGNED_DOMAINS = 100_000
"""Domains read from one pod set's assignment at most (Kueue's own bound on a slice); past it,
nothing is pinned."""


def request(
    topology: TopologyRequest | None, template: Mapping[str, Any], count: int
) -> dict[str, Any] | None:
    """The ``topologyRequest`` of a pod set of ``count`` pods made from ``template`` (its Kueue
    annotations, as Kueue's LWS integration reads them), or None.

    Raises ValueError on a value Kueue would refuse, and when the LWS carries the gatekeeper's
    own topology annotation (``topology``, ``core.model.lws.topology_request``): Kueue tells
    the pods of a Workload it placed from other pods by Kueue's annotations on the pods, so a
    group asked only by the LWS's annotation would be counted twice in its domain once bound
    (as the Workload's assignment and as pods Kueue does not know)."""
    if topology is not None:
        asked = TOPOLOGY_REQUIRED_ANNOTATION if topology.required else TOPOLOGY_PREFERRED_ANNOTATION
        raise ValueError(
            f"annotation {asked} is the pools backend's; with the kueue backend Kueue chooses the "
            f"domain and counts a group's pods by its own annotations: write "
            f"{KUEUE_REQUIRED_TOPOLOGY_ANNOTATION} (or -preferred-topology) on the templates, with "
            f"{KUEUE_PODSET_GROUP_ANNOTATION} to keep leader and workers together"
        )
    return _from_template(as_map(meta(template).get("annotations")), count)


def _from_template(notes: Mapping[str, Any], count: int) -> dict[str, Any] | None:
    """Kueue's ``NewPodSetTopologyRequest`` rules: required, else preferred, else
    unconstrained; a slice layer beside any of them; a group name with required or preferred."""
    out: dict[str, Any] = {}
    required, preferred = KUEUE_REQUIRED_TOPOLOGY_ANNOTATION, KUEUE_PREFERRED_TOPOLOGY_ANNOTATION
    if required in notes:
        out["required"] = _level(notes[required], required)
    elif preferred in notes:
        out["preferred"] = _level(notes[preferred], preferred)
    elif KUEUE_UNCONSTRAINED_TOPOLOGY_ANNOTATION in notes:
        value = str(notes[KUEUE_UNCONSTRAINED_TOPOLOGY_ANNOTATION]).lower()
        if value not in ("true", "false"):
            raise ValueError(f"annotation {KUEUE_UNCONSTRAINED_TOPOLOGY_ANNOTATION} is not true or false")
        out["unconstrained"] = value == "true"
    slice_level = notes.get(KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION)
    slice_size = notes.get(KUEUE_SLICE_SIZE_ANNOTATION)
    if slice_level is not None and slice_size is not None:
        out["podSetSliceRequiredTopology"] = _level(slice_level, KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION)
        out["podSetSliceSize"] = _slice_size(slice_size, count)
    elif slice_level is not None:
        raise ValueError(
            f"annotation {KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION} needs {KUEUE_SLICE_SIZE_ANNOTATION}"
        )
    group = notes.get(KUEUE_PODSET_GROUP_ANNOTATION)
    if group is not None and ("required" in out or "preferred" in out):
        if not isinstance(group, str) or not 0 < len(group) <= MAX_GROUP_NAME_CHARS:
            raise ValueError(f"annotation {KUEUE_PODSET_GROUP_ANNOTATION} is empty or longer than 256")
        out["podSetGroupName"] = group
    return out or None


def _level(value: object, where: str) -> str:
    if not is_label_key(value) or len(str(value)) > MAX_LEVEL_CHARS:
        shown = value[:80] if isinstance(value, str) else type(value).__name__
        raise ValueError(
            f"{where} is not a node label key of at most {MAX_LEVEL_CHARS} characters: {shown!r}"
        )
    return str(value)


def _slice_size(value: object, count: int) -> int:
    text = str(value)
    if not (text.isascii() and text.isdigit() and len(text) <= 6 and 1 <= int(text) <= max(count, 1)):
        raise ValueError(
            f"annotation {KUEUE_SLICE_SIZE_ANNOTATION} is not a count from 1 to {count}: {text[:20]!r}"
        )
    return int(text)


def assigned_domain(assignment: Mapping[str, Any], rank: int | None = None) -> dict[str, str]:
    """Where a pod set's ``topologyAssignment`` puts its pods: without ``rank``, the narrowest
    domain that holds every pod (the labels of the levels, widest first, on which all its
    domains agree: a pod set on one host is pinned to that host, one over the hosts of a rack
    to the rack, when the rack is a level of the assignment); with ``rank`` (the pod's place
    in the pod set: a worker's index less one), the domain of that pod, taking the domains in
    the assignment's order, each for as many pods as it counts. Empty when nothing is assigned
    or the assignment cannot be read.

    Reads Kueue v1beta2's ``slices`` (``valuesPerLevel`` universal or individual with prefix
    and suffix, ``podCounts`` universal or individual) and v1beta1's ``domains``. Kueue lists
    only the hostname level when its Topology's lowest level is the hostname."""
    levels = as_list(assignment.get("levels"))
    if not 0 < len(levels) <= MAX_LEVELS or not all(is_label_key(level) for level in levels):
        return {}
    domains = _domains(assignment, len(levels))
    if not domains:
        return {}
    if rank is not None:
        for values, count in domains:
            if rank < count:
                return dict(zip(map(str, levels), values, strict=True))
            rank -= count
    out: dict[str, str] = {}
    for i, level in enumerate(levels):
        seen = {values[i] for values, _ in domains}
        if len(seen) != 1:
            break
        out[str(level)] = next(iter(seen))
    return out


def assigned_domains(assignment: Mapping[str, Any], pods: int) -> list[dict[str, str]]:
    """``assigned_domain(assignment, rank)`` for every rank below ``pods``, the assignment read
    once (the webhook's table holds every worker's place: ``kueue.pass_through``)."""
    levels = as_list(assignment.get("levels"))
    if not 0 < len(levels) <= MAX_LEVELS or not all(is_label_key(level) for level in levels):
        return [{} for _ in range(pods)]
    domains = _domains(assignment, len(levels)) or []
    out: list[dict[str, str]] = []
    for values, count in domains:
        place = dict(zip(map(str, levels), values, strict=True))
        out.extend(place for _ in range(min(count, pods - len(out))))
        if len(out) >= pods:
            return out
    return out + [assigned_domain(assignment)] * (pods - len(out))


def _domains(assignment: Mapping[str, Any], width: int) -> list[tuple[tuple[str, ...], int]] | None:
    """The assignment's domains in order: (a value per level, pods); None when unreadable or
    larger than ``MAX_ASSIGNED_DOMAINS``."""
    out: list[tuple[tuple[str, ...], int]] = []
    for item in as_list(assignment.get("slices")):
        piece = as_map(item)
        count = piece.get("domainCount")
        per_level = as_list(piece.get("valuesPerLevel"))
        if (
            type(count) is not int
            or not 0 < count <= MAX_ASSIGNED_DOMAINS - len(out)
            or len(per_level) != width
        ):
            return None
        columns = [_values(as_map(entry), count) for entry in per_level]
        pods = _pod_counts(as_map(piece.get("podCounts")), count)
        if pods is None or any(column is None for column in columns):
            return None
        rows = zip(*[column for column in columns if column is not None], strict=True)
        out.extend(zip(rows, pods, strict=True))
    for item in as_list(assignment.get("domains")):
        named, pods = as_list(as_map(item).get("values")), as_map(item).get("count", 1)
        if (
            len(named) != width
            or len(out) >= MAX_ASSIGNED_DOMAINS
            or not all(isinstance(v, str) for v in named)
        ):
            return None
        out.append((tuple(str(v) for v in named), pods if type(pods) is int and pods > 0 else 1))
    return out


def _values(entry: Mapping[str, Any], count: int) -> list[str] | None:
    universal = entry.get("universal")
    if isinstance(universal, str):
        return [universal] * count
    individual = as_map(entry.get("individual"))
    roots = as_list(individual.get("roots"))
    if len(roots) != count or not all(isinstance(r, str) for r in roots):
        return None
    prefix, suffix = individual.get("prefix") or "", individual.get("suffix") or ""
    if not isinstance(prefix, str) or not isinstance(suffix, str):
        return None
    return [f"{prefix}{root}{suffix}" for root in roots]


def _pod_counts(counts: Mapping[str, Any], domains: int) -> list[int] | None:
    universal, individual = counts.get("universal"), counts.get("individual")
    if type(universal) is int and universal > 0:
        return [universal] * domains
    listed = as_list(individual)
    if len(listed) == domains and all(type(n) is int and n > 0 for n in listed):
        return [int(n) for n in listed]
    return None
