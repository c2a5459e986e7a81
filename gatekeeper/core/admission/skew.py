"""Where a pod with hard topology spread constraints may go now, in one planning pass.

Why this exists: ``NodeTable.place`` (``core.admission.fit``) places a group's pods one by one;
before each pod with constraints (``core.model.spread.Spread``) it asks ``Skews.mask`` which
nodes the kube-scheduler's PodTopologySpread filter would let it bind to, given the pods bound
(``BoundPods``), the pods the pass placed before (kept), and the group's pods placed before it
(``local``). A group kept by the pass counts for the groups after it (``keep``); one given
back (``NodeTable.unplace``) stops counting (``forget``).

Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gatekeeper.core.kube.selectors import LabelSelector, NodeConstraints
from gatekeeper.core.model.demand import PodDemand
from gatekeeper.core.model.nodes import Node
from gatekeeper.core.model.spread import BoundPods, Spread

__all__ = ["Local", "Skews"]

Scope = tuple[str, LabelSelector | None, str, bool]
"""The pods one constraint counts: (namespace, selector, topology key, the group's own only)."""

Local = Counter[tuple[Scope, str]]
"""The group's pods placed so far in one ``place``, per (scope, domain)."""


def _scope(spread: Spread) -> Scope:
    return (spread.namespace, spread.selector, spread.key, spread.group_only)


class Skews:
    """The spread counts of one planning pass over ``nodes`` (in the ``NodeTable``'s order)."""

    def __init__(self, nodes: Sequence[Node], bound: BoundPods | None, *, hypothetical: bool) -> None:
        self._nodes = nodes
        self._bound = bound
        self._ignore = hypothetical  # transient node taints, as the "could it ever fit" table does
        self._kept: Counter[tuple[Scope, str]] = Counter()
        self._candidates: dict[tuple[str, NodeConstraints, str, bool, bool], list[tuple[int, str]]] = {}
        self._on_bound: dict[tuple[str, NodeConstraints, Scope], Counter[str]] = {}

    def mask(
        self, view: str, members: Sequence[int], pod: PodDemand, local: Local
    ) -> tuple[bytearray, Spread] | None:
        """The nodes every hard constraint of ``pod`` lets it go to, and the constraint that
        leaves the fewest; None when the pod has none."""
        if not pod.spreads:
            return None
        allowed: bytearray | None = None
        tightest: tuple[int, Spread] | None = None
        for spread in pod.spreads:
            flags, count = self._one(view, members, pod.constraints, spread, local)
            allowed = (
                flags if allowed is None else bytearray(a & b for a, b in zip(allowed, flags, strict=True))
            )
            if tightest is None or count < tightest[0]:
                tightest = (count, spread)
        assert allowed is not None and tightest is not None
        return allowed, tightest[1]

    def count(self, pod: PodDemand, node: int, local: Local) -> None:
        """``pod`` placed on ``node``: one more in its domain for each constraint matching it."""
        labels = self._nodes[node].labels
        for spread in pod.spreads:
            if spread.own and spread.key in labels:
                local[(_scope(spread), labels[spread.key])] += 1

    def keep(self, local: Local) -> None:
        """The group is kept: its pods count for the groups placed after it in the pass."""
        for (scope, domain), n in local.items():
            if not scope[3]:
                self._kept[(scope, domain)] += n

    def forget(self, pods: Sequence[PodDemand], nodes: Sequence[int]) -> None:
        """Kept pods given back (``NodeTable.unplace``)."""
        local: Local = Counter()
        for pod, node in zip(pods, nodes, strict=True):
            self.count(pod, node, local)
        for key, n in local.items():
            if not key[0][3]:
                self._kept[key] -= n

    def _one(
        self, view: str, members: Sequence[int], constraints: NodeConstraints, spread: Spread, local: Local
    ) -> tuple[bytearray, int]:
        candidates = self._candidates_of(view, members, constraints, spread)
        scope = _scope(spread)
        bound = self._bound_counts(view, constraints, spread, candidates)
        counts: Counter[str] = Counter()
        for _, domain in candidates:
            counts[domain] = bound[domain] + self._kept[(scope, domain)] + local[(scope, domain)]
        least = min(counts.values(), default=0) if len(counts) >= spread.min_domains else 0
        open_domains = {d for d, n in counts.items() if n + spread.own - least <= spread.max_skew}
        flags = bytearray(len(self._nodes))
        for i, domain in candidates:
            if domain in open_domains:
                flags[i] = 1
        return flags, len(open_domains)

    def _candidates_of(
        self, view: str, members: Sequence[int], constraints: NodeConstraints, spread: Spread
    ) -> list[tuple[int, str]]:
        """The view's nodes the constraint counts (its node inclusion policies), with their domain."""
        key = (view, constraints, spread.key, spread.honor_affinity, spread.honor_taints)
        found = self._candidates.get(key)
        if found is None:
            found = []
            for i in members:
                node = self._nodes[i]
                domain = node.labels.get(spread.key)
                if domain is None:
                    continue
                if spread.honor_affinity and not constraints.matches_labels(node.name, node.labels):
                    continue
                if spread.honor_taints and not constraints.tolerates(
                    node.taints, ignore_condition_taints=self._ignore
                ):
                    continue
                found.append((i, domain))
            self._candidates[key] = found
        return found

    def _bound_counts(
        self, view: str, constraints: NodeConstraints, spread: Spread, candidates: list[tuple[int, str]]
    ) -> Counter[str]:
        """Per domain: the bound pods the constraint counts (none for the group's own only)."""
        key = (view, constraints, _scope(spread))
        found = self._on_bound.get(key)
        if found is None:
            found = Counter()
            if self._bound is not None and spread.selector is not None and not spread.group_only:
                per_node = self._bound.on_nodes(spread.namespace, spread.selector)
                for i, domain in candidates:
                    found[domain] += per_node.get(self._nodes[i].name, 0)
            self._on_bound[key] = found
        return found
