"""Gangs: groups of several LWSs admitted as one unit, all or none (a disaggregated slice).

Why this exists: disaggregated serving runs one model as several LWSs, one per role (prefill,
decode), made by LWS's DisaggregatedSet (KEP-766) or by hand. A prefill group without its decode
group serves nothing, yet each LWS's groups would be admitted on their own: one role admitted and
holding its GPUs while the other waits. So the groups of one unit (``core.model.lws.gang_of``: a
DisaggregatedSet revision's roles, a slice of them, or one ``lws-gatekeeper.io/gang`` label) that
wait in a pass are considered together, at the place in the queue of the first of them: as one
group whose pods are all of theirs (``combined``), so the quota, the node fit and a topology level
hold for the whole unit, into one domain when its LWSs ask for one. Admitted, each member gets its
own pods' nodes (``split``); waiting, each says the unit's reason (``each_waits``).

A unit is the groups there are when a pass looks: LWSs made a moment apart (a DisaggregatedSet
makes its roles one after another) could be admitted apart. So an LWS says how many LWSs its gang
has (``lws-gatekeeper.io/gang-size``, in a DisaggregatedSet's roles' metadata): until that many
have groups in the pass, waiting or admitted, its groups wait (``WaitingForGang``).

A unit's LWSs must name one Pool and agree on their topology level; otherwise every member waits
with ``InvalidSpec`` saying so. Members already admitted (a role made again) are held as any
admitted group; the members still waiting form the unit. Not for gangs: each member's own
exclusive or subgroup placement (the unit is placed as one group), borrowing from a cohort, and
preempting (a member waits, it does not preempt); the docs say so.

Called by the pools planner (``planner.plan``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gatekeeper.core.admission.queue import AdmittedGroup, WaitingGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.outcome import Admission, Waiting
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import InvalidDemand

__all__ = ["combined", "each_waits", "incomplete", "members_named", "split", "units"]

Unit = tuple[str, str]
"""(namespace, gang)."""


def units(queue: Iterable[WaitingGroup]) -> dict[Unit, list[WaitingGroup]]:
    """The waiting groups of each unit, in queue order: those with more than one waiting, or
    whose gang says it has more LWSs than wait alone."""
    found: dict[Unit, list[WaitingGroup]] = {}
    for group in queue:
        if group.gang:
            found.setdefault((group.key.namespace, group.gang), []).append(group)
    return {
        unit: members
        for unit, members in found.items()
        if len(members) > 1 or max(m.gang_size for m in members) > 1
    }


def incomplete(members: Sequence[WaitingGroup], admitted: Iterable[AdmittedGroup]) -> tuple[int, int] | None:
    """(LWSs there, LWSs the gang says it has) while fewer are there, else None: an LWS is there
    when a group of it waits in the unit or holds an admission in the gang."""
    expected = max(m.gang_size for m in members)
    if expected <= 1:
        return None
    first = members[0]
    there = {m.key.name for m in members}
    there |= {a.key.name for a in admitted if a.gang == first.gang and a.key.namespace == first.key.namespace}
    return (len(there), expected) if len(there) < expected else None


def members_named(members: Sequence[WaitingGroup]) -> str:
    """ "vllm-prefill group 0, vllm-decode group 0" """
    return ", ".join(f"{m.key.name} group {m.key.index}" for m in members)


def combined(members: Sequence[WaitingGroup]) -> WaitingGroup | tuple[Reason, str]:
    """The unit as one group (the first member's key and place, its members' pods in order), or
    why it cannot be admitted as it is (a permanent reason for every member)."""
    first = members[0]
    pools = sorted({m.pool for m in members})
    if len(pools) > 1:
        return (
            Reason.INVALID_SPEC,
            f"its LWSs name different pools ({', '.join(pools)}); a gang is admitted into one",
        )
    invalid = next((m for m in members if isinstance(m.demand, InvalidDemand)), None)
    if invalid is not None and isinstance(invalid.demand, InvalidDemand):
        return Reason.INVALID_SPEC, f"{invalid.key.name} group {invalid.key.index}: {invalid.demand.message}"
    requests = {m.topology for m in members if m.topology is not None}
    if len(requests) > 1:
        return (
            Reason.INVALID_SPEC,
            "its LWSs ask for different topology levels; a gang is placed in one domain",
        )
    pods = tuple(p for m in members if isinstance(m.demand, GroupDemand) for p in m.demand.pods)
    return WaitingGroup(
        key=first.key,
        pool=first.pool,
        demand=GroupDemand(pods),
        created=min(m.created for m in members),
        priority=max(m.priority for m in members),
        classes=tuple(sorted({c for m in members for c in m.classes})),
        topology=next(iter(requests), None),
        gang=first.gang,
    )


def split(found: Admission, members: Sequence[WaitingGroup]) -> list[Admission]:
    """The unit's admission, one per member: its own pods' nodes, the unit's domain."""
    out: list[Admission] = []
    at = 0
    for m in members:
        count = len(m.demand.pods) if isinstance(m.demand, GroupDemand) else 0
        out.append(Admission(m.key, m.pool, found.nodes[at : at + count], found.lender, found.domain))
        at += count
    return out


def each_waits(
    members: Sequence[WaitingGroup], reason: Reason, detail: str, position: int = 0
) -> list[Waiting]:
    """The unit's reason, on each member (one place in the queue for all)."""
    names = members_named(members)
    gang = members[0].gang
    return [
        Waiting(
            m.key,
            m.pool,
            reason,
            f"group {m.key.index} is admitted only with its {gang} ({names}), all or none: {detail}",
            position,
        )
        for m in members
    ]
