"""What one planning pass decides (``Plan``: admissions, waits, each pool's status), and the
tally of a pool it keeps meanwhile.

Why this exists: ``planner`` decides and these are its words; ``decide``, ``writes``,
``holdback`` and ``preemption`` read them. Kept apart so that the planner is its rules only.
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gatekeeper.core.admission.fit import Placement
from gatekeeper.core.admission.intruders import Intruders
from gatekeeper.core.admission.quota import by_importance
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.kube.quantity import format_amount
from gatekeeper.core.model.demand import GroupDemand, Resources
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.pool import Pool, QueueingStrategy

__all__ = ["Admission", "Plan", "PoolStatus", "PoolTally", "Waiting"]


@dataclass(frozen=True)
class Admission:
    """Admit this group now; ``nodes`` is the tentative node of each pod, leader first."""

    key: GroupKey
    pool: str
    nodes: Placement
    lender: str = ""
    """The pool of the cohort that lends the group its room ("": its own pool admits it)."""
    domain: tuple[tuple[str, str], ...] = ()
    """The topology domain its pods are pinned to, as node labels (``core.admission.topology``);
    (): none."""


@dataclass(frozen=True)
class Waiting:
    """A group not admitted in this pass, with a reason and a sentence for people.

    ``position`` is the group's 1-based place among the pool's waiting groups, or 0
    when its reason is permanent (it is not really in the queue).
    """

    key: GroupKey
    pool: str
    reason: Reason
    message: str
    position: int = 0


@dataclass(frozen=True)
class PoolStatus:
    """A pool's state after the pass: quota (explicit, or its schedulable nodes' allocatable),
    what admitted groups hold, what is free, and how many groups are admitted, waiting
    (for quota, nodes or their turn) and inadmissible (permanent reasons). ``stranded``
    lists admitted groups with unbound pods for which no node has room any more."""

    name: str
    queueing_strategy: QueueingStrategy
    quota: Resources
    used: Resources
    free: Resources
    admitted: int
    waiting: int
    inadmissible: int
    nodes: int
    stranded: tuple[GroupKey, ...] = ()
    intruders: tuple[str, ...] = ()
    """Pods on the pool's closed nodes that no admission let there (``core.admission.intruders``),
    ``namespace/name``; what they ask is in ``used``."""
    cohort: str = ""
    lent: Resources = field(default_factory=dict)
    """What groups of the cohort's other pools hold of the pool's quota (in ``used`` too)."""
    borrowed: Resources = field(default_factory=dict)
    """What the pool's groups hold of the cohort's other pools' quotas."""
    notes: tuple[str, ...] = ()
    """How its NodePools' instance types were planned where not as their file gives them."""

    def describe(self) -> str:
        """One line for people, e.g. ``pool on-demand: 4/4 nvidia.com/gpu held; 2 admitted, 8 waiting``."""
        held = ", ".join(
            f"{format_amount(r, self.used.get(r, 0))}/{format_amount(r, self.quota[r])} {r}"
            for r in by_importance(self.quota)
        )
        return f"pool {self.name}: {held or 'nothing'} held; {self.admitted} admitted, {self.waiting} waiting"


@dataclass(frozen=True)
class Plan:
    """The outcome of one planning pass."""

    admit: tuple[Admission, ...]
    waiting: tuple[Waiting, ...]
    pools: Mapping[str, PoolStatus]
    _by_key: Mapping[GroupKey, Waiting] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_key", {w.key: w for w in self.waiting})

    def why(self, key: GroupKey) -> Waiting | None:
        """The reason ``key`` was not admitted (None if it was admitted or not planned)."""
        return self._by_key.get(key)


@dataclass
class PoolTally:
    pool: Pool
    quota: dict[str, int]
    ceiling: dict[str, int]
    nodes: int
    used: dict[str, int] = field(default_factory=dict)
    holders: dict[str, int] = field(default_factory=dict)
    admitted: int = 0
    waiting: int = 0
    inadmissible: int = 0
    blocker: GroupKey | None = None
    stranded: list[GroupKey] = field(default_factory=list)
    intruders: tuple[str, ...] = ()
    lent: dict[str, int] = field(default_factory=dict)
    borrowed: dict[str, int] = field(default_factory=dict)

    def intrude(self, found: Intruders) -> None:
        """Hold what the pods on the pool's nodes without an admission ask, against its quota."""
        for resource, amount in found.requests.items():
            self.used[resource] = self.used.get(resource, 0) + amount
        self.intruders = found.pods

    def hold(self, demand: GroupDemand) -> None:
        held = dict(demand.total)
        held["pods"] = demand.pod_count
        for resource, amount in held.items():
            self.used[resource] = self.used.get(resource, 0) + amount
            self.holders[resource] = self.holders.get(resource, 0) + 1
        self.admitted += 1

    def counted_as(self, groups: int, demand: GroupDemand) -> None:
        """``demand``, held (``hold``) as one group, is ``groups`` groups (a gang's members)."""
        for resource in (*demand.total, "pods"):
            self.holders[resource] = self.holders.get(resource, 0) + groups - 1
        self.admitted += groups - 1

    def status(self, notes: tuple[str, ...] = ()) -> PoolStatus:
        free = {r: max(q - self.used.get(r, 0), 0) for r, q in self.quota.items()}
        return PoolStatus(
            name=self.pool.name,
            queueing_strategy=self.pool.queueing_strategy,
            quota=self.quota,
            used=self.used,
            free=free,
            admitted=self.admitted,
            waiting=self.waiting,
            inadmissible=self.inadmissible,
            nodes=self.nodes,
            stranded=tuple(self.stranded),
            intruders=self.intruders,
            cohort=self.pool.cohort,
            lent=self.lent,
            borrowed=self.borrowed,
            notes=notes,
        )
