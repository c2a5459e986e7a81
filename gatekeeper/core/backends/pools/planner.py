"""The admission planner: which waiting groups to admit now, and why every other one waits.

One planning pass takes a snapshot (pools, nodes, bound-pod usage, admitted groups,
waiting groups) and returns a ``Plan``; it changes nothing itself. The I/O layer
records the admissions, ungates the pods and writes the reasons as Conditions/Events.

Per pass, in queue order (see ``queue.queue_order``), each waiting group is checked:

1. its pool exists, admits the group's namespace (``spec.namespaceSelector``) and its
   demand could be computed;
2. it could ever be admitted: the quota covers every resource it asks for and could
   hold it, and the group's pods can be placed on the pool's nodes when empty;
3. its pool's StrictFIFO queue is not held by an earlier group;
4. quota: what admitted groups hold plus the group's demand fits the quota;
5. node fit: every pod gets a tentative node on free room (``fit.NodeTable``), in one
   topology domain when its LWS asks for one (a level of the Pool's ``spec.topology.levels``,
   LWS's exclusive placement), each subgroup in a domain of its own (LWS's subgroup exclusive
   placement): ``placing``. The domain chosen is the admission's (``Admission.domain``): its
   pods are pinned there.

Pods are placed as they will be once ungated: with the pool's node selector and
tolerations added to their own (``Pool.steer``).

A group passing all five is admitted and immediately counts against quota and node
room for the rest of the pass. A group failing 4 or 5 waits; in a StrictFIFO pool it
also holds every later group. A group failing 1 or 2 is reported with a permanent
reason and skipped, so bad input never blocks a StrictFIFO queue forever (it stays
reported until its LWS or the pool changes).

Admitted groups hold their whole demand in the quota, and node room for their pods
not yet bound, so a group between "ungated" and "bound" cannot be double-booked.

Pools of one ``spec.cohort`` lend each other room (``cohort``): once every waiting group was
tried in its own pool, each that waits for quota or nodes (in queue order, within its pool's
``spec.borrowingLimit``) is tried in the other pools of its cohort, by name, within their
``spec.lendingLimit``, with 2, 4 and 5 as that pool's own groups are; one that fits is
admitted there (``Admission.lender``) and holds that pool's quota and room. A group admitted
on a loan (``AdmittedGroup.lender``) is held in its lender's quota and nodes.

A pool with ``nodeFit: QuotaOnly`` (autoscaled nodes) skips the node checks of 2 and 5:
a group that fits the quota is admitted, placed tentatively where the existing nodes
have room, and its other pods (placement ``""``) wait Pending for the nodes an
autoscaler brings. Its admitted groups with unplaced pods are not called stranded.

A pool with ``spec.nodePools`` (Karpenter) places in 5 what does not fit the free room of
its existing nodes on nodes its NodePools can still launch (``provisioning.Launcher``),
all of the group or nothing; 2 asks the same of empty nodes and the NodePools' whole
limits. Its admitted groups' unbound pods hold room on the nodes coming up (NodeClaims
not ready yet, passed in as nodes), else on what the NodePools can launch, so no other
group takes the nodes bought for them. Without ``spec.quota`` it skips 4: the room decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from gatekeeper.core.admission import messages as text
from gatekeeper.core.admission import topology
from gatekeeper.core.admission.exclusive import KeptOut, NoDomain, Occupant
from gatekeeper.core.admission.fit import Misfit, NodeTable, Placement
from gatekeeper.core.admission.intruders import Intruders
from gatekeeper.core.admission.queue import AdmittedGroup, WaitingGroup, queue_order
from gatekeeper.core.admission.quota import by_importance, check_quota
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.admission.subgroups import NoSubgroupDomain
from gatekeeper.core.admission.topology import Domain, NoRoom, Placed
from gatekeeper.core.backends.pools import cohort, gangs
from gatekeeper.core.backends.pools.outcome import Admission, Plan, PoolStatus, PoolTally, Waiting
from gatekeeper.core.backends.pools.placing import Placing
from gatekeeper.core.backends.pools.provisioning import Launcher
from gatekeeper.core.kube.keys import GANG_SIZE_ANNOTATION
from gatekeeper.core.model.demand import GroupDemand, PodDemand
from gatekeeper.core.model.group import GroupKey, InvalidDemand
from gatekeeper.core.model.nodes import Node
from gatekeeper.core.model.pool import NodeFit, Pool, QueueingStrategy, sum_allocatable
from gatekeeper.core.model.spread import BoundPods

__all__ = ["Admission", "Plan", "PoolStatus", "Waiting", "plan"]
"""The planner's words (``outcome``) are read from here too."""


class _Pass:
    """The mutable state of one planning pass: node room, quota use, per-pool queues."""

    def __init__(
        self,
        pools: Iterable[Pool],
        nodes: Iterable[Node],
        usage: Mapping[str, Mapping[str, int]],
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        launcher: Launcher | None = None,
        occupants: Mapping[str, Iterable[Occupant]] | None = None,
        bound: BoundPods | None = None,
    ):
        node_list = list(nodes)
        self.room = Placing(node_list, usage, occupants, bound)
        self.now, self.empty, self.domains = self.room.now, self.room.empty, self.room.domains
        self.launcher = launcher or Launcher((), (), ())
        self.namespaces: Mapping[str, Mapping[str, str]] = namespaces or {}
        self._steered: dict[tuple[str, GroupDemand], GroupDemand] = {}
        self._pinned: dict[tuple[GroupDemand, Domain], GroupDemand] = {}
        self.states: dict[str, PoolTally] = {}
        self._never_cache: dict[tuple[str, GroupDemand, str, object], tuple[Reason, str] | None] = {}
        self._members: dict[str, list[Pool]] = {}
        """Each cohort's pools, by name (``cohort.members``)."""
        self._no_loan: set[tuple[str, GroupDemand, str, str, object]] = set()
        """(lender, demand, exclusive key, namespace) that found no room: loans only take room, so
        a shape that found none in a lender finds none later in the pass."""
        for pool in pools:
            if pool.name in self.states:
                raise ValueError(f"two pools are named {pool.name}")
            members = [n for n in node_list if pool.selects(n)]
            if pool.quota is not None:
                quota, ceiling = dict(pool.quota), dict(pool.quota)
            else:
                quota = sum_allocatable(n for n in members if n.schedulable)
                ceiling = sum_allocatable(members)
                if pool.node_pools:
                    # Not checked (the room decides), but shown: what the pool can reach.
                    for resource, amount in self.launcher.headroom(pool.node_pools).items():
                        quota[resource] = quota.get(resource, 0) + amount
            self.now.add_view(pool.name, pool.selects)
            self.empty.add_view(pool.name, pool.selects)
            self.states[pool.name] = PoolTally(pool, quota, ceiling, nodes=self.now.view_size(pool.name))

    def hold(self, group: AdmittedGroup) -> None:
        """Count an admitted group against its pool's quota (its lender's, on a loan) and hold
        room for its unbound pods."""
        state = self.states.get(group.held_in)
        if group.lender:
            self._lend(group.lender, group.pool, group.demand)
        if state is None:
            return
        state.hold(group.demand)
        pool = state.pool
        mark = [Occupant(group.key.namespace, group.exclusive, group.subgroups)]
        for i, pod in enumerate(self._pin(self._steer(pool, group.demand), group.domain).pods):
            if i in group.bound:
                continue
            node = self.now.reserve(pool.name, pod, group.nodes.get(i) or None)
            if node is not None:
                self.domains.take(node, mark)
                continue
            if pool.node_pools and not isinstance(
                self.launcher.launch(pool.node_pools, [pod], pool.selects), PodDemand
            ):
                continue  # its node is still to be bought: the NodePools' room is held for it
            if group.key not in state.stranded and state.pool.node_fit is NodeFit.REQUIRED:
                state.stranded.append(group.key)

    def consider(self, group: WaitingGroup) -> Admission | Waiting:
        """Admit ``group`` (updating quota use and node room) or say why it waits."""
        state = self.states.get(group.pool)
        if state is None:
            return Waiting(
                group.key, group.pool, Reason.POOL_NOT_FOUND, _say(group, text.pool_not_found(group.pool))
            )
        ns = group.key.namespace
        if not state.pool.admits(self.namespaces.get(ns)):
            detail = text.namespace_not_allowed(ns, group.pool)
            return self._wait(state, group, Reason.NAMESPACE_NOT_ALLOWED, detail)
        off = state.pool.disallowed(group.classes)
        if off:
            allowed = state.pool.allowed_priority_classes or ()
            detail = text.priority_class_not_allowed(group.pool, off, allowed)
            return self._wait(state, group, Reason.PRIORITY_CLASS_NOT_ALLOWED, detail)
        if isinstance(group.demand, InvalidDemand):
            return self._wait(state, group, Reason.INVALID_SPEC, text.invalid_spec(group.demand.message))
        demand = self._steer(state.pool, group.demand)
        never = self._never(state, demand, group)
        if never is not None:
            return self._wait(state, group, *never)
        if state.blocker is not None:
            return self._wait(
                state, group, Reason.BLOCKED_BY_STRICT_FIFO, text.blocked(group.pool, str(state.blocker))
            )
        check = check_quota(demand, state.quota, state.used, ceiling=state.ceiling)
        if not check.fits and _quota_applies(state.pool):
            detail = text.waits_for_quota(
                group.pool, demand, check.short, state.quota, state.used, state.holders, len(state.intruders)
            )
            return self._wait(state, group, Reason.WAITING_FOR_QUOTA, detail)
        outcome = self.room.place(state, demand, group)
        if isinstance(outcome, NoDomain | KeptOut | NoRoom | NoSubgroupDomain):
            if isinstance(outcome, NoDomain):
                detail = text.waits_for_domain(group.pool, outcome)
            elif isinstance(outcome, NoSubgroupDomain):
                detail = text.waits_for_subgroup_domain(group.pool, outcome)
            elif isinstance(outcome, NoRoom):
                detail = text.waits_for_topology(group.pool, outcome)
            else:
                detail = text.kept_out(group.pool, outcome.keys)
            return self._wait(state, group, Reason.WAITING_FOR_NODES, detail)
        if isinstance(outcome, Misfit):
            if state.pool.node_fit is NodeFit.QUOTA_ONLY:
                state.hold(demand)
                return Admission(group.key, group.pool, self._place_some(state, demand))
            if state.pool.node_pools:
                launched = self._launch(state, demand)
                if isinstance(launched, PodDemand):
                    described = self.launcher.describe(state.pool.node_pools)
                    detail = text.waits_for_launch(group.pool, launched.role, described)
                    return self._wait(state, group, Reason.WAITING_FOR_NODES, detail)
                state.hold(demand)
                return Admission(group.key, group.pool, launched)
            return self._wait(
                state, group, Reason.WAITING_FOR_NODES, text.waits_for_nodes(group.pool, outcome)
            )
        state.hold(demand)
        return Admission(group.key, group.pool, outcome.nodes, domain=outcome.domain)

    def consider_unit(
        self, members: list[WaitingGroup], admitted: Sequence[AdmittedGroup]
    ) -> Sequence[Admission | Waiting]:
        """Admit a gang's waiting members together, or say why each waits (``gangs``)."""
        state = self.states.get(members[0].pool)
        short = gangs.incomplete(members, admitted)
        if short is not None:
            if state is not None:
                state.waiting += len(members)
            detail = f"{short[0]} of its {short[1]} LWSs are there ({GANG_SIZE_ANNOTATION})"
            return gangs.each_waits(members, Reason.WAITING_FOR_GANG, detail)
        if len(members) == 1:
            return [self.consider(members[0])]
        whole = gangs.combined(members)
        if isinstance(whole, tuple):
            if state is not None:
                state.inadmissible += len(members)
            return gangs.each_waits(members, *whole)
        outcome = self.consider(whole)
        if isinstance(outcome, Admission):
            if state is not None and isinstance(whole.demand, GroupDemand):
                state.counted_as(len(members), whole.demand)
            return gangs.split(outcome, members)
        if state is not None:
            if outcome.position:
                state.waiting += len(members) - 1
            else:
                state.inadmissible += len(members) - 1
        detail = "the gang " + outcome.message.removeprefix(f"group {whole.key.index} ")
        return gangs.each_waits(members, outcome.reason, detail, outcome.position)

    def borrow(self, group: WaitingGroup, waiting: Waiting) -> Admission | None:
        """A group that waits in its own pool for quota or nodes, admitted into another pool of
        its cohort that has room for it (``cohort``); None when none has, or it may not borrow."""
        own = self.states.get(group.pool)
        if (
            own is None
            or not own.pool.cohort
            or waiting.reason not in (Reason.WAITING_FOR_QUOTA, Reason.WAITING_FOR_NODES)
            or not isinstance(group.demand, GroupDemand)
            or cohort.over(own.pool.borrowing_limit, own.borrowed, group.demand.total)
        ):
            return None
        name = own.pool.cohort
        if name not in self._members:
            self._members[name] = cohort.members((s.pool for s in self.states.values()), name)
        ns = group.key.namespace if group.exclusive else ""
        for lender_pool in self._members[name]:
            lender = self.states[lender_pool.name]
            miss = (lender_pool.name, group.demand, group.exclusive, ns, group.topology)
            if lender_pool.name == own.pool.name or miss in self._no_loan or lender.blocker is not None:
                continue  # itself; no room for such a group; or its StrictFIFO queue keeps its room
            if cohort.over(lender_pool.lending_limit, lender.lent, group.demand.total):
                continue
            demand = self._steer(lender_pool, group.demand)
            if (
                self._never(lender, demand, group) is not None
                or not check_quota(demand, lender.quota, lender.used, ceiling=lender.ceiling).fits
                or not isinstance(outcome := self.room.place(lender, demand, group), Placed)
            ):
                self._no_loan.add(miss)
                continue
            lender.hold(demand)
            self._lend(lender_pool.name, own.pool.name, demand)
            own.waiting -= 1
            nodes, domain = outcome.nodes, outcome.domain
            return Admission(group.key, group.pool, nodes, lender=lender_pool.name, domain=domain)
        return None

    def _lend(self, lender: str, borrower: str, demand: GroupDemand) -> None:
        """Tally a loan on both pools (those in this pass)."""
        if lender in self.states:
            cohort.add(self.states[lender].lent, demand.total)
        if borrower in self.states:
            cohort.add(self.states[borrower].borrowed, demand.total)

    def _steer(self, pool: Pool, demand: GroupDemand) -> GroupDemand:
        """The group's pods as ungated into ``pool`` (cached per pass)."""
        key = (pool.name, demand)
        steered = self._steered.get(key)
        if steered is None:
            steered = self._steered[key] = pool.steer(demand)
        return steered

    def _pin(self, demand: GroupDemand, domain: Domain) -> GroupDemand:
        """The group's pods pinned to ``domain`` (cached per pass)."""
        if not domain:
            return demand
        key = (demand, domain)
        pinned = self._pinned.get(key)
        if pinned is None:
            pinned = self._pinned[key] = topology.pin(demand, domain)
        return pinned

    def _launch(self, state: PoolTally, demand: GroupDemand) -> Placement | PodDemand:
        """All of the group on the free room of the pool's nodes plus nodes its NodePools would
        launch (kept), or the first pod that finds neither (nothing kept). A pod to launch
        for has placement ``""``: its node does not exist yet."""
        pool, pods = state.pool, demand.pods
        partial = self.now.place_partial(pool.name, pods, keep=False)
        rest = [pods[i] for i, node in enumerate(partial) if node is None]
        launched = self.launcher.launch(pool.node_pools, rest, pool.selects, keep=False)
        if isinstance(launched, PodDemand):
            return launched
        self.now.place_partial(pool.name, pods, keep=True)
        self.launcher.launch(pool.node_pools, rest, pool.selects, keep=True)
        return tuple(node or "" for node in partial)

    def _place_some(self, state: PoolTally, demand: GroupDemand) -> Placement:
        """A QuotaOnly pool's group that does not fit whole: room held for the pods that fit
        now, ``""`` for the others (they wait for new nodes)."""
        return tuple(self.now.reserve(state.pool.name, pod) or "" for pod in demand.pods)

    def _wait(self, state: PoolTally, group: WaitingGroup, reason: Reason, detail: str) -> Waiting:
        if reason.permanent:
            state.inadmissible += 1
            return Waiting(group.key, group.pool, reason, _say(group, detail))
        state.waiting += 1
        strict = state.pool.queueing_strategy is QueueingStrategy.STRICT_FIFO
        if strict and state.blocker is None:
            state.blocker = group.key
        return Waiting(group.key, group.pool, reason, _say(group, detail), state.waiting)

    def _never(self, state: PoolTally, demand: GroupDemand, group: WaitingGroup) -> tuple[Reason, str] | None:
        """Why ``demand`` can never be admitted into the pool as it is, or None (cached per pass)."""
        pool, request = state.pool, group.topology
        cache = (pool.name, demand, group.exclusive, (request, group.subgroups))
        if cache not in self._never_cache:
            never = _never(state, self.empty, demand, self.launcher)
            if never is None and request is not None and request.key not in pool.levels:
                said = text.topology_not_in_pool(pool.name, request.key, pool.levels)
                never = Reason.TOPOLOGY_NOT_IN_POOL, said
            elif never is None:
                never = self.room.never(pool, demand, group)
            self._never_cache[cache] = never
        return self._never_cache[cache]


def _say(group: WaitingGroup, detail: str) -> str:
    return f"group {group.key.index} {detail}"


def _quota_applies(pool: Pool) -> bool:
    """A pool with NodePools and no ``spec.quota`` has no quota: the room decides."""
    return pool.quota is not None or not pool.node_pools


def _never(
    state: PoolTally, hypothetical: NodeTable, demand: GroupDemand, launcher: Launcher
) -> tuple[Reason, str] | None:
    pool = state.pool
    explicit = pool.quota is not None
    check = check_quota(demand, state.quota, {}, ceiling=state.ceiling)
    if _quota_applies(pool):
        if check.uncovered:
            return Reason.RESOURCE_NOT_IN_QUOTA, text.not_in_quota(pool.name, check.uncovered, explicit)
        if check.too_large:
            resource = by_importance(check.too_large)[0]
            return Reason.EXCEEDS_QUOTA, text.exceeds_quota(
                pool.name, demand, resource, state.ceiling[resource], explicit
            )
    if pool.node_fit is NodeFit.QUOTA_ONLY:
        return None  # the nodes that will hold it may not exist yet
    if pool.node_pools:
        partial = hypothetical.place_partial(pool.name, demand.pods, keep=False)
        rest = [demand.pods[i] for i, node in enumerate(partial) if node is None]
        never = launcher.launch(pool.node_pools, rest, pool.selects, keep=False, fresh=True)
        if isinstance(never, PodDemand):
            return Reason.NODES_TOO_SMALL, text.cannot_launch(pool.name, pool.node_pools, never.role)
        return None
    placed = hypothetical.place(pool.name, demand.pods, keep=False)
    if isinstance(placed, Misfit):
        reason = Reason.NO_MATCHING_NODE if placed.eligible == 0 else Reason.NODES_TOO_SMALL
        return reason, text.cannot_place(pool.name, placed)
    return None


def _loans(
    planning: _Pass, queue: list[WaitingGroup], results: list[Waiting], admit: list[Admission]
) -> list[Waiting]:
    """The waiting groups that borrow room in their cohort, in queue order, added to ``admit``;
    the rest, their places in their pools' queues counted again."""
    by_key = {g.key: g for g in queue}
    still: list[Waiting] = []
    for w in results:
        group = by_key.get(w.key)  # a gang's member borrows nothing (``gangs``)
        found = planning.borrow(group, w) if group is not None else None
        if found is not None:
            admit.append(found)
        else:
            still.append(w)
    if len(still) == len(results):
        return results
    places: dict[str, int] = {}
    renumbered: list[Waiting] = []
    for w in still:
        if w.position:
            places[w.pool] = places.get(w.pool, 0) + 1
            w = replace(w, position=places[w.pool])
        renumbered.append(w)
    return renumbered


def plan(
    pools: Iterable[Pool],
    nodes: Iterable[Node],
    usage: Mapping[str, Mapping[str, int]],
    admitted: Iterable[AdmittedGroup],
    waiting: Iterable[WaitingGroup],
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    launcher: Launcher | None = None,
    intruders: Mapping[str, Intruders] | None = None,
    occupants: Mapping[str, Iterable[Occupant]] | None = None,
    bound: BoundPods | None = None,
) -> Plan:
    """Decide which waiting groups to admit now and why each other one waits.

    ``usage`` is what bound, non-terminal pods request per node (``nodes.node_usage``).
    ``namespaces`` holds each namespace's labels (for the pools' ``namespaceSelector``).
    ``launcher`` is what the pools' Karpenter NodePools can still launch (``nodes`` then
    include the nodes coming up, ``provisioning.coming_up``). ``intruders`` are the pods on
    each pool's closed nodes without an admission (``core.admission.intruders``): held against its quota.
    ``occupants`` are the LWS groups' bound pods per node (``core.admission.exclusive.occupants``),
    for the groups of LWSs with exclusive placement; ``bound`` the live bound pods, for the pods
    with hard topology spread constraints (``core.admission.skew``).
    Waiting groups already in ``admitted`` (same key) are ignored. Raises ValueError if
    two pools share a name.
    """
    planning = _Pass(pools, nodes, usage, namespaces, launcher, occupants, bound)
    for name, found in (intruders or {}).items():
        if name in planning.states:
            planning.states[name].intrude(found)
    admitted_keys: set[GroupKey] = set()
    admitted_list = sorted(admitted, key=lambda g: g.key)
    for group in admitted_list:
        admitted_keys.add(group.key)
        planning.hold(group)
    admit: list[Admission] = []
    results: list[Waiting] = []
    queue = sorted((g for g in waiting if g.key not in admitted_keys), key=queue_order)
    units = gangs.units(queue)
    unit_of = {m.key: unit for unit, members in units.items() for m in members}
    for candidate in queue:
        unit = unit_of.get(candidate.key)
        if unit is not None:
            if unit in units:  # at the place of its first member, once
                for one in planning.consider_unit(units.pop(unit), admitted_list):
                    if isinstance(one, Admission):
                        admit.append(one)
                    else:
                        results.append(one)
            continue
        outcome = planning.consider(candidate)
        if isinstance(outcome, Admission):
            admit.append(outcome)
        else:
            results.append(outcome)
    if any(p.pool.cohort for p in planning.states.values()):
        results = _loans(planning, [g for g in queue if g.key not in unit_of], results, admit)
    return Plan(
        admit=tuple(admit),
        waiting=tuple(results),
        pools={
            name: state.status(planning.launcher.notes_of(state.pool.node_pools))
            for name, state in planning.states.items()
        },
    )
