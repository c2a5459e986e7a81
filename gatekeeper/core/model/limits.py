"""The requests a namespace's LimitRanges give a container that names none.

Why this exists: a group's demand is computed from its LWS's templates before its pods
exist, and the API server's LimitRanger admission plugin adds requests to each container
at pod creation that the templates do not show. A demand without them lets a Pool with a
cpu or memory quota admit groups whose pods then ask more than it holds, and makes each pod
ask more than its role was admitted with. ``container_defaults`` reads the LimitRanges of
every namespace into the requests a container gets, as the API server would give them;
``core.model.demand`` adds them to each container (init containers included) that names
neither a request nor a limit of that resource. Called by ``core.model.groups.DemandMemo``.

The API server's rules, followed here:

* only items of ``type: Container`` give defaults (a Pod item only bounds);
* a LimitRange item's default request is its ``defaultRequest``, else its ``default`` limit,
  else its ``max``, else its ``min`` (the LimitRange object's own defaulting);
* within one LimitRange a later item wins; across LimitRanges the first, by name, wins (the
  plugin applies each in turn and never overwrites what a container already has);
* a container's own request, or its limit (the request defaults to it), is never replaced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from gatekeeper.core.kube.objects import as_list, as_map, meta
from gatekeeper.core.kube.quantity import parse_quantity

__all__ = ["MAX_LIMIT_RANGES", "Defaults", "container_defaults"]

Defaults = Mapping[str, Fraction]
"""Resource -> the request a container that names none of it gets."""

MAX_LIMIT_RANGES = 16
"""LimitRanges read per namespace (the first by name); more are not looked at."""

_ORDER = ("min", "max", "default", "defaultRequest")
"""Least to most binding: each later field's value replaces an earlier one's."""


def _item_defaults(item: Mapping[str, Any]) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for field_name in _ORDER:
        for resource, raw in as_map(item.get(field_name)).items():
            try:
                out[str(resource)] = parse_quantity(raw)
            except (ValueError, ArithmeticError):
                continue  # the API server validated it; an unreadable one gives nothing
    return out


def _one(limit_range: Mapping[str, Any]) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for raw in as_list(as_map(limit_range.get("spec")).get("limits")):
        item = as_map(raw)
        if item.get("type") == "Container":
            out.update(_item_defaults(item))
    return out


def container_defaults(limit_ranges: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Fraction]]:
    """Namespace -> the requests its LimitRanges give a container that names none; a
    namespace whose LimitRanges give nothing is left out."""
    by_namespace: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for lr in limit_ranges:
        m = meta(lr)
        by_namespace.setdefault(str(m.get("namespace") or ""), []).append((str(m.get("name") or ""), lr))
    out: dict[str, dict[str, Fraction]] = {}
    for namespace, named in by_namespace.items():
        merged: dict[str, Fraction] = {}
        for _, lr in sorted(named, key=lambda n: n[0])[:MAX_LIMIT_RANGES]:
            for resource, amount in _one(lr).items():
                merged.setdefault(resource, amount)
        if merged:
            out[namespace] = merged
    return out
