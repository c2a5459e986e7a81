"""Borrowing between the Pools of one cohort: who may lend to whom, and how much.

Why this exists: Pools that name one ``spec.cohort`` lend each other the quota they do not use
(as Kueue's ClusterQueues of one cohort do). Here a loan is of a pool's *room*, not of an
abstract number: a group admitted on a loan runs on the lender's nodes, steered by the lender's
node selector and tolerations, and holds the lender's quota and node room; its record names
the lender in ``status.borrowedFrom`` (``core.model.record.held_in``). So nothing is ever
bound beyond any pool's quota, and a lender that wants its room back finds the borrowers'
groups on its own nodes (``spec.preemption.reclaimWithinCohort``, ``preempting``).

The rules, each a function below:

* a pool lends to the other pools of its cohort, in name order (``lenders``);
* ``spec.borrowingLimit`` caps what the borrower's groups hold of the others' quotas, and
  ``spec.lendingLimit`` what the lender lends, per resource named (``over``);
* a lender whose StrictFIFO queue is held by one of its own groups lends nothing: its free room
  is kept for that group (the planner checks it);
* a borrowing group is one of its own pool's groups that waits for quota or nodes, after every
  pool's own groups were tried in the pass (the planner's order), so a lender's own groups come
  first.

Called by ``planner`` (the loans of a pass) and ``preempting`` (who may reclaim whom). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gatekeeper.core.model.pool import Pool, ReclaimWithinCohort

__all__ = ["add", "lenders", "members", "over", "reclaims"]


def members(pools: Iterable[Pool], name: str) -> list[Pool]:
    """The pools of cohort ``name``, by name ("": none)."""
    return sorted((p for p in pools if name and p.cohort == name), key=lambda p: p.name)


def lenders(pools: Iterable[Pool], borrower: Pool) -> list[Pool]:
    """The pools ``borrower`` may borrow from: the other pools of its cohort, by name."""
    return [p for p in members(pools, borrower.cohort) if p.name != borrower.name]


def over(limit: Mapping[str, int] | None, held: Mapping[str, int], demand: Mapping[str, int]) -> str:
    """The first resource of ``limit`` that ``held`` plus ``demand`` would pass; "" when none
    (or no limit)."""
    for resource, most in sorted((limit or {}).items()):
        if held.get(resource, 0) + demand.get(resource, 0) > most:
            return resource
    return ""


def add(into: dict[str, int], amounts: Mapping[str, int]) -> None:
    """``into`` += ``amounts``, per resource."""
    for resource, amount in amounts.items():
        into[resource] = into.get(resource, 0) + amount


def reclaims(lender: Pool, borrower_priority: int, waiting_priority: int) -> bool:
    """May a waiting group of ``lender`` (of ``waiting_priority``) preempt a borrower's group of
    ``borrower_priority`` running on the lender's room?"""
    policy = lender.reclaim_within_cohort
    if policy is ReclaimWithinCohort.ANY:
        return True
    return policy is ReclaimWithinCohort.LOWER_PRIORITY and borrower_priority < waiting_priority
