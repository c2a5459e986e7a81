"""Where a pod with hard topology spread constraints may go now, in one planning pass.

Why this exists: ``NodeTable.place`` (``core.admission.fit``) places a group's pods one by one;
before each pod with constraints (``core.model.spread.Spread``) it asks ``Skews.rule`` which
nodes the kube-scheduler's PodTopologySpread filter would let it bind to, given the pods bound
(``BoundPods``), the pods the pass placed before (kept), and the group's pods placed before it
(``local``). A group kept by the pass counts for the groups after it (``keep``); one given
back (``NodeTable.unplace``) stops counting (``forget``).

Speed: each (nodes counted, pods counted) pair keeps its domains' counts and how many domains
have each count, so a pod's minimum is found without a pass over the domains, and a node is
judged only when the fit's best-fit scan reaches it (``Rule.allows``): a pass over 5,000 nodes
places a spread group about as fast as a plain one.

Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from gatekeeper.core.kube.selectors import LabelSelector, NodeConstraints
from gatekeeper.core.model.demand import PodDemand
from gatekeeper.core.model.nodes import Node
from gatekeeper.core.model.spread import BoundPods, Spread

__all__ = ["Local", "Rule", "Skews"]

Scope = tuple[str, LabelSelector | None, str, bool]
"""The pods one constraint counts: (namespace, selector, topology key, the group's own only)."""

Local = Counter[tuple[Scope, str]]
"""The group's pods placed so far in one ``place``, per (scope, domain)."""


def _scope(spread: Spread) -> Scope:
    return (spread.namespace, spread.selector, spread.key, spread.group_only)


@dataclass(frozen=True)
class _Domains:
    """The nodes one constraint counts (by the pod's node inclusion policies), with their domain;
    shared by every scope that counts on them."""

    domain_of: dict[int, str]
    names: frozenset[str]


class _Counts:
    """The pods of one scope in each domain of one ``_Domains`` (bound and kept by the pass),
    kept sparse (a domain with none is not stored), with how many domains have each count."""

    def __init__(self, domains: _Domains, base: Counter[str]) -> None:
        self.domains = domains
        self.counts: dict[str, int] = {d: n for d, n in base.items() if n > 0 and d in domains.names}
        self.histogram: Counter[int] = Counter(self.counts.values())
        self.zeros = len(domains.names) - len(self.counts)

    def of(self, domain: str) -> int:
        return self.counts.get(domain, 0)

    def add(self, domain: str, n: int) -> None:
        if domain not in self.domains.names:
            return
        old = self.counts.get(domain, 0)
        if old:
            self.histogram[old] -= 1
            if not self.histogram[old]:
                del self.histogram[old]
        else:
            self.zeros -= 1
        new = old + n
        if new > 0:
            self.counts[domain] = new
            self.histogram[new] += 1
        else:
            self.counts.pop(domain, None)
            self.zeros += 1

    def least(self, scope: Scope, local: Local, min_domains: int) -> int:
        """The emptiest domain's count with the group's own pods placed so far; 0 when there are
        fewer domains than ``min_domains``."""
        if len(self.domains.names) < min_domains or not self.domains.names:
            return 0
        low = 0 if self.zeros else min(self.histogram)
        at_low = self.zeros if low == 0 else self.histogram[low]
        bumped = {d for (s, d), n in local.items() if s == scope and n and d in self.domains.names}
        if sum(1 for d in bumped if self.of(d) == low) < at_low:
            return low
        return min(self.of(d) + local[(scope, d)] for d in {*self.counts, *bumped})


@dataclass(frozen=True)
class Rule:
    """The PodTopologySpread filter for one pod, now: ``allows(node)`` as the fit's scan reaches it."""

    checks: tuple[tuple[_Counts, Scope, int], ...]
    """Per constraint: its counts, its scope, and the highest count a domain may have before
    this pod goes there (``maxSkew`` + minimum - whether the pod counts itself)."""
    local: Local
    said: str
    """The constraints in a record's words."""

    def allows(self, node: int) -> bool:
        for counts, scope, ceiling in self.checks:
            domain = counts.domains.domain_of.get(node)
            if domain is None or counts.of(domain) + self.local[(scope, domain)] > ceiling:
                return False
        return True


class Skews:
    """The spread counts of one planning pass over ``nodes`` (in the ``NodeTable``'s order)."""

    def __init__(self, nodes: Sequence[Node], bound: BoundPods | None, *, hypothetical: bool) -> None:
        self._nodes = nodes
        self._bound = bound
        self._ignore = hypothetical  # transient node taints, as the "could it ever fit" table does
        self._position = {node.name: i for i, node in enumerate(nodes)}
        self._domains: dict[tuple[frozenset[str], NodeConstraints, str, bool, bool], _Domains] = {}
        self._counts: dict[tuple[frozenset[str], NodeConstraints, str, bool, bool, Scope], _Counts] = {}
        self._by_scope: dict[Scope, list[_Counts]] = {}
        self._kept: dict[Scope, Counter[str]] = {}

    def rule(self, pod: PodDemand, local: Local) -> Rule | None:
        """Where ``pod`` may go now under its hard constraints; None when it has none."""
        if not pod.spreads:
            return None
        checks = []
        keys = frozenset(s.key for s in pod.spreads)
        for spread in pod.spreads:
            counts = self._counts_of(keys, pod.constraints, spread)
            scope = _scope(spread)
            least = counts.least(scope, local, spread.min_domains)
            checks.append((counts, scope, least + spread.max_skew - int(spread.own)))
        return Rule(tuple(checks), local, "; ".join(s.said for s in pod.spreads))

    def count(self, pod: PodDemand, node: int, local: Local) -> None:
        """``pod`` placed on ``node``: one more in its domain for each constraint of its group
        whose selector matches it (``PodDemand.counted_in``: a leader without constraints
        counts for its workers' rule)."""
        labels = self._nodes[node].labels
        for spread in pod.counted_in:
            if spread.key in labels:
                local[(_scope(spread), labels[spread.key])] += 1

    def keep(self, local: Local) -> None:
        """The group is kept: its pods count for the groups placed after it in the pass."""
        for (scope, domain), n in local.items():
            if n and not scope[3]:
                self._kept.setdefault(scope, Counter())[domain] += n
                for counts in self._by_scope.get(scope, ()):
                    counts.add(domain, n)

    def forget(self, pods: Sequence[PodDemand], nodes: Sequence[int]) -> None:
        """Kept pods given back (``NodeTable.unplace``)."""
        local: Local = Counter()
        for pod, node in zip(pods, nodes, strict=True):
            self.count(pod, node, local)
        self.keep(Counter({key: -n for key, n in local.items()}))

    def _counts_of(self, keys: frozenset[str], constraints: NodeConstraints, spread: Spread) -> _Counts:
        scope = _scope(spread)
        where = (keys, constraints, spread.key, spread.honor_affinity, spread.honor_taints)
        found = self._counts.get((*where, scope))
        if found is None:
            domains = self._domains.get(where)
            if domains is None:
                domains = self._domains[where] = self._domains_of(keys, constraints, spread)
            base: Counter[str] = Counter(self._kept.get(scope, ()))
            if self._bound is not None and spread.selector is not None and not spread.group_only:
                for name, n in self._bound.on_nodes(spread.namespace, spread.selector).items():
                    domain = domains.domain_of.get(self._position.get(name, -1))
                    if domain is not None:
                        base[domain] += n
            found = self._counts[(*where, scope)] = _Counts(domains, base)
            self._by_scope.setdefault(scope, []).append(found)
        return found

    def _domains_of(self, keys: frozenset[str], constraints: NodeConstraints, spread: Spread) -> _Domains:
        """The nodes the constraint counts, with their domain, as the scheduler takes them: every
        node of the cluster (cordoned and not ready ones too) that has all the pod's topology
        keys and passes the constraint's node inclusion policies (the pod's node selector and
        required affinity, which name its pool; its tolerations only with ``Honor``)."""
        out: dict[int, str] = {}
        for i, node in enumerate(self._nodes):
            domain = node.labels.get(spread.key)
            if domain is None or not keys.issubset(node.labels):
                continue
            if spread.honor_affinity and not constraints.matches_labels(node.name, node.labels):
                continue
            if spread.honor_taints and not constraints.tolerates(
                node.taints, ignore_condition_taints=self._ignore
            ):
                continue
            out[i] = domain
        return _Domains(out, frozenset(out.values()))
