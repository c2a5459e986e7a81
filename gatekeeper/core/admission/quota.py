"""Quota fit with Kueue ClusterQueue semantics: does a whole group fit what its pool may hold?

A group fits when, for every resource the quota limits, what admitted groups hold plus
what the group asks stays within the quota. Two failures are permanent rather than
"wait": the group asks more than the quota could ever give, or it asks for an
extended resource (a GPU kind, say) the quota does not list at all; Kueue reports such
workloads as inadmissible, and so do we.

Decision (documented for users): when ``spec.quota`` is given, only the listed
resources are limited by quota. The basic resources cpu, memory, ephemeral-storage,
hugepages-* and pods are simply unlimited by quota when not listed (node fit still
checks them); ``pods``, when listed, counts the group's pods. Any other resource the
group requests must be listed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gatekeeper.core.model.demand import GroupDemand, Resources

_BASIC = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})


def is_basic_resource(resource: str) -> bool:
    """Resources a quota may leave out without making groups that use them inadmissible."""
    return resource in _BASIC or resource.startswith("hugepages-")


def by_importance(resources: Iterable[str]) -> list[str]:
    """Resource names in the order a person cares about them: extended ones (GPUs) first, pods last."""
    return sorted(resources, key=lambda r: (r == "pods", is_basic_resource(r), r))


def limited_demand(demand: GroupDemand, quota: Resources) -> dict[str, int]:
    """The part of ``demand`` that ``quota`` limits (``pods`` counts pods when listed)."""
    limited = {resource: amount for resource, amount in demand.total.items() if resource in quota}
    if "pods" in quota:
        limited["pods"] = demand.pod_count
    return limited


@dataclass(frozen=True)
class QuotaCheck:
    """Outcome of a quota check; each tuple lists resource names, sorted."""

    uncovered: tuple[str, ...] = ()
    """Requested, but the quota has no entry for them: never admissible."""
    too_large: tuple[str, ...] = ()
    """The group asks more than the quota can ever hold: never admissible."""
    short: tuple[str, ...] = ()
    """Not enough left now; the group waits for admitted groups to leave."""

    @property
    def fits(self) -> bool:
        return not (self.uncovered or self.too_large or self.short)

    @property
    def never(self) -> bool:
        return bool(self.uncovered or self.too_large)


def check_quota(
    demand: GroupDemand,
    quota: Resources,
    used: Resources,
    *,
    ceiling: Resources | None = None,
) -> QuotaCheck:
    """Does ``demand`` fit ``quota`` given what admitted groups already ``used``?

    ``ceiling`` is the most the quota could ever be (defaults to ``quota``); for a pool
    without explicit quota it is the allocatable of all its nodes, cordoned or not,
    while ``quota`` is that of its schedulable nodes. Which resources are limited, and
    which are uncovered, is decided by ``ceiling``.
    """
    ceiling = quota if ceiling is None else ceiling
    uncovered = sorted(r for r in demand.total if r not in ceiling and not is_basic_resource(r))
    too_large: list[str] = []
    short: list[str] = []
    for resource, amount in limited_demand(demand, ceiling).items():
        if amount > ceiling[resource]:
            too_large.append(resource)
        elif used.get(resource, 0) + amount > quota.get(resource, 0):
            short.append(resource)
    return QuotaCheck(tuple(uncovered), tuple(sorted(too_large)), tuple(sorted(short)))
