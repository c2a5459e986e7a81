"""Node fit: can every pod of a group be placed, at the same time, on free room of the pool's nodes?

Quota alone is not placement: four free GPUs spread 1+1+1+1 do not hold a pod that
needs two. Before a group is admitted, each of its pods gets a tentative node by a
deterministic greedy rule, first-fit-decreasing with best fit:

* the group's pods are placed largest first ("largest" = the pod's dominant share:
  its biggest request relative to the largest such node in the pool; ties keep
  leader-first order);
* each pod goes to the eligible node with the *least* free amount of the pod's
  dominant resource that still holds all of the pod's requests (best fit), ties by
  node name, which keeps big nodes free for big pods;
* a node holds a pod if the pod tolerates its NoSchedule/NoExecute taints, matches its
  labels, the node is schedulable, and free >= request for every requested resource
  plus one ``pods`` slot, as the kube-scheduler's NodeResourcesFit filter checks.

The greedy is a heuristic: it may miss a packing that exists (bin packing is
NP-hard), never the other way round. The scheduler later binds the ungated pods by
its own scoring, so the tentative nodes are advice, not a binding.

Speed: a ``NodeTable`` lives for one planning pass. It keeps every node's free vector
and, per pool and resource, a sorted index of (free, node), built on first use and
updated as pods are placed, so a placement costs a bisect plus a short scan instead of
a pass over all nodes. Eligibility per distinct set of pod constraints is computed once.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gatekeeper.core.admission.quota import by_importance
from gatekeeper.core.admission.skew import Local, Skews
from gatekeeper.core.kube.selectors import NodeConstraints
from gatekeeper.core.model.demand import PodDemand, Resources
from gatekeeper.core.model.nodes import Node
from gatekeeper.core.model.spread import BoundPods

#: Node names, one per pod of the group, in the group's pod order (leader first).
Placement = tuple[str, ...]

_ALL = "*"


@dataclass(frozen=True)
class Misfit:
    """Why a group's pods could not all be placed: the first pod that found no node.

    ``resource`` is the resource no eligible node has enough of, or None when either no
    node is eligible at all (``eligible == 0``) or every resource is available somewhere
    but no single node has all of them. ``largest`` is the largest free amount of
    ``resource`` on any eligible node; ``total`` the free amount summed over eligible
    nodes and ``spread`` how many of them have some. ``placed`` pods of the group were
    placed before this one.
    """

    pod: int
    role: str
    requests: Resources
    resource: str | None
    needed: int
    largest: int
    total: int
    spread: int
    placed: int
    eligible: int
    nodes: int
    skew: str = ""
    """The hard topology spread constraint that left the pod no node with room (``Spread.said``),
    or "" when room itself was short."""


class NodeTable:
    """Free capacity of a set of nodes during one planning pass, with group placement.

    ``usage`` (node name -> requests of bound pods, with a ``pods`` count) is subtracted
    from allocatable. With ``hypothetical`` the table answers "could this ever fit": all
    nodes count as empty and schedulable, and transient ``node.kubernetes.io/*`` taints
    are ignored. Nodes are grouped into views (one per pool) with ``add_view``.
    """

    def __init__(
        self,
        nodes: Iterable[Node],
        usage: Mapping[str, Mapping[str, int]] | None = None,
        *,
        hypothetical: bool = False,
        bound: BoundPods | None = None,
    ) -> None:
        self._nodes = sorted(nodes, key=lambda node: node.name)
        self._skews = Skews(self._nodes, None if hypothetical else bound, hypothetical=hypothetical)
        self._position = {node.name: i for i, node in enumerate(self._nodes)}
        self._hypothetical = hypothetical
        usage = usage or {}
        self._free: list[dict[str, int]] = []
        for node in self._nodes:
            free = dict(node.allocatable)
            if not hypothetical:
                for resource, amount in usage.get(node.name, {}).items():
                    free[resource] = free.get(resource, 0) - amount
            self._free.append(free)
        self._usable = [hypothetical or node.schedulable for node in self._nodes]
        self._views: dict[str, list[int]] = {}
        self._node_views: list[list[str]] = [[] for _ in self._nodes]
        self._indexes: dict[tuple[str, str], list[tuple[int, int]]] = {}
        # Per index: [sum of positive free, nodes with positive free], kept with the index.
        self._stats: dict[tuple[str, str], list[int]] = {}
        self._members: dict[tuple[str, NodeConstraints], list[int]] = {}
        self._eligible: dict[tuple[str, NodeConstraints], bytearray] = {}
        self._largest: dict[str, dict[str, int]] = {}
        self._shape: dict[tuple[str, PodDemand], tuple[float, str, dict[str, int]]] = {}
        self.version = 0
        """Bumped by every kept placement; equal versions mean equal free capacity."""
        self._log: list[int] = []
        """The nodes whose free room changed, in order (``changed_since``)."""

    # ----- views -----------------------------------------------------------------------

    def add_view(self, name: str, selects: Callable[[Node], bool]) -> None:
        """Define view ``name`` as the usable nodes ``selects`` accepts (a pool's nodes)."""
        members = [i for i, node in enumerate(self._nodes) if self._usable[i] and selects(node)]
        self._views[name] = members
        for i in members:
            self._node_views[i].append(name)
        largest: dict[str, int] = {}
        for i in members:
            for resource, amount in self._nodes[i].allocatable.items():
                if amount > largest.get(resource, 0):
                    largest[resource] = amount
        self._largest[name] = largest

    def view_size(self, view: str) -> int:
        """How many usable nodes the view holds."""
        return len(self._views[view])

    def free_of(self, node_name: str) -> Mapping[str, int]:
        """Current free vector of a node (for tests and diagnostics)."""
        return self._free[self._position[node_name]]

    # ----- placement -------------------------------------------------------------------

    def place(
        self,
        view: str,
        pods: Sequence[PodDemand],
        *,
        keep: bool = True,
        allowed: bytearray | None = None,
        local: Local | None = None,
    ) -> Placement | Misfit:
        """Place all ``pods`` on the view's nodes, or explain the first pod that does not fit.

        On success the placement is kept (free capacity reduced, ``version`` bumped)
        unless ``keep`` is False; on failure nothing changes. With ``allowed`` (``mask``)
        only those nodes are used (one topology domain, or all but the domains closed to
        the group). ``local`` holds the spread counts of the group's pods placed by earlier
        calls (a group placed in parts: ``core.admission.subgroups``); kept parts stay in it.
        """
        shapes = [self._pod_shape(view, pod) for pod in pods]
        order = sorted(range(len(pods)), key=lambda i: (-shapes[i][0], i))
        taken: list[tuple[int, dict[str, int]]] = []
        chosen = [0] * len(pods)
        local = Counter() if local is None else local
        added: Local = Counter()
        for i in order:
            _, primary, req = shapes[i]
            rule = self._skews.rule(pods[i], local)
            accept = rule.allows if rule is not None else None
            node = self._best_fit(view, pods[i].constraints, primary, req, allowed, accept)
            if node is None:
                misfit = self._explain(view, i, pods[i], req, len(taken))
                if (
                    rule is not None
                    and self._best_fit(view, pods[i].constraints, primary, req, allowed) is not None
                ):
                    misfit = replace(misfit, skew=rule.said)  # room there is, where the rule forbids
                for n, r in reversed(taken):
                    self._change(n, r, +1)
                local.subtract(added)
                return misfit
            self._change(node, req, -1)
            self._skews.count(pods[i], node, added)
            self._skews.count(pods[i], node, local)
            taken.append((node, req))
            chosen[i] = node
        if keep:
            self._skews.keep(added)
            self.version += 1
        else:
            local.subtract(added)
            for n, r in reversed(taken):
                self._change(n, r, +1)
        return tuple(self._nodes[n].name for n in chosen)

    def unplace(self, view: str, pods: Sequence[PodDemand], nodes: Placement) -> None:
        """Give back the room ``place`` kept for ``pods`` on ``nodes`` (a group placed in parts
        that did not all fit)."""
        for pod, name in zip(pods, nodes, strict=True):
            self._change(self._position[name], self._pod_shape(view, pod)[2], +1)
        self._skews.forget(pods, [self._position[name] for name in nodes])
        self.version += 1

    def view_nodes(self, view: str) -> list[Node]:
        """The view's usable nodes, by name."""
        return [self._nodes[i] for i in self._views[view]]

    def mask(self, names: Iterable[str]) -> bytearray:
        """The ``allowed`` of ``place`` for these nodes (names it does not hold are left out)."""
        flags = bytearray(len(self._nodes))
        for name in names:
            i = self._position.get(name)
            if i is not None:
                flags[i] = 1
        return flags

    def positions(self, names: Iterable[str]) -> list[int]:
        """The table's positions of these nodes (for ``free_at``; names it does not hold left out)."""
        return [i for name in names if (i := self._position.get(name)) is not None]

    def free_at(self, positions: Iterable[int], resource: str) -> int:
        """Free ``resource`` summed over the nodes at these positions (negative free counts as none)."""
        return sum(max(self._free[i].get(resource, 0), 0) for i in positions)

    @property
    def changes(self) -> int:
        """The mark of now, for ``changed_since``."""
        return len(self._log)

    def changed_since(self, mark: int) -> tuple[list[int], int]:
        """The positions of the nodes whose free room changed since ``mark`` (0: since the table
        was made; possibly changed back since), and the mark to ask from next time."""
        return self._log[mark:], len(self._log)

    def free_sum(self, names: Iterable[str], resource: str) -> int:
        """Free ``resource`` summed over these nodes (negative free counts as none)."""
        total = 0
        for name in names:
            i = self._position.get(name)
            if i is not None:
                total += max(self._free[i].get(resource, 0), 0)
        return total

    def place_partial(self, view: str, pods: Sequence[PodDemand], *, keep: bool) -> tuple[str | None, ...]:
        """Place what of ``pods`` fits (largest first, as ``place``); None for each pod that
        does not. Kept only with ``keep``: the same call then places the same way."""
        shapes = [self._pod_shape(view, pod) for pod in pods]
        order = sorted(range(len(pods)), key=lambda i: (-shapes[i][0], i))
        taken: list[tuple[int, dict[str, int]]] = []
        chosen: list[str | None] = [None] * len(pods)
        for i in order:
            _, primary, req = shapes[i]
            node = self._best_fit(view, pods[i].constraints, primary, req)
            if node is None:
                continue
            self._change(node, req, -1)
            taken.append((node, req))
            chosen[i] = self._nodes[node].name
        if keep:
            self.version += 1
        else:
            for n, r in reversed(taken):
                self._change(n, r, +1)
        return tuple(chosen)

    def reserve(self, view: str, pod: PodDemand, preferred: str | None = None) -> str | None:
        """Hold room for one pod of an admitted group, on ``preferred`` if it still fits there.

        Returns the node name, or None when no node of the view has room.
        """
        _, primary, req = self._pod_shape(view, pod)
        node: int | None = None
        if preferred is not None:
            i = self._position.get(preferred)
            if i is not None and self._eligibility(view, pod.constraints)[i] and _fits(self._free[i], req):
                node = i
        if node is None:
            node = self._best_fit(view, pod.constraints, primary, req)
        if node is None:
            return None
        self._change(node, req, -1)
        held: Local = Counter()
        self._skews.count(pod, node, held)  # an admitted group's pod counts where it will bind
        self._skews.keep(held)
        self.version += 1
        return self._nodes[node].name

    # ----- internals -------------------------------------------------------------------

    def _pod_shape(self, view: str, pod: PodDemand) -> tuple[float, str, dict[str, int]]:
        """(dominant share, dominant resource, requests incl. a pods slot) of a pod in a view."""
        key = (view, pod)
        shape = self._shape.get(key)
        if shape is None:
            req = dict(pod.requests)
            req["pods"] = req.get("pods", 0) + 1
            largest = self._largest[view]
            best: tuple[float, str] = (-1.0, "pods")
            for resource in sorted(req):
                cap = largest.get(resource, 0)
                share = req[resource] / cap if cap > 0 else math.inf
                if share > best[0]:
                    best = (share, resource)
            shape = (best[0], best[1], req)
            self._shape[key] = shape
        return shape

    def _eligibility(self, view: str, constraints: NodeConstraints) -> bytearray:
        """Per node (by position): 1 if it is in ``view`` and accepts pods with ``constraints``."""
        flags = self._eligible.get((view, constraints))
        if flags is None:
            ignore = self._hypothetical
            flags = bytearray(len(self._nodes))
            for i in self._views[view]:
                node = self._nodes[i]
                if constraints.matches_labels(node.name, node.labels) and constraints.tolerates(
                    node.taints, ignore_condition_taints=ignore
                ):
                    flags[i] = 1
            self._eligible[(view, constraints)] = flags
        return flags

    def _index(self, view: str, resource: str) -> list[tuple[int, int]]:
        index = self._indexes.get((view, resource))
        if index is None:
            free = self._free
            index = sorted((free[i].get(resource, 0), i) for i in self._views[view])
            self._indexes[(view, resource)] = index
            self._stats[(view, resource)] = [
                sum(a for a, _ in index if a > 0),
                sum(1 for a, _ in index if a > 0),
            ]
        return index

    def _best_fit(
        self,
        view: str,
        constraints: NodeConstraints,
        primary: str,
        req: Mapping[str, int],
        allowed: bytearray | None = None,
        accept: Callable[[int], bool] | None = None,
    ) -> int | None:
        index = self._index(view, primary)
        eligible = self._eligibility(view, constraints)
        free = self._free
        items = list(req.items())
        for j in range(bisect_left(index, (req[primary], -1)), len(index)):
            node = index[j][1]
            if eligible[node] and (allowed is None or allowed[node]) and (accept is None or accept(node)):
                have = free[node]
                for resource, amount in items:
                    if have.get(resource, 0) < amount:
                        break
                else:
                    return node
        return None

    def _change(self, node: int, req: Mapping[str, int], sign: int) -> None:
        self._log.append(node)
        free = self._free[node]
        for view in self._node_views[node]:
            for resource, amount in req.items():
                index = self._indexes.get((view, resource))
                if index is not None:
                    old = free.get(resource, 0)
                    new = old + sign * amount
                    del index[bisect_left(index, (old, node))]
                    insort(index, (new, node))
                    stats = self._stats[(view, resource)]
                    stats[0] += max(new, 0) - max(old, 0)
                    stats[1] += (new > 0) - (old > 0)
        for resource, amount in req.items():
            free[resource] = free.get(resource, 0) + sign * amount

    def _eligible_members(self, view: str, constraints: NodeConstraints) -> list[int]:
        members = self._members.get((view, constraints))
        if members is None:
            eligible = self._eligibility(view, constraints)
            members = [i for i in self._views[view] if eligible[i]]
            self._members[(view, constraints)] = members
        return members

    def _free_stats(self, view: str, resource: str, members: list[int]) -> tuple[int, int, int]:
        """(largest, total, spread) of positive free ``resource`` over ``members``."""
        stats = self._stats.get((view, resource))
        if stats is not None and len(members) == len(self._views[view]):
            index = self._indexes[(view, resource)]
            return max(index[-1][0] if index else 0, 0), stats[0], stats[1]
        free = self._free
        positive = [a for a in (free[i].get(resource, 0) for i in members) if a > 0]
        return max(positive, default=0), sum(positive), len(positive)

    def _explain(self, view: str, pod_index: int, pod: PodDemand, req: dict[str, int], placed: int) -> Misfit:
        members = self._eligible_members(view, pod.constraints)
        resource: str | None = None
        needed = largest = total = spread = 0
        if members:
            for name in by_importance(req):
                most, total, spread = self._free_stats(view, name, members)
                if most < req[name]:
                    resource, needed, largest = name, req[name], most
                    break
            else:
                total = spread = 0
        return Misfit(
            pod=pod_index,
            role=pod.role,
            requests=req,
            resource=resource,
            needed=needed,
            largest=largest,
            total=total,
            spread=spread,
            placed=placed,
            eligible=len(members),
            nodes=len(self._views[view]),
        )


def _fits(free: Mapping[str, int], req: Mapping[str, int]) -> bool:
    return all(free.get(resource, 0) >= amount for resource, amount in req.items())


def fit_group(
    nodes: Iterable[Node],
    usage: Mapping[str, Mapping[str, int]],
    pods: Sequence[PodDemand],
) -> Placement | Misfit:
    """One-shot node fit of a group's ``pods`` on schedulable ``nodes`` with bound-pod ``usage``."""
    table = NodeTable(nodes, usage)
    table.add_view(_ALL, lambda _node: True)
    return table.place(_ALL, pods)
